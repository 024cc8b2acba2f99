"""The admin HTTP server (``/metrics``, ``/healthz``, ``/readyz``) and its probes (B22)."""

from spate.admin._probes import healthz, readyz
from spate.admin._server import AdminServer, parse_listen

__all__ = ["AdminServer", "healthz", "parse_listen", "readyz"]
