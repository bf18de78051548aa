"""Two faults at one spine or one ToR of Panel 1, a partial 5-tuple loss among them: ``python -m bench.spine_pairs``.

On Panel 1 (4 spines, 3 ToRs) two faults on links of one spine, or on two uplinks of one ToR, share
most of their tuples, and a partial 5-tuple loss fails only a few of those: the case where a healthy
link that crosses both faults' tuples outscores each fault's link. Four fixed pairs (:data:`PAIRS`),
each run at every seed of ``--seeds`` (the simulator's ECMP hashing and the partial loss's tuple draw
change with the seed), 80 s with the closed loop and the benchmark's background loss, scored by
:func:`bench.accuracy.score` together. It prints the wrong claims; the accuracy benchmark's own draw
meets these pairs only now and then (section 1 of BENCHMARKS.md, limit 3).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from bench.accuracy import BACKGROUND_LOSS, SIZES, AccuracyReport, Scenario, ScenarioResult, run_scenario, score
from producers.sim import LinkDown, LossyLink, PartialTupleLoss
from producers.sim.faults import Fault

PANEL1 = SIZES[0]

PAIRS: dict[str, Callable[[], list[Fault]]] = {
    "C-S1 down, A-S1 partial 43 %": lambda: [LinkDown("C", "S1"), PartialTupleLoss("A", "S1", fraction=0.43)],
    "C-S2 down, C-S4 partial 53 %": lambda: [LinkDown("C", "S2"), PartialTupleLoss("C", "S4", fraction=0.53)],
    "B-S1 lossy 23.9 %, B-S2 partial 21 %": lambda: [LossyLink("B", "S1", rate=0.239),
                                                      PartialTupleLoss("B", "S2", fraction=0.21)],
    "B-S3 lossy 10 %, B-S4 partial 30 %": lambda: [LossyLink("B", "S3", rate=0.1),
                                                    PartialTupleLoss("B", "S4", fraction=0.3)],
}
"""Label -> the pair's faults (active for the whole run): the lab's seed 31447, scenarios 15 and 24; seed
4908's last scenario (its loss one-way on the lab); a lossy uplink beside a partial one on one ToR."""


def pair_results(seeds: range, pairs: dict[str, Callable[[], list[Fault]]] = PAIRS) -> list[ScenarioResult]:
    """Every pair at every seed: a Panel 1 scenario of 80 s with the loop (scenario index = seed)."""
    name, build = PANEL1
    return [run_scenario(Scenario(s, name, build(s), make(), 80), s, BACKGROUND_LOSS, loop=True)
            for s in seeds for make in pairs.values()]


def summary(rep: AccuracyReport) -> str:
    """One line: claims right of made, window recall, windows with both faults named."""
    pr = sum(a for a, _ in rep.precision.values()), sum(b for _, b in rep.precision.values())
    wr = sum(a for a, _ in rep.window_recall.values()), sum(b for _, b in rep.window_recall.values())
    both = rep.concurrent_windows
    return (f"precision {pr[0]}/{pr[1]}; window recall {wr[0]}/{wr[1]}; both faults named {both[0]}/{both[1]}; "
            f"undetermined verdicts {rep.undetermined}, right abstentions {len(rep.abstentions)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-59", help="seeds, LO-HI inclusive (each runs every pair)")
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.seeds.split("-"))
    t = time.perf_counter()
    rep = score(pair_results(range(lo, hi + 1)), lo, time.perf_counter() - t)
    print(f"{len(PAIRS)} pairs x seeds {lo}-{hi}: {summary(rep)}; {time.perf_counter() - t:.0f} s")
    for w in rep.wrong:
        print(f"  wrong: seed {w['scenario']} window {w['window']}: {w['kind']} {w['location']} at "
              f"{w['confidence']:.2f} ({', '.join(w['faults'])})")


if __name__ == "__main__":
    main()
