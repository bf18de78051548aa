"""Throughput of the simulator at the paper's scale: ``python -m producers.sim.bench``.

A two-tier fabric of ``n_rnics`` RNICs (8 per host, 32 per ToR, 32 spines: the paper's
Tomahawk-4 ToRs, §6) at the paper's rates: ToR-mesh 10 probes/s per RNIC, inter-ToR
tuples from Eq. 1 at P = 0.99. Prints setup time and probe rows produced per second of
wall time. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import time

from producers.sim.engine import Simulator
from producers.sim.fabrics import random_clos
from producers.sim.faults import LinkDown


def bench(n_rnics: int = 10_000, batches: int = 2, seed: int = 0, trace: str = "on_change") -> dict:
    """Run ``batches`` 5 s uploads of a ``n_rnics`` fabric with one dead link; return the figures.

    Returns:
        dict with ``rnics``, ``setup_s`` (inventory, pinglists, routing), ``probes`` and
        ``paths`` (rows produced), ``batch_s`` (mean wall seconds per 5 s batch),
        ``probes_per_s`` (rows per wall second) and ``realtime_x`` (simulated / wall time).
    """
    per_tor = 32
    n_tors = max(2, round(n_rnics / per_tor))
    t = time.perf_counter()
    inv = random_clos(seed, n_tors=n_tors, n_spines=32, hosts_per_tor=4, rnics_per_host=8)
    tors = list(inv.tors)
    sim = Simulator(inv, seed=seed, faults=[LinkDown(tors[0], "S3")], trace=trace)
    t0 = 1_800_000_000_000_000_000
    sim.upload_batches(t0, seconds=0.001)  # builds pinglists, paths and hop strings
    setup = time.perf_counter() - t
    probes = paths = 0
    t = time.perf_counter()
    for i in range(batches):
        for _agent, pc, qc in sim.upload_batches(t0 + i * 5_000_000_000):
            probes += len(pc["seq"])
            paths += len(qc["hops"])
    wall = time.perf_counter() - t
    return {
        "rnics": len(inv.rnics),
        "setup_s": round(setup, 2),
        "probes": probes,
        "paths": paths,
        "batch_s": round(wall / batches, 2),
        "probes_per_s": round(probes / wall),
        "realtime_x": round(5.0 * batches / wall, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rnics", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--trace", choices=("on_change", "every_batch"), default="on_change")
    a = ap.parse_args()
    r = bench(a.rnics, a.batches, trace=a.trace)
    print(
        f"{r['rnics']} RNICs: setup {r['setup_s']} s; {r['probes']} probe rows and {r['paths']} path rows "
        f"in {a.batches} batches; {r['batch_s']} s per 5 s batch; {r['probes_per_s']:,} probe rows/s; "
        f"{r['realtime_x']}x real time"
    )


if __name__ == "__main__":
    main()
