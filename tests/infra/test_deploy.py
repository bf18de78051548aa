"""Deploy files checked as far as this machine can: systemd units (systemd-analyze verify against the
checkout's venv), Kubernetes manifests (kubernetes-validate, schemas bundled), the pipeline's alerting
rules (promtool test rules), and an agent-only install that imports none of the pipeline's packages."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from infra.systemd.render import UNITS, render

from conftest import REPO

PIPELINE_ONLY = ("pyarrow", "faust", "chdb", "matplotlib", "aiokafka", "clickhouse_connect", "numpy")


def _venv() -> Path:
    checkout = REPO / ".venv"
    return checkout if (checkout / "bin" / "python").exists() else Path(sys.prefix)


def _unit(path: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # keep key case
    cp.read_string(path.read_text())
    return cp


@pytest.fixture(scope="module")
def units(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("units")
    files = {f.name: f for f in render(_venv(), out)}
    (out / "fabricscope-agent@both.service").symlink_to(files["fabricscope-agent@.service"])
    return files


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent (Debian: systemd)")
def test_units_verify_clean_against_the_checkouts_venv(units):
    out = next(iter(units.values())).parent
    names = [n for n in UNITS if "@." not in n] + ["fabricscope-agent@both.service"]
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", *[str(out / n) for n in names]],
                       capture_output=True, text=True, timeout=120)
    # rc 0 alone is not enough: unknown keys are only warnings
    assert r.returncode == 0 and r.stdout.strip() == r.stderr.strip() == "", r.stdout + r.stderr


def test_units_restart_always_and_hold_only_the_privilege_table(units):
    wanted = {"fabricscope-worker.service": "", "fabricscope-reducer.service": "", "fabricscope-sink.service": "",
              "fabricscope-alerts.service": "",
              "fabricscope-agent@.service": "CAP_NET_ADMIN", "fabricscope-hostping.service": "CAP_SYSLOG"}
    assert set(wanted) == set(UNITS)
    for name, caps in wanted.items():
        svc = _unit(units[name])["Service"]
        assert svc["Restart"] == "always", name
        assert svc["DynamicUser"] == "yes" and "User" not in svc, name  # never root
        assert svc["CapabilityBoundingSet"] == caps and svc["AmbientCapabilities"] == caps, name
        assert svc["NoNewPrivileges"] == "yes" and svc["ProtectSystem"] == "strict", name
        assert svc["ExecStart"].startswith(str(_venv().absolute())), name
        assert _unit(units[name])["Unit"]["StartLimitBurst"] == "5", name


def _docs() -> list[dict]:
    return [d for f in sorted((REPO / "infra" / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]


def test_manifests_validate_against_bundled_schemas():
    exe = Path(sys.executable).parent / "kubernetes-validate"
    if not exe.exists():
        pytest.skip("kubernetes-validate not installed (the test extra has it)")
    files = sorted(str(f) for f in (REPO / "infra" / "k8s").glob("*.yaml"))
    r = subprocess.run([str(exe), "--strict", "--quiet", *files], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # and it does reject a broken one (the check can fail)
    bad = Path(files[-1]).read_text().replace("replicas: 2", "replicas: two", 1)
    broken = REPO / "var" / "k8s-broken.yaml"
    broken.parent.mkdir(exist_ok=True)
    broken.write_text(bad)
    try:
        r = subprocess.run([str(exe), "--strict", "--quiet", str(broken)], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0
    finally:
        broken.unlink()


def test_manifests_agents_daemonset_capabilities_and_config_from_configmap_and_secret():
    by = {(d["kind"], d["metadata"]["name"]): d for d in _docs()}
    ds = by[("DaemonSet", "fabricscope-agent")]["spec"]["template"]["spec"]
    caps = {c["name"]: c["securityContext"]["capabilities"] for c in ds["containers"]}
    assert caps == {"agent": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
                    "hostping": {"drop": ["ALL"], "add": ["SYSLOG"]}}
    agent = next(c for c in ds["containers"] if c["name"] == "agent")
    assert agent["args"][-2:] == ["--role", "both"]  # prober and responder in one process
    assert ds["hostNetwork"] is True
    for name in ("fabricscope-worker", "fabricscope-reducer", "fabricscope-sink"):
        spec = by[("Deployment", name)]["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            kinds = {next(iter(e)) for e in c["envFrom"]}
            assert kinds == {"configMapRef", "secretRef"}
    secrets = [d for d in _docs() if d["kind"] == "Secret"]
    assert secrets and all(v in ("", d["stringData"].get("KAFKA_SASL_USERNAME")) for d in secrets
                           for v in d["stringData"].values())  # no secret value committed


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool absent (Debian: prometheus)")
def test_pipeline_alerting_rules():
    d = REPO / "infra" / "prometheus"
    r = subprocess.run(["promtool", "test", "rules", "fabricscope-rules.test.yml"], cwd=d, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    rules = yaml.safe_load((d / "fabricscope-rules.yml").read_text())["groups"][0]["rules"]
    assert {x["alert"] for x in rules} == {"FabricscopeAgentSilent", "FabricscopeConsumerLagGrowing",
                                           "FabricscopeDeadLettersSpiking", "FabricscopeReducerStalled",
                                           "FabricscopeReducerBehindWatermark", "FabricscopeLinksUncovered"}
    tested = {t["alertname"] for case in yaml.safe_load((d / "fabricscope-rules.test.yml").read_text())["tests"]
              for t in case["alert_rule_test"] if t.get("exp_alerts")}
    assert tested == {x["alert"] for x in rules}  # every alert fires in a test


def test_agent_only_install_pulls_no_pipeline_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {d.split(">")[0].split("[")[0].lower() for d in project["dependencies"]}
    assert not base & {"chdb-core", "faust-streaming", "pyarrow", "matplotlib", "numpy", "aiokafka"}
    # the agent, the CLI and the Hostping host agent run with the pipeline packages made unimportable
    def run(*argv: str) -> subprocess.CompletedProcess:
        code = (
            "import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {PIPELINE_ONLY!r}: raise ModuleNotFoundError(name=name.split('.')[0])\n"
            "sys.meta_path.insert(0, Block())\n"
            "import producers.udp_agent, producers.kafka_producer\n"
            f"sys.argv = ['fabricscope', *{list(argv)!r}]\n"
            "from fabricscope.cli import main\n"
            "main()\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"})

    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "diagnose" in r.stdout and "hostping" in r.stdout and " up " not in r.stdout  # pipeline groups left out
    r = run("hostping", "agent", "--once", "--no-loopback", "--no-nvml")
    assert r.returncode == 0 and "PCI functions" in r.stdout + r.stderr, r.stdout + r.stderr
    r = run("source", "hostping-sim", "--pattern", "healthy")  # the simulated hosts need numpy: said, no traceback
    assert r.returncode == 1 and "fabricscope[pipeline]" in r.stderr and "Traceback" not in r.stderr, r.stderr
