"""The whole kind of fault behind each field case, beyond the case itself (Hostping parsers and rules)."""

from __future__ import annotations

from diagnose.collectors import dmesg, lspci, nccl_log, nccl_pairs
from diagnose.run import diagnose_paths
from producers.hostping import hw_counters, sysfs, sysfs_pcie

from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hostping"
SYSFS = FIXTURES / "sysfs_gpu_behind_switch"

LSPCI = """\
3b:00.0 Ethernet controller: Mellanox Technologies MT28908 Family [ConnectX-6]
\tSubsystem: Mellanox Technologies Device 0007
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported
\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+
\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)
\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
\tCapabilities: [480 v1] Address Translation Service (ATS)
\t\tATSCap:\tInvalidate Queue Depth: 00
\t\tATSCtl:\tEnable-, Smallest Translation Unit: 00

af:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 16GT/s (ok), Width x8 (downgraded)

b0:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)
\t\tATSCtl:\tEnable+, Smallest Translation Unit: 00
"""


def test_lspci_rnic_at_gen1_is_a_problem_gpu_at_gen1_is_not():
    found = {(f.kind, f.location) for f in lspci.findings(lspci.parse(LSPCI))}
    assert found == {
        ("pcie_downgrade", "0000:3b:00.0"),  # an RNIC does not idle down: real downgrade
        ("ats_disabled", "0000:3b:00.0"),
        ("pcie_downgrade", "0000:af:00.0"),  # width x8 of x16 is never power saving
        ("pcie_idle_power_saving", "0000:b0:00.0"),
    }


def test_lspci_device_classes_from_headers():
    devs = {d.location: d.device_class for d in lspci.parse(LSPCI)}
    assert devs == {"0000:3b:00.0": "rnic", "0000:af:00.0": "gpu", "0000:b0:00.0": "gpu"}


def test_sysfs_walk_effective_link_of_gpu_is_upstream_port():
    hops = sysfs_pcie.read_hops(sysfs.SysfsSnapshot.from_root(SYSFS))
    assert hops["0000:03:00.0"].chain == ("0000:00:01.1", "0000:01:00.0", "0000:02:00.0")
    eff = sysfs_pcie.effective_link(hops, "0000:03:00.0")
    # nearest narrowest hop wins: the switch upstream port, not the root port reading the same link
    assert (eff.at, eff.speed_gtps, eff.width, eff.gbps) == ("0000:01:00.0", 16.0, 8, 126.0)


def test_sysfs_root_findings_one_per_link():
    found = diagnose_paths([SYSFS])
    got = sorted((f.kind, f.location, f.severity) for f in found)
    assert got == [
        ("pcie_downgrade", "0000:01:00.0", "error"),  # root port 00:01.1 reads the same link: reported once
        ("pcie_idle_power_saving", "0000:81:00.0", "info"),
        ("pcie_link_errors", "0000:03:00.0", "warning"),  # aer_dev_correctable: Timeout 7, BadTLP 2
        ("rnic", "mlx5_0/port1", "warning"),  # link_downed=3
    ]
    aer = next(f for f in found if f.kind == "pcie_link_errors")
    assert aer.evidence["aer"]["aer_dev_correctable"] == {"BadTLP": 2, "Timeout": 7}
    down = next(f for f in found if f.kind == "pcie_downgrade")
    assert down.evidence["limits_endpoints"] == ["0000:02:00.0", "0000:03:00.0"]
    assert down.evidence["link"] == "0000:00:01.1->0000:01:00.0"


def test_hw_counter_deltas_survive_a_reset():
    assert hw_counters.deltas({"a": 10, "b": 50}, {"a": 15, "b": 3, "c": 1}) == {"a": 5, "b": 3, "c": 1}


