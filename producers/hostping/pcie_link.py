"""One rule for a PCIe link's trained speed/width against what it can do.

Used by :mod:`diagnose.collectors.lspci` (LnkCap/LnkCap2/LnkCtl2/LnkSta) and :mod:`.sysfs_pcie`
(``current_link_*``/``max_link_*``) so both sources judge a link the same way.
Hostping §2 (Figure 3): a PCIe downgrade on an RNIC link cut throughput from
197 Gb/s to 67 Gb/s; it is failure #1 (RNIC) / #2 (GPU) of the paper.

The one exception (field case 12): GPUs, and the switch/root ports above them,
retrain to 2.5 GT/s when idle to save power and keep their full width. A
speed-only drop to 2.5 GT/s on a GPU or an unidentified device is therefore
informational: re-check under load (NVML current vs max generation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from producers.hostping.findings import Finding

#: Line rate per lane after encoding, Gb/s (8b/10b for Gen1/2, 128b/130b Gen3-5, FLIT Gen6).
LANE_GBPS = {
    2.5: 2.0,
    5.0: 4.0,
    8.0: 8.0 * 128 / 130,
    16.0: 16.0 * 128 / 130,
    32.0: 32.0 * 128 / 130,
    64.0: 64.0 * 242 / 256,
}
GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
IDLE_SPEED_GTPS = 2.5
DEVICE_CLASSES = ("gpu", "rnic", "nvme", "bridge", "unknown")


def link_gbps(speed_gtps: float, width: int) -> float:
    """Usable one-direction bandwidth of a link in Gb/s (speed in GT/s per lane, width in lanes)."""
    per_lane = LANE_GBPS.get(speed_gtps, speed_gtps * 128 / 130)
    return per_lane * width


@dataclass(frozen=True)
class LinkReading:
    """What one source says about one PCIe link.

    Speeds are GT/s per lane, widths are lanes; ``None`` when the source does
    not show the value. ``speed_marked_downgraded``/``width_marked_downgraded`` are
    lspci's own "(downgraded)" markers, used only when the capability is unknown.
    """

    location: str
    speed_gtps: float | None
    width: int | None
    max_speed_gtps: float | None = None
    max_width: int | None = None
    target_speed_gtps: float | None = None
    device_class: str = "unknown"
    speed_marked_downgraded: bool = False
    width_marked_downgraded: bool = False
    line: int = 0
    under_load: bool = False


def limited_by_partner(port: LinkReading, partners: list[LinkReading]) -> LinkReading:
    """A port's link trains to what *both* ends support: cap the port's maximum speed/width by
    the device(s) below it, so a Gen4 root port holding a Gen3 x8 NIC is not called downgraded."""
    speeds = [p.max_speed_gtps for p in partners if p.max_speed_gtps]
    widths = [p.max_width for p in partners if p.max_width]
    return replace(
        port,
        max_speed_gtps=min([port.max_speed_gtps, *speeds]) if port.max_speed_gtps and speeds else port.max_speed_gtps,
        max_width=min([port.max_width, *widths]) if port.max_width and widths else port.max_width,
    )


def _expected_speed(r: LinkReading) -> float | None:
    speeds = [s for s in (r.max_speed_gtps, r.target_speed_gtps) if s]
    return min(speeds) if speeds else None


def assess_link(r: LinkReading) -> Finding | None:
    """Judge one link; return a finding or ``None`` when it trained as expected.

    Returns:
        ``pcie_downgrade`` (severity ``error``, cause ``failure``) when the width is
        below capability, or the speed is below min(LnkCap, LnkCtl2 target) other
        than the idle case; ``pcie_idle_power_saving`` (``info``) for a speed-only
        drop to 2.5 GT/s at full width on a GPU, bridge or unidentified device.
    """
    if (r.speed_gtps is None and r.width is None) or r.width == 0:
        return None  # no link trained: an empty slot or unused downstream port
    expected = _expected_speed(r)
    speed_down = (r.speed_gtps is not None and expected is not None and r.speed_gtps < expected) or (
        expected is None and r.speed_marked_downgraded
    )
    width_down = (r.width is not None and r.max_width is not None and r.width < r.max_width) or (
        r.max_width is None and r.width_marked_downgraded
    )
    if not speed_down and not width_down:
        return None
    evidence: dict[str, object] = {
        "current_speed_gtps": r.speed_gtps,
        "current_width": r.width,
        "max_speed_gtps": r.max_speed_gtps,
        "max_width": r.max_width,
        "target_speed_gtps": r.target_speed_gtps,
        "device_class": r.device_class,
        "downgraded": [d for d, on in (("speed", speed_down), ("width", width_down)) if on],
    }
    if r.speed_gtps and r.width:
        evidence["current_gbps"] = round(link_gbps(r.speed_gtps, r.width), 1)
    if expected and (r.max_width or r.width):
        evidence["capable_gbps"] = round(link_gbps(expected, r.max_width or r.width or 0), 1)
    line = str(r.line) if r.line else ""
    if (
        speed_down
        and not width_down
        and r.speed_gtps == IDLE_SPEED_GTPS
        and not r.under_load
        and r.device_class in ("gpu", "bridge", "unknown")
    ):
        return Finding(
            "pcie_idle_power_saving",
            r.location,
            "info",
            f"Link at 2.5 GT/s with full width x{r.width}: GPUs retrain to Gen1 when idle to save power. "
            "Not a fault by itself; re-check under load (NVML current vs max PCIe generation).",
            evidence,
            "",
            line,
        )
    parts = []
    if speed_down:
        want = f"{expected:g} GT/s" if expected else "its capability"
        parts.append(f"speed {r.speed_gtps:g} GT/s below {want}")
    if width_down:
        parts.append(f"width x{r.width} below x{r.max_width}" if r.max_width else f"width x{r.width} downgraded")
    elif r.max_width is not None and r.width == r.max_width and r.max_width < 16:
        evidence["width_limit"] = f"x{r.max_width} equals the port's capability: a slot limit, not a downgrade"
    text = "PCIe link trained below capability: " + "; ".join(parts) + "."
    if "width_limit" in evidence:
        text += f" Width x{r.width} equals the capability (slot limit, not a width downgrade)."
    if width_down and not speed_down:
        text += (
            " A width-only drop at full speed is most often the slot's electrical width or the upstream port "
            "(platform wiring, bifurcation): check them before the card."
        )
    else:
        text += " Reseat/replace the card or cable, check firmware and BIOS link settings."
    return Finding("pcie_downgrade", r.location, "error", text, evidence, "failure", line)
