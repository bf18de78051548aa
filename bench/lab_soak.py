"""``fabricscope bench lab-soak``: ``fabricscope up`` on the netns lab for a long run, faults injected and cleared.

Starts ``up`` (source lab) as a user's script does: a session of its own, stdin from /dev/null, no
terminal. Every ``fault_every_s`` it injects the next lab scenario (switch link down, RNIC down,
lossy link, host down, in turn), clears it after half the period, and measures the fault's verdict
latency: from the injection to the first verdict in the store that names it (kind and location,
read through the store writer's endpoint, polled each second). It also reports rows stored per
minute, the restarts ``up`` logged, and the RSS of every process of the run at the start and the
end (a leak shows as a ratio). Then it stops ``up`` with SIGINT and reports how long that took.

Not a test: it prints figures (BENCHMARKS.md, "lab soak").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FAULT_CYCLE = ("switch-link-down", "rnic-down", "switch-link-lossy", "host-down")


@dataclass
class FaultResult:
    """One injected fault: what, when (s after up's start line) and its verdict latency (None: never named)."""

    scenario: str
    kind: str
    locations: list[str]
    injected_at_s: float
    latency_s: float | None = None


@dataclass
class SoakResult:
    """What one soak run measured. RSS in MiB per process name; rows per minute of run time."""

    minutes: float
    restarts: int = 0
    rows_per_minute: list[int] = field(default_factory=list)
    rss_start_mib: dict[str, float] = field(default_factory=dict)
    rss_end_mib: dict[str, float] = field(default_factory=dict)
    faults: list[FaultResult] = field(default_factory=list)
    stop_s: float = 0.0
    exit_code: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _rss_by_name(var: Path) -> dict[str, float]:
    """RSS (MiB) of every live process whose environment names ``var``, keyed by a short command name."""
    mark = f"FABRICSCOPE_VAR={var}".encode()
    out: dict[str, float] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if mark not in (p / "environ").read_bytes().split(b"\0"):
                continue
            argv = (p / "cmdline").read_bytes().decode(errors="replace").split("\0")
            rss_kib = next(int(ln.split()[1]) for ln in (p / "status").read_text().splitlines()
                           if ln.startswith("VmRSS:"))
        except (OSError, StopIteration, ValueError):
            continue
        name = " ".join(a for a in argv[2:6] if a and not a.startswith("/"))[:60] or argv[0]
        while name in out:
            name += "'"
        out[name] = round(rss_kib / 1024, 1)
    return out


def _query(var: Path, sql: str) -> list[dict[str, Any]]:
    from sinks.query_endpoint import find_endpoint, query_remote

    url = find_endpoint(var / "clickhouse")
    if not url:
        return []
    try:
        return query_remote(url, sql, timeout=10.0).to_pylist()
    except Exception:
        return []


def _rows(var: Path) -> int:
    r = _query(var, "SELECT count() AS n FROM probes")
    return int(r[0]["n"]) if r else 0


def _named(var: Path, kind: str, locations: list[str], since_ns: int) -> bool:
    locs = ", ".join(f"'{x}'" for x in locations)
    r = _query(var, f"SELECT count() AS n FROM verdicts WHERE kind = '{kind}' AND location IN ({locs}) "
                    f"AND window_end_ns > {since_ns}")
    return bool(r and r[0]["n"])


def run(minutes: float, var: Path, fault_every_s: float = 300.0, say: Any = print) -> SoakResult:
    """Run ``up --source lab`` for ``minutes`` with a fault every ``fault_every_s``; returns the figures.

    Raises:
        RuntimeError: ``up`` did not print its start line within 5 minutes, or exited early (its
            stderr tail is in the message).
    """
    from infra.lab import faults, scenarios

    var.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FABRICSCOPE_VAR": str(var)}
    err_path = var / "lab-soak-up.err"
    with open(err_path, "w") as err:
        up = subprocess.Popen([sys.executable, "-m", "fabricscope", "up", "--source", "lab"], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                              start_new_session=True)
    res = SoakResult(minutes)
    try:
        deadline = time.monotonic() + 300
        while "fabricscope up (pid" not in err_path.read_text():
            if up.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"up did not start: {err_path.read_text()[-2000:]}")
            time.sleep(0.5)
        t0 = time.monotonic()
        end = t0 + minutes * 60
        next_fault, next_minute, clear_at = t0 + 60, t0 + 60, None
        last_rows, cycle = 0, 0
        open_fault: FaultResult | None = None
        open_since_ns = 0
        rss_taken = False
        while time.monotonic() < end:
            if up.poll() is not None:
                raise RuntimeError(f"up exited ({up.returncode}): {err_path.read_text()[-2000:]}")
            now = time.monotonic()
            if not rss_taken and now - t0 >= 30:
                res.rss_start_mib, rss_taken = _rss_by_name(var), True
            if now >= next_minute:
                rows = _rows(var)
                res.rows_per_minute.append(rows - last_rows)
                last_rows, next_minute = rows, next_minute + 60
                say(f"{(now - t0) / 60:.0f} min: {res.rows_per_minute[-1]:,} rows in the last minute")
            if now >= next_fault and open_fault is None:
                name = FAULT_CYCLE[cycle % len(FAULT_CYCLE)]
                cycle += 1
                open_since_ns = time.time_ns()
                t = scenarios.apply(name, seed=cycle, directory=var / "lab")
                open_fault = FaultResult(name, str(t.kind), list(t.locations), round(now - t0, 1))
                res.faults.append(open_fault)
                clear_at, next_fault = now + fault_every_s / 2, next_fault + fault_every_s
                say(f"injected {name} at {', '.join(t.locations)}")
            if open_fault is not None and open_fault.latency_s is None and \
                    _named(var, open_fault.kind, open_fault.locations, open_since_ns):
                open_fault.latency_s = round(time.time_ns() / 1e9 - open_since_ns / 1e9, 1)
                say(f"  named after {open_fault.latency_s} s")
            if clear_at is not None and now >= clear_at:
                faults.clear(None, var / "lab")
                open_fault, clear_at = None, None
            time.sleep(1.0)
        res.rss_end_mib = _rss_by_name(var)
    finally:
        t_stop = time.monotonic()
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
        try:
            res.exit_code = up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            res.exit_code = up.wait()
        res.stop_s = round(time.monotonic() - t_stop, 1)
    text = err_path.read_text()
    res.restarts = text.count(" restarted (pid ")
    return res


def report(r: SoakResult) -> str:
    """A few lines for people."""
    lat = [f.latency_s for f in r.faults if f.latency_s is not None]
    lines = [f"lab soak: {r.minutes:g} min, restarts {r.restarts}, exit {r.exit_code} after SIGINT in {r.stop_s} s",
             f"rows per minute: min {min(r.rows_per_minute, default=0):,}, max {max(r.rows_per_minute, default=0):,}",
             f"faults named: {len(lat)} of {len(r.faults)}; verdict latency s: {sorted(lat)}"]
    for name in sorted(set(r.rss_start_mib) & set(r.rss_end_mib)):
        lines.append(f"  RSS {name}: {r.rss_start_mib[name]:.0f} -> {r.rss_end_mib[name]:.0f} MiB")
    return "\n".join(lines)


def to_json(r: SoakResult) -> str:
    """One JSON line."""
    return json.dumps(r.as_dict())
