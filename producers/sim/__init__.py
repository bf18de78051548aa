"""The ``sim`` probe backend: a seeded Clos-fabric model that computes each 5 s upload at once.

See :mod:`producers.sim.engine` for the model and :mod:`producers.sim.faults` for the faults.
"""

from producers.sim.engine import Simulator, to_pylists, tuple_key
from producers.sim.faults import (
    BusyHost,
    FlappingLink,
    HostDown,
    HostRestart,
    LatencyLink,
    LinkDown,
    LossyLink,
    PartialTupleLoss,
    RnicDown,
)

__all__ = [
    "BusyHost",
    "FlappingLink",
    "HostDown",
    "HostRestart",
    "LatencyLink",
    "LinkDown",
    "LossyLink",
    "PartialTupleLoss",
    "RnicDown",
    "Simulator",
    "to_pylists",
    "tuple_key",
]
