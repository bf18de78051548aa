"""NCCL log collector: RDMA async events, completion statuses, verbs call failures, HCA and GPUDirect state.

NCCL lines carry ``host:pid:tid [cudaDev]``. What decides who to blame:

- ``NET/IB : Got async event : port error`` on a host: its RNIC port went down
  (flapping link, cable, transceiver). When local ranks of one host log it, the host's
  RNIC/port is at fault (``rnic``, subkind ``port_flapping``); the host is alive, since
  its processes keep logging, so it is never ``host_down`` (field case 3).
  ``local catastrophic error`` is the RNIC itself (``rnic``, subkind ``device_fatal``).
- ``Got completion from peer P<port> with status=S ... vendor err V``, every
  ``IBV_WC_*`` status by name (:mod:`diagnose.verbs_status`):

  * 12 (retry exceeded): charged to P's RNIC when P logged a port error, or when two or
    more hosts report it against P (a vote, as R-Pingmesh §5 votes over paths);
    otherwise ``undetermined`` between the two hosts, never a switch link from logs alone;
  * 13 (RNR retry exceeded): ``rnr_retry_exceeded``: the peer posted no receive buffer
    (a stalled or dying peer process), not the fabric;
  * 4, 8, 10 (protection/access): ``rdma_access_error`` (configuration: memory
    registration, GPUDirect RDMA pinning);
  * 1, 9, or a ``local access violation work queue error`` async event followed by
    flushes: ``mtu_mismatch`` (configuration; field case 18). From one end this is a
    probable cause: the finding says what to compare on both ends;
  * 5 / vendor 0xf9 (flush): secondary; tied to the first primary error of the same
    host (its ``secondary_flushes`` evidence), never a finding of its own unless no
    primary is in the log (then ``undetermined``: look for the first error elsewhere).
- ``Call to ibv_modify_qp/ibv_create_qp failed with error E``: named by errno
  (``No such device`` -> ``hca_selection`` on the HCA NCCL selected, field case 19).
  ``NET/IB : No device found`` -> ``no_rdma_device`` (NCCL falls back to TCP sockets).
- GPUDirect RDMA per HCA and per node: ``GPU Direct RDMA Disabled for HCA i 'dev'`` and
  channel lines ``via NET/IB/i[/GDRDMA]``. All HCAs of a host disabled -> ``gdr_disabled``
  at the host (field case 21: a software/configuration fault, not a NIC); a host whose
  NET channels lack ``/GDRDMA`` while another host's have it -> ``gdr_disabled`` there.
- socket errors (``Broken pipe``, ``Connection closed by remote peer``, proxy ``retcode 6``
  = ncclRemoteError) with no RDMA completion error and no port error: a peer process died
  (``host_down``); the network is innocent (field case 4).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field, replace

from diagnose import verbs_status as vs
from producers.hostping.findings import Finding

NAME = "nccl_log"
READS = "NCCL logs (NCCL_DEBUG=INFO or WARN), one or many hosts in one file"

_PREFIX = re.compile(r"^(?P<host>[\w.\-<>]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]\s*(?P<rest>.*)$")
_ASYNC = re.compile(r"(?:(?P<hca>[\w-]+):(?P<port>\d+) )?Got async event : (?P<ev>.+?)\s*$")
_COMPL = re.compile(
    r"Got completion (?:from peer (?P<peer>\S+?)<(?P<port>\d+)> )?with (?:error|status)[ =]?(?P<err>\d+)"
)
_VENDOR = re.compile(r"vendor err (?P<v>\d+)")
_LGID = re.compile(r"localGid\s*(?P<g>[0-9a-fA-F:.]+)")
_RGID = re.compile(r"remoteGids?\s*(?P<g>[0-9a-fA-F:.]*[0-9a-fA-F])")
_SOCK = re.compile(
    r"(?:Call to (?P<op>\w+) from (?P<peer>\S+?)<\d+> failed : (?P<why>.+?)\s*$)"
    r"|(?:Connection closed by remote peer (?P<peer2>\S+?)<\d+>)"
    r"|(?:Connection reset by peer)"
)
_PROXY = re.compile(r"Failed to execute operation (?P<op>\w+) from rank (?P<rank>\d+), retcode (?P<rc>\d+)")
_VERBS = re.compile(r"Call to (?P<fn>ibv_\w+) failed(?: with error (?P<why>.+?))?\s*$")
_OPEN = re.compile(r"NET/IB ?: Unable to open device (?P<hca>\S+)")
_NODEV = re.compile(r"NET/IB ?: No device found")
_USING = re.compile(r"NET/IB ?: Using (?P<list>(?:\[\d+\]\S+\s*)+)")
_USING_ONE = re.compile(r"\[\d+\](?P<hca>[\w-]+):(?P<port>\d+)/(?P<ll>\w+)")
_ENV = re.compile(r"(?P<var>NCCL_\w+) set (?:by environment )?to (?P<val>\S+)")
_GDR = re.compile(r"GPU Direct RDMA (?P<state>Disabled|Enabled) for HCA (?P<i>\d+) '(?P<hca>[^']+)'")
_CHANNEL = re.compile(r"via NET/(?P<net>IB\w*)/(?P<i>\d+)(?P<gdr>/GDRDMA)?")

#: ibv_wc_status codes seen in NCCL logs (kept for callers; full table in :mod:`diagnose.verbs_status`).
WC_STATUS = {code: vs.status_name(code) for code in vs.WC_STATUS}
PORT_EVENTS = ("port error", "local catastrophic error", "device fatal")
UNNAMED_PEER = "(peer not named)"
ACCESS_STATUSES = (4, 8, 10)
LENGTH_STATUSES = (1, 9)


@dataclass(frozen=True)
class NcclEvent:
    """One classified line.

    ``what`` is ``async``, ``completion``, ``socket``, ``proxy``, ``verbs_call``, ``open_failed``,
    ``no_device``, ``using``, ``env``, ``gdr`` or ``channel``. ``code`` is the completion status or
    proxy retcode; ``hca`` the RNIC named on the line (``mlx5_0``).
    """

    host: str
    pid: int
    what: str
    detail: str
    peer: str
    code: int | None
    line: int
    vendor: int | None = None
    hca: str = ""
    local_gid: str = ""
    remote_gid: str = ""
    file: str = ""  # set when logs of several files are merged (see :func:`merge`)

    @property
    def where(self) -> str:
        """``line`` or ``file:line``: the finding source of this event."""
        return f"{self.file}:{self.line}" if self.file else str(self.line)


@dataclass
class NcclLog:
    events: list[NcclEvent] = field(default_factory=list)
    hosts_seen: dict[str, int] = field(default_factory=dict)


def _classify(host: str, pid: int, rest: str, n: int) -> list[NcclEvent]:
    if m := _ASYNC.search(rest):
        return [NcclEvent(host, pid, "async", m["ev"].lower(), "", None, n, hca=m["hca"] or "")]
    if m := _COMPL.search(rest):
        v, lg, rg = _VENDOR.search(rest), _LGID.search(rest), _RGID.search(rest)
        return [
            NcclEvent(
                host,
                pid,
                "completion",
                rest,
                m["peer"] or "",
                int(m["err"]),
                n,
                vendor=int(v["v"]) if v else None,
                local_gid=lg["g"] if lg else "",
                remote_gid=rg["g"] if rg else "",
            )
        ]
    if m := _VERBS.search(rest):
        return [NcclEvent(host, pid, "verbs_call", (m["why"] or "").strip(), "", None, n, hca=m["fn"])]
    if m := _SOCK.search(rest):
        why = m["why"] or ("Connection closed by remote peer" if m["peer2"] else "Connection reset by peer")
        return [NcclEvent(host, pid, "socket", why, m["peer"] or m["peer2"] or "", None, n)]
    if m := _PROXY.search(rest):
        return [NcclEvent(host, pid, "proxy", m["op"], f"rank {m['rank']}", int(m["rc"]), n)]
    if m := _OPEN.search(rest):
        return [NcclEvent(host, pid, "open_failed", "", "", None, n, hca=m["hca"])]
    if _NODEV.search(rest):
        return [NcclEvent(host, pid, "no_device", "", "", None, n)]
    if m := _USING.search(rest):
        return [
            NcclEvent(host, pid, "using", u["ll"], "", int(u["port"]), n, hca=u["hca"])
            for u in _USING_ONE.finditer(m["list"])
        ]
    if m := _GDR.search(rest):
        return [NcclEvent(host, pid, "gdr", m["state"].lower(), "", int(m["i"]), n, hca=m["hca"])]
    if m := _CHANNEL.search(rest):
        return [NcclEvent(host, pid, "channel", "gdr" if m["gdr"] else "host", "", int(m["i"]), n)]
    out = [NcclEvent(host, pid, "env", e["val"], "", None, n, hca=e["var"]) for e in _ENV.finditer(rest)]
    return out


def parse(text: str) -> NcclLog:
    """Classify every NCCL line; ``hosts_seen`` counts lines per host (a host that logs is alive)."""
    log = NcclLog()
    for n, line in enumerate(text.splitlines(), start=1):
        p = _PREFIX.match(line.strip())
        if p is None:
            continue
        host, pid, rest = p["host"], int(p["pid"]), p["rest"]
        log.hosts_seen[host] = log.hosts_seen.get(host, 0) + 1
        log.events.extend(_classify(host, pid, rest, n))
    return log


def merge(logs: list[tuple[str, NcclLog]]) -> NcclLog:
    """One log from the logs of several files (``(file name, log)``), events tagged with their file,
    so votes (error 12 from two hosts) and per-node GPUDirect comparisons span per-host log files."""
    out = NcclLog()
    for name, log in logs:
        out.events += [replace(e, file=name) for e in log.events]
        for host, n in log.hosts_seen.items():
            out.hosts_seen[host] = out.hosts_seen.get(host, 0) + n
    return out


def hosts_in(text: str) -> list[str]:
    """Hosts named by NCCL line prefixes, in order of first appearance."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        p = _PREFIX.match(line.strip())
        if p and "NCCL" in p["rest"]:
            seen.setdefault(p["host"], None)
    return list(seen)


