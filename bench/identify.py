"""Identifiability of the probe plans and the closed loop on agg-to-core faults: ``python -m bench.identify``.

Two parts (docs/identifiability.md):

* **Plans.** For each fabric of the accuracy benchmark, the Eq. 1 pinglists (ToR-mesh, inter-ToR):
  switch links identifiable for a single fault, ambiguous groups and how many no 5-tuple can split,
  two-link faults that look like another fault, and the extra inter-ToR tuples
  :func:`producers.controller_ident.make_identifiable` adds (against Eq. 1's).
* **Loop.** On the benchmark's three-tier fabric (two pods), one fault per scenario on an agg-to-core
  link (scenario ``s``: link ``s mod 8``, kind ``s mod 4``: dead, 5 % lossy, 40 % partial 5-tuple
  loss, flapping 2 s in 10 s), 80 s, background loss as the benchmark draws it, run without and
  with the controller's closed loop; scored by :func:`bench.accuracy.score`.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from bench.accuracy import BACKGROUND_LOSS, BIG, SIZES, AccuracyReport, Scenario, ScenarioResult, run_scenario, score
from producers.plan_explain import explain_plan
from producers.sim import FlappingLink, LinkDown, LossyLink, PartialTupleLoss

THREE_TIER = SIZES[3]


def plan_rows(seed: int = 1, bounce: bool = False) -> list[dict]:
    """One row per benchmark fabric: identifiability of its Eq. 1 plan before and after the builder (with
    ``bounce``, standing bounced probes for the groups no 5-tuple splits, as the simulator's agents send)."""
    rows = []
    for name, build in [*SIZES, BIG]:
        x = explain_plan(build(seed), seed=seed, two_link=True, bounce=bounce)
        rows.append({"fabric": name, "links": len(x.before.links), "before": x.before, "after": x.after,
                     "two_link": x.two_link, "eq1_tuples": x.augmented.base_entries,
                     "extra_tuples": len(x.augmented.extra), "extra_pps": x.extra_pps, "eq1_pps": x.eq1_pps,
                     "bounce_pps": x.bounce_pps})
    return rows


def agg_core_results(seeds: range, loop: bool) -> list[ScenarioResult]:
    """The loop study's scenarios (see the module docstring), each run with or without the loop."""
    name, build = THREE_TIER
    out = []
    for s in seeds:
        inv = build(s)
        links = sorted((ln.a, ln.b) for ln in inv.links if inv.switches.get(ln.b) and
                       inv.switches[ln.b].tier == "core")
        a, b = links[s % len(links)]
        f = [LinkDown(a, b), LossyLink(a, b, rate=0.05), PartialTupleLoss(a, b, fraction=0.4),
             FlappingLink(a, b, period_s=10.0, down_s=2.0)][s % 4]
        out.append(run_scenario(Scenario(s, name, inv, [f], 80), s, BACKGROUND_LOSS, loop=loop))
    return out


def undetermined_run(results: list[ScenarioResult]) -> dict[str, int]:
    """Per fault kind, the most windows in a row a fault's scenario ended ``undetermined`` over a link group."""
    out: dict[str, int] = defaultdict(int)
    for r in results:
        kind = r.truth[0]["fault"]
        run = best = 0
        for _, rows in r.windows:
            und = any(v["kind"] == "undetermined" and "|" in str(v["location"]) for v in rows)
            run = run + 1 if und else 0
            best = max(best, run)
        out[kind] = max(out[kind], best)
    return dict(out)


def _line(label: str, rep: AccuracyReport, runs: dict[str, int]) -> str:
    fr = sum(a for a, _ in rep.fault_recall.values()), sum(b for _, b in rep.fault_recall.values())
    wr = sum(a for a, _ in rep.window_recall.values()), sum(b for _, b in rep.window_recall.values())
    pr = sum(a for a, _ in rep.precision.values()), sum(b for _, b in rep.precision.values())
    per = ", ".join(f"{k} {a}/{b}" for k, (a, b) in sorted(rep.fault_recall.items()))
    return (f"{label}: fault recall {fr[0]}/{fr[1]} ({per}); window recall {wr[0]}/{wr[1]}; precision "
            f"{pr[0]}/{pr[1]}; undetermined verdicts {rep.undetermined}; right abstentions "
            f"{len(rep.abstentions)}; most undetermined windows in a row per kind {runs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-15", help="scenario seeds of the loop study, LO-HI inclusive")
    ap.add_argument("--plan-seed", type=int, default=1)
    ap.add_argument("--no-plans", action="store_true")
    ap.add_argument("--bounce", action="store_true", help="plans keep standing bounced probes (structural groups)")
    a = ap.parse_args()
    if not a.no_plans:
        for r in plan_rows(a.plan_seed, a.bounce):
            print(f"{r['fabric']}: Eq. 1 plan: {r['before'].summary()}; two-link ambiguous {r['two_link']}; "
                  f"builder adds {r['extra_tuples']} tuples to {r['eq1_tuples']} "
                  f"({r['extra_pps']:.0f} of {r['eq1_pps']:.0f} inter-ToR probes/s)"
                  + (f", standing bounces {r['bounce_pps']:.0f} probes/s" if a.bounce else "")
                  + f"; after: {r['after'].summary()}")
            for g in r["after"].structural:
                print(f"    no 5-tuple splits {'|'.join(g)} (bounced probes do)")
    lo, hi = (int(x) for x in a.seeds.split("-"))
    seeds = range(lo, hi + 1)
    for loop in (False, True):
        t = time.perf_counter()
        res = agg_core_results(seeds, loop)
        rep = score(res, lo, time.perf_counter() - t)
        print(_line("with the loop" if loop else "without the loop", rep, undetermined_run(res))
              + f"; {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
