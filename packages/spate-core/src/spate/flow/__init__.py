"""Flow control: the in-flight byte budget, pause/resume hysteresis, the pending gate."""

from spate.flow._contract import ByteBudget

__all__ = ["ByteBudget"]
