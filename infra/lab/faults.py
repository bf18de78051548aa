"""Fault injection on the running lab: the fault classes of R-Pingmesh §5 and Table 2.

=================  ==============================================================  ===================
kind               what it does                                                    expected verdict
=================  ==============================================================  ===================
``link-down``      a ToR-spine cable dies: the ToR end goes admin-down, the spine  ``switch`` (link)
                   end loses carrier; far ToRs keep hashing onto it (blackhole)
``link-loss``      random loss (``numgen random``) both ways on one cable          ``switch`` (link)
``one-way-loss``   random loss on one cable in one direction only: what leaves     ``switch`` (link)
                   ``a`` toward ``b`` (a ToR's uplink, or a spine's downlink)
``partial-5tuple`` one cable drops a hashed subset of 5-tuples, both directions    ``switch`` (link)
``flapping-link``  a ToR-spine cable is down ``down_s`` of every ``period_s`` s    ``switch`` (link)
                   (:mod:`infra.lab.flap`: the ToR end, as for ``link-down``)
``nic-down``       an RNIC's link goes down (host side)                            ``rnic``
``host-down``      the host's agents are stopped                                   ``host_down``
``host-restart``   the host's agents restart with new QPNs                         ``stale_qpn`` noise
``busy-host``      the responder is SIGSTOPped in bursts longer than the timeout   ``busy_host``
=================  ==============================================================  ===================

Each active fault is recorded in the state file with what undoes it, so
:func:`clear` (and ``lab down``) restores the fabric.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from infra.lab import agents, nft, procs
from infra.lab.layout import Fabric
from infra.lab.netns import LabError, lab_dir, load, ns_exec, read_state, write_state

KINDS = ("link-down", "link-loss", "one-way-loss", "partial-5tuple", "flapping-link", "nic-down", "host-down",
         "host-restart", "busy-host")
LINK_KINDS = ("link-down", "link-loss", "one-way-loss", "partial-5tuple", "flapping-link")
"""The kinds that take a ToR-spine cable (``a``, ``b``)."""


def _fault_id(state: dict[str, Any]) -> str:
    n = int(state.get("fault_seq", 0)) + 1
    state["fault_seq"] = n
    return f"f{n}"


def _switch_link(fab: Fabric, a: str, b: str) -> tuple[str, str]:
    """Order a ToR-spine pair as (ToR, spine), or raise with the valid names."""
    pair = {a, b}
    tors = pair & set(fab.tors)
    spines = pair & set(fab.spines)
    if len(tors) != 1 or len(spines) != 1:
        raise LabError(
            f"{a}-{b} is not a ToR-spine link; ToRs are {', '.join(fab.tors)}, spines {', '.join(fab.spines)}"
        )
    return tors.pop(), spines.pop()


def pick_target(kind: str, fab: Fabric, seed: int) -> dict[str, str]:
    """Draw the faulted link, RNIC or host of ``kind`` from ``seed`` (the demo scenarios)."""
    rng = random.Random(seed)
    if kind in LINK_KINDS:
        return {"a": rng.choice(fab.tors), "b": rng.choice(fab.spines)}
    if kind == "nic-down":
        return {"rnic": rng.choice(fab.rnics).name}
    if kind in ("host-down", "host-restart", "busy-host"):
        return {"host": rng.choice(fab.hosts)}
    raise LabError(f"unknown fault {kind!r}; kinds are {', '.join(KINDS)}")


def inject(
    kind: str,
    directory: str | Path | None = None,
    *,
    a: str = "",
    b: str = "",
    rnic: str = "",
    host: str = "",
    loss: float = 0.05,
    fraction: float = 0.25,
    stop_ms: float = 700.0,
    run_ms: float = 300.0,
    period_s: float = 10.0,
    down_s: float = 2.0,
    seed: int = 1,
) -> dict[str, Any]:
    """Inject one fault; returns its record (``id``, ``kind``, ``target`` and undo data).

    Args:
        kind: one of :data:`KINDS`.
        a, b: the cable's ends (a ToR and a spine, either order) for link faults; ``one-way-loss`` drops
            what ``a`` sends to ``b``.
        rnic: the RNIC for ``nic-down``.
        host: the host for ``host-down``, ``host-restart``, ``busy-host``.
        loss: drop probability of ``link-loss`` and ``one-way-loss`` (0..1).
        fraction: share of 5-tuples dropped by ``partial-5tuple`` (0..1).
        stop_ms, run_ms: ``busy-host`` burst lengths in ms.
        period_s, down_s: ``flapping-link``: down for ``down_s`` of every ``period_s`` seconds.
        seed: hash seed of ``partial-5tuple`` (which tuples die).

    Raises:
        LabError: no lab, unknown kind or name, or the kernel refused.
    """
    d = lab_dir(directory)
    fab, state = load(d)
    fid = _fault_id(state)
    rec: dict[str, Any] = {"id": fid, "kind": kind, "injected_ns": time.time_ns()}  # `lab fault list` shows it
    if kind in LINK_KINDS:
        tor, spine = _switch_link(fab, a, b)
        ln = fab.link(tor, spine)
        rec["target"] = f"{tor}-{spine}"
        if kind == "link-down":
            ns_exec(fab.netns(tor), ["ip", "link", "set", "dev", ln.a_if, "down"])
            rec["undo"] = [[fab.netns(tor), ["ip", "link", "set", "dev", ln.a_if, "up"]]]
        elif kind == "flapping-link":
            if not 0 < down_s < period_s:
                raise LabError(f"flapping-link: down_s {down_s} must be in (0, period_s {period_s})")
            argv = procs.python_argv("infra.lab.flap", "--netns", fab.netns(tor), "--dev", ln.a_if,
                                     "--period-s", str(period_s), "--down-s", str(down_s))
            procs.start(d, state, f"flap.{fid}", argv, kind="flap", host=tor)
            rec["process"] = f"flap.{fid}"
            rec["undo"] = [[fab.netns(tor), ["ip", "link", "set", "dev", ln.a_if, "up"]]]  # also if it was killed
            rec["period_s"], rec["down_s"] = period_s, down_s
        elif kind == "one-way-loss":
            table = f"fs_{fid}"
            sender, ifname = (tor, ln.a_if) if a == tor else (spine, ln.b_if)
            nft.add_table(fab.netns(sender), table, [nft.loss_rule(ifname, max(1, round(loss * 1000)))])
            rec["tables"] = [[fab.netns(sender), table]]
            rec["loss"], rec["direction"] = loss, f"{sender}->{spine if sender == tor else tor}"
        else:
            table = f"fs_{fid}"
            for node, ifname in ((tor, ln.a_if), (spine, ln.b_if)):
                if kind == "link-loss":
                    rules = [nft.loss_rule(ifname, max(1, round(loss * 1000)))]
                else:
                    rules = nft.tuple_loss_rules(ifname, max(1, round(fraction * 1000)), seed)
                nft.add_table(fab.netns(node), table, rules)
            rec["tables"] = [[fab.netns(tor), table], [fab.netns(spine), table]]
            rec["loss" if kind == "link-loss" else "fraction"] = loss if kind == "link-loss" else fraction
    elif kind == "nic-down":
        r = fab.rnic(rnic)
        rec["target"] = r.name
        ns_exec(fab.netns(r.host), ["ip", "link", "set", "dev", r.name, "down"])
        # An admin-down link loses its static routes: bring them back after it is up.
        restore = [
            [
                fab.netns(r.host),
                ["ip", "route", "replace", rt.dst, "via", rt.gateways[0], "dev", r.name, "table", str(rt.table)],
            ]
            for rt in fab.routes
            if rt.node == r.host and rt.gateways == (r.gateway,)
        ]
        rec["undo"] = [[fab.netns(r.host), ["ip", "link", "set", "dev", r.name, "up"]], *restore]
    elif kind in ("host-down", "host-restart", "busy-host"):
        fab.role(host)
        rec["target"] = host
        write_state(d, state)  # keep fault_seq: the helpers below rewrite the state file
        if kind == "host-down":
            agents.stop_agents(d, [host])
            rec["restart"] = host
        elif kind == "host-restart":
            rec["qpn"] = agents.restart_agents(d, [host])
        else:
            entry = agents.agent_entry(d, host, "responder")
            st = read_state(d)
            argv = procs.python_argv(
                "infra.lab.busy", "--pid", str(entry["pid"]), "--stop-ms", str(stop_ms), "--run-ms", str(run_ms)
            )
            procs.start(d, st, f"busy.{fid}", argv, kind="busy", host=host)
            write_state(d, st)
            rec["process"] = f"busy.{fid}"
        state = read_state(d)
    else:
        raise LabError(f"unknown fault {kind!r}; kinds are {', '.join(KINDS)}")
    state.setdefault("faults", []).append(rec)
    write_state(d, state)
    return rec


def clear(fault_id: str | None = None, directory: str | Path | None = None) -> list[str]:
    """Undo ``fault_id`` (default: every active fault); returns the ids cleared."""
    d = lab_dir(directory)
    state = read_state(d)
    cleared = []
    keep = []
    for rec in state.get("faults", []):
        if fault_id and rec["id"] != fault_id:
            keep.append(rec)
            continue
        _undo(d, state, rec)
        cleared.append(rec["id"])
    state["faults"] = keep
    write_state(d, state)
    return cleared


def _undo(d: Path, state: dict[str, Any], rec: dict[str, Any]) -> None:
    name = rec.get("process")
    if name and name in state.get("processes", {}):  # first: a flapping link's process must not undo the undo
        procs.stop(state["processes"].pop(name))
    for ns, argv in rec.get("undo", []):
        ns_exec(ns, argv, check=False)
    for ns, table in rec.get("tables", []):
        nft.delete_table(ns, table)
    if rec.get("restart"):
        write_state(d, state)
        agents.restart_agents(d, [rec["restart"]])
        state.update(read_state(d))


def active(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """The faults in force, oldest first."""
    return list(read_state(lab_dir(directory)).get("faults", []))
