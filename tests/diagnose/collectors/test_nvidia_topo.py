"""``nvidia_topo`` collector: ``nvidia-smi topo -m`` GPU-NIC locality (NVIDIA and other vendors' RDMA
devices), with a real DGX A100 matrix as the false-positive guard."""

from __future__ import annotations

from artifact_findings import ARTIFACTS, fixture, problems

from diagnose.collectors import nvidia_topo


def test_topo_gpu_whose_nearest_nic_is_sys_and_guard_real_pxb_matrix():
    text = (
        "        GPU0    GPU1    NIC0    CPU Affinity\n"
        "GPU0     X      SYS     SYS     0-23\n"
        "GPU1    SYS      X      PIX     24-47\n"
        "NIC0    SYS     PIX      X\n"
        "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    assert nvidia_topo.detect(text)
    assert problems(text) == [("gpu_nic_locality", "GPU0")]
    assert fixture("topo_dgx_a100_pxb.txt") == []
    assert nvidia_topo.parse((ARTIFACTS / "topo_dgx_a100_pxb.txt").read_text()).cells["GPU2"]["NIC2"] == "PXB"


def test_topo_with_rdma_device_columns_of_other_vendors():
    text = (
        "        GPU0    GPU1    bnxt_re0    mlx5_1    CPU Affinity\n"
        "GPU0     X      NV18    NODE        PIX       0-31\n"
        "GPU1    NV18     X      NODE        NODE      0-31\n"
    )
    t = nvidia_topo.parse(text)
    assert t.nics() == ["bnxt_re0", "mlx5_1"]
    assert problems(text) == [("gpu_nic_locality", "GPU1")]
