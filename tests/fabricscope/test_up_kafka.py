"""`fabricscope up` on the real broker: a second `up` is refused, a killed `up` takes its children
with it, Ctrl-C and SIGTERM stop everything, and a source that follows another on the same topics (synthetic
after a lab run) still stores its rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabricscope.up import read_stats
from sinks.query_endpoint import find_endpoint, query_remote

from conftest import REPO, free_port, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _publish_lab_registry(bootstrap: str, prefix: str) -> None:
    """The registry a lab run leaves on the compacted topic: Panel 1's RNICs, none of synthetic's."""
    from producers.controller import Registry
    from producers.kafka_producer import AgentProducer
    from producers.sim.fabrics import panel1
    from schemas.arrow_nano import encode_columns
    from schemas.topics import REGISTRY, topic_name

    cols = Registry.from_inventory(panel1(), seed=1).to_columns("controller", time.time_ns())
    p = AgentProducer(bootstrap)
    p.publish(topic_name(REGISTRY, prefix), encode_columns("registry.v1", cols), "registry.v1", key="controller")
    assert p.flush() == 0


def _up(env: dict[str, str], tmp: Path, name: str, *args: str, sigint_ignored: bool = False) -> subprocess.Popen:
    """``sigint_ignored``: start it the way a shell without job control starts ``up &`` (SIGINT ignored)."""
    return subprocess.Popen([sys.executable, "-m", "fabricscope", "up", "--source", "synthetic", *args], env=env,
                            cwd=tmp, stdout=open(tmp / f"{name}.out", "w"),  # noqa: SIM115 - closed at exit
                            stderr=open(tmp / f"{name}.err", "w"),  # noqa: SIM115
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored
                            else None)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(x) for x in (task / "children").read_text().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_second_up_refused_killed_up_takes_children_synthetic_after_lab(tmp_path, topic_prefix, kafka_bootstrap):
    _publish_lab_registry(kafka_bootstrap, topic_prefix)
    var = tmp_path / "var"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_bootstrap,
           "FABRICSCOPE_TOPIC_PREFIX": topic_prefix, "FABRICSCOPE_VAR": str(var)}
    first = _up(env, tmp_path, "first")
    procs = [first]
    try:
        store = var / "clickhouse"
        stats = wait_for(lambda: (s := read_stats(store)) and s.rows > 0 and s, timeout=150,
                         what="synthetic rows in the store after the lab's registry")
        assert stats.dead == 0, stats.top_reason  # its RNICs were registered before it probed

        second = _up(env, tmp_path, "second")
        procs.append(second)
        assert second.wait(timeout=60) == 1
        err = (tmp_path / "second.err").read_text()
        assert f"is in use by pid {first.pid}" in err and "Traceback" not in err, err
        assert (tmp_path / "second.out").read_text() == ""
        assert first.poll() is None
        n = read_stats(store).rows
        wait_for(lambda: (s := read_stats(store)) and s.rows > n, timeout=60, what="rows still growing")

        # `up` runs the Hostping host agent for this host: its inventory and live monitor rows land in the store
        host = Path("/proc/sys/kernel/hostname").read_text().strip()
        url = find_endpoint(store)
        inv = wait_for(lambda: query_remote(url, "SELECT bdf FROM pci_functions FINAL WHERE host = "
                                                 f"'{host}' ORDER BY bdf")["bdf"].to_pylist() or None,
                       timeout=90, what="this host's PCI functions from up's host agent")
        assert inv == sorted(os.listdir("/sys/bus/pci/devices"))
        wait_for(lambda: query_remote(url, "SELECT count() AS n FROM host_metrics WHERE host = "
                                           f"'{host}'")["n"][0].as_py() > 0, timeout=60, what="live monitor rows")

        assert (tmp_path / "first.out").read_text() == ""  # progress is on stderr only
        progress = wait_for(lambda: [ln for ln in (tmp_path / "first.err").read_text().splitlines()
                                     if "probe rows this run" in ln], timeout=90, what="a progress line (every 10 s)")
        assert all(ln[2] == ":" and ln[5] == ":" for ln in progress)  # plain time-stamped lines

        kids = _children(first.pid)
        workers = os.cpu_count() or 1  # `up` starts one worker per core by default
        assert len(kids) == 4 + workers  # sink, worker0.., reducer, source-synthetic, hostping
        first.kill()  # SIGKILL, as the OOM killer would
        first.wait()
        wait_for(lambda: not any(_alive(k) for k in kids), timeout=60, what="children gone with their parent")

        third = _up(env, tmp_path, "third")  # the dead holder's lock blocks nobody
        procs.append(third)
        wait_for(lambda: read_stats(store), timeout=120, what="the third up's store writer")
        kids = _children(third.pid)
        third.send_signal(signal.SIGINT)  # Ctrl-C
        assert third.wait(timeout=60) == 0
        assert not any(_alive(k) for k in kids)
        err = (tmp_path / "third.err").read_text()
        assert "left running: the Kafka broker" in err and err.rstrip().endswith("stopped"), err

        fourth = _up(env, tmp_path, "fourth", sigint_ignored=True)  # `up &` from a script, stopped by `kill PID`
        procs.append(fourth)
        wait_for(lambda: read_stats(store), timeout=120, what="the fourth up's store writer")
        kids = _children(fourth.pid)
        fourth.send_signal(signal.SIGTERM)
        assert fourth.wait(timeout=60) == 0
        assert not any(_alive(k) for k in kids)
        err = (tmp_path / "fourth.err").read_text()
        assert err.rstrip().endswith("stopped") and "Traceback" not in err, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_up_stops_the_broker_it_started_and_only_that(tmp_path):
    """A broker `up` started (none answered) is stopped with it; the shared one it found is left running."""
    libs = REPO / "var" / "kafka" / "libs"
    if not (libs / ".complete").exists():
        pytest.skip("Kafka jars not installed (scripts/setup installs them)")
    import socket

    port = free_port(2)  # the private broker's listener and, next to it, its controller
    var = tmp_path / "var"
    (var / "kafka").mkdir(parents=True)
    (var / "kafka" / "libs").symlink_to(libs)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
           "KAFKA_CONTROLLER_PORT": str(port + 1),
           "FABRICSCOPE_TOPIC_PREFIX": "own.", "FABRICSCOPE_VAR": str(var)}
    up = _up(env, tmp_path, "own", "--duration", "3")
    try:
        assert up.wait(timeout=240) == 0, (tmp_path / "own.err").read_text()
    finally:
        if up.poll() is None:
            up.kill()
    err = (tmp_path / "own.err").read_text()
    assert f"kafka: started on 127.0.0.1:{port}" in err and "kafka: stopped" in err, err
    assert (tmp_path / "own.out").read_text() == ""
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there any more
