"""Collector for UCX logs (Open MPI/UCX, NIXL, UCC): ``ib_mlx5_log`` completion errors and IB async events.

``[host:pid:tid:n] ib_mlx5_log.c:143  Transport retry count exceeded on mlx5_0:1/RoCE
(synd 0x15 vend 0x81 hw_synd 0/0)`` is followed by the failing work request
(``DCI QP 0x.. wqe[0]: SEND ... dgid fe80::..`` or
``rlid 703``), which names the remote port. The mlx5 syndrome maps to the verbs status
(:data:`.verbs_status.MLX5_SYNDROME`: 0x15 -> 12 retry exceeded, 0x16 -> 13 RNR, ...).

Rules, as for NCCL (:mod:`.nccl_log`): retry exceeded towards one remote port reported by
two or more hosts -> ``rnic`` at that remote (a vote); by one host -> ``undetermined``
between the reporter and the remote; RNR -> ``rnr_retry_exceeded``; protection/access ->
``rdma_access_error``; flushes are secondary. ``IB Async event ... port error`` -> ``rnic``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from diagnose import verbs_status as vs
from producers.hostping.findings import Finding

NAME = "ucx_log"
READS = "UCX logs (ib_mlx5_log completion errors with synd/vend, IB async events)"

_PREFIX = re.compile(r"^\[(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+):(?P<tid>\d+)(?::\d+)?\]\s+(?P<rest>.*)$")
_ERR = re.compile(
    r"ib_mlx5_log\.c:\d+\s+(?P<err>.+?) on (?P<dev>[\w-]+):(?P<port>\d+)/(?P<tr>\w+) "
    r"\(synd 0x(?P<synd>[0-9a-fA-F]+) vend 0x(?P<vend>[0-9a-fA-F]+)"
)
_WQE = re.compile(r"QP 0x[0-9a-fA-F]+ wqe\[\d+\]:.*?(?:dgid (?P<dgid>[0-9a-fA-F:.]+)|rlid (?P<rlid>\d+))")
_ASYNC = re.compile(r"IB Async event on (?P<dev>[\w-]+): (?P<ev>.+?)(?: on port (?P<port>\d+))?\s*$")


@dataclass
class UcxError:
    """One ``ib_mlx5_log`` error; ``remote`` is ``dgid X`` or ``lid N`` from the next WQE line."""

    host: str
    pid: int
    text: str
    device: str
    port: int
    transport: str
    status: int
    vendor: int
    line: int
    remote: str = ""


@dataclass
class UcxLog:
    errors: list[UcxError] = field(default_factory=list)
    async_events: list[tuple[str, str, str, int]] = field(default_factory=list)  # host, device, event, line


def parse(text: str) -> UcxLog:
    """Errors with their remote port, and async events."""
    log = UcxLog()
    last: dict[tuple[str, int], UcxError] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        p = _PREFIX.match(line)
        host, pid, rest = (p["host"], int(p["pid"]), p["rest"]) if p else ("", 0, line)
        if m := _ERR.search(rest):
            synd = int(m["synd"], 16)
            e = UcxError(
                host,
                pid,
                m["err"].strip(),
                m["dev"],
                int(m["port"]),
                m["tr"],
                vs.MLX5_SYNDROME.get(synd, 21),
                int(m["vend"], 16),
                n,
            )
            log.errors.append(e)
            last[(host, pid)] = e
        elif (m := _WQE.search(rest)) and (host, pid) in last and not last[(host, pid)].remote:
            last[(host, pid)].remote = f"dgid {m['dgid']}" if m["dgid"] else f"lid {m['rlid']}"
        elif m := _ASYNC.search(rest):
            log.async_events.append((host, m["dev"], m["ev"].strip().lower(), n))
    return log


def hosts_in(text: str) -> list[str]:
    """Hosts named by UCX ``[host:pid:tid]`` prefixes on ib_mlx5_log/UCX lines."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        p = _PREFIX.match(line.strip())
        if p and ("ib_mlx5_log" in p["rest"] or "UCX" in p["rest"]):
            seen.setdefault(p["host"], None)
    return list(seen)