def _by(log: NcclLog, what: str) -> list[NcclEvent]:
    return [e for e in log.events if e.what == what]


def _completion_evidence(evs: list[NcclEvent]) -> dict[str, object]:
    e = evs[0]
    return {
        "status": e.code,
        "status_name": vs.status_name(e.code or 0),
        "vendor_err": e.vendor,
        "vendor_meaning": vs.vendor_meaning(e.vendor),
        "count": len(evs),
        "gid_pairs": sorted({f"{x.local_gid}->{x.remote_gid}" for x in evs if x.local_gid or x.remote_gid}),
    }


def _port_findings(log: NcclLog, timeouts: dict[str, list[NcclEvent]]) -> list[Finding]:
    out = []
    port_ranks: dict[str, set[int]] = defaultdict(set)
    fatal: dict[str, list[NcclEvent]] = defaultdict(list)
    first: dict[str, str] = {}
    for e in _by(log, "async"):
        if e.detail == "port error":
            port_ranks[e.host].add(e.pid)
            first.setdefault(e.host, e.where)
        elif vs.ASYNC_EVENTS.get(e.detail, ("", ""))[0] == "device":
            fatal[e.host].append(e)
    for host, pids in sorted(port_ranks.items()):
        reporters = sorted({e.host for e in timeouts.pop(host, [])})
        out.append(
            Finding(
                "rnic",
                host,
                "error",
                f"{len(pids)} local rank(s) on {host} got RDMA async 'port error': its RNIC port went down "
                "(flapping link, cable or transceiver). The host is alive (it keeps logging), so not host_down"
                + (
                    f"; completion error 12 seen by {', '.join(reporters)} against {host} is the same fault"
                    if reporters
                    else ""
                )
                + ". Check the RNIC port counters (link_downed), cable and ToR port.",
                {
                    "subkind": "port_flapping",
                    "ranks_reporting": len(pids),
                    "log_lines_from_host": log.hosts_seen.get(host, 0),
                    "error12_reported_by": reporters,
                    "peer": host,
                },
                "failure",
                first[host],
            )
        )
    for host, evs in sorted(fatal.items()):
        hcas = sorted({e.hca for e in evs if e.hca})
        out.append(
            Finding(
                "rnic",
                f"{host}/{hcas[0]}" if len(hcas) == 1 else host,
                "critical",
                f"RNIC {'/'.join(hcas) or 'of ' + host} raised '{evs[0].detail}': the adapter itself failed "
                "(firmware assert or fatal hardware error). Check dmesg for mlx5 health/syndrome lines; "
                "the RNIC needs a reset or replacement.",
                {"subkind": "device_fatal", "events": len(evs), "hcas": hcas},
                "failure",
                evs[0].where,
            )
        )
    return out


