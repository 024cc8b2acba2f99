"""Flow control: the in-flight byte budget, pause/resume hysteresis, the pending gate."""

from spate.flow._budget import InflightBudget
from spate.flow._contract import ByteBudget
from spate.flow._gate import PendingGate
from spate.flow._watermark import Hysteresis

__all__ = ["ByteBudget", "Hysteresis", "InflightBudget", "PendingGate"]
