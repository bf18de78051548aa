"""NCCL log classifier: RDMA async events, completion errors and socket errors, correlated across hosts.

NCCL WARN lines carry ``host:pid:tid [cudaDev]``. Three signatures decide who to blame:

- ``NET/IB : Got async event : port error`` on a host: its RNIC port went down
  (flapping link, cable, transceiver). When several local ranks of one host log it,
  the host's RNIC/port is at fault (``rnic``, subkind ``port_flapping``); the host is
  alive, since its processes keep logging, so it is never ``host_down`` (field case 3).
- ``Got completion from peer P<port> with error 12`` (IBV_WC_RETRY_EXC_ERR: transport
  retries exhausted): charged to P's RNIC when P logged a port error, or when two or
  more hosts report error 12 against P (a vote, as R-Pingmesh §5 votes over paths);
  otherwise ``undetermined`` between the two hosts, never a switch link from logs alone.
- socket errors (``Broken pipe``, ``Connection closed by remote peer``, proxy ``retcode 6``
  = ncclRemoteError) with no RDMA completion error and no port error: a peer process died
  (``host_down``); the network is innocent (field case 4).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from producers.hostping.findings import Finding

_PREFIX = re.compile(r"^(?P<host>[\w.\-<>]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]\s*(?P<rest>.*)$")
_ASYNC = re.compile(r"Got async event : (?P<ev>.+?)\s*$")
_COMPL = re.compile(
    r"Got completion (?:from peer (?P<peer>\S+?)<(?P<port>\d+)> )?with (?:error|status)[ =]?(?P<err>\d+)"
)
_SOCK = re.compile(
    r"(?:Call to (?P<op>\w+) from (?P<peer>\S+?)<\d+> failed : (?P<why>.+?)\s*$)"
    r"|(?:Connection closed by remote peer (?P<peer2>\S+?)<\d+>)"
    r"|(?:Connection reset by peer)"
)
_PROXY = re.compile(r"Failed to execute operation (?P<op>\w+) from rank (?P<rank>\d+), retcode (?P<rc>\d+)")

#: ibv_wc_status codes seen in NCCL logs.
WC_STATUS = {
    4: "IBV_WC_LOC_PROT_ERR",
    5: "IBV_WC_WR_FLUSH_ERR",
    10: "IBV_WC_REM_ACCESS_ERR",
    12: "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded: timeout)",
    13: "IBV_WC_RNR_RETRY_EXC_ERR (receiver not ready)",
}
PORT_EVENTS = ("port error", "local catastrophic error", "device fatal")


@dataclass(frozen=True)
class NcclEvent:
    """One classified line: ``what`` is ``async``, ``completion``, ``socket`` or ``proxy``."""

    host: str
    pid: int
    what: str
    detail: str
    peer: str
    code: int | None
    line: int


@dataclass
class NcclLog:
    events: list[NcclEvent] = field(default_factory=list)
    hosts_seen: dict[str, int] = field(default_factory=dict)


def parse(text: str) -> NcclLog:
    """Classify every NCCL line; ``hosts_seen`` counts lines per host (a host that logs is alive)."""
    log = NcclLog()
    for n, line in enumerate(text.splitlines(), start=1):
        p = _PREFIX.match(line.strip())
        if p is None:
            continue
        host, pid, rest = p["host"], int(p["pid"]), p["rest"]
        log.hosts_seen[host] = log.hosts_seen.get(host, 0) + 1
        if m := _ASYNC.search(rest):
            log.events.append(NcclEvent(host, pid, "async", m["ev"].lower(), "", None, n))
        elif m := _COMPL.search(rest):
            log.events.append(NcclEvent(host, pid, "completion", rest, m["peer"] or "", int(m["err"]), n))
        elif m := _SOCK.search(rest):
            why = m["why"] or ("Connection closed by remote peer" if m["peer2"] else "Connection reset by peer")
            log.events.append(NcclEvent(host, pid, "socket", why, m["peer"] or m["peer2"] or "", None, n))
        elif m := _PROXY.search(rest):
            log.events.append(NcclEvent(host, pid, "proxy", m["op"], f"rank {m['rank']}", int(m["rc"]), n))
    return log


def findings(log: NcclLog) -> list[Finding]:
    """Apply the three signatures above; one finding per blamed host or host pair."""
    out: list[Finding] = []
    port_ranks: dict[str, set[int]] = defaultdict(set)
    first: dict[str, int] = {}
    for e in log.events:
        if e.what == "async" and e.detail in PORT_EVENTS:
            port_ranks[e.host].add(e.pid)
            first.setdefault(e.host, e.line)
    timeouts: dict[str, list[NcclEvent]] = defaultdict(list)
    for e in log.events:
        if e.what == "completion" and e.code == 12 and e.peer:
            timeouts[e.peer].append(e)
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
                },
                "failure",
                str(first[host]),
            )
        )
    for peer, evs in sorted(timeouts.items()):
        reporters = sorted({e.host for e in evs})
        ev = {"error": 12, "status": WC_STATUS[12], "reported_by": reporters, "count": len(evs)}
        if len(reporters) >= 2:
            out.append(
                Finding(
                    "rnic",
                    peer,
                    "error",
                    f"{len(reporters)} hosts got transport-retry timeouts (error 12) from {peer}: its RNIC or port "
                    "is the common element. Check its port counters and cable.",
                    dict(ev, subkind="retry_timeout_vote"),
                    "failure",
                    str(evs[0].line),
                )
            )
        else:
            out.append(
                Finding(
                    "undetermined",
                    f"{reporters[0]}<->{peer}",
                    "warning",
                    f"{reporters[0]} got a transport-retry timeout (error 12) from {peer}, and nothing else "
                    "names a side: the RNIC of either host or the path between them. Probe the pair "
                    "(R-Pingmesh) to localise.",
                    ev,
                    "",
                    str(evs[0].line),
                )
            )
    rdma = any(e.what in ("completion", "async") for e in log.events)
    sockets = [e for e in log.events if e.what in ("socket", "proxy")]
    if sockets and not rdma:
        peers = sorted({e.peer for e in sockets if e.what == "socket" and e.peer})
        ranks = sorted({e.peer for e in sockets if e.what == "proxy"})
        reporters = sorted({e.host for e in sockets})
        local = [p for p in peers if p.split(".")[0] in reporters]
        out.append(
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
                str(sockets[0].line),
            )
        )
    return out


def detect(text: str) -> bool:
    """True when the text holds an NCCL log line (``host:pid:tid [dev] ... NCCL``)."""
    return any((p := _PREFIX.match(x.strip())) and "NCCL" in p["rest"] for x in text.splitlines())
