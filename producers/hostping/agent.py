"""The Hostping host agent (§3, Figure 6): discovery, hardware monitor, host status, loopback triggers.

What one agent process does on its host (``fabricscope hostping agent``):

1. **Discovers** the host once (:mod:`.discovery`) and **publishes once** to compacted topics:
   every PCI function (``pci_function.v1`` -> ``hosts.inventory``) and, on a host with RNICs,
   the intra-host topology with its healthy baseline and RNIC registers (``host_topology.v1`` ->
   ``hosts.topology``). The baseline is the first idle full-mesh round (Hostping §4.1: measured
   on a healthy host) unless ``--baseline FILE`` gives one.
2. **Every 1 s** (``interval_s``) reads the hardware monitor (:mod:`.hwmon`) and publishes its
   ``hostmetric.v2`` rows to ``hostmetrics.raw``.
3. **Every 5 min** (``status_interval_s``, §5) decides the host status from RNIC throughput over
   the interval: idle when every RNIC is below ``Thp_low`` (5 % of line rate), which starts a
   full-mesh loopback round; a Tx pause ratio above ``PFC_high`` (3 %) in any 1 s reading starts an
   affinitive-only round (§4.3), at most once per ``busy_round_min_s``.
4. Publishes each round's ``loopback.v1`` batch to ``loopback.raw``.

Without an RNIC the agent monitors only and says that loopback needs one. Every reader takes the
``--path.sysfs`` / ``--path.procfs`` roots, so the agent runs over a captured tree as well.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from producers.hostping import loopback, monitor, pci_inventory
from producers.hostping.discovery import HostDiscovery, discover
from producers.hostping.hwmon import HardwareMonitor, MonitorSnapshot
from producers.hostping.loopback import LoopbackBackend, LoopbackUnavailable
from producers.hostping.nvml import NvmlSession, NvmlUnavailable
from producers.hostping.rnic_config import parse_roce_accl
from producers.hostping.uncore import BusCounterReader

log = logging.getLogger("fabricscope.hostping.agent")

#: (topic name without prefix, schema key, Kafka key, Arrow IPC payload)
Publish = Callable[[str, str, str, bytes], None]


@dataclass
class AgentConfig:
    """Agent settings; defaults are the paper's (Hostping §5) and node_exporter's roots."""

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    host: str | None = None
    interval_s: float = 1.0
    status_interval_s: float = 300.0
    thp_low: float = monitor.THP_LOW
    pfc_high: float = monitor.PFC_HIGH
    busy_round_min_s: float = 60.0
    bus_capacity_gbps: dict[str, float] = field(default_factory=dict)
    use_nvml: bool = True
    use_ethtool: bool = True
    use_loopback: bool = True
    baseline_file: Path | None = None


class HostAgent:
    """One host's agent. Build with :meth:`start`; :meth:`close` releases NVML, perf and verbs resources.

    Args:
        cfg: the settings.
        backend_factory: builds the loopback backend from the sysfs root; default
            :class:`producers.hostping.loopback_verbs.VerbsBackend` (refuses without an RNIC).
    """

    def __init__(self, cfg: AgentConfig,
                 backend_factory: Callable[[Path], LoopbackBackend] | None = None) -> None:
        self.cfg = cfg
        self.nvml: NvmlSession | None = None
        nvml_error = "disabled (--no-nvml)"
        gpus: list[dict[str, object]] = []
        if cfg.use_nvml:
            try:
                self.nvml = NvmlSession()
                gpus = [{"index": g.index, "bdf": g.bdf, "name": g.name} for g in self.nvml.sample()]
                nvml_error = ""
            except NvmlUnavailable as err:
                nvml_error = str(err)
        self.disc: HostDiscovery = discover(cfg.sysfs, cfg.procfs, cfg.host, gpus, nvml_error)
        self.agent_id = f"hostping-{self.disc.host}"
        self.bus = BusCounterReader(self.disc.bus_counters) if self.disc.bus_counters else None
        self.monitor = HardwareMonitor(self.disc, self.nvml, self.bus, cfg.use_ethtool, cfg.bus_capacity_gbps)
        self.backend: LoopbackBackend | None = None
        self.loopback_reason = "disabled (--no-loopback)"
        if cfg.use_loopback:
            if self.disc.topology is None or not self.disc.topology.topology.rnics:
                self.loopback_reason = "loopback needs an RNIC: none found under class/infiniband; monitoring only"
            else:
                try:
                    if backend_factory is None:
                        from producers.hostping.loopback_verbs import VerbsBackend

                        backend_factory = VerbsBackend
                    self.backend = backend_factory(cfg.sysfs)
                    self.loopback_reason = ""
                except LoopbackUnavailable as err:
                    self.loopback_reason = f"{err}; monitoring only"
        self.baseline: list[list[float]] | None = self._load_baseline()
        self.topology_published = False
        self._last_busy_round = float("-inf")

    # -- publish once --------------------------------------------------------------------------
    def inventory_columns(self, upload_ns: int) -> dict[str, list]:
        """``pci_function.v1`` columns: every function under ``/sys/bus/pci/devices``."""
        return pci_inventory.record_columns(self.agent_id, upload_ns, self.disc.host, self.disc.functions)

    def rnic_config(self) -> dict[str, dict[str, bool]] | None:
        """``mlxreg ROCE_ACCL`` per RNIC (slow start, TX window), or ``None`` when mlxreg is absent or fails."""
        exe = shutil.which("mlxreg")
        if exe is None or self.disc.topology is None:
            return None
        out: dict[str, dict[str, bool]] = {}
        for name in self.disc.topology.topology.rnics:
            bdf = self.disc.topology.bdf.get(name, "")
            try:
                p = subprocess.run([exe, "-d", bdf, "--reg_name", "ROCE_ACCL", "--get"], capture_output=True,
                                   text=True, timeout=10, check=False)
                out[name] = parse_roce_accl(p.stdout)
            except (subprocess.TimeoutExpired, ValueError) as err:
                log.warning("mlxreg ROCE_ACCL on %s (%s) not read: %s", name, bdf, err)
                return None
        return out

    def topology_columns(self, upload_ns: int) -> dict[str, list] | None:
        """``host_topology.v1`` columns, or ``None`` while there is no topology or no complete baseline."""
        from schemas.host_topology import record_columns

        if self.disc.topology is None or self.baseline is None:
            return None
        return record_columns(self.agent_id, upload_ns, self.disc.topology.topology, self.baseline,
                              self.rnic_config())

    def _load_baseline(self) -> list[list[float]] | None:
        if self.cfg.baseline_file is None:
            return None
        data = json.loads(Path(self.cfg.baseline_file).read_text())
        if self.disc.topology is None:
            raise ValueError(f"{self.cfg.baseline_file}: a baseline was given but this host has no GPU or RNIC")
        topo = self.disc.topology.topology
        try:
            ri = {r: i for i, r in enumerate(data["rnics"])}
            ei = {e: j for j, e in enumerate(data["endpoints"])}
            return [[float(data["gbps"][ri[r]][ei[e]]) for e in topo.endpoints] for r in topo.rnics]
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise ValueError(f"{self.cfg.baseline_file}: needs {{rnics, endpoints, gbps}} covering RNICs "
                             f"{topo.rnics} and endpoints {topo.endpoints}; missing or bad: {err}") from None

    # -- loopback ------------------------------------------------------------------------------
    def loopback_round(self, mode: str, upload_ns: int) -> list[dict[str, object]]:
        """Run one round (``idle``: full mesh, ``busy``: affinitive) and return its ``loopback.v1`` rows.

        The first complete idle round becomes the baseline when none was given.

        Raises:
            LoopbackUnavailable: this agent has no loopback backend (the reason says why).
        """
        if self.backend is None or self.disc.topology is None:
            raise LoopbackUnavailable(self.loopback_reason)
        topo = self.disc.topology.topology
        results = loopback.measure(self.backend, loopback.plan(topo, mode))
        if mode == "idle" and self.baseline is None:
            got = {(r.test.rnic, r.test.dst): r.bw_host_gbps for r in results if r.status == "ok"}
            if all(got.get((r, e)) for r in topo.rnics for e in topo.endpoints):
                self.baseline = [[float(got[(r, e)]) for e in topo.endpoints] for r in topo.rnics]  # type: ignore[arg-type]
        return loopback.to_rows(results, self.agent_id, self.disc.host, mode, upload_ns)

    # -- status and triggers -------------------------------------------------------------------
    def rnic_rates(self, prev: MonitorSnapshot, cur: MonitorSnapshot) -> list[monitor.RnicRates]:
        """Each RNIC's throughput and pause ratio between two readings (netdev/ethtool/hw_counters)."""
        return [rt for _, rt in self.monitor.rnic_rates(prev, cur)]

    def host_status(self, prev: MonitorSnapshot, cur: MonitorSnapshot) -> str | None:
        """``idle``/``busy`` over the interval (Thp_low of the line rate), ``None`` without a rated RNIC."""
        rate = self.disc.line_rate_gbps
        r = self.rnic_rates(prev, cur)
        if not r or not rate:
            return None
        return monitor.host_status(r, rate, self.cfg.thp_low)

    def status_row(self, status: str, t_ns: int) -> dict[str, object]:
        """``hostmetric.v2`` row: ``host_status`` 0 idle / 1 busy."""
        return {"agent_id": self.agent_id, "upload_ns": t_ns, "host": self.disc.host, "device": self.disc.host,
                "metric": "host_status", "value": 0.0 if status == "idle" else 1.0, "unit": "0 idle, 1 busy",
                "sample_ns": t_ns,
                "source": f"derived: RNIC throughput over {self.cfg.status_interval_s:g} s vs Thp_low "
                          f"{self.cfg.thp_low:.0%} of {self.disc.line_rate_gbps:g} Gb/s"}

    # -- one cycle for --once ------------------------------------------------------------------
    def once(self, wait_s: float | None = None) -> dict[str, object]:
        """What one cycle publishes: the inventory, the topology record (if any) and one set of monitor
        rows (two reads ``wait_s`` apart, default the monitor interval), as JSON-ready data."""
        t0 = time.time_ns()
        prev = self.monitor.read()
        time.sleep(self.cfg.interval_s if wait_s is None else wait_s)
        cur = self.monitor.read()
        inv = self.inventory_columns(t0)
        topo = self.topology_columns(t0)
        return {
            "host": self.disc.host,
            "discovery": self.disc.to_json(),
            "publish": {
                "hosts.inventory": _rows(inv),
                "hosts.topology": _rows(topo) if topo else [],
                "hostmetrics.raw": self.monitor.rows(prev, cur, self.agent_id),
            },
            "monitor_errors": cur.errors | ({"bus": "; ".join(self.bus.errors)} if self.bus and self.bus.errors
                                            else {}),
            "loopback": {"available": self.backend is not None, "reason": self.loopback_reason},
        }

    # -- the loop ------------------------------------------------------------------------------
    def run(self, publish: Publish, stop: Callable[[], bool], max_cycles: int | None = None) -> int:
        """Publish the inventory, then monitor until ``stop()`` (or ``max_cycles`` 1 s cycles).

        Returns the number of monitor batches published.
        """
        from schemas.arrow_nano import encode_columns

        host = self.disc.host
        now = time.time_ns()
        publish("hosts.inventory", "pci_function.v1", host, encode_columns("pci_function.v1",
                                                                         self.inventory_columns(now)))
        self._publish_topology(publish, now)
        prev = status_prev = self.monitor.read()
        last_status = time.monotonic()
        next_at = last_status + self.cfg.interval_s
        cycles = 0
        while not stop() and (max_cycles is None or cycles < max_cycles):
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += self.cfg.interval_s
            cur = self.monitor.read()
            rows = self.monitor.rows(prev, cur, self.agent_id)
            mode = None
            # a busy round is judged against the baseline (§4.3): none before the first idle round
            if self.baseline is not None and any(r.tx_pause_ratio > self.cfg.pfc_high
                                                 for r in self.rnic_rates(prev, cur)) and \
                    time.monotonic() - self._last_busy_round >= self.cfg.busy_round_min_s:
                mode = "busy"
            if time.monotonic() - last_status >= self.cfg.status_interval_s:
                status = self.host_status(status_prev, cur)
                if status is not None:
                    rows.append(self.status_row(status, cur.t_ns))
                    mode = "idle" if status == "idle" else mode
                status_prev, last_status = cur, time.monotonic()
            publish("hostmetrics.raw", "hostmetric.v2", host, encode_columns("hostmetric.v2", _columns(rows)))
            cycles += 1
            if mode and self.backend is not None:
                self._round(publish, mode, cur.t_ns)
            prev = cur
        return cycles

    def _publish_topology(self, publish: Publish, t_ns: int) -> None:
        from schemas.arrow_nano import encode_columns

        cols = None if self.topology_published else self.topology_columns(t_ns)
        if cols is not None:
            publish("hosts.topology", "host_topology.v1", self.disc.host, encode_columns("host_topology.v1", cols))
            self.topology_published = True

    def _round(self, publish: Publish, mode: str, t_ns: int) -> None:
        from schemas.arrow_nano import encode_columns

        if mode == "busy":
            self._last_busy_round = time.monotonic()
        rows = self.loopback_round(mode, t_ns)
        self._publish_topology(publish, t_ns)  # after the first complete idle round: the baseline exists
        if rows:
            publish("loopback.raw", "loopback.v1", self.disc.host, encode_columns("loopback.v1", _columns(rows)))

    def close(self) -> None:
        """Release perf counters, NVML and verbs resources."""
        if self.bus is not None:
            self.bus.close()
        if self.nvml is not None:
            self.nvml.close()
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()


def _columns(rows: list[dict[str, object]]) -> dict[str, list]:
    return {k: [r[k] for r in rows] for k in rows[0]} if rows else {}


def _rows(cols: dict[str, list]) -> list[dict[str, object]]:
    n = len(next(iter(cols.values()))) if cols else 0
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]
