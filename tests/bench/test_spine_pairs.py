"""The two-faults-at-a-spine study (``bench.spine_pairs``) on the seeds whose wrong claims changed the vote:
C-S1 dead beside a partial loss on A-S1 named B->S1 at seeds 48 and 51 (a candidate's passing probes hidden
behind dark votes; a live link that outscored the dead one with its failures)."""

from __future__ import annotations

from bench import accuracy
from bench.spine_pairs import PAIRS, pair_results, summary


def test_a_dead_spine_link_beside_a_partial_loss_names_no_healthy_link():
    pair = {k: v for k, v in PAIRS.items() if k.startswith("C-S1 down")}
    res = pair_results(range(48, 52, 3), pair)  # seeds 48 and 51
    rep = accuracy.score(res, 48, 0.0)
    assert rep.wrong == [], rep.wrong
    assert rep.fault_recall["link_down"] == (2, 2)
    right, made = rep.precision["switch"]
    assert right == made > 0
    assert summary(rep).startswith(f"precision {made}/{made};")
