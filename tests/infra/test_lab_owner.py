"""A lab is only torn down by whoever made it: another `up`'s or `demo`'s running lab is refused, by pid."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab
if os.geteuid() != 0 or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
    pytest.skip("the lab needs root and network namespaces", allow_module_level=True)

from infra.lab import netns  # noqa: E402
from infra.lab.layout import LabSpec  # noqa: E402
from infra.lab.netns import LabError, lab_lock_path  # noqa: E402

from conftest import REPO  # noqa: E402

PREFIX = "fso-"  # this test's namespaces only


@pytest.fixture
def holder_process(tmp_path: Path):
    """Another process that made a lab from ``tmp_path/other`` and holds its lock (like a running `up`)."""
    code = ("import time\nfrom pathlib import Path\nfrom infra.lab.netns import _claim\n"
            f"_claim({PREFIX!r}, Path({str(tmp_path / 'other')!r}))\nprint('held', flush=True)\ntime.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.readline().strip() == "held"
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def foreign_namespace():
    name = f"{PREFIX}s1"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_lab_held_by_another_process_is_neither_rebuilt_nor_torn_down(tmp_path, holder_process,
                                                                        foreign_namespace):
    with pytest.raises(LabError, match=f"in use by pid {holder_process.pid}"):
        netns.up(LabSpec(prefix=PREFIX), tmp_path / "mine")
    with pytest.raises(LabError, match=f"in use by pid {holder_process.pid}"):
        netns.down(tmp_path / "mine", PREFIX)
    assert foreign_namespace in netns.lab_namespaces(PREFIX)


def test_a_lab_from_another_directory_with_live_agents_is_left_alone(tmp_path, foreign_namespace):
    other = tmp_path / "other"
    agent = subprocess.Popen(["sleep", "60"])
    try:
        netns.write_state(other, {"spec": {"prefix": PREFIX}, "namespaces": [foreign_namespace], "processes": {
            "H1.prober": {"pid": agent.pid, "argv": ["sleep", "60"], "start_ns": time.time_ns()}}})
        lab_lock_path(PREFIX).write_text(f"\n{other.resolve()}\n")  # made by a `lab up` that has exited
        with pytest.raises(LabError, match=f"made from {other.resolve()} is running"):
            netns.up(LabSpec(prefix=PREFIX), tmp_path / "mine")
        assert foreign_namespace in netns.lab_namespaces(PREFIX) and agent.poll() is None
    finally:
        agent.kill()
        agent.wait()
    # its agents are gone: a crashed lab is swept as before
    netns.check_not_foreign(PREFIX, tmp_path / "mine")
