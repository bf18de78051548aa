"""The lab's ``one-way-loss`` and ``flapping-link`` faults on real namespaces. Needs root, network
namespaces and ``nft``; a lab of its own prefix (``fsa-``), so it runs beside a lab of the default one."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or not Path("/proc/self/ns/net").exists() or shutil.which("nft") is None:
    pytest.skip("the lab needs root, network namespaces and nft", allow_module_level=True)

from infra import lab  # noqa: E402
from infra.lab import faults, nft  # noqa: E402
from infra.lab.netns import lab_namespaces, ns_exec, read_state  # noqa: E402

from conftest import wait_for  # noqa: E402

PREFIX = "fsa-"


def _counted(ns: str, table: str) -> int:
    """Packets the counters of table ``inet table`` in ``ns`` counted."""
    rules = [i["rule"] for i in json.loads(ns_exec(ns, ["nft", "-j", "list", "table", "inet", table]))["nftables"]
             if "rule" in i]
    return sum(int(e["counter"]["packets"]) for r in rules for e in r["expr"] if "counter" in e)


def _send(ns: str, dst: str, n: int = 5) -> int:
    """``n`` UDP datagrams from ``ns`` to ``dst`` port 9; returns how many the sender's kernel refused (EPERM:
    an nftables drop on the way out)."""
    code = (f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nrefused = 0\n"
            f"for _ in range({n}):\n    try:\n        s.sendto(b'x', ({dst!r}, 9))\n"
            f"    except PermissionError:\n        refused += 1\nprint(refused)")
    return int(ns_exec(ns, [sys.executable, "-c", code]).strip())


def _count_arrivals(fab: lab.Fabric, *nodes: str) -> None:
    """Count the datagrams to port 9 that reach each of ``nodes`` (:func:`_arrived`)."""
    for node in nodes:
        nft.add_table(fab.netns(node), "fsa_in", ["udp dport 9 counter"], hook="input")


def _arrived(fab: lab.Fabric, node: str) -> int:
    return _counted(fab.netns(node), "fsa_in")


@pytest.fixture
def fab(tmp_path: Path):  # noqa: ANN201
    fabric = lab.up(lab.LabSpec(spines=2, tors=2, hosts_per_tor=1, nics_per_host=1, prefix=PREFIX), tmp_path)
    try:
        yield fabric
    finally:
        lab.down(tmp_path)
    assert lab_namespaces(PREFIX) == []


def test_one_way_loss_drops_only_what_its_sender_sends(fab: lab.Fabric, tmp_path: Path) -> None:
    ln = fab.link("A", "S2")  # ToR A's side a_ip, spine S2's side b_ip
    _count_arrivals(fab, "A", "S2")
    _send(fab.netns("A"), ln.b_ip)
    _send(fab.netns("S2"), ln.a_ip)
    wait_for(lambda: _arrived(fab, "S2") == 5 and _arrived(fab, "A") == 5, timeout=30, what="healthy datagrams")
    # what S2 sends down to A dies, whichever name comes first in the check of the cable
    rec = faults.inject("one-way-loss", tmp_path, a="S2", b="A", loss=1.0)
    assert rec["target"] == "A-S2" and rec["direction"] == "S2->A" and rec["loss"] == 1.0
    table = f"fs_{rec['id']}"
    assert 'oifname "A"' in ns_exec(fab.netns("S2"), ["nft", "list", "table", "inet", table])
    assert table not in ns_exec(fab.netns("A"), ["nft", "list", "ruleset"])  # nothing on the other end
    assert _send(fab.netns("A"), ln.b_ip) == 0  # up the cable: arrives
    assert _send(fab.netns("S2"), ln.a_ip) == 5  # down the cable: dropped at S2
    wait_for(lambda: _arrived(fab, "S2") == 10, timeout=30, what="datagrams up the cable")
    assert _counted(fab.netns("S2"), table) >= 5  # ours, and any IPv6 neighbour traffic S2 sent down it
    assert _arrived(fab, "A") == 5
    assert faults.clear(rec["id"], tmp_path) == [rec["id"]]
    assert table not in ns_exec(fab.netns("S2"), ["nft", "list", "ruleset"])
    _send(fab.netns("S2"), ln.a_ip)
    wait_for(lambda: _arrived(fab, "A") == 10, timeout=30, what="datagrams down the cable after the clear")


def _admin_up(fab: lab.Fabric, tor: str, dev: str) -> bool:
    flags = ns_exec(fab.netns(tor), ["ip", "-o", "link", "show", "dev", dev]).split("<", 1)[1].split(">", 1)[0]
    return "UP" in flags.split(",")


def test_flapping_link_goes_down_and_up_until_cleared_then_stays_up(fab: lab.Fabric, tmp_path: Path) -> None:
    ln = fab.link("A", "S1")
    _count_arrivals(fab, "S1")
    rec = faults.inject("flapping-link", tmp_path, a="S1", b="A", period_s=1.0, down_s=0.5)
    assert rec["target"] == "A-S1" and (rec["period_s"], rec["down_s"]) == (1.0, 0.5)
    entry = read_state(tmp_path)["processes"][rec["process"]]
    for state in (False, True, False, True):  # it flaps: seen down, up, down, up again
        wait_for(lambda s=state: _admin_up(fab, "A", ln.a_if) is s, timeout=30, every=0.05,
                 what=f"A's {ln.a_if} {'up' if state else 'down'}")
    assert faults.clear(rec["id"], tmp_path) == [rec["id"]]
    assert _admin_up(fab, "A", ln.a_if)  # left up, its process gone
    assert rec["process"] not in read_state(tmp_path).get("processes", {})
    assert not Path(f"/proc/{entry['pid']}").exists() or "flap" not in Path(f"/proc/{entry['pid']}/cmdline").read_text()
    _send(fab.netns("A"), ln.b_ip)
    wait_for(lambda: _arrived(fab, "S1") == 5, timeout=30, what="datagrams over the cable after the clear")
    with pytest.raises(faults.LabError, match="down_s 2.0 must be in"):
        faults.inject("flapping-link", tmp_path, a="A", b="S1", period_s=2.0, down_s=2.0)
