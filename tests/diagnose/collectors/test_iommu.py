"""``iommu`` collector: AMD-Vi IO_PAGE_FAULT and DMAR fault lines, and the kernel command line, on real public
outputs (tests/diagnose/fixtures/artifacts, sources in its README), with false-positive guards."""

from __future__ import annotations

from diagnose.collectors import iommu
from diagnose.run import diagnose_paths

from conftest import REPO

FIX = REPO / "tests" / "diagnose" / "fixtures" / "artifacts"


def iommu_findings(name: str):
    return [f for f in diagnose_paths([FIX / name]) if f.kind.startswith("iommu")]


def test_nvidia_gpu_io_page_faults_during_p2p_are_an_error_at_the_gpu():
    [f] = iommu_findings("dmesg_amdvi_nvidia_p2p_io_page_fault.txt")
    assert (f.kind, f.location, f.severity, f.cause) == ("iommu_fault", "0000:07:00.0", "error", "config")
    assert f.evidence["driver"] == "nvidia" and f.evidence["faults"] == 9 and f.evidence["gpu_or_rnic"] is True
    assert "iommu=pt" in f.explanation and f.source.endswith(":1")


def test_nvme_faults_are_a_warning_not_a_gpudirect_error():
    [f] = iommu_findings("dmesg_amdvi_nvme_io_page_fault.txt")
    assert (f.location, f.severity, f.evidence["driver"]) == ("0000:01:00.0", "warning", "nvme")
    assert f.evidence["faults"] == 3 and f.evidence["callbacks_suppressed"] == 96


def test_dmar_faults_name_the_device_and_the_reason_and_drhd_lines_add_nothing():
    [f] = iommu_findings("dmesg_dmar_pte_write_fault.txt")
    assert (f.location, f.severity, f.evidence["fault"]) == ("0000:00:12.0", "warning", "DMAR DMA Write fault")
    assert f.evidence["faults"] == 3  # the three fault lines, not the DRHD status lines
    assert f.evidence["details"] == ["reason 05: PTE Write access is not set"]
    assert f.evidence["callbacks_suppressed"] == 2474


def test_split_amdvi_form_and_command_line():
    # older kernels split the event over two lines (pcengines/apu2-documentation#240)
    split = ("kernel: [  221.562629] AMD-Vi: Event logged [\n"
             "kernel: [  221.565929] IO_PAGE_FAULT device=05:00.0 domain=0x0012 address=0x00000000ff6101b0 "
             "flags=0x0070]\n")
    [f] = iommu.findings(iommu.parse(split))
    assert (f.location, f.severity) == ("0000:05:00.0", "warning")
    # /proc/cmdline, written from its format (no public capture kept): translation on without pt is info
    on = "BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=x ro quiet intel_iommu=on\n"
    [t] = iommu.findings(iommu.parse(on))
    assert (t.kind, t.severity, t.evidence["cmdline"]) == ("iommu_translation", "info", {"intel_iommu": "on"})
    assert iommu.findings(iommu.parse(on.replace("intel_iommu=on", "intel_iommu=on iommu=pt"))) == []
    assert not iommu.detect("BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=x ro quiet\n")  # no IOMMU argument: nothing
