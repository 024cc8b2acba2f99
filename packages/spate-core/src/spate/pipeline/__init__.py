"""The pipeline: code-level constructor, runtime loop, drain, signals and exit report."""

from spate._assembly import new_run_nonce
from spate.pipeline._builder import Pipeline
from spate.pipeline._exit import ExitReport
from spate.pipeline._health import PipelineHealth
from spate.pipeline._runtime import PipelineRuntime
from spate.pipeline._signals import ShutdownHandle
from spate.pipeline._supervisor import RestartDecision, RestartPolicy, Supervisor

__all__ = [
    "ExitReport",
    "Pipeline",
    "PipelineHealth",
    "PipelineRuntime",
    "RestartDecision",
    "RestartPolicy",
    "ShutdownHandle",
    "Supervisor",
    "new_run_nonce",
]
