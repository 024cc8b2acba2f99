"""spate-huggingface: a sink that commits rows to a Hugging Face dataset repository.

Rows are grouped into windows and each window is committed once through the Hub's
commit API, one file per Hive partition, named by a hash of its bytes (B78). Failed
commits are retried with a capped backoff honouring ``Retry-After``; when the attempts
run out the records stay upstream (B79). Commits to one repository in a process go
through a commit gate, one at a time, each bounded by ``request_timeout`` (B80).
"""

from spate_huggingface._encode import (
    CsvEncoder,
    FileEncoder,
    JsonLinesEncoder,
    ParquetFileEncoder,
    build_encoder,
)
from spate_huggingface._factory import HuggingFaceSinkFactory, build_sink, resolve_token
from spate_huggingface._hub import CommitFile, HubClient, HubError, commit_payload
from spate_huggingface._sink import HuggingFaceSink
from spate_huggingface.config import CommitRetryConfig, EncoderConfig, HuggingFaceSinkConfig

__version__ = "0.1.0"

__all__ = [
    "CommitFile",
    "CommitRetryConfig",
    "CsvEncoder",
    "EncoderConfig",
    "FileEncoder",
    "HubClient",
    "HubError",
    "HuggingFaceSink",
    "HuggingFaceSinkConfig",
    "HuggingFaceSinkFactory",
    "JsonLinesEncoder",
    "ParquetFileEncoder",
    "__version__",
    "build_encoder",
    "build_sink",
    "commit_payload",
    "resolve_token",
]
