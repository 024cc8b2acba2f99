"""Work assignment across spate instances: in-memory and NATS JetStream KV stores.

A job's work is a *plan* of splits (ids with weights and metadata). Instances of the job
heartbeat into a TTL keyspace; one of them leads (a TTL lease) and assigns splits to
the live ones, deterministically, stickily and balanced by weight. Moving a split is
cooperative first (the owner drains, commits and releases) and forced after
``drain_deadline``. Every progress write is a compare-and-set on the split's epoch, so
an instance whose lease lapsed writes nothing after its successor took over (B24).

Entry points: the store factories ``memory`` and ``nats`` (group
``spate.coordination_stores``). Start with :class:`Coordinator`.
"""

from spate_coordination._assign import assign
from spate_coordination._coordinator import Coordinator
from spate_coordination._core import CoordinatorCore
from spate_coordination._events import OwnedSplit, ProgressWrite, SplitEvent, SplitEventKind
from spate_coordination._memory import MemoryStore
from spate_coordination._plugins import (
    MemoryStoreFactory,
    NatsStoreFactory,
    memory_store_factory,
    nats_store_factory,
)
from spate_coordination._records import JsonValue, Progress, SplitSpec
from spate_coordination._states import (
    SplitState,
    SplitStatus,
    read_split_states,
    retry_quarantined,
)
from spate_coordination._store import (
    CoordinationError,
    CoordinationStore,
    DuplicateInstanceError,
    Entry,
    Keyspace,
    PlanConflictError,
    StoreUnavailableError,
    WatchEvent,
)
from spate_coordination.config import (
    CoordinationConfig,
    MemoryStoreConfig,
    NatsStoreConfig,
    NatsTlsConfig,
    load_coordination_config,
)

__version__ = "0.1.0"

__all__ = [
    "CoordinationConfig",
    "CoordinationError",
    "CoordinationStore",
    "Coordinator",
    "CoordinatorCore",
    "DuplicateInstanceError",
    "Entry",
    "JsonValue",
    "Keyspace",
    "MemoryStore",
    "MemoryStoreConfig",
    "MemoryStoreFactory",
    "NatsStoreConfig",
    "NatsStoreFactory",
    "NatsTlsConfig",
    "OwnedSplit",
    "PlanConflictError",
    "Progress",
    "ProgressWrite",
    "SplitEvent",
    "SplitEventKind",
    "SplitSpec",
    "SplitState",
    "SplitStatus",
    "StoreUnavailableError",
    "WatchEvent",
    "__version__",
    "assign",
    "load_coordination_config",
    "memory_store_factory",
    "nats_store_factory",
    "read_split_states",
    "retry_quarantined",
]
