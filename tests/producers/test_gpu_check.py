"""``scripts/gpu-check`` where it can run here: no GPU, no NVML library, over this VM and a DGX A100 tree.

On a GPU host it samples NVML for 30 s; here NVML is absent (a clean record, not an error) and the
NVML part is driven by the stand-in ``pynvml`` of tests/nvml_double.py over the captured DGX
A100 tree, whose GPU addresses it uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nvml_double import fake_pynvml

from producers.hostping import gpu_check
from producers.hostping.pcie_link import link_gbps

from conftest import REPO

DGX = REPO / "tests" / "fixtures" / "hostping" / "sysfs_dgx_a100"
HEAVY = {"pyarrow", "nanoarrow", "confluent_kafka", "numpy", "faust", "pydantic", "typer"}


def test_script_on_this_host_records_nvml_absent_and_imports_only_the_standard_library(tmp_path):
    out = tmp_path / "gpu-check.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHON": sys.executable}
    r = subprocess.run([str(REPO / "scripts" / "gpu-check"), "--duration", "1", "--interval", "0.4", "--out",
                        str(out)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    assert [f["bdf"] for f in rep["discovery"]["pci_functions"]] == sorted(os.listdir("/sys/bus/pci/devices"))
    assert rep["would_publish"]["hosts.inventory"] == len(os.listdir("/sys/bus/pci/devices"))
    if not Path("/dev/nvidiactl").exists():
        assert rep["nvml"]["available"] is False and "NVML is not usable here" in rep["nvml"]["error"]
        assert rep["nvml"]["samples"] == []
    assert any(m["metric"] == "bus_counters" for m in rep["would_publish"]["hostmetrics.raw"])
    assert 1.0 <= rep["duration_s"] < 30
    # what the script loads: the readers and the standard library, nothing of the pipeline
    code = ("import sys, json; from producers.hostping import gpu_check; "
            f"gpu_check.main(['--duration', '0.2', '--interval', '0.1', '--out', {str(tmp_path / 'x.json')!r}]); "
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r}))))")
    r = subprocess.run([sys.executable, "-c", code], env=env | {"PYTHONPATH": str(REPO)}, capture_output=True,
                       text=True, timeout=60, check=True)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


def test_nvml_samples_links_and_unsupported_calls_over_a_dgx_a100_tree(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(events=None))
    rep = gpu_check.run(0.5, 0.1, DGX, DGX / "no-proc")
    n = rep["nvml"]
    assert n["available"] is True and n["error"] == ""
    assert {s["bdf"] for s in n["samples"]} == {"0000:07:00.0", "0000:0f:00.0"}
    assert len(n["samples"]) >= 2 and len(n["samples"]) % 2 == 0  # both GPUs in every cycle
    assert n["unsupported_calls"]["0000:07:00.0"] == {"gpu_util_pct": "_NotSupported: Not Supported"}
    assert "Not Supported" in n["xid_error"]
    assert rep["links"]["0000:81:00.0"] == {"speed_gtps": 8.0, "width": 16, "max_speed_gtps": 16.0, "max_width": 16}
    rows = {(r["device"], r["metric"]): r for r in rep["would_publish"]["hostmetrics.raw"]}
    util = rows[("sw:0000:01:00.0->gpu0", "bus_util")]
    assert util["value"] == pytest.approx(80.0 / link_gbps(16.0, 16), abs=1e-6)
    assert util["source"] == "nvml:nvmlDeviceGetPcieThroughput / link Gb/s"
    assert rows[("0000:07:00.0", "pcie_link_gen")]["source"] == "nvml:nvmlDeviceGetCurrPcieLinkGeneration"


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert gpu_check.main(["--duration", "0", "--out", str(tmp_path / "x.json")]) == 2
    assert "must be > 0" in capsys.readouterr().err
    assert gpu_check.main(["--path.sysfs", str(tmp_path / "nope"), "--out", str(tmp_path / "x.json")]) == 2
