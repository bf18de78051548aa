"""Synthetic fabrics for the simulator, demos, benchmarks and tests.

:func:`panel1` is the toy fabric of the R-Pingmesh digest's Panel 1; :func:`random_clos`
a seeded two- or three-tier Clos of any size. Both return a validated
:class:`~schemas.inventory.Inventory`, the same model a cluster's YAML file gives, with
IPs ``10.<tor>.<n>``, GIDs derived from them and ToR ports named ``Ethernet<n>``.
"""

from __future__ import annotations

import random
import string
from dataclasses import replace

from schemas.inventory import Host, Inventory, Link, Rnic, Switch, Tor, gid_from_ip


def _build(
    name: str,
    tors: list[Tor],
    switches: list[Switch],
    host_rnics: list[tuple[str, list[tuple[str, str]]]],
    links: list[Link],
    port_shuffle: random.Random | None = None,
) -> Inventory:
    """Assemble an inventory; ``host_rnics`` is [(host, [(rnic id, tor), ...])]. IPs 10.<tor>.<n>."""
    tor_index = {t.name: i for i, t in enumerate(tors)}
    per_tor_count: dict[str, int] = {}
    hosts: dict[str, Host] = {}
    rnics: dict[str, Rnic] = {}
    for hname, rl in host_rnics:
        for j, (rid, tor) in enumerate(rl):
            n = per_tor_count.get(tor, 0) + 1
            per_tor_count[tor] = n
            ti = tor_index[tor]
            ip = f"10.{ti // 250}.{ti % 250 + 1}.{n}" if n < 255 else f"10.{100 + ti // 250}.{ti % 250}.{n - 254}"
            rnics[rid] = Rnic(rid, hname, f"eth{j}", ip, gid_from_ip(ip), tor, f"Ethernet{n}")
        hosts[hname] = Host(hname, tuple(r for r, _ in rl))
    if port_shuffle is not None:
        # Cabling is rarely in order: permute each ToR's port numbers.
        for tor in tor_index:
            ids = [r.id for r in rnics.values() if r.tor == tor]
            ports = [rnics[r].tor_port for r in ids]
            port_shuffle.shuffle(ports)
            for r, p in zip(ids, ports, strict=True):
                rnics[r] = replace(rnics[r], tor_port=p)
    return Inventory(
        name, {t.name: t for t in tors}, {s.name: s for s in switches}, hosts, rnics, links, f"<{name}>"
    ).validate()


def panel1() -> Inventory:
    """The toy fabric of the R-Pingmesh digest's Panel 1.

    Three ToRs ``A``, ``B``, ``C``; four spines ``S1``–``S4``, each cabled to every ToR;
    six hosts ``H1``–``H6`` of two RNICs each. RNICs are named by ToR: ``A1``–``A4`` under
    ToR A (``H1`` = A1, A2; ``H2`` = A3, A4), ``B1``–``B4`` (``H3``, ``H4``), ``C1``–``C4``
    (``H5``, ``H6``). The digest's job H1 + H3 therefore flows A2 → B2.
    """
    tors = [Tor(t) for t in "ABC"]
    switches = [Switch(f"S{i}") for i in range(1, 5)]
    host_rnics = []
    for ti, t in enumerate("ABC"):
        for hj in range(2):
            host = f"H{2 * ti + hj + 1}"
            host_rnics.append((host, [(f"{t}{2 * hj + 1}", t), (f"{t}{2 * hj + 2}", t)]))
    links = [
        Link(t.name, s.name, f"Ethernet{33 + si}", f"Ethernet{ti + 1}")
        for ti, t in enumerate(tors)
        for si, s in enumerate(switches)
    ]
    return _build("panel1", tors, switches, host_rnics, links)


def _tor_names(n: int) -> list[str]:
    # Letters only up to G, so ToR ``H``'s RNIC ``H1`` can never clash with host ``H1`` or spine ``S1``.
    if n <= 7:
        return list(string.ascii_uppercase[:n])
    return [f"T{i + 1}" for i in range(n)]


def random_clos(
    seed: int,
    n_tors: int,
    n_spines: int,
    hosts_per_tor: int,
    rnics_per_host: int,
    *,
    n_pods: int = 1,
    n_cores: int = 0,
) -> Inventory:
    """A seeded Clos fabric.

    Two-tier by default: ``n_tors`` ToRs, each cabled to all ``n_spines`` spines
    (``N = n_spines`` parallel ToR-to-ToR paths). With ``n_pods > 1`` and ``n_cores > 0``
    it is three-tier like the paper's evaluation cluster (§6): ToRs are split over pods,
    each pod has ``n_spines`` agg switches cabled to all its ToRs, and agg *j* of every
    pod is cabled to the cores of plane *j* (``n_cores // n_spines`` each, so
    ``N = n_cores`` paths between pods).

    Naming: ToRs ``A``–``G`` (``T1``, ``T2``, ... beyond 7); RNICs ``<ToR><n>``
    (``A1`` ... as in Panel 1, ``T12r3`` beyond 7 ToRs); hosts ``H1``...; spines ``S1``...,
    aggs ``P<pod>S<j>``, cores ``X1``.... The seed permutes each ToR's port numbers
    (cabling is rarely in order), so ports are not derivable from names.

    Raises:
        ValueError: a size is not positive, or ``n_cores`` is not a multiple of ``n_spines``.
    """
    if min(n_tors, n_spines, hosts_per_tor, rnics_per_host, n_pods) < 1:
        raise ValueError("random_clos: every size must be at least 1")
    three_tier = n_pods > 1
    if three_tier and (n_cores < n_spines or n_cores % n_spines):
        raise ValueError(
            f"random_clos: n_cores={n_cores} must be a positive multiple of n_spines={n_spines} for n_pods > 1"
        )
    rng = random.Random(seed)
    names = _tor_names(n_tors)
    sep = "" if n_tors <= 7 else "r"
    tors = [Tor(t, pod=i * n_pods // n_tors) for i, t in enumerate(names)]
    host_rnics = []
    h = 0
    for t in names:
        for _ in range(hosts_per_tor):
            h += 1
            base = (h - 1) % hosts_per_tor * rnics_per_host
            host_rnics.append((f"H{h}", [(f"{t}{sep}{base + k + 1}", t) for k in range(rnics_per_host)]))
    links: list[Link] = []
    switches: list[Switch] = []
    down = hosts_per_tor * rnics_per_host
    if not three_tier:
        switches = [Switch(f"S{i + 1}") for i in range(n_spines)]
        for ti, t in enumerate(tors):
            for si, s in enumerate(switches):
                links.append(Link(t.name, s.name, f"Ethernet{down + si + 1}", f"Ethernet{ti + 1}"))
    else:
        per_plane = n_cores // n_spines
        cores = [Switch(f"X{i + 1}", "core") for i in range(n_cores)]
        for p in range(n_pods):
            aggs = [Switch(f"P{p}S{j + 1}", "agg", p) for j in range(n_spines)]
            switches += aggs
            pod_tors = [t for t in tors if t.pod == p]
            for ti, t in enumerate(pod_tors):
                for j, a in enumerate(aggs):
                    links.append(Link(t.name, a.name, f"Ethernet{down + j + 1}", f"Ethernet{ti + 1}"))
            for j, a in enumerate(aggs):
                for c in range(per_plane):
                    core = cores[j * per_plane + c]
                    links.append(Link(a.name, core.name, f"Ethernet{len(pod_tors) + c + 1}", f"Ethernet{p + 1}"))
        switches += cores
    return _build(f"clos-{seed}", tors, switches, host_rnics, links, port_shuffle=rng)
