"""The benchmarks' pipeline children stop when the benchmark is asked to (bench/pipeline.py's PipelineProcs):
SIGTERM to a benchmark stops them all, a child that ignores SIGTERM is killed after the grace, and a second
signal during the stop kills every child and exits at once. The children here are plain sleepers started in
place of ``fabricscope worker``/``sink`` (the processes' own stop is tested with them, tests/streams); one
that ignores SIGTERM stands for a hung worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bench.pipeline import PipelineProcs

_REPO = Path(__file__).resolve().parents[2]
_STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
             "time.sleep(600)")
_POLITE = "import time; print('ready', flush=True); time.sleep(600)"

# A benchmark holding the pipeline, its children replaced by sleepers (argv[1]: their code); it prints their pids,
# then "stopping" when its stop starts waiting for them.
_BENCH = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    import bench.pipeline as bp

    code, real_popen = sys.argv[1], subprocess.Popen

    def sleeper(args, **kw):
        p = real_popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                       start_new_session=kw.get("start_new_session", False))
        assert p.stdout.readline().strip() == "ready"
        return p

    bp.subprocess.Popen = sleeper
    wait = bp.PipelineProcs._wait_or_kill

    def announced(self, grace_s):
        print("stopping", flush=True)
        wait(self, grace_s)

    bp.PipelineProcs._wait_or_kill = announced
    with bp.PipelineProcs("127.0.0.1:1", "t.", Path(sys.argv[2]), workers=2) as pipe:
        pipe.stop_grace_s = float(sys.argv[3])
        print(" ".join(str(p.pid) for p in pipe.procs.values()), flush=True)
        time.sleep(600)
""")


def _start(code: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"  # its handler is in place
    return p


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _wait_gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return all(_gone(p) for p in pids)


def _bench(child_code: str, tmp_path: Path, grace_s: float) -> tuple[subprocess.Popen, list[int]]:
    bench = subprocess.Popen([sys.executable, "-c", _BENCH, child_code, str(tmp_path), str(grace_s)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=_REPO)
    assert bench.stdout is not None
    pids = [int(x) for x in bench.stdout.readline().split()]
    assert len(pids) == 4, bench.stderr.read() if bench.stderr else ""  # the sink, 2 workers, the reducer
    return bench, pids


def test_stop_terminates_the_children_and_kills_one_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    pipe = PipelineProcs("127.0.0.1:1", "t.", tmp_path)
    pipe.procs = {"worker0": _start(_POLITE), "reducer": _start(_STUBBORN)}
    t0 = time.monotonic()
    pipe.stop(grace_s=1.0)
    took = time.monotonic() - t0
    assert pipe.procs["worker0"].returncode == -signal.SIGTERM
    assert pipe.procs["reducer"].returncode == -signal.SIGKILL
    assert 1.0 <= took < 10.0


def test_sigterm_to_the_benchmark_stops_every_child_the_reducer_in_its_own_session_too(tmp_path: Path) -> None:
    bench, pids = _bench(_POLITE, tmp_path, 30.0)
    try:
        assert os.getsid(pids[-1]) == pids[-1]  # the reducer leads a session of its own: no group signal reaches it
        os.kill(bench.pid, signal.SIGTERM)  # to the benchmark alone, as `kill PID` does
        out, _err = bench.communicate(timeout=30)
        assert "stopping" in out
        assert _wait_gone(pids, 10), "a child outlived the benchmark"
    finally:
        if bench.poll() is None:
            bench.kill()


def test_a_second_signal_during_the_stop_kills_every_child_and_exits(tmp_path: Path) -> None:
    bench, pids = _bench(_STUBBORN, tmp_path, 300.0)
    try:
        assert bench.stdout is not None and bench.stderr is not None
        os.kill(bench.pid, signal.SIGTERM)
        assert bench.stdout.readline().strip() == "stopping"  # its stop waits on children that ignore SIGTERM
        os.kill(bench.pid, signal.SIGTERM)
        out, err = bench.communicate(timeout=30)
        assert bench.returncode == 1, err
        assert ("fabricscope bench: a second signal: exiting now; left behind: its topics on 127.0.0.1:1 (names "
                "starting t.)") in err
        assert _wait_gone(pids, 10), "a child outlived the benchmark"
    finally:
        if bench.poll() is None:
            bench.kill()
