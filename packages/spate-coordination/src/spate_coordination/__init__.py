"""Work assignment across spate instances: in-memory and NATS JetStream KV stores."""

__version__ = "0.1.0"