def _retry_findings(log: NcclLog, timeouts: dict[str, list[NcclEvent]]) -> list[Finding]:
    out = []
    for peer, evs in sorted(timeouts.items()):
        reporters = sorted({e.host for e in evs})
        flushes = sum(1 for e in _by(log, "completion") if e.host in reporters and vs.is_flush(e.code, e.vendor))
        ev = dict(_completion_evidence(evs), error=12, reported_by=reporters, peer=peer, secondary_flushes=flushes)
        ev["status"] = 12
        link_local = any(g.lower().startswith("fe80") for e in evs for g in (e.local_gid, e.remote_gid))
        if link_local:
            ev["link_local_gid"] = True
        if len(reporters) >= 2 and peer != UNNAMED_PEER:
            out.append(
                Finding(
                    "rnic",
                    peer,
                    "error",
                    f"{len(reporters)} hosts got transport-retry timeouts (error 12) from {peer}: its RNIC or port "
                    "is the common element. Check its port counters and cable.",
                    dict(ev, subkind="retry_timeout_vote"),
                    "failure",
                    evs[0].where,
                )
            )
        else:
            out.append(
                Finding(
                    "undetermined",
                    f"{reporters[0]}<->{peer}",
                    "warning",
                    f"{reporters[0]} got a transport-retry timeout (error 12"
                    + (f", vendor {vs.vendor_meaning(evs[0].vendor)}" if evs[0].vendor is not None else "")
                    + f") from {peer}, and nothing else names a side: the RNIC of either host or the path "
                    "between them. Probe the pair (R-Pingmesh) to localise"
                    + (
                        "; the GIDs are link-local (fe80::), which RoCE v2 cannot route across subnets: "
                        "check the GID index"
                        if link_local
                        else ""
                    )
                    + ".",
                    ev,
                    "",
                    evs[0].where,
                )
            )
    return out


