"""The ``sim`` probe backend: a seeded Clos-fabric model that computes each 5 s upload at once.

One module per concern: :mod:`~producers.sim.engine` (the :class:`Simulator` and its uploads;
the model's overview), :mod:`~producers.sim.routing` (nodes and ECMP routing),
:mod:`~producers.sim.plan` (pinglists as arrays), :mod:`~producers.sim.faults` (what can be
injected) and :mod:`~producers.sim.fault_effects` (where and when it acts),
:mod:`~producers.sim.hashing` (seeded hashes), :mod:`~producers.sim.fabrics` (Panel 1 and
seeded Clos inventories), :mod:`~producers.sim.scenarios` (named fault scenarios) and
:mod:`~producers.sim.stream` (encoded uploads).
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
