"""spate-parquet: a Parquet sink for local directories and S3.

Files are cut by the input alone (``max_records``, ``max_bytes``, record-time windows,
a new row shape), named by what they hold (lane, first and last position, a hash of the
bytes and encoder settings) and written byte-identically on replay (B50). Acks resolve
only once a file is durable (B51). With ``publish: manifest`` parts become visible
through an atomically replaced ``_manifest.json`` after passing their audits (B52).
"""

from spate_parquet._audit import AuditFailure
from spate_parquet._encode import Encoder, safe
from spate_parquet._factory import ParquetSinkFactory, build_sink
from spate_parquet._gate import StoreGate
from spate_parquet._manifest import Manifest, ManifestStore, Part
from spate_parquet._schema import RowShaper, SchemaError, parse_schema
from spate_parquet._sink import ParquetSink
from spate_parquet._store import LocalStore, S3Store, Store, open_store
from spate_parquet.config import AuditConfig, ParquetSinkConfig, S3Config

__version__ = "0.1.0"

__all__ = [
    "AuditConfig",
    "AuditFailure",
    "Encoder",
    "LocalStore",
    "Manifest",
    "ManifestStore",
    "ParquetSink",
    "ParquetSinkConfig",
    "ParquetSinkFactory",
    "Part",
    "RowShaper",
    "S3Config",
    "S3Store",
    "SchemaError",
    "Store",
    "StoreGate",
    "__version__",
    "build_sink",
    "open_store",
    "parse_schema",
    "safe",
]
