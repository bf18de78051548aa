"""Cluster inventory (schemas/inventory.py), LLDP import and R-Pingmesh Eq. 1 (schemas/eq1.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from producers.sim.fabrics import panel1, random_clos
from schemas import lldp
from schemas.eq1 import p_miss, tuples_needed
from schemas.inventory import InventoryError
from schemas.inventory_yaml import load
from schemas.lldp import apply_lldp, parse_lldpctl_json

from conftest import REPO

FIXTURES = REPO / "tests" / "schemas" / "fixtures"


def test_panel1_shape_and_lookups():
    inv = panel1()
    assert sorted(inv.tors) == ["A", "B", "C"]
    assert sorted(inv.switches) == ["S1", "S2", "S3", "S4"]
    assert sorted(inv.hosts) == [f"H{i}" for i in range(1, 7)]
    assert len(inv.rnics) == 12
    assert inv.rnics_under_tor("A") == ["A1", "A2", "A3", "A4"]
    assert inv.rnics_of_host("H1") == ["A1", "A2"]
    assert inv.rnics_of_host("H3") == ["B1", "B2"]
    assert inv.host_of("A3") == "H2"
    assert inv.tor_of("C4") == "C"
    assert inv.hosts_under_tor("B") == ["H3", "H4"]
    assert inv.uplinks("A") == ["S1", "S2", "S3", "S4"]
    assert len(inv.links) == 12
    assert inv.neighbors()["S3"] == ["A", "B", "C"]
    assert inv.neighbors()["A3"] == ["A"]
    assert inv.rnic_by_ip(inv.rnics["B2"].ip) == "B2"
    assert inv.rnics["A1"].gid == "::ffff:" + inv.rnics["A1"].ip


def test_yaml_round_trip(tmp_path):
    inv = panel1()
    p = tmp_path / "cluster.yaml"
    inv.dump(p)
    back = load(p)
    assert back.rnics == inv.rnics
    assert back.links == inv.links
    assert back.hosts == inv.hosts
    assert back.source == str(p)


def _write(tmp_path, data) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_unknown_tor_names_file_field_and_fix(tmp_path):
    data = panel1().to_dict()
    data["hosts"][0]["rnics"][1]["tor"] = "Z"
    p = _write(tmp_path, data)
    with pytest.raises(InventoryError) as e:
        load(p)
    msg = str(e.value)
    assert str(p) in msg
    assert "hosts[H1].rnics[A2].tor" in msg
    assert "unknown ToR 'Z'" in msg and "add it under tors" in msg


def test_duplicate_rnic_is_rejected(tmp_path):
    data = panel1().to_dict()
    data["hosts"][1]["rnics"][0]["id"] = "A1"  # H2's first RNIC renamed to H1's
    with pytest.raises(InventoryError) as e:
        load(_write(tmp_path, data))
    assert "duplicate RNIC 'A1' (also on host H1)" in str(e.value)


def test_link_to_nowhere_and_duplicate_ip(tmp_path):
    data = panel1().to_dict()
    data["links"].append({"a": "A", "b": "S9"})
    data["hosts"][2]["rnics"][0]["ip"] = data["hosts"][0]["rnics"][0]["ip"]
    with pytest.raises(InventoryError) as e:
        load(_write(tmp_path, data))
    assert len(e.value.problems) == 2
    assert any("links[12].b: 'S9' is a link to nowhere" in p for p in e.value.problems)
    assert any("is also RNIC A1's" in p for p in e.value.problems)


def test_missing_field_and_bad_yaml(tmp_path):
    data = panel1().to_dict()
    del data["hosts"][0]["rnics"][0]["netdev"]
    with pytest.raises(InventoryError, match=r"hosts\[H1\]\.rnics\[0\]: missing required field 'netdev'"):
        load(_write(tmp_path, data))
    p = tmp_path / "broken.yaml"
    p.write_text("hosts: [\n")
    with pytest.raises(InventoryError, match="not valid YAML"):
        load(p)


def test_random_clos_two_tier_is_seeded():
    a = random_clos(7, n_tors=4, n_spines=8, hosts_per_tor=2, rnics_per_host=8)
    b = random_clos(7, n_tors=4, n_spines=8, hosts_per_tor=2, rnics_per_host=8)
    c = random_clos(8, n_tors=4, n_spines=8, hosts_per_tor=2, rnics_per_host=8)
    assert len(a.rnics) == 64 and len(a.hosts) == 8 and len(a.links) == 32
    assert a.rnics == b.rnics
    assert [r.tor_port for r in a.rnics.values()] != [r.tor_port for r in c.rnics.values()]
    assert a.uplinks("A") == [f"S{i}" for i in range(1, 9)]
    assert len(a.rnics_under_tor("D")) == 16
    # every port under a ToR is used once
    assert len({a.rnics[r].tor_port for r in a.rnics_under_tor("A")}) == 16


def test_random_clos_three_tier_and_large_names():
    inv = random_clos(1, n_tors=8, n_spines=4, hosts_per_tor=1, rnics_per_host=2, n_pods=2, n_cores=8)
    assert sorted(inv.tors)[:2] == ["T1", "T2"]
    assert inv.rnics_under_tor("T1") == ["T1r1", "T1r2"]
    assert {inv.tors[t].pod for t in inv.tors} == {0, 1}
    assert inv.uplinks("T1") == ["P0S1", "P0S2", "P0S3", "P0S4"]
    assert inv.uplinks("P0S1") == ["X1", "X2"]
    assert inv.uplinks("P1S4") == ["X7", "X8"]
    with pytest.raises(ValueError, match="multiple of n_spines"):
        random_clos(1, 4, 4, 1, 1, n_pods=2, n_cores=6)


def test_lldp_fixture_parses():
    nbs = parse_lldpctl_json((FIXTURES / "lldp" / "H2_lldpctl.json").read_text())
    assert [(n.local_ifname, n.chassis, n.port_id) for n in nbs] == [
        ("eth0", "A", "Ethernet7"),
        ("eth1", "A", "Ethernet28"),  # port id is a MAC: the description names the port
        ("mgmt0", "oob-sw-07", "Ethernet14"),
    ]


def test_lldp_single_interface_is_a_mapping():
    text = (
        '{"lldp": {"interface": {"eth0": {"chassis": {"B": {}}, '
        '"port": {"id": {"type": "ifname", "value": "Ethernet3"}}}}}}'
    )
    assert parse_lldpctl_json(text) == [lldp.LldpNeighbor("eth0", "B", "Ethernet3", "")]
    with pytest.raises(ValueError, match="lldpctl -f json"):
        parse_lldpctl_json("not json")


def test_apply_lldp_fills_ports_and_catches_miscabling():
    inv = panel1()
    nbs = parse_lldpctl_json((FIXTURES / "lldp" / "H2_lldpctl.json").read_text())
    out = apply_lldp(inv, "H2", nbs)
    assert out.rnics["A3"].tor_port == "Ethernet7"
    assert out.rnics["A4"].tor_port == "Ethernet28"
    assert out.port_of("A3") == "A:Ethernet7"
    assert out.rnics["A1"] == inv.rnics["A1"]
    wrong = [lldp.LldpNeighbor("eth0", "B", "Ethernet9")]
    with pytest.raises(InventoryError, match="inventory says ToR 'A' but LLDP on eth0 sees 'B'"):
        apply_lldp(inv, "H2", wrong)


@pytest.mark.parametrize(("n", "k"), [(8, 51), (32, 255), (1, 1)])
def test_eq1_paper_values(n, k):
    assert tuples_needed(n, 0.99) == k


def test_eq1_is_the_smallest_k():
    assert p_miss(8, 51) <= 0.01 < p_miss(8, 50)
    assert p_miss(32, 255) <= 0.01 < p_miss(32, 254)
    assert p_miss(4, 3) == 1.0
    # two paths: miss iff all k tuples land on one path: 2 * 0.5^k
    assert p_miss(2, 5) == pytest.approx(2 * 0.5**5)


def test_tor_lldp_fills_rnic_ports_and_uplink_ports():
    inv = panel1()
    nbs = parse_lldpctl_json((FIXTURES / "lldp" / "torA_lldpctl.json").read_text())
    out = lldp.apply_switch_lldp(inv, "A", nbs)
    assert out.port_of("A1") == "A:Ethernet0"
    assert out.port_of("A2") == "A:Ethernet4"
    (ln,) = [x for x in out.links if (x.a, x.b) == ("A", "S3")]
    assert (ln.a_port, ln.b_port) == ("Ethernet256", "Ethernet8")
    assert out.rnics["A3"] == inv.rnics["A3"]
    assert out.port_of("A4") == "A:?"  # its old port Ethernet4 is A2's now: stale, so unknown
    with pytest.raises(InventoryError, match="inventory says ToR 'A' but B sees it on Ethernet0"):
        lldp.apply_switch_lldp(inv, "B", nbs[:1])
    with pytest.raises(InventoryError, match="has no such link"):
        lldp.apply_switch_lldp(inv, "A", [lldp.LldpNeighbor("Ethernet9", "B", "Ethernet9")])


def test_cli_inventory_check_names_the_problem(tmp_path):
    import typer
    from typer.testing import CliRunner

    from fabricscope import cmd_inventory

    app = typer.Typer()
    app.add_typer(cmd_inventory.inventory_app)
    p = tmp_path / "c.yaml"
    panel1().dump(p)
    r = CliRunner().invoke(app, ["inventory", "check", str(p)])
    assert r.exit_code == 0 and "12 RNICs" in r.output
    p.write_text(p.read_text().replace("tor: C", "tor: D"))
    r = CliRunner().invoke(app, ["inventory", "check", str(p)])
    assert r.exit_code == 1 and "unknown ToR 'D'" in r.output
