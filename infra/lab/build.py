"""The lab's kernel objects, built in a process of its own: ``python -m infra.lab.build LAB_DIR PARENT_PID``.

:func:`infra.lab.netns.up` writes the state file (the spec) and runs this module as a child
process, so pyroute2's helpers (``netns.create`` and ``IPRoute(netns=...)`` fork the calling
process) never fork the multi-threaded process that holds the broker, the pipeline's children
and the signal handlers: a forked copy of that process would run its ``finally`` blocks (stop
the broker, release its locks) inside a lab namespace. This process starts with default signal
dispositions, so SIGINT or SIGTERM ends it and its helpers at once; the parent then tears the
half-built lab down.

Kernel settings (measured on this kind of machine):

- routers: ``fib_multipath_hash_policy=3`` with ``fib_multipath_hash_fields=0x37``
  (src/dst IP, protocol, src/dst port: the L4 5-tuple; policy 1 scatters one
  5-tuple), a per-ToR ``fib_multipath_hash_seed`` (else forward and reverse paths
  always take the same spine), ``fib_multipath_use_neigh=1`` and
  ``ignore_routes_with_linkdown=1`` (a dead next hop leaves the multipath set);
- everyone: ``icmp_errors_use_inbound_ifaddr=1`` and ``icmp_ratelimit=0`` so
  TTL-limited probes name every hop; hosts accept packets from their own other
  NIC (``accept_local=1``) and route each source address out of its own NIC.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from pyroute2 import IPRoute, netns

from infra.lab.layout import Fabric, LabSpec, plan
from infra.lab.netns import LabError, ns_exec, read_state
from infra.process_group import die_with_parent

_COMMON_SYSCTLS = {
    "net.ipv4.icmp_ratelimit": "0",
    "net.ipv4.icmp_msgs_per_sec": "100000",
    "net.ipv4.icmp_msgs_burst": "100000",
    "net.ipv4.icmp_errors_use_inbound_ifaddr": "1",
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
    "net.ipv4.conf.default.ignore_routes_with_linkdown": "1",
}
_ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.fib_multipath_hash_policy": "3",
    "net.ipv4.fib_multipath_hash_fields": "0x37",
    "net.ipv4.fib_multipath_use_neigh": "1",
}
_HOST_SYSCTLS = {
    "net.ipv4.conf.all.accept_local": "1",
    "net.ipv4.conf.default.accept_local": "1",
}


def set_sysctls(ns: str, values: dict[str, str]) -> None:
    """Write sysctls inside ``ns`` (one ``sysctl`` call)."""
    ns_exec(ns, ["sysctl", "-q", "-w", *[f"{k}={v}" for k, v in values.items()]])


def _router_seed(spec: LabSpec, index: int) -> str:
    # Distinct, non-zero 32-bit seeds per router (0 means "random" in the kernel).
    return str((spec.seed * 2654435761 + (index + 1) * 40503) % (2**32 - 1) + 1)


def build(fab: Fabric) -> None:
    """Create the namespaces, sysctls, veth pairs, addresses, rules and routes of ``fab``.

    Forks (pyroute2): call it only in a process of its own (:func:`main`).

    Raises:
        LabError: a sysctl failed (its stderr in the message); pyroute2's ``NetlinkError`` for a
            refused netlink call.
    """
    spec = fab.spec
    for node in fab.nodes:
        netns.create(fab.netns(node))
    for i, node in enumerate(fab.nodes):
        values = dict(_COMMON_SYSCTLS)
        if fab.role(node) == "host":
            values.update(_HOST_SYSCTLS)
        else:
            values.update(_ROUTER_SYSCTLS)
            values["net.ipv4.fib_multipath_hash_seed"] = _router_seed(spec, i)
        set_sysctls(fab.netns(node), values)
    handles = {n: IPRoute(netns=fab.netns(n)) for n in fab.nodes}
    try:
        for ln in fab.links:
            handles[ln.a].link(
                "add", ifname=ln.a_if, kind="veth", peer={"ifname": ln.b_if, "net_ns_fd": fab.netns(ln.b)}
            )
        for ipr in handles.values():
            for link in ipr.get_links():
                ipr.link("set", index=link["index"], state="up")
        for ln in fab.links:
            for node, ifname, ip in ((ln.a, ln.a_if, ln.a_ip), (ln.b, ln.b_if, ln.b_ip)):
                ipr = handles[node]
                idx = ipr.link_lookup(ifname=ifname)[0]
                ipr.addr("add", index=idx, address=ip, prefixlen=ln.prefixlen)
        for host in fab.hosts:
            ipr = handles[host]
            for i, r in enumerate(fab.host_rnics(host)):
                ipr.rule("add", src=r.ip, src_len=32, iifname="lo", table=r.table, priority=100 + i)
            # Local delivery after the per-source rules, so A1 -> A2 on one host leaves by A1's cable.
            ipr.rule("add", table=255, priority=1000)
            ipr.rule("del", table=255, priority=0)
        for rt in fab.routes:
            ipr = handles[rt.node]
            if len(rt.gateways) == 1:
                ipr.route("add", dst=rt.dst, gateway=rt.gateways[0], table=rt.table)
            else:
                ipr.route("add", dst=rt.dst, table=rt.table, multipath=[{"gateway": g} for g in rt.gateways])
    finally:
        for ipr in handles.values():
            ipr.close()


def main(argv: list[str]) -> int:
    """``python -m infra.lab.build LAB_DIR PARENT_PID``: build the lab the state file in ``LAB_DIR`` describes.

    Returns:
        0 when built; 2 with a one-line error on stderr otherwise (the caller tears down).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m infra.lab.build LAB_DIR PARENT_PID", file=sys.stderr)
        return 2
    die_with_parent(signal.SIGKILL, int(argv[1]))  # a parent killed mid-build leaves no builder behind
    try:
        spec = read_state(Path(argv[0])).get("spec")
        if not spec:
            raise LabError(f"no lab spec in {Path(argv[0]) / 'state.json'}")
        build(plan(LabSpec(**spec)))
    except Exception as e:  # one line for the parent's LabError; the parent tears down
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
