"""The stream runtime's configuration: read once by the CLI and handed in, with clear errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streams.pingmesh.impact import JobThreshold
from streams.runtime.config import ROLES, RuntimeConfig

from conftest import REPO


def test_from_env_reads_the_stream_tunables():
    env = {
        "FABRICSCOPE_JOB_THRESHOLDS": '{"job-a": {"value": 100.0}, "job-b": {"value": 5, "higher_is_worse": true}}',
        "FABRICSCOPE_PARTITION_IDLE_S": "5",
        "FABRICSCOPE_HOSTPING_IMPACT": "P1",
        "FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S": "60",
    }
    c = RuntimeConfig.from_env("k1:9092,k2:9092", "t.", {"security.protocol": "SSL"}, "/var/fs", env)
    assert (c.bootstrap, c.topic_prefix, dict(c.kafka_client), c.var_dir) == (
        "k1:9092,k2:9092", "t.", {"security.protocol": "SSL"}, "/var/fs")
    assert c.job_thresholds == {"job-a": JobThreshold(100.0, False), "job-b": JobThreshold(5.0, True)}
    assert (c.partition_idle_s, c.hostping_impact, c.hostping_bus_lookback_s) == (5.0, "P1", 60.0)


def test_stream_buffer_holds_four_steps_not_fausts_4096_messages():
    c = RuntimeConfig.from_env("k:9092", "", {}, "var", {"FABRICSCOPE_STEP_MESSAGES": "32"})
    assert (c.step_messages, c.stream_buffer_messages) == (32, 128)
    assert RuntimeConfig().stream_buffer_messages == 256


def test_defaults_and_the_password_stays_out_of_repr():
    c = RuntimeConfig.from_env("b:9092", "", {"sasl.password": "s3cret"}, "var", {})
    got = (c.job_thresholds, c.partition_idle_s, c.hostping_impact, c.hostping_bus_lookback_s)
    assert got == ({}, 30.0, "P2", 600.0)
    assert "s3cret" not in repr(c)


@pytest.mark.parametrize(("name", "value", "says"), [
    ("FABRICSCOPE_JOB_THRESHOLDS", "{bad", "FABRICSCOPE_JOB_THRESHOLDS"),
    ("FABRICSCOPE_JOB_THRESHOLDS", '{"job": {"threshold": 1}}', "expected JSON like"),
    ("FABRICSCOPE_PARTITION_IDLE_S", "soon", "FABRICSCOPE_PARTITION_IDLE_S='soon' is not a number"),
    ("FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S", "10m", "FABRICSCOPE_HOSTPING_BUS_LOOKBACK_S='10m'"),
])
def test_bad_values_name_the_variable(name, value, says):
    with pytest.raises(ValueError, match=says):
        RuntimeConfig.from_env("b:9092", "", {}, "var", {name: value})


def test_importing_the_app_builds_nothing(tmp_path):
    """The topology is built by build_app from a config handed in: the import alone makes no Faust app and no
    directory (a fresh interpreter: this one may have imported it already)."""
    code = ("import faust, os, streams.runtime.app as m; "
            "print(sorted(k for k, v in vars(m).items() if isinstance(v, faust.App)), os.listdir('.'))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["[]", "[]"]


def test_build_app_registers_what_the_role_runs(tmp_path):
    from streams.runtime.app import build_app

    got = {}
    for role in ROLES:
        w = build_app(RuntimeConfig(topic_prefix="t.", role=role, var_dir=str(tmp_path / role / "var")))
        got[role] = (w.app.conf.id, sorted(w.app.agents), w.probes_raw.get_topic_name(),
                     (tmp_path / role / "var").is_dir())
    rtt, reducer, hostlink = ("streams.runtime.app.rtt", "streams.runtime.app.reducer",
                              "streams.runtime.hostping_agents.hostlink")
    assert got == {
        "all": ("t.fabricscope", [reducer, rtt, hostlink], "t.probes.raw", True),
        "stream": ("t.fabricscope", [rtt, hostlink], "t.probes.raw", True),
        "reducer": ("t.fabricscope-reducer", [reducer], "t.probes.raw", True),
    }
