"""Right / wrong / missed per finding kind over the diagnose fixtures, and false positives on the healthy ones.

Each fixture's stated truth is below (field cases: ``test_cases.RIGHT_DIAGNOSIS``, from each case's "right
diagnosis"; the collector fixtures: what their public threads say). A problem found at the stated location
is right; the stated kind found elsewhere is wrong; a stated problem not found is missed; any problem on a
healthy fixture (a guard) is a false positive. Prints the table (``-s`` not needed) and fails on any miss.
"""

from __future__ import annotations

from collections import Counter

from test_cases import RIGHT_DIAGNOSIS

from diagnose.run import diagnose_paths

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures"

#: collector fixtures (tests/diagnose/fixtures/artifacts) with problems: file -> [(kind, location)]
STATED = {
    "ulimit_a_memlock_64k.txt": [("memlock_limit", "host")],
    "ucx_create_cq_enomem_64k.txt": [("memlock_limit", "ampere")],
    "ucx_reg_mr_enomem_512m.txt": [("memlock_limit", "hostname")],
    "ibstat_cx7_down_polling.txt": [("port_down", "mlx5_10/1")],
    "ibstat_ib_down_linkup.txt": [("port_down", "test-sriov-ib-pod/mlx5_7/1")],
    "rdma_link_flapping_samples.txt": [("port_flapping", "mlx5_7/1")],
    "ibv_devinfo_port_down_two_models.txt": [("port_down", "f51fec68bf55/mlx5_0/1"),
                                             ("port_down", "f51fec68bf55/mlx5_12/1")],
    "dmesg_mlx4_upgrade_fw_lso.txt": [("firmware_too_old", "0000:0d:00.0")],
    "dmesg_amdvi_nvidia_p2p_io_page_fault.txt": [("iommu_fault", "0000:07:00.0")],
    "dmesg_amdvi_nvme_io_page_fault.txt": [("iommu_fault", "0000:01:00.0")],
    "dmesg_dmar_pte_write_fault.txt": [("iommu_fault", "0000:00:12.0")],
    "nvlink_s_v100_inactive_links.txt": [("nvlink_inactive", "GPU 3")],
}
#: healthy samples of the same tools, and their alarming-looking lines: nothing above info
GUARDS = [
    "ulimit_a_memlock_5g.txt", "ibstat_roce_active_and_disabled.txt", "rdma_link_show_active.txt",
    "ethtool_i_mlx5_cx4lx.txt", "mlxup_query_update_required.txt", "mlxup_query_no_matching_image.txt",
    "flint_query_cx5.txt", "dmesg_mlx4_working_node.txt", "nvlink_s_gb200_healthy.txt",
]


def score() -> tuple[dict[str, Counter], list[str]]:
    per_kind: dict[str, Counter] = {}
    fps: list[str] = []
    truth = {FIX / "artifacts" / k: v for k, v in STATED.items()}
    truth |= {next((FIX / "cases").glob(f"{p}_*.txt")): v for p, v in RIGHT_DIAGNOSIS.items()}
    for path, stated in truth.items():
        found = [(f.kind, f.location) for f in diagnose_paths([path]) if f.is_problem]
        if not stated:  # a field case whose right diagnosis is "no problem" (case 12) is a guard too
            fps += [f"{path.name}: {k} at {loc}" for k, loc in found]
        for kind, loc in stated:
            c = per_kind.setdefault(kind, Counter())
            if (kind, loc) in found:
                c["right"] += 1
            elif any(k == kind for k, _ in found):
                c["wrong"] += 1
            else:
                c["missed"] += 1
    fps += [f"{name}: {f.kind} at {f.location}" for name in GUARDS
            for f in diagnose_paths([FIX / "artifacts" / name]) if f.is_problem]
    return per_kind, fps


def test_accuracy_report_over_all_fixtures(capsys):
    per_kind, fps = score()
    rows = [f"{k:<24} {c['right']:>5} {c['wrong']:>5} {c['missed']:>6}" for k, c in sorted(per_kind.items())]
    with capsys.disabled():
        print("\nkind                     right wrong missed\n" + "\n".join(rows)
              + f"\nfalse positives on {len(GUARDS) + 1} healthy fixtures (case 12 included): {len(fps)}")
    new_kinds = {"memlock_limit", "port_down", "port_flapping", "firmware_too_old", "iommu_fault", "nvlink_inactive"}
    assert new_kinds | {"pcie_downgrade"} <= set(per_kind)
    assert all(c["wrong"] == c["missed"] == 0 for c in per_kind.values()), per_kind
    assert fps == []
