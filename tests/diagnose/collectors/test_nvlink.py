"""``nvlink`` collector: ``nvidia-smi nvlink -s`` on real public outputs
(tests/diagnose/fixtures/artifacts, sources in its README), with a healthy GB200 as the false-positive guard."""

from __future__ import annotations

from diagnose.collectors import nvlink
from diagnose.run import diagnose_paths

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"


def test_inactive_links_beside_active_ones_are_an_error_at_that_gpu():
    [f] = [f for f in diagnose_paths([FIX / "nvlink_s_v100_inactive_links.txt"]) if f.kind.startswith("nvlink")]
    assert (f.kind, f.location, f.severity) == ("nvlink_inactive", "GPU 3", "error")
    assert f.evidence["inactive_links"] == [3, 5] and f.evidence["links"] == 6
    assert f.evidence["active_gbps"] == [25.781] and f.source.endswith(":3")


def test_a_healthy_gb200_raises_nothing_and_the_cut_paste_is_read():
    assert [f for f in diagnose_paths([FIX / "nvlink_s_gb200_healthy.txt"]) if f.kind.startswith("nvlink")] == []
    gpus = nvlink.parse((FIX / "nvlink_s_gb200_healthy.txt").read_text())
    assert [(g.index, len(g.links)) for g in gpus] == [(0, 18), (1, 2)]


def test_all_links_inactive_and_a_slower_link():
    # written from the -s format of the fixtures above
    none = "GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-x)\n\t Link 0: <inactive>\n\t Link 1: <inactive>\n"
    [f] = nvlink.findings(nvlink.parse(none))
    assert (f.kind, f.severity) == ("nvlink_inactive", "warning")
    slow = "GPU 1: Tesla V100-SXM2-32GB (UUID: GPU-y)\n\t Link 0: 25.781 GB/s\n\t Link 1: 12.891 GB/s\n"
    [d] = nvlink.findings(nvlink.parse(slow))
    assert (d.kind, d.location, d.evidence["slow_links"]) == ("nvlink_degraded", "GPU 1", [1])