def test_dmesg_corrected_only_is_a_warning_and_fatal_without_xid_is_a_failure():
    text = (
        "[ 10.0] pcieport 0000:40:01.1: AER: Corrected error received: 0000:41:00.0\n"
        "[ 10.1] pcieport 0000:40:01.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
        "[ 10.2] pcieport 0000:40:01.1:    [ 0] RxErr\n"
        "[ 20.0] pcieport 0000:c0:03.1: AER: Uncorrected (Fatal) error received: 0000:c1:00.0\n"
        "[ 20.1] pcieport 0000:c0:03.1: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer\n"
        "[ 20.2] pcieport 0000:c0:03.1:    [ 5] Surprise Down Error    (First)\n"
    )
    got = sorted((f.kind, f.location, f.severity) for f in dmesg.findings(dmesg.parse(text)))
    assert got == [("pcie_link_errors", "0000:40:01.1", "warning"), ("pcie_link_failure", "0000:c0:03.1", "critical")]


def test_nccl_error12_voted_by_two_hosts_blames_peer_rnic_one_host_is_undetermined():
    text = (
        "h1:1:2 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer hx<1> with error 12, opcode 2\n"
        "h2:3:4 [1] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer hx<2> with error 12, opcode 2\n"
        "h3:5:6 [1] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer hy<2> with error 12, opcode 2\n"
    )
    got = [(f.kind, f.location) for f in nccl_log.findings(nccl_log.parse(text))]
    assert got == [("rnic", "hx"), ("undetermined", "h3<->hy")]


def test_pairs_slow_only_across_tors_blames_switch_not_hosts():
    text = "a,b 90.0\nc,d 89.0\na,c 45.0  # crossing ToR\nb,d 46.0 # crossing ToR\n"
    got = [(f.kind, f.location) for f in nccl_pairs.vote(nccl_pairs.parse(text))]
    assert got == [("switch", "inter-ToR path")]


LSPCI_TREE = """\
00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge
\tBus: primary=00, secondary=3b, subordinate=3b, sec-latency=0
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <64us
\t\tLnkSta:\tSpeed 8GT/s (downgraded), Width x8 (downgraded)

00:03.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge
\tBus: primary=00, secondary=3c, subordinate=3c, sec-latency=0
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <64us
\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x0 (downgraded)

3b:00.0 Ethernet controller: Intel Corporation Ethernet Controller X710 for 10GbE SFP+
\t\tLnkCap:\tPort #0, Speed 8GT/s, Width x8, ASPM L1, Exit Latency L1 <16us
\t\tLnkSta:\tSpeed 8GT/s (ok), Width x8 (ok)
"""


def test_lspci_root_port_holding_a_gen3_x8_nic_and_an_empty_slot_are_not_downgrades():
    assert lspci.findings(lspci.parse(LSPCI_TREE)) == []
    # the same NIC trained at x4: reported once, at the NIC, against the lesser capability
    narrow = LSPCI_TREE.replace("Speed 8GT/s (ok), Width x8 (ok)", "Speed 8GT/s (ok), Width x4 (downgraded)")
    got = [(f.kind, f.location, f.evidence["downgraded"]) for f in lspci.findings(lspci.parse(narrow))]
    assert got == [("pcie_downgrade", "0000:3b:00.0", ["width"])]


def test_sysfs_port_above_a_less_capable_device_is_not_a_downgrade():
    rp = "/sys/devices/pci0000:00/0000:00:01.1"
    nic = rp + "/0000:3b:00.0"
    text = "\n".join(
        [
            f"{rp}/current_link_speed:8.0 GT/s PCIe",
            f"{rp}/current_link_width:8",
            f"{rp}/max_link_speed:16.0 GT/s PCIe",
            f"{rp}/max_link_width:16",
            f"{nic}/current_link_speed:8.0 GT/s PCIe",
            f"{nic}/current_link_width:8",
            f"{nic}/max_link_speed:8.0 GT/s PCIe",
            f"{nic}/max_link_width:8",
        ]
    )
    assert sysfs_pcie.findings(sysfs.SysfsSnapshot.from_text(text)) == []
    worse = text.replace(f"{nic}/current_link_width:8", f"{nic}/current_link_width:4").replace(
        f"{rp}/current_link_width:8", f"{rp}/current_link_width:4"
    )
    got = [(f.location, f.evidence["link"]) for f in sysfs_pcie.findings(sysfs.SysfsSnapshot.from_text(worse))]
    assert got == [("0000:3b:00.0", "0000:00:01.1->0000:3b:00.0")]
