"""``scripts/gpu-check``: run the NVML and sysfs readers of the Hostping agent for a while, write JSON.

For a GPU host where fabricscope is not installed: standard library plus ``nvidia-ml-py`` only (no
Kafka, no Arrow), so it runs from a bare checkout with the host's ``python3``. It records what the
agent would see and publish there:

- ``environment``: kernel, Python, ``/dev/nvidia*``, ``/dev/infiniband``, ``perf_event_paranoid``;
- ``discovery``: every PCI function, NUMA nodes, RNICs, GPUs (NVML), the intra-host topology, the
  uncore PMUs and the bus counters planned on them, and why any part is missing;
- ``nvml``: per GPU the calls this driver does not support (e.g. Xid events in a container) and one
  sample per interval of link generation/width, PCIe throughput, replay counter, utilisation;
- ``links``: every PCIe hop's current and maximum speed/width at the end of the run;
- ``would_publish``: the inventory and topology records and the last cycle's ``hostmetric.v2`` rows.

An unsupported NVML call never stops the run; NVML absent altogether is recorded, not raised.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import time
from pathlib import Path

from producers.hostping.agent import AgentConfig, HostAgent


def environment(procfs: Path) -> dict[str, object]:
    """What the host offers the agent: devices, kernel and perf settings."""
    try:
        paranoid = (procfs / "sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        paranoid = "unreadable"
    return {
        "kernel": platform.release(), "machine": platform.machine(), "python": sys.version.split()[0],
        "uid": os.geteuid(), "dev_nvidia": sorted(glob.glob("/dev/nvidia*")),
        "dev_infiniband": sorted(glob.glob("/dev/infiniband/*")), "perf_event_paranoid": paranoid,
        "nvidia_ml_py": _nvml_version(),
    }


def _nvml_version() -> str:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return "not installed"
    from importlib import metadata

    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "installed (version unknown)"


def run(duration_s: float, interval_s: float, sysfs: Path, procfs: Path) -> dict[str, object]:
    """Sample for ``duration_s`` seconds every ``interval_s``; the JSON-ready report.

    Raises:
        FileNotFoundError: ``sysfs`` is not a directory.
        ValueError: a non-positive duration or interval.
    """
    if duration_s <= 0 or interval_s <= 0:
        raise ValueError(f"--duration and --interval must be > 0 s, got {duration_s}, {interval_s}")
    t0 = time.time()
    agent = HostAgent(AgentConfig(sysfs=sysfs, procfs=procfs, interval_s=interval_s, use_loopback=False))
    samples: list[dict[str, object]] = []
    xids: list[dict[str, object]] = []
    unsupported: dict[str, dict[str, str]] = {}
    try:
        prev = agent.monitor.read()
        rows: list[dict[str, object]] = []
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            time.sleep(interval_s)
            cur = agent.monitor.read()
            rows = agent.monitor.rows(prev, cur, agent.agent_id)
            for g in cur.gpus:
                samples.append({"t_ns": cur.t_ns, "gpu": g.index, "bdf": g.bdf, **g.values})
                unsupported.setdefault(g.bdf, {}).update(g.unsupported)
            xids += [{"t_ns": cur.t_ns, "gpu": i, "xid": x} for i, x in cur.xids]
            prev = cur
        links = {bdf: {"speed_gtps": v[0], "width": v[1], "max_speed_gtps": v[2], "max_width": v[3]}
                 for bdf, v in prev.links.items()}
        topo = agent.topology_columns(prev.t_ns)
        return {
            "started": t0, "duration_s": round(time.time() - t0, 3), "host": agent.disc.host,
            "environment": environment(procfs),
            "discovery": agent.disc.to_json(),
            "nvml": {"available": agent.nvml is not None, "error": agent.disc.nvml_error,
                     "unsupported_calls": unsupported,
                     "xid_events": xids, "xid_error": agent.nvml.xid_error if agent.nvml else "",
                     "samples": samples},
            "bus_counter_errors": agent.bus.errors if agent.bus else [],
            "monitor_errors": prev.errors,
            "links": links,
            "would_publish": {
                "hosts.inventory": len(agent.disc.functions),
                "hosts.topology": "after the first idle loopback round (needs an RNIC)" if topo is None else topo,
                "hostmetrics.raw": rows,
            },
        }
    finally:
        agent.close()


def main(argv: list[str] | None = None) -> int:
    """Command line of ``scripts/gpu-check``; exit 0 with the JSON written, 2 on bad arguments."""
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=30.0, help="seconds to sample (default 30)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--path.sysfs", dest="sysfs", default="/sys")
    p.add_argument("--path.procfs", dest="procfs", default="/proc")
    p.add_argument("--out", default=None, help="JSON file (default $OUT/gpu-check.json, else ./gpu-check.json)")
    a = p.parse_args(argv)
    out = Path(a.out) if a.out else Path(os.environ.get("OUT", ".")) / "gpu-check.json"
    try:
        report = run(a.duration, a.interval, Path(a.sysfs), Path(a.procfs))
    except (FileNotFoundError, ValueError) as err:
        print(f"gpu-check: {err}", file=sys.stderr)
        return 2
    out.write_text(json.dumps(report, indent=1, default=str))
    n = report["nvml"]
    print(f"gpu-check: {report['host']}: {len(report['discovery']['pci_functions'])} PCI functions, "  # type: ignore[index]
          f"{len(n['samples'])} NVML samples ({'NVML: ' + n['error'] if n['error'] else 'NVML ok'}); "  # type: ignore[index]
          f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
