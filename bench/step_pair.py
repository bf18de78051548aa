"""Two source trees' worker step, measured in turns: CPU µs per row of ``process_step``, paired round by round.

On a shared machine the load changes between one run of a benchmark and the next, so two trees measured one
after the other differ by more than their code does. Here one process per tree (``PYTHONPATH`` = the tree)
builds the profile fabric's 240,000-row step (:func:`bench.profile._sim_batch`, 40 messages of 6,000 rows,
66,752-tuple path index) and waits; each round asks both trees' processes for one
``process_step`` (process CPU time), so both see the same load within a second of each other; which tree goes
first alternates round by round (:func:`round_order`). Prints per tree
the minimum, first quartile and median, the median of the paired new/old ratios, and the 1-minute load
average over the rounds.

    python -m bench.step_pair OLD_TREE NEW_TREE [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

_CHILD = """
import sys, time
from bench.profile import _sim_batch
from schemas.codec import decode, encode
from streams.pingmesh.windows import WINDOW_NS, split_by_window
from streams.runtime.probe_step import RawMessage, process_step
payload, index, _ = _sim_batch(241_000)
full = max(split_by_window(decode(payload, "probe.v1")[1]).values(), key=lambda t: t.num_rows).slice(0, 240_000)
msgs = [RawMessage(encode(full.slice(i, 6000)), "probe.v1", "probes.raw", 0, i // 6000)
        for i in range(0, full.num_rows, 6000)]
process_step(msgs, index, WINDOW_NS)
print("ready", flush=True)
for _ in sys.stdin:
    c = time.process_time()
    process_step(msgs, index, WINDOW_NS)
    print(1e6 * (time.process_time() - c) / full.num_rows, flush=True)
"""


def round_order(k: int) -> tuple[str, str]:
    """Which tree steps first in round ``k``: old first in even rounds, new first in odd ones, so neither
    always gets the caches (and the CPU frequency) the other left."""
    return ("old", "new") if k % 2 == 0 else ("new", "old")


def run(old: str, new: str, rounds: int = 30, child: str = _CHILD) -> dict[str, object]:
    """``{"old": [µs/row per round], "new": [...], "ratios": [new/old per round], "load": (min, max)}``.

    Args:
        old, new: source trees (each a checkout with ``bench``, ``schemas`` and ``streams``).
        rounds: steps per tree, taken in turns (:func:`round_order`).
        child: the step process's program (prints ``ready``, then one µs/row figure per line read).

    Raises:
        RuntimeError: a tree's step process did not start.
    """
    procs = {name: subprocess.Popen([sys.executable, "-c", child], cwd="/", text=True, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": tree})
             for name, tree in (("old", old), ("new", new))}
    try:
        for p in procs.values():
            if p.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                raise RuntimeError("a tree's step process did not start")
        out: dict[str, list[float]] = {"old": [], "new": []}
        loads = []
        for k in range(rounds):
            for name in round_order(k):
                p = procs[name]
                p.stdin.write("go\n")  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]
                out[name].append(float(p.stdout.readline()))  # type: ignore[union-attr]
            loads.append(os.getloadavg()[0])
    finally:
        for p in procs.values():
            p.stdin.close()  # type: ignore[union-attr]
            p.wait()
    return {**out, "ratios": [n / o for o, n in zip(out["old"], out["new"], strict=True)],
            "load": (min(loads), max(loads))}


def main() -> None:
    """Print the comparison (the module docstring's command)."""
    old, new = sys.argv[1], sys.argv[2]
    r = run(old, new, int(sys.argv[3]) if len(sys.argv) > 3 else 30)
    for name in ("old", "new"):
        v = sorted(r[name])  # type: ignore[arg-type]
        print(f"{name} {(old, new)[name == 'new']}: min {v[0]:.3f} p25 {v[len(v) // 4]:.3f} "
              f"median {statistics.median(v):.3f} µs/row")
    print(f"paired new/old: median {statistics.median(r['ratios']):.3f}; "  # type: ignore[arg-type]
          f"load average (1 min) {r['load'][0]:.1f}-{r['load'][1]:.1f}")  # type: ignore[index]


if __name__ == "__main__":
    main()
