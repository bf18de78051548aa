"""``perftest`` collector: ``ib_write_bw`` runs over GPU and host memory (GPUDirect bandwidth), on
hand-written and real public outputs (tests/diagnose/fixtures/artifacts, sources in its README), with
false-positive guards."""

from __future__ import annotations

from artifact_findings import fixture

from diagnose.collectors import perftest
from diagnose.run import diagnose_text

RUN = """\
{cuda}
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 33554432   5000           {bw}              {bw}                 0.000
"""


def test_perftest_gpu_memory_well_below_host_memory_is_gdr_bandwidth():
    text = RUN.format(cuda="initializing CUDA", bw="11000.00") + RUN.format(cuda="", bw="23000.00")
    runs = perftest.parse(text)
    assert [(r.memory, r.bw_average, r.unit) for r in runs] == [("gpu", 11000.0, "MB/sec"), ("host", 23000.0, "MB/sec")]
    found = [f for f in perftest.findings(runs) if f.is_problem]
    assert [(f.kind, f.location, f.evidence["ratio"]) for f in found] == [("gdr_bandwidth", "mlx5_0", 0.478)]


def test_guard_perftest_gpu_close_to_host_and_real_host_only_run():
    text = RUN.format(cuda="initializing CUDA", bw="22000.00") + RUN.format(cuda="", bw="23000.00")
    assert [f for f in diagnose_text(text) if f.is_problem] == []
    real = fixture("perftest_write_bw_host_small.txt")
    assert [(f.kind, f.evidence["bw_average"], f.evidence["msg_bytes"]) for f in real] == [("rdma_bandwidth", 0.17, 8)]
