"""Second stage of ``fabricscope diagnose``: rules that span artifacts (several collectors, files or hosts).

The first stage (:mod:`diagnose.registry`) gives one :class:`~diagnose.registry.Artifact`
per (input, collector). Each rule here reads the parsed artifacts of all inputs given
together, adds findings, and may replace first-stage findings it explains better:

- :func:`lossy_roce_rule`: ``ethtool -S`` priority counters + RDMA ``hw_counters`` of the same
  input (or the only ones given) -> ``lossy_roce`` (field case 10);
- :func:`transceiver_rule`: uncorrectable PHY errors on a netdev + an mlx5 port module error
  of the same host -> one ``transceiver`` finding for the port (field case 25);
- :func:`intra_host_rule`: an NCCL completion error whose local and remote GIDs both belong
  to one host (from ``ip a``, ``show_gids``, ``ibv_devinfo -v`` or sysfs gids of that host)
  -> ``intra_host_path`` on that host's RNIC pair, replacing the host<->peer verdict (field case 24);
- :func:`gid_index_rule`: ``NCCL_IB_GID_INDEX`` set to an index that is link-local or RoCE v1
  in the GID table of the same host -> ``gid_index`` (configuration);
- :func:`firmware_rule`: firmware versions of one host's RNICs read from several inputs
  -> one ``mixed_firmware`` over all of them;
- :func:`mtu_rule`: a one-ended ``mtu_mismatch`` (field case 18) with the MTUs of both ends
  (``ip a`` or ``ibv_devinfo -v`` of both hosts) -> confirmed, or weakened when they match.

NCCL logs of several files (one per host or rank, as schedulers write them) are first merged
into one log (:func:`merge_nccl_logs`), so their votes and per-node comparisons span files.

Hosts: an artifact's host is the one its text names (see ``registry.host_hint``); artifacts
of one input file share it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from diagnose import lossy_roce
from diagnose.collectors import firmware, gid_table, ip_addr, nccl_log
from diagnose.collectors.nccl_log import NcclLog
from diagnose.registry import Artifact
from producers.hostping import hw_counters
from producers.hostping.findings import Finding


@dataclass
class Correlation:
    """What one rule concluded: new findings, and first-stage findings they replace (by identity)."""

    findings: list[Finding] = field(default_factory=list)
    replaces: list[Finding] = field(default_factory=list)


def _of(arts: list[Artifact], collector: str) -> list[Artifact]:
    return [a for a in arts if a.collector == collector]


def _src(art: Artifact, line: int | str) -> str:
    return f"{art.source}:{line}" if line else art.source


def lossy_roce_rule(arts: list[Artifact]) -> Correlation:
    """ethtool priority counters + hw_counters -> ``lossy_roce`` (see :mod:`.lossy_roce`)."""
    out = Correlation()
    snaps = [a for a in _of(arts, "sysfs") if hw_counters.read(a.parsed)]
    for eth in _of(arts, "ethtool"):
        same = [a for a in snaps if a.source == eth.source] or (snaps if len(snaps) == 1 else [])
        for snap in same:
            for f in lossy_roce.findings(eth.parsed, hw_counters.read(snap.parsed), str(eth.parsed.line)):
                out.findings.append(
                    Finding(f.kind, f.location, f.severity, f.explanation, f.evidence, f.cause, _src(eth, f.source))
                )
    return out


def transceiver_rule(arts: list[Artifact]) -> Correlation:
    """One port-level fault from PHY errors and a module event of the same host/input."""
    out = Correlation()
    phy = [(a, f) for a in _of(arts, "ethtool") for f in a.findings if f.kind == "phy_errors"]
    mods = [(a, f) for a in _of(arts, "dmesg") for f in a.findings if f.kind == "transceiver"]
    for a, pf in phy:
        mine = [(b, mf) for b, mf in mods if b.source == a.source or (a.host and b.host == a.host)]
        if len(mine) != 1:
            continue  # which module belongs to which netdev is not shown: keep both findings
        b, mf = mine[0]
        out.replaces += [pf, mf]
        out.findings.append(
            Finding(
                "transceiver",
                f"{pf.location} ({mf.location})",
                "error",
                f"One physical-layer fault at this host's port: {pf.location} counts uncorrectable errors ("
                + ", ".join(f"{k}={v}" for k, v in pf.evidence["uncorrectable"].items())
                + f") and {mf.location} reported '{', '.join(mf.evidence['events'])}'. The transceiver is not "
                "properly powered/supported, so the link runs lossy (for RoCE: retransmissions, timeouts). "
                "The fault is this port's module, not the fiber or the far side: use a supported optic or update "
                "the NIC firmware.",
                {"phy": pf.evidence, "module_event": mf.evidence, "netdev": pf.location, "port": mf.location},
                "failure",
                pf.source,
            )
        )
    return out


@dataclass(frozen=True)
class _Owner:
    host: str
    what: str  # netdev or rdma device
    art: Artifact
    mtu: tuple[str, int] | None = None  # ("netdev", bytes) from ip a, ("active_mtu", bytes) from ibv_devinfo


def _address_owners(arts: list[Artifact]) -> dict[ipaddress.IPv6Address, _Owner]:
    """Which host (and netdev/RDMA device) owns each GID; a GID claimed by two hosts is left out
    (duplicate or anonymised addresses must not make two hosts one)."""
    owners: dict[ipaddress.IPv6Address, _Owner] = {}
    claims: dict[ipaddress.IPv6Address, set[str]] = {}
    for a in arts:
        host = a.host or f"host of {a.source}"
        if a.collector == "ip_addr":
            for nd in a.parsed:
                for addr, _ in nd.addresses:
                    g = ip_addr.gid_of(addr)
                    if g is not None:
                        owners[g] = _Owner(host, nd.name, a, ("netdev", nd.mtu))
                        claims.setdefault(g, set()).add(host)
        table = (
            a.parsed
            if a.collector == "gid_table"
            else gid_table.from_snapshot(a.parsed)
            if a.collector == "sysfs"
            else None
        )
        for e in table.entries if table else []:
            if e.address is not None and e.address != gid_table.ZERO_GID:
                mtu = table.active_mtu.get((e.device, e.port))
                owners.setdefault(
                    e.address, _Owner(host, e.netdev or e.device, a, ("active_mtu", mtu) if mtu else None)
                )
                claims.setdefault(e.address, set()).add(host)
    return {g: o for g, o in owners.items() if len(claims.get(g, ())) <= 1}


def _gid(s: str) -> ipaddress.IPv6Address | None:
    return ip_addr.gid_of(s) if s else None


def intra_host_rule(arts: list[Artifact]) -> Correlation:
    """Failing connections whose both GIDs belong to the reporting host -> ``intra_host_path``."""
    out = Correlation()
    owners = _address_owners(arts)
    if not owners:
        return out
    for a in _of(arts, "nccl_log"):
        log: NcclLog = a.parsed
        comps = [e for e in log.events if e.what == "completion" and (e.local_gid or e.remote_gid)]
        # A peer is this host when any of its connections ends at a GID this host owns.
        local_peers: dict[tuple[str, str], str] = {}
        for e in comps:
            lo, ro = owners.get(_gid(e.local_gid)), owners.get(_gid(e.remote_gid))  # type: ignore[arg-type]
            hosts = {e.host, lo.host if lo else e.host}
            if ro is not None and (ro.host in hosts or (lo is not None and ro.art is lo.art)):
                local_peers[(e.host, e.peer)] = f"{e.remote_gid} ({ro.what})"
        pairs: dict[tuple[str, str, str], list] = {}
        for e in comps:
            if (e.host, e.peer) in local_peers:
                pairs.setdefault((e.host, e.local_gid, e.remote_gid), []).append(e)
        for (host, lg, rg), evs in pairs.items():
            lo, ro = owners.get(_gid(lg)), owners.get(_gid(rg))  # type: ignore[arg-type]
            proof = local_peers[(host, evs[0].peer)]
            out.findings.append(
                Finding(
                    "intra_host_path",
                    f"{host}:{lg}<->{rg}",
                    "error",
                    f"Both ends of the failing RDMA connection are on {host}: local GID {lg}"
                    + (f" ({lo.what})" if lo else "")
                    + f" -> remote GID {rg}"
                    + (f" ({ro.what})" if ro else f" (peer {evs[0].peer} is {host} itself: it also owns {proof})")
                    + f"; status {evs[0].code} x{len(evs)}. The broken path is NIC<->NIC inside the host (SR-IOV/"
                    "eswitch forwarding, hairpin at the ToR), not the inter-node fabric and not one NIC. "
                    "Workaround: NCCL_NET_DISABLE_INTRA=1; fix the VF/switch forwarding of same-host RoCE traffic.",
                    {
                        "host": host,
                        "local_gid": lg,
                        "remote_gid": rg,
                        "local_netdev": lo.what if lo else None,
                        "remote_netdev": ro.what if ro else None,
                        "peer": evs[0].peer,
                        "status": evs[0].code,
                        "vendor_err": evs[0].vendor,
                        "count": len(evs),
                        "peer_is_this_host_because": proof,
                    },
                    "config",
                    _src(a, evs[0].line),
                )
            )
        peers = {p for _, p in local_peers}
        out.replaces += [f for b in _of(arts, "nccl_log") for f in b.findings if f.evidence.get("peer") in peers]
    return out


def gid_index_rule(arts: list[Artifact]) -> Correlation:
    """``NCCL_IB_GID_INDEX`` pointing at a link-local or RoCE v1 entry of the same host's GID table."""
    out = Correlation()
    tables = [(a, a.parsed) for a in _of(arts, "gid_table")]
    tables += [(a, gid_table.from_snapshot(a.parsed)) for a in _of(arts, "sysfs")]
    for a in _of(arts, "nccl_log"):
        env = [e for e in a.parsed.events if e.what == "env" and e.hca == "NCCL_IB_GID_INDEX"]
        if not env or not env[0].detail.isdigit():
            continue
        idx = int(env[0].detail)
        for t_art, table in tables:
            if not (t_art.source == a.source or (a.host and t_art.host == a.host)):
                continue
            for e in table.entries:
                if e.index != idx or e.address in (None, gid_table.ZERO_GID):
                    continue
                if e.gid_type == "RoCE v2" and e.routable:
                    continue
                good = gid_table.routable_v2(table, e.device, e.port)
                out.findings.append(
                    Finding(
                        "gid_index",
                        f"{a.host or 'host'}/{e.device}/port{e.port}",
                        "error",
                        f"NCCL_IB_GID_INDEX={idx} selects {e.gid} on {e.device} port {e.port}, a "
                        f"{'link-local ' if not e.routable else ''}{e.gid_type or 'untyped'} GID: RoCE v2 over L3 "
                        "cannot use it."
                        + (f" Use index {good[0].index} ({good[0].gid}, RoCE v2)." if good else "")
                        + " A configuration fault, not the fabric.",
                        {
                            "gid_index": idx,
                            "gid": e.gid,
                            "gid_type": e.gid_type,
                            "routable": e.routable,
                            "suggested_index": good[0].index if good else None,
                        },
                        "config",
                        _src(a, env[0].line),
                    )
                )
    return out


