"""`bench agent` measures an agent's whole process tree from /proc: its descendants, user and system CPU
apart, PSS summed over the tree."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import agent as ba

# a parent that starts two children, says so once both are up, and waits for its stdin to close
_CHILD = "import sys; print('up', flush=True); sys.stdin.read()"
_TREE = f"""
import subprocess, sys
kids = [subprocess.Popen([sys.executable, "-c", {_CHILD!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True) for _ in range(2)]
for k in kids:
    k.stdout.readline()
print("ready", flush=True)
sys.stdin.read()
"""


def test_the_tree_holds_the_children_and_its_pss_sums_over_them():
    p = subprocess.Popen([sys.executable, "-c", _TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        tree = ba.process_tree(p.pid)
        assert tree[0] == p.pid and len(tree) == 3
        pss = [ba.pss_mib(q) for q in tree]
        assert all(x > 1.0 for x in pss)  # a Python interpreter maps more than 1 MiB of its own
        s = ba.measure({"tree": p.pid}, warmup_s=0.0, seconds=0.2)["tree"]
        assert s.processes == 3 and s.pss_mib == pytest.approx(sum(pss), rel=0.2)
        assert s.cpu_pct == pytest.approx(s.user_pct + s.sys_pct)
        u, st = ba._ticks(p.pid)
        assert u >= 0 and st >= 0
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    with pytest.raises(FileNotFoundError):
        ba.process_tree(p.pid)


def test_the_one_process_host_bench_pairs_two_hosts_that_probe_and_answer_each_other(tmp_path):
    cfgs = ba._loopback_configs(tmp_path, "127.0.0.1:9092", "p.", 150.0, 4791)
    la, lb = (json.loads(cfgs[h].read_text()) for h in ("LA", "LB"))
    assert la["role"] == lb["role"] == "both"
    assert la["allowed_sources"] == [r["ip"] for r in lb["rnics"]] and len(la["rnics"]) == ba.RNICS == 8
    entries = json.loads((tmp_path / "LA.pinglist.json").read_text())["entries"]
    assert len(entries) == 64 and {e["dst_ip"] for e in entries} == {r["ip"] for r in lb["rnics"]}
    per_rnic = {}
    for e in entries:
        per_rnic[e["prober_rnic"]] = per_rnic.get(e["prober_rnic"], 0) + e["rate_pps"]
    assert per_rnic == {f"LA{i}": 150.0 for i in range(1, 9)}  # 8 RNICs x 150 probes/s
    assert {e["qpn"] for e in entries} == set(lb["qpns"].values())  # addressed to LB's live QPNs
    assert len({e["src_port"] for e in entries}) == 64  # one 5-tuple an entry
    with pytest.raises(ValueError, match="--rnics 65 is not in 1..64"):
        ba._loopback_configs(tmp_path, "127.0.0.1:9092", "p.", 150.0, 4791, rnics=65)
    with pytest.raises(ValueError, match="nope is not one of udp, host, sim"):
        ba.run("127.0.0.1:9092", which=("nope",))
