"""Engine, configuration, metrics, admin server, CLI and plugin registry of spate."""

__version__ = "0.1.0"
