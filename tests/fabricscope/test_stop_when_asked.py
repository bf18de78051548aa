"""Every long-running command stops when asked: SIGINT or SIGTERM ends it, and its process group, within 10 s.

Each command runs as a script or systemd runs it (a session of its own, stdin from /dev/null) on the
suite's broker; the signal goes to its pid alone, as ``kill PID`` sends it, once the command is
doing its work (the store writer serves its endpoint, a source or the Hostping agent has published,
a worker serves its metrics).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sinks.query_endpoint import find_endpoint

from conftest import REPO, free_port, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
STOP_BOUND_S = 10.0


def _published(bootstrap: str, topic: str) -> bool:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "stop-when-asked"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] > 0
    except Exception:
        return False
    finally:
        c.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


COMMANDS = ["sink", "worker", "source-sim", "source-synthetic", "hostping-agent"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", COMMANDS)
def test_command_stops_within_bound(command: str, sig: int, tmp_path: Path, kafka_bootstrap: str,
                                    topic_prefix: str) -> None:
    var = tmp_path / "var"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_bootstrap,
           "FABRICSCOPE_TOPIC_PREFIX": topic_prefix, "FABRICSCOPE_VAR": str(var)}
    port = free_port()
    argv, ready = {
        "sink": (["sink"], lambda: find_endpoint(var / "clickhouse") is not None),
        "worker": (["worker", "--metrics-port", str(port)], lambda: _answers(port)),
        "source-sim": (["source", "sim"], lambda: _published(kafka_bootstrap, f"{topic_prefix}probes.raw")),
        "source-synthetic": (["source", "synthetic"],
                             lambda: _published(kafka_bootstrap, f"{topic_prefix}probes.raw")),
        "hostping-agent": (["hostping", "agent", "--no-loopback"],
                           lambda: _published(kafka_bootstrap, f"{topic_prefix}hostmetrics.raw")),
    }[command]
    with open(tmp_path / "out.log", "w") as log:
        p = subprocess.Popen([sys.executable, "-m", "fabricscope", *argv], env=env, cwd=tmp_path,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: ready() or p.poll() is not None, timeout=120, what=f"{command} at work")
        assert p.poll() is None, (tmp_path / "out.log").read_text()[-2000:]
        t0 = time.monotonic()
        p.send_signal(sig)
        code = p.wait(timeout=60)
        took = time.monotonic() - t0
        out = (tmp_path / "out.log").read_text()
        assert took < STOP_BOUND_S, (command, took, out[-2000:])
        assert code in (0, 1, 130, -sig), (code, out[-2000:])
        assert "Traceback" not in out, out[-3000:]
        wait_for(lambda: not _group_alive(p.pid), timeout=5, what="its process group gone")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


_CAUGHT = """
import sys
from fabricscope.stopping import forget_caught_interrupts
try:
    exec("x = 1")  # stands for a dataclass being defined when the signal lands
    exec("raise KeyboardInterrupt")
except KeyboardInterrupt:
    pass  # the command caught it and cleaned up
forget_caught_interrupts()
if sys.argv[1] == "uncaught":
    raise KeyboardInterrupt
sys.exit(1)
"""


@pytest.mark.parametrize(("how", "code"), [("caught", 1), ("uncaught", -signal.SIGINT)])
def test_python_m_exits_with_the_code_chosen_after_a_caught_interrupt(how: str, code: int, tmp_path: Path) -> None:
    """A SIGTERM that became KeyboardInterrupt inside exec() (CPython's flag) must not turn `up`'s exit 0/1 into
    death by SIGINT; an interrupt nobody caught still exits by SIGINT, as a shell expects."""
    (tmp_path / "caught_interrupt.py").write_text(_CAUGHT)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}
    p = subprocess.run([sys.executable, "-m", "caught_interrupt", how], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == code, p.stderr


def test_sigint_stops_a_command_started_with_sigint_ignored(tmp_path: Path, kafka_bootstrap: str,
                                                            topic_prefix: str) -> None:
    """A script's `fabricscope source synthetic &` (no job control) starts with SIGINT ignored; `kill -INT` still
    stops it, as it stops `up` (cli.main reinstalls the handler)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_bootstrap,
           "FABRICSCOPE_TOPIC_PREFIX": topic_prefix, "FABRICSCOPE_VAR": str(tmp_path / "var")}
    with open(tmp_path / "out.log", "w") as log:
        p = subprocess.Popen(["bash", "-c", f'trap "" INT; exec "{sys.executable}" -m fabricscope source synthetic'],
                             env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        wait_for(lambda: _published(kafka_bootstrap, f"{topic_prefix}probes.raw") or p.poll() is not None,
                 timeout=120, what="the source at work")
        status = Path(f"/proc/{p.pid}/status").read_text()
        ignored = int(next(ln for ln in status.splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
        assert p.poll() is None and ignored & (1 << (signal.SIGINT - 1)) == 0, (tmp_path / "out.log").read_text()
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=60)
        assert time.monotonic() - t0 < STOP_BOUND_S and code in (0, 130, -signal.SIGINT), code
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