def mtu_rule(arts: list[Artifact]) -> Correlation:
    """Confirm or weaken a one-ended ``mtu_mismatch`` with the MTUs of both ends, when ``ip a`` or
    ``ibv_devinfo -v`` of both hosts were given with the log."""
    out = Correlation()
    owners = _address_owners(arts)
    for a in _of(arts, "nccl_log"):
        for f in a.findings:
            if f.kind != "mtu_mismatch":
                continue
            pairs = [p.split("->") for p in f.evidence.get("gid_pairs", []) if "->" in p]
            ends = [(owners.get(_gid(lg)), owners.get(_gid(rg))) for lg, rg in pairs]  # type: ignore[arg-type]
            ends += [(None, owners.get(_gid(peer))) for peer in f.evidence.get("peers", [])]  # type: ignore[arg-type]
            local = next((lo for lo, _ in ends if lo and lo.mtu), None)
            remote = next(
                (ro for _, ro in ends if ro and ro.mtu and ro.art is not (local.art if local else None)), None
            )
            if not (local and remote and local.mtu and remote.mtu and local.mtu[0] == remote.mtu[0]):
                continue
            mtus = {f"{local.host} {local.what}": local.mtu[1], f"{remote.host} {remote.what}": remote.mtu[1]}
            differ = local.mtu[1] != remote.mtu[1]
            text = (
                f"Confirmed from both ends: {local.mtu[0]} {local.mtu[1]} on {local.host} {local.what} vs "
                f"{remote.mtu[1]} on {remote.host} {remote.what}. Set the same MTU on both ends. "
                if differ
                else f"Both ends have {local.mtu[0]} {local.mtu[1]}: the MTU matches, so compare the other items. "
            )
            ev = dict(f.evidence, probable=not differ, mtus=mtus, mtu_source=local.mtu[0])
            out.replaces.append(f)
            out.findings.append(Finding(f.kind, f.location, f.severity, text + f.explanation, ev, f.cause, f.source))
    return out