def _qp_hca(log: NcclLog, host: str) -> str:
    hcas = sorted({e.hca for e in _by(log, "async") if e.host == host and e.hca})
    if not hcas:
        hcas = sorted({e.hca for e in _by(log, "using") if e.host == host})
    return hcas[0] if len(hcas) == 1 else ""


def _status_findings(log: NcclLog, flush_owner: dict[str, list[NcclEvent]]) -> list[Finding]:
    """Completion statuses other than 12, the MTU-mismatch signature, and flushes tied to their primary."""
    out: list[Finding] = []
    comps = [e for e in _by(log, "completion") if e.code != 12]
    qp_async = [e for e in _by(log, "async") if vs.ASYNC_EVENTS.get(e.detail, ("", ""))[0] == "qp"]
    hosts = sorted({e.host for e in comps} | {e.host for e in qp_async})
    for host in hosts:
        mine = [e for e in comps if e.host == host]
        flushes = [e for e in mine if vs.is_flush(e.code, e.vendor)]
        primary = [e for e in mine if not vs.is_flush(e.code, e.vendor)]
        qp_ev = [e for e in qp_async if e.host == host]
        hca = _qp_hca(log, host)
        where = f"{host}/{hca}" if hca else host
        peers = sorted({e.peer for e in mine if e.peer})
        peer_part = f"<->{','.join(peers)}" if peers else ""
        access_violation = any("access violation" in e.detail or "invalid request" in e.detail for e in qp_ev)
        length = [e for e in primary if e.code in LENGTH_STATUSES]
        if (access_violation and not [e for e in primary if e.code not in LENGTH_STATUSES]) or length:
            first = min(qp_ev + length or [mine[0]], key=lambda e: e.line).where
            out.append(
                Finding(
                    "mtu_mismatch",
                    where + peer_part,
                    "error",
                    f"{where} got "
                    + ("'" + qp_ev[0].detail + "' " if qp_ev else "")
                    + (f"status {length[0].code} ({vs.status_name(length[0].code or 0)}) " if length else "")
                    + (
                        f"then {len(flushes)} flushed completion(s) (status 5 / vendor 0xf9, secondary) "
                        if flushes
                        else ""
                    )
                    + f"from {', '.join(peers) or 'its peer'}. Probable cause: a configuration mismatch between the "
                    "two ends, most often the MTU (the QP path MTU is larger than the receiver accepts; NCCL >= 2.20 "
                    "no longer clamps it to min(local, remote)). From one end this is probable: compare on BOTH "
                    "hosts active_mtu (ibv_devinfo), the netdev MTU (ip link), the GID index/type (show_gids) and "
                    "the NCCL version. Not a NIC or cable failure.",
                    {
                        "probable": True,
                        "async_events": sorted({e.detail for e in qp_ev}),
                        "length_errors": len(length),
                        "secondary_flushes": len(flushes),
                        "peers": peers,
                        "compare_on_both_ends": ["active_mtu", "netdev mtu", "gid index/type", "NCCL version"],
                        **({"gid_pairs": _completion_evidence(mine)["gid_pairs"]} if mine else {}),
                    },
                    "config",
                    first,
                )
            )
            continue
        by_status: dict[int, list[NcclEvent]] = defaultdict(list)
        for e in primary:
            by_status[e.code or 0].append(e)
        for code, evs in sorted(by_status.items()):
            ev = dict(_completion_evidence(evs), peer=",".join(sorted({e.peer for e in evs if e.peer})))
            loc = f"{host}<->{ev['peer']}" if ev["peer"] else host
            if code in ACCESS_STATUSES:
                kind, sev, cause = "rdma_access_error", "error", "config"
                text = (
                    f"{host} got {vs.status_name(code)} ({vs.status_meaning(code)}). A memory registration "
                    "problem, not the fabric: GPUDirect RDMA pinning (nvidia-peermem loaded? same driver on "
                    "both ends?), IOMMU/ACS on the GPU-NIC path, or a buffer freed while in flight."
                )
            elif code == 13:
                kind, sev, cause = "rnr_retry_exceeded", "warning", ""
                text = (
                    f"{host} got receiver-not-ready retries exceeded from {ev['peer'] or 'a peer'}: the peer "
                    "posted no receive buffer in time (a stalled, overloaded or dying peer process), not a link fault."
                )
            else:
                kind, sev, cause = "rdma_completion_error", "warning", ""
                text = (
                    f"{host} got {vs.status_name(code)} ({vs.status_meaning(code)})"
                    + (f", vendor {vs.vendor_meaning(evs[0].vendor)}" if evs[0].vendor is not None else "")
                    + ". Look at both ends' logs around this line."
                )
            ev["secondary_flushes"] = len(flushes)
            out.append(Finding(kind, loc, sev, text, ev, cause, evs[0].where))
            flushes = []  # tied to the first primary of this host
        if flushes and not primary and not qp_ev:
            flush_owner[host] = flushes
    return out


