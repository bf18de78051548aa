"""``nccl_pairs`` collector: pairwise bandwidths (nccl-tests) voted into a host, a ToR or the
inter-ToR path."""

from __future__ import annotations

from diagnose.collectors import nccl_pairs


def test_pairs_slow_only_across_tors_blames_switch_not_hosts():
    text = "a,b 90.0\nc,d 89.0\na,c 45.0  # crossing ToR\nb,d 46.0 # crossing ToR\n"
    got = [(f.kind, f.location) for f in nccl_pairs.vote(nccl_pairs.parse(text))]
    assert got == [("switch", "inter-ToR path")]
