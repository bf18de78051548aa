"""The values the CLI accepts, in one place: ``--help`` shows these lists and the parser checks them.

Each list comes from the module that implements the values (simulator scenarios, lab
scenarios), so a new scenario shows up in ``--help`` and in every error by itself.
Commands take them as ``str`` Enums: typer renders ``[a|b|c]`` in ``--help`` and a wrong
value stops the command before it starts anything, with exit code 2 (see ``fabricscope.cli``).
"""

from __future__ import annotations

import enum

import typer

from infra.lab.faults import KINDS as _LAB_FAULTS
from infra.lab.scenarios import SCENARIOS as _LAB_SCENARIOS
from producers.sim.scenarios import SCENARIOS as SIM_SCENARIOS

LAB_SCENARIOS: tuple[str, ...] = tuple(_LAB_SCENARIOS)
ALL_SCENARIOS: tuple[str, ...] = (*LAB_SCENARIOS, *(s for s in SIM_SCENARIOS if s not in LAB_SCENARIOS))
UP_SOURCES = ("auto", "lab", "sim", "synthetic")
SOURCE_KINDS = ("sim", "synthetic", "hostping-sim")
DEMO_SOURCES = ("sim", "lab")
LAB_FAULT_ACTIONS: tuple[str, ...] = (*_LAB_FAULTS, "clear", "list")
# streams.runtime.config.ROLES, spelled out: that module imports pyarrow, too slow for every CLI start
# (tests/streams/test_worker_roles.py checks the two agree)
WORKER_ROLES = ("all", "stream", "reducer")


def _choices(name: str, values: tuple[str, ...]) -> type[enum.Enum]:
    return enum.Enum(name, {v: v for v in values}, type=str)  # type: ignore[return-value]


UpSource = _choices("UpSource", UP_SOURCES)
SourceKind = _choices("SourceKind", SOURCE_KINDS)
DemoSource = _choices("DemoSource", DEMO_SOURCES)
Scenario = _choices("Scenario", ALL_SCENARIOS)
LabFault = _choices("LabFault", LAB_FAULT_ACTIONS)
WorkerRole = _choices("WorkerRole", WORKER_ROLES)
DemoScenario = Scenario


def value(v: object) -> str:
    """The plain string of a choice (an Enum member) or of a string."""
    return str(v.value) if isinstance(v, enum.Enum) else str(v)


def check_scenario(source: str, scenario: str) -> None:
    """Raise :class:`typer.BadParameter` when ``scenario`` does not run on ``source`` (lab or sim).

    The simulator knows every scenario; the netns lab only those it can inject for real.
    """
    if source == "lab" and scenario not in LAB_SCENARIOS:
        raise typer.BadParameter(f"{scenario!r} runs on the sim only; on the lab choose one of "
                                 f"{', '.join(LAB_SCENARIOS)}", param_hint="'--scenario'")


def positive_seconds(v: float) -> float:
    """A typer callback: a duration in seconds must not be negative."""
    if v < 0:
        raise typer.BadParameter(f"{v:g} s: a duration cannot be negative (0 = until Ctrl-C)")
    return v