def firmware_rule(arts: list[Artifact]) -> Correlation:
    """``mixed_firmware`` across inputs of one host (``ethtool -i`` per interface in its own file, a bundle's
    ``ibstat`` beside its dmesg): one finding over all of them, replacing the per-input ones."""
    out = Correlation()
    by_host: dict[str, list[Artifact]] = {}
    for a in _of(arts, "firmware"):
        by_host.setdefault(a.host or "", []).append(a)
    for group in by_host.values():
        if len(group) < 2:
            continue
        owner = {id(e): a for a in group for e in a.parsed.entries}
        entries = [e for a in group for e in a.parsed.entries]
        found = firmware.mixed(entries, lambda e, owner=owner: _src(owner[id(e)], e.line))
        if found:
            out.findings += found
            out.replaces += [f for a in group for f in a.findings if f.kind == "mixed_firmware"]
    return out


#: Every second-stage rule, in output order.
RULES: tuple[Callable[[list[Artifact]], Correlation], ...] = (
    lossy_roce_rule,
    transceiver_rule,
    intra_host_rule,
    gid_index_rule,
    mtu_rule,
    firmware_rule,
)


def merge_nccl_logs(arts: list[Artifact]) -> list[Artifact]:
    """With NCCL logs in two or more inputs, judge them as one log: the first NCCL artifact carries
    the findings of the merged log (sources ``file:line``), the others none."""
    logs = _of(arts, "nccl_log")
    if len(logs) < 2:
        return arts
    merged = nccl_log.findings(nccl_log.merge([(a.source, a.parsed) for a in logs]))
    return [replace(a, findings=merged if a is logs[0] else []) if a.collector == "nccl_log" else a for a in arts]


def correlate(arts: list[Artifact]) -> list[Finding]:
    """All findings in input order (a rule's finding goes with the input of its first evidence line),
    minus the first-stage findings a rule replaced."""
    arts = merge_nccl_logs(arts)
    results = [rule(arts) for rule in RULES]
    replaced = {id(f) for r in results for f in r.replaces}
    out = [f for a in arts for f in a.findings if id(f) not in replaced]
    out += [f for r in results for f in r.findings]
    order: dict[str, int] = {}
    for i, a in enumerate(arts):
        order.setdefault(a.source, i)

    def position(f: Finding) -> int:
        hits = [i for src, i in order.items() if f.source == src or f.source.startswith(src + ":")]
        return min(hits, default=len(arts))

    return sorted(out, key=position)
