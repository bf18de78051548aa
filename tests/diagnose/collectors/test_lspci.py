"""``lspci`` collector: link speed and width against capability along the path (the narrowest hop named
as the limit), device classes, idle power saving and ATS, in full and condensed ``lspci -vvv``
captures, with false-positive guards."""

from __future__ import annotations

from artifact_findings import kinds

from diagnose.collectors import lspci

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


def test_lspci_names_an_upstream_port_wired_narrower_as_the_limit():
    text = (
        "00:01.0 PCI bridge: Intel Corporation Root Port\n"
        "\tBus: primary=00, secondary=3b, subordinate=3b, sec-latency=0\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x2\n"
        "\t\tLnkSta:\tSpeed 32GT/s, Width x2\n"
        "\n"
        "3b:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x4\n"
        "\t\tLnkSta:\tSpeed 32GT/s, Width x2 (downgraded)\n"
    )
    found = lspci.findings(lspci.parse(text))
    assert [(f.kind, f.location, f.cause, f.evidence["limiting_hop"]) for f in found] == [
        ("pcie_downgrade", "0000:3b:00.0", "config", "0000:00:01.0")
    ]


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


def test_guard_condensed_lspci_healthy_lines_raise_nothing():
    text = "0000:01:00.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x4\n"
    assert lspci.detect(text) and kinds(text) == []


def test_condensed_lspci_with_the_root_port_line_names_it_as_the_limit():
    case16_like = (
        "Observed on host X\n"
        "0002:00:00.0  LnkCap: Speed 32GT/s, Width x2    LnkSta: Speed 32GT/s, Width x2\n"
        "0002:01:00.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x2 (downgraded)\n"
        "0002:01:00.1  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x2 (downgraded)\n"
    )
    found = lspci.findings(lspci.parse(case16_like))
    assert [(f.location, f.cause, f.evidence["limiting_hop"], f.evidence["limiting_hop_inferred"]) for f in found] == [
        ("0002:01:00.0", "config", "0002:00:00.0", True),
        ("0002:01:00.1", "config", "0002:00:00.0", True),
    ]
    # two candidate ports above: nothing is inferred
    two = case16_like.replace(
        "Observed on host X\n",
        "Observed on host X\n0002:00:01.0  LnkCap: Speed 32GT/s, Width x4    LnkSta: Speed 32GT/s, Width x4\n",
    )
    assert {f.evidence["limiting_hop"] for f in lspci.findings(lspci.parse(two))} == {
        "upstream port (not in this capture)"
    }
