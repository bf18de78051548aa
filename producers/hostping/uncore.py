"""Bus counters from perf uncore PMUs: memory controller (IMC) and socket interconnect (UPI/QPI).

Hostping's bus monitor (§3.4) tells congestion from failure by the utilisation of the link
behind an abnormal path: above ``Util_high`` (90 %) it is congested. This module finds the PMUs
the kernel exposes under ``/sys/bus/event_source/devices/uncore_*`` (read from a root, like every
reader here), encodes their events from the PMU's own ``format/`` and ``events/`` files, maps
each PMU to a topology link through the NUMA node of its ``cpumask`` CPU, and reads them with
:mod:`.perf_event`. Counters and their byte scale:

- ``uncore_imc_<N>`` ``cas_count_read`` / ``cas_count_write``: one 64-byte line per CAS; the
  kernel gives ``.scale`` and ``.unit`` (6.103515625e-5 MiB). Link ``cpuS->memS``.
- ``uncore_imc_free_running_<N>`` ``data_read`` / ``data_write`` (client and some server parts):
  scale and unit from sysfs. Link ``cpuS->memS``.
- ``uncore_upi_<N>`` / ``uncore_qpi_<N>``: the named ``upi_data_bandwidth_tx`` when sysfs has it,
  else the raw ``TxL_FLITS.ALL_DATA`` (``event=0x02,umask=0x0f``) at 64/9 bytes per flit (a 64-byte
  line takes 9 data flits; Intel uncore guide, as likwid's UPI group). Link: the UPI pair of the socket.

- ``uncore_iio_free_running_<N>`` ``bw_in_port<k>`` / ``bw_out_port<k>`` (PCIe bandwidth counters of
  IIO stack N, scale from sysfs): the stack's root bus comes from ``uncore_iio_<N>/die<D>``
  (``Documentation/ABI/testing/sysfs-devices-mapping``); the monitor maps it to the root-port link
  of the topology whose root port sits on that bus, and the root port's own link is the capacity.

Utilisation needs a capacity (Gb/s) per link, which no counter gives for memory channels and UPI
links: the operator gives it (``--bus-capacity cpu0->mem0=1228``). Without one the bandwidth is
published and the utilisation is not.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

from producers.hostping.numa import NumaNode, node_of_cpu, parse_cpulist
from producers.hostping.perf_event import PerfCounter, PerfEventError
from producers.hostping.sysfs import SysfsSnapshot

EVENT_SOURCE = "/sys/bus/event_source/devices"
_UNIT_BYTES = {"bytes": 1.0, "b": 1.0, "kib": 1024.0, "kb": 1e3, "mib": 1024.0**2, "mb": 1e6, "gib": 1024.0**3}
_FORMAT = re.compile(r"^(?P<field>config[12]?):(?P<ranges>[\d,-]+)$")
UPI_RAW_TX_DATA_FLITS = "event=0x02,umask=0x0f"
#: link prefix of an IIO stack's counters: the monitor maps the root bus to the topology's root-port link
PCIE_ROOT_BUS = "pcie_root_bus:"
_IIO_PORT = re.compile(r"^bw_(?P<dir>in|out)_port\d+$")
UPI_BYTES_PER_FLIT = 64 / 9


@dataclass(frozen=True)
class Pmu:
    """One PMU directory: its name, ``type``, ``cpumask`` CPUs, format fields and named events.

    ``formats``: term -> ``(config field, [(lo bit, hi bit), ...])``; ``events``: name -> terms text.
    """

    name: str
    type: int
    cpus: tuple[int, ...]
    formats: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    events: dict[str, str] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    dies: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BusCounter:
    """One counter to open: PMU, event label, encoding, CPU, byte scale and the topology link it measures."""

    pmu: str
    event: str
    pmu_type: int
    config: tuple[int, int, int]
    cpu: int
    bytes_per_count: float
    link: str
    metric: str

    @property
    def source(self) -> str:
        """``perf:<pmu>/<event>``: the ``source`` column of its ``hostmetric.v2`` rows."""
        return f"perf:{self.pmu}/{self.event}"


def _format(text: str | None) -> tuple[str, tuple[tuple[int, int], ...]] | None:
    m = _FORMAT.match((text or "").strip())
    if not m:
        return None
    ranges = []
    for part in m["ranges"].split(","):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return m["field"], tuple(ranges)


def read_pmus(snap: SysfsSnapshot, prefix: str = "uncore_") -> list[Pmu]:
    """Every PMU under ``bus/event_source/devices`` whose name starts with ``prefix``."""
    out = []
    for name in snap.listdir(EVENT_SOURCE):
        if not name.startswith(prefix):
            continue
        base = f"{EVENT_SOURCE}/{name}"
        t = snap.read(f"{base}/type")
        if t is None or not t.isdigit():
            continue
        formats = {f: parsed for f in snap.listdir(f"{base}/format")
                   if (parsed := _format(snap.read(f"{base}/format/{f}")))}
        events, scales, units = {}, {}, {}
        for e in snap.listdir(f"{base}/events"):
            v = snap.read(f"{base}/events/{e}") or ""
            if e.endswith(".scale"):
                with contextlib.suppress(ValueError):
                    scales[e[:-6]] = float(v)
            elif e.endswith(".unit"):
                units[e[:-5]] = v
            elif "." not in e:
                events[e] = v
        dies = {}  # IIO stacks: die<N> holds the stack's PCIe root bus (ABI sysfs-devices-mapping, Linux >= 5.10)
        stack = name.replace("uncore_iio_free_running_", "uncore_iio_")
        for f in snap.listdir(f"{EVENT_SOURCE}/{stack}"):
            if f.startswith("die") and f[3:].isdigit() and (bus := snap.read(f"{EVENT_SOURCE}/{stack}/{f}")):
                dies[int(f[3:])] = bus.lower()
        out.append(Pmu(name, int(t), parse_cpulist(snap.read(f"{base}/cpumask")), formats, events, scales, units,
                       dies))
    return sorted(out, key=lambda p: p.name)


def encode(pmu: Pmu, terms: str) -> tuple[int, int, int]:
    """``"event=0x04,umask=0x03"`` -> ``(config, config1, config2)`` by the PMU's ``format/`` bit ranges.

    Raises:
        ValueError: a term the PMU has no format for, or a value that does not fit its bits.
    """
    cfg = {"config": 0, "config1": 0, "config2": 0}
    for term in filter(None, (t.strip() for t in terms.split(","))):
        name, _, val = term.partition("=")
        if name not in pmu.formats:
            raise ValueError(f"{pmu.name}: event term {name!r} has no format/{name} (terms: {terms})")
        value = int(val or "1", 0)
        fld, ranges = pmu.formats[name]
        width = sum(hi - lo + 1 for lo, hi in ranges)
        if value >> width:
            raise ValueError(f"{pmu.name}: {name}={val} does not fit {width} bits")
        shift = 0
        for lo, hi in ranges:
            n = hi - lo + 1
            cfg[fld] |= ((value >> shift) & ((1 << n) - 1)) << lo
            shift += n
    return cfg["config"], cfg["config1"], cfg["config2"]


def _bytes_per_count(pmu: Pmu, event: str) -> float | None:
    scale = pmu.scales.get(event)
    unit = pmu.units.get(event, "").strip().lower()
    if scale is None or unit not in _UNIT_BYTES:
        return None
    return scale * _UNIT_BYTES[unit]


def plan(pmus: list[Pmu], nodes: list[NumaNode]) -> tuple[list[BusCounter], list[str]]:
    """The counters to open for each memory controller and UPI PMU, and why others were skipped.

    An uncore PMU's ``cpumask`` names one CPU per socket; on each, the CPU's NUMA node is the socket ``S``
    (memory link ``cpuS->memS``; UPI link ``cpuA->cpuB`` between the two sockets of a 2-socket host).
    """
    counters: list[BusCounter] = []
    skipped: list[str] = []
    sockets = sorted({n.node for n in nodes})
    for pmu in pmus:
        if not pmu.cpus:
            skipped.append(f"{pmu.name}: empty cpumask")
            continue
        for die, cpu in enumerate(pmu.cpus):  # one CPU per socket (die): the PMU counts that socket's box
            node = node_of_cpu(nodes, cpu)
            s = 0 if node is None else node
            c, why = _plan_one(pmu, cpu, s, sockets, pmu.dies.get(die))
            counters += c
            skipped += [w for w in why if w not in skipped]
    return counters, skipped


def _plan_one(pmu: Pmu, cpu: int, s: int, sockets: list[int], root_bus: str | None = None,
              ) -> tuple[list[BusCounter], list[str]]:
    """The counters of one PMU on one socket ``s`` (counted on ``cpu``); ``root_bus`` for an IIO stack."""
    wanted: list[tuple[str, str, float | None]] = []
    if pmu.name.startswith("uncore_iio_free_running"):
        if root_bus is None:
            return [], [f"{pmu.name}: no die<N> root-bus file for socket {s} (kernel without the IIO mapping)"]
        out = []
        for e in sorted(pmu.events):
            m = _IIO_PORT.match(e)
            scale = _bytes_per_count(pmu, e)
            if m is None or scale is None:
                continue
            try:
                cfg = encode(pmu, pmu.events[e])
            except ValueError as err:
                return [], [str(err)]
            out.append(BusCounter(pmu.name, e, pmu.type, cfg, cpu, scale, f"{PCIE_ROOT_BUS}{root_bus}",
                                  f"pcie_bw_{m['dir']}_gbps"))
        return out, [] if out else [f"{pmu.name}: no bw_in_port*/bw_out_port* event with a byte scale"]
    if pmu.name.startswith("uncore_imc"):
        link, metric = f"cpu{s}->mem{s}", "mem_bw_gbps"
        names = [e for e in ("cas_count_read", "cas_count_write", "data_read", "data_write") if e in pmu.events]
        wanted = [(e, pmu.events[e], _bytes_per_count(pmu, e)) for e in names]
    elif pmu.name.startswith(("uncore_upi", "uncore_qpi")):
        others = [x for x in sockets if x != s]
        if len(others) != 1:
            return [], [f"{pmu.name}: a UPI link needs exactly one other socket, found {others}"]
        a, b = sorted((s, others[0]))
        link, metric = f"cpu{a}->cpu{b}", "upi_bw_gbps"
        named = next((e for e in ("upi_data_bandwidth_tx", "qpi_data_bandwidth_tx") if e in pmu.events), None)
        umask = next((u for u in ("umask", "umask_ext") if u in pmu.formats), None)
        if named:
            wanted = [(named, pmu.events[named], _bytes_per_count(pmu, named))]
        elif "event" in pmu.formats and umask:
            wanted = [("txl_flits_all_data", UPI_RAW_TX_DATA_FLITS.replace("umask", umask), UPI_BYTES_PER_FLIT)]
    elif pmu.name.startswith("uncore_iio_"):
        return [], [f"{pmu.name}: programmable IIO counters are not used (its free-running bandwidth counters are)"]
    else:
        return [], [f"{pmu.name}: not a memory-controller, UPI or IIO bandwidth PMU"]
    if not wanted:
        return [], [f"{pmu.name}: no bandwidth event in its events/ directory"]
    out, skipped = [], []
    for event, terms, scale in wanted:
        if scale is None:
            skipped.append(f"{pmu.name}/{event}: no .scale/.unit in bytes")
            continue
        try:
            cfg = encode(pmu, terms)
        except ValueError as err:
            skipped.append(str(err))
            continue
        out.append(BusCounter(pmu.name, event, pmu.type, cfg, cpu, scale, link, metric))
    return out, skipped


class BusCounterReader:
    """The planned counters, opened system-wide; :meth:`read` gives bytes per counter since open.

    Counters the kernel refuses (privilege, missing PMU) are left out and their errors kept in
    ``errors``; ``readable`` is False when none opened (the bus cause is then unknown downstream).
    """

    def __init__(self, counters: list[BusCounter]) -> None:
        self.open: list[tuple[BusCounter, PerfCounter]] = []
        self.errors: list[str] = []
        for c in counters:
            try:
                fd = PerfCounter(c.pmu_type, c.config[0], config1=c.config[1], config2=c.config[2], cpu=c.cpu,
                                 pid=-1, label=f"{c.pmu}/{c.event}")
            except (PerfEventError, OSError) as err:
                self.errors.append(str(err))
                continue
            self.open.append((c, fd))

    @property
    def readable(self) -> bool:
        return bool(self.open)

    def read(self) -> dict[BusCounter, float]:
        """Bytes moved per counter since it was opened (count x bytes per count)."""
        return {c: fd.read() * c.bytes_per_count for c, fd in self.open}

    def close(self) -> None:
        for _, fd in self.open:
            fd.close()
        self.open = []


LinkReadings = dict[tuple[str, str], tuple[float, list[str]]]


def link_bandwidth(prev: dict[BusCounter, float], cur: dict[BusCounter, float], dt_s: float) -> LinkReadings:
    """``{(link, metric): (Gb/s, [sources])}``: bytes of every counter on a link between two reads.

    Counters on one socket add up (read + write, every IMC channel, every UPI port's Tx); across
    sockets the busier one counts: a UPI link's two directions are the two sockets' Tx, and its
    utilisation is that of the busier direction.

    Raises:
        ValueError: ``dt_s`` is not positive.
    """
    if dt_s <= 0:
        raise ValueError(f"interval between bus counter reads must be > 0 s, got {dt_s}")
    per_cpu: dict[tuple[str, str], dict[int, float]] = {}
    sources: dict[tuple[str, str], list[str]] = {}
    for c, v in cur.items():
        if c not in prev:
            continue
        key = (c.link, c.metric)
        by_cpu = per_cpu.setdefault(key, {})
        by_cpu[c.cpu] = by_cpu.get(c.cpu, 0.0) + max(v - prev[c], 0.0) * 8 / dt_s / 1e9
        if c.source not in sources.setdefault(key, []):
            sources[key].append(c.source)
    return {k: (max(v.values()), sources[k]) for k, v in per_cpu.items()}