def findings(log: UcxLog) -> list[Finding]:
    """Vote retry-exceeded errors over remote ports; name the other statuses."""
    out: list[Finding] = []
    retry: dict[str, list[UcxError]] = defaultdict(list)
    other: dict[tuple[str, int], list[UcxError]] = defaultdict(list)
    for e in log.errors:
        if e.status == 12:
            retry[e.remote or f"peer of {e.host}/{e.device}"].append(e)
        elif not vs.is_flush(e.status, e.vendor):
            other[(e.host, e.status)].append(e)
    for remote, evs in sorted(retry.items()):
        reporters = sorted({e.host or "?" for e in evs})
        ev = {
            "status": 12,
            "status_name": vs.status_name(12),
            "vendor_err": evs[0].vendor,
            "vendor_meaning": vs.vendor_meaning(evs[0].vendor),
            "reported_by": reporters,
            "devices": sorted({f"{e.device}:{e.port}/{e.transport}" for e in evs}),
            "count": len(evs),
            "peer": remote,
        }
        if len(reporters) >= 2:
            out.append(
                Finding(
                    "rnic",
                    remote,
                    "error",
                    f"{len(reporters)} hosts exhausted transport retries towards {remote}: that remote RNIC/port is "
                    "the common element. Check its port counters, cable and link state.",
                    dict(ev, subkind="retry_timeout_vote"),
                    "failure",
                    str(evs[0].line),
                )
            )
        else:
            out.append(
                Finding(
                    "undetermined",
                    f"{reporters[0]}/{evs[0].device}<->{remote}",
                    "warning",
                    f"{reporters[0]} exhausted transport retries ({vs.status_name(12)}, vendor "
                    f"{vs.vendor_meaning(evs[0].vendor)}) on {evs[0].device} towards {remote}: the remote RNIC, "
                    "either port, or the path. Probe the pair (R-Pingmesh) or collect logs from more hosts.",
                    ev,
                    "",
                    str(evs[0].line),
                )
            )
    for (host, status), evs in sorted(other.items()):
        if status in (4, 8, 10):
            kind, sev, cause, why = (
                "rdma_access_error",
                "error",
                "config",
                "memory registration (GPUDirect pinning, freed buffer)",
            )
        elif status == 13:
            kind, sev, cause, why = "rnr_retry_exceeded", "warning", "", "the peer posted no receive buffer in time"
        else:
            kind, sev, cause, why = "rdma_completion_error", "warning", "", vs.status_meaning(status)
        out.append(
            Finding(
                kind,
                f"{host or 'host'}/{evs[0].device}",
                sev,
                f"UCX on {host or 'the host'} got '{evs[0].text}' ({vs.status_name(status)}): {why}.",
                {
                    "status": status,
                    "status_name": vs.status_name(status),
                    "vendor_err": evs[0].vendor,
                    "count": len(evs),
                    "remotes": sorted({e.remote for e in evs if e.remote}),
                },
                cause,
                str(evs[0].line),
            )
        )
    ports: dict[tuple[str, str], list[int]] = defaultdict(list)
    for host, dev, event, n in log.async_events:
        scope, _ = vs.ASYNC_EVENTS.get(event.split(" on port")[0], ("", ""))
        if scope in ("port", "device"):
            ports[(host, dev)].append(n)
    for (host, dev), lines in sorted(ports.items()):
        out.append(
            Finding(
                "rnic",
                f"{host or 'host'}/{dev}",
                "error",
                f"UCX saw an RDMA port/device error event on {dev}: its port went down or the adapter failed. "
                "Check link_downed, the cable and dmesg mlx5 lines.",
                {"subkind": "port_flapping", "events": len(lines)},
                "failure",
                str(lines[0]),
            )
        )
    return out


def detect(text: str) -> bool:
    """True when the text holds an ``ib_mlx5_log`` error or a UCX IB async event line."""
    return any(_ERR.search(x) or ("UCX" in x and _ASYNC.search(x)) for x in text.splitlines())