def _flush_only_findings(log: NcclLog, flush_owner: dict[str, list[NcclEvent]]) -> list[Finding]:
    out = []
    primaries = {e.host for e in log.events if e.what == "completion" and e.code == 12}
    primaries |= {e.host for e in _by(log, "async") if e.detail in PORT_EVENTS}
    for host, evs in sorted(flush_owner.items()):
        if host in primaries:
            continue  # tied to that host's retry timeout or port error
        peers = sorted({e.peer for e in evs if e.peer})
        out.append(
            Finding(
                "undetermined",
                f"{host}<->{','.join(peers)}" if peers else host,
                "warning",
                f"{host} logged only flushed completions (status 5 / vendor 0xf9): they follow an earlier error on "
                "the same QP, which is not in this log. Find the first error in the peer's log "
                f"({', '.join(peers) or 'unknown peer'}) or earlier lines.",
                dict(_completion_evidence(evs), secondary=True, peer=",".join(peers)),
                "",
                evs[0].where,
            )
        )
    return out


def _setup_findings(log: NcclLog) -> list[Finding]:
    """Failed verbs calls, unusable HCAs and 'No device found', named as configuration."""
    out = []
    selected: dict[str, list[str]] = defaultdict(list)
    for e in _by(log, "using"):
        if e.hca not in selected[e.host]:
            selected[e.host].append(e.hca)
    env = {e.hca: e.detail for e in _by(log, "env")}
    seen: set[tuple[str, str, str]] = set()
    cannot_open = {e.host for e in _by(log, "open_failed")}
    for e in _by(log, "verbs_call"):
        if e.hca == "ibv_open_device" and e.host in cannot_open:
            continue  # the 'Unable to open device' lines name the HCA
        why = e.detail.lower()
        kind, check = vs.VERBS_CALL_ERRNO.get(why, ("rdma_setup_error", f"{e.hca} failed ({e.detail or 'no errno'})"))
        hcas = selected.get(e.host, [])
        key = (e.host, e.hca, why)
        if key in seen:
            continue
        seen.add(key)
        where = f"{e.host}/{hcas[0]}" if len(hcas) == 1 else e.host
        out.append(
            Finding(
                kind,
                where,
                "error",
                f"{e.hca} failed on {e.host} with '{e.detail or 'an error'}'"
                + (f" on the HCA NCCL selected ({', '.join(hcas)})" if hcas else "")
                + f", before any packet was sent: {check}. A setup problem, not a link or peer timeout.",
                {"call": e.hca, "errno": e.detail, "selected_hcas": hcas, "nccl_env": env},
                "config",
                e.where,
            )
        )
    for e in _by(log, "open_failed"):
        out.append(
            Finding(
                "hca_selection",
                f"{e.host}/{e.hca}",
                "warning",
                f"NCCL could not open {e.hca} on {e.host}: not usable here (container device list, permissions "
                "or a stale device). Exclude it (NCCL_IB_HCA=^name) or expose it to the process.",
                {"hca": e.hca, "nccl_env": env},
                "config",
                e.where,
            )
        )
    nodev = sorted({e.host for e in _by(log, "no_device")})
    for host in nodev:
        first = next(e for e in _by(log, "no_device") if e.host == host)
        if "NCCL_IB_HCA" in env:
            out.append(
                Finding(
                    "hca_selection",
                    host,
                    "error",
                    f"NCCL_IB_HCA={env['NCCL_IB_HCA']} matches no usable device on {host}, so NCCL found no IB/RoCE "
                    "HCA and falls back to TCP sockets. Fix the list (names from ibv_devices, ^ to exclude, = for "
                    "exact match) or expose those devices to the container.",
                    {"nccl_env": env},
                    "config",
                    first.where,
                )
            )
            continue
        out.append(
            Finding(
                "no_rdma_device",
                host,
                "warning",
                f"NCCL found no usable IB/RoCE HCA on {host} and falls back to TCP sockets (NET/Socket): "
                "far lower bandwidth. Check NCCL_IB_HCA, /dev/infiniband in the container, libibverbs and "
                "that the RDMA devices are up (ibv_devinfo).",
                {"nccl_env": env},
                "config",
                first.where,
            )
        )
    return out


