"""The netns fabric lab: a real ECMP Clos fabric on this machine.

``up(spec)`` builds spines, ToRs and two-NIC hosts as network namespaces joined
by veth pairs; ``down()`` removes everything; :mod:`infra.lab.faults` injects the
R-Pingmesh fault classes; :mod:`infra.lab.agents` starts the udp agents.
"""

from infra.lab.layout import Fabric, LabSpec, plan
from infra.lab.netns import LabError, down, lab_dir, load, up

__all__ = ["Fabric", "LabError", "LabSpec", "down", "lab_dir", "load", "plan", "up"]
