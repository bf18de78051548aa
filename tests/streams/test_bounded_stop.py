"""A stream worker whose stop hangs still ends when asked: at its stop deadline, or at once on a second signal.

Runs ``hang_on_stop_app.py`` (a Faust app on :class:`streams.runtime.bounded_stop.BoundedStopWorker` with a
service whose stop never returns) as a process of its own on the suite's broker, and signals it once it
has started. Without the bound Faust waits for that service for good.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, wait_for

pytestmark = [pytest.mark.kafka]
APP = Path(__file__).with_name("hang_on_stop_app.py")


def _start(bootstrap: str, deadline_s: float, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        p = subprocess.Popen([sys.executable, str(APP), bootstrap, str(deadline_s), f"stoptest-{uuid.uuid4().hex[:8]}",
                              str(tmp_path / "faust")], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: "started" in log.read_text() or p.poll() is not None, what="the app to start")
    assert p.poll() is None, log.read_text()
    return p, log


def test_a_stop_that_hangs_ends_at_the_deadline(kafka_bootstrap: str, tmp_path: Path) -> None:
    p, log = _start(kafka_bootstrap, 3.0, tmp_path)
    try:
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 1
        took = time.monotonic() - t0
        text = log.read_text()
        assert "stopping" in text and "fabricscope worker: its stop overran 3 s: exiting now" in text, text
        assert took >= 3.0, f"exited after {took:.1f} s, before its deadline"
    finally:
        p.kill()


def test_a_second_signal_ends_a_hanging_stop_at_once(kafka_bootstrap: str, tmp_path: Path) -> None:
    p, log = _start(kafka_bootstrap, 600.0, tmp_path)
    try:
        p.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping" in log.read_text(), what="the stop to begin")
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 1
        assert "fabricscope worker: a second signal: exiting now" in log.read_text()
    finally:
        p.kill()