def _gdr_findings(log: NcclLog) -> list[Finding]:
    """GPUDirect RDMA state per HCA and per node."""
    out = []
    state: dict[str, dict[str, str]] = defaultdict(dict)
    first: dict[str, str] = {}
    for e in _by(log, "gdr"):
        state[e.host][e.hca] = e.detail
        first.setdefault(e.host, e.where)
    for host, hcas in sorted(state.items()):
        disabled = sorted(h for h, s in hcas.items() if s == "disabled")
        enabled = sorted(h for h, s in hcas.items() if s == "enabled")
        if disabled and not enabled:
            out.append(
                Finding(
                    "gdr_disabled",
                    host,
                    "error",
                    f"GPUDirect RDMA is disabled on every HCA of {host} ({', '.join(disabled)}): NCCL stages "
                    "network traffic through host memory (an order of magnitude slower). A host software/"
                    "configuration fault, not a NIC, PCIe or fabric fault: check that nvidia-peermem is loaded "
                    "(lsmod | grep peermem; older NCCL only detects nv_peer_mem: NCCL >= 2.23.4 also checks "
                    "nvidia_peermem) and NCCL_NET_GDR_LEVEL.",
                    {"disabled_hcas": disabled, "enabled_hcas": enabled},
                    "config",
                    first[host],
                )
            )
        for hca in disabled if enabled else []:
            out.append(
                Finding(
                    "gdr_disabled",
                    f"{host}/{hca}",
                    "warning",
                    f"GPUDirect RDMA is disabled for {hca} but enabled for {', '.join(enabled)} on {host}: "
                    "that HCA is too far from the GPUs (nvidia-smi topo -m) or lacks peer-memory support.",
                    {"disabled_hcas": disabled, "enabled_hcas": enabled},
                    "config",
                    first[host],
                )
            )
    channels: dict[str, dict[str, int]] = defaultdict(lambda: {"gdr": 0, "host": 0})
    chan_line: dict[str, str] = {}
    for e in _by(log, "channel"):
        channels[e.host][e.detail] += 1
        chan_line.setdefault(e.host, e.where)
    with_gdr = sorted(h for h, c in channels.items() if c["gdr"])
    for host, c in sorted(channels.items()):
        if c["gdr"] or not c["host"] or not with_gdr or host in state:
            continue
        out.append(
            Finding(
                "gdr_disabled",
                host,
                "error",
                f"{host}'s NET/IB channels run without GPUDirect RDMA while {', '.join(with_gdr)} use /GDRDMA: "
                f"GDR is missing on this node only (nvidia-peermem not loaded, different driver/NCCL, or a GPU-NIC "
                "path beyond NCCL_NET_GDR_LEVEL). Compare lsmod and nvidia-smi topo -m with a good node.",
                {"host_channels": c["host"], "gdr_channels_elsewhere": {h: channels[h]["gdr"] for h in with_gdr}},
                "config",
                chan_line[host],
            )
        )
    return out


