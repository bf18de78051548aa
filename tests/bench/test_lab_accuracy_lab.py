"""`bench accuracy --source lab` end to end: two scenarios on a real netns lab of its own prefix (``fsa-``,
so it runs beside a lab of the default prefix), the real broker, worker and store writer. Needs root."""

from __future__ import annotations

import subprocess

import pytest

from bench import accuracy
from bench.lab_accuracy import results_of, run_lab
from fabricscope.local_services import lab_available
from fabricscope.settings import Settings

pytestmark = [pytest.mark.lab, pytest.mark.kafka, pytest.mark.slow]

if not lab_available():
    pytest.skip("the lab needs root and network namespaces", allow_module_level=True)

PREFIX = "fsa-"
SEED = 480  # scenario 0: nic-down C1, scenario 1: link-down A-S3 (draw_lab_scenario, over LAB_KINDS in order)


def test_two_lab_scenarios_are_named_in_every_fault_window(kafka_bootstrap, tmp_path, no_fork):
    out, inv, size = run_lab(Settings(kafka_bootstrap=kafka_bootstrap), 2, SEED, windows=1, lab_prefix=PREFIX,
                             var=tmp_path, warmup_s=20, say=lambda m: None)
    assert [[f.kind for f in r.scenario.faults] for r in out.runs] == [["nic-down"], ["link-down"]]
    assert out.unclosed == [], f"windows never closed; logs in {tmp_path}"
    rep = accuracy.score(results_of(out, inv, size), SEED, 0.0)
    assert rep.fault_recall == {"rnic_down": (1, 1), "link_down": (1, 1)}
    assert rep.window_recall == {"rnic_down": (1, 1), "link_down": (1, 1)}, rep.missed_windows
    assert rep.overall_precision() == 1.0, rep.wrong
    assert rep.window_recall_10 == (2, 2)  # the dead link's window crossed it with >= 10 probes
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ln for ln in left.splitlines() if ln.startswith(PREFIX)], left
    assert no_fork == []