def _socket_findings(log: NcclLog) -> list[Finding]:
    rdma = any(e.what in ("completion", "async") for e in log.events)
    sockets = [e for e in log.events if e.what in ("socket", "proxy")]
    if not sockets or rdma:
        return []
    peers = sorted({e.peer for e in sockets if e.what == "socket" and e.peer})
    ranks = sorted({e.peer for e in sockets if e.what == "proxy"})
    reporters = sorted({e.host for e in sockets})
    local = [p for p in peers if p.split(".")[0] in reporters]
    return [
        Finding(
            "host_down",
            ", ".join(peers + ranks) or "peer process",
            "error",
            f"{', '.join(reporters)} lost socket connections to {', '.join(peers + ranks) or 'a peer'} "
            "(broken pipe / closed by remote peer) with no RDMA completion error: a peer process "
            "crashed or exited. Not a network fault: look for the first error (segfault, OOM, "
            "exception) in the peer's own log"
            + (
                f"; {', '.join(local)} names the reporting host itself, so look at its other ranks too."
                if local
                else "."
            ),
            {
                "socket_errors": [e.detail for e in sockets if e.what == "socket"],
                "proxy_retcodes": sorted({e.code for e in sockets if e.code is not None}),
                "peers": peers,
                "ranks": ranks,
                "reported_by": reporters,
                "network_innocent": True,
                "peers_on_reporting_host": local,
            },
            "failure",
            sockets[0].where,
        )
    ]


def findings(log: NcclLog) -> list[Finding]:
    """Every rule above; one finding per blamed host, HCA or host pair."""
    timeouts: dict[str, list[NcclEvent]] = defaultdict(list)
    for e in _by(log, "completion"):
        if e.code == 12:
            timeouts[e.peer or UNNAMED_PEER].append(e)  # older NCCL lines do not name the peer
    out = _port_findings(log, timeouts)
    out += _retry_findings(log, timeouts)
    flush_owner: dict[str, list[NcclEvent]] = {}
    out += _status_findings(log, flush_owner)
    out += _flush_only_findings(log, flush_owner)
    out += _setup_findings(log)
    out += _gdr_findings(log)
    out += _socket_findings(log)
    return out


def detect(text: str) -> bool:
    """True when the text holds an NCCL log line (``host:pid:tid [dev] ... NCCL``)."""
    return bool(hosts_in(text))
