"""Configuration errors name the variable; secrets reach the clients and nothing else; no shell strings.

The Kafka checks run against the real broker: a client given SASL settings talks
SASL to it (the plaintext broker refuses the handshake, which proves the settings
reached the client), and the password appears in no log line.
"""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.settings import ConfigError, Settings, read_settings
from streams.runtime.kafka_env import faust_credentials

from conftest import REPO, free_port

SECRET = "S3cret-Pw-7781"
SASL = {"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN",
        "KAFKA_SASL_USERNAME": "fs-agent", "KAFKA_SASL_PASSWORD": SECRET}


def _cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricscope", *args], env={**os.environ, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_a_typo_in_the_security_protocol_names_the_variable_and_the_choices(tmp_path):
    r = _cli(["topics"], {"KAFKA_SECURITY_PROTOCOL": "PLAINTXT", "KAFKA_SASL_PASSWORD": SECRET}, tmp_path)
    assert r.returncode == 2
    assert "KAFKA_SECURITY_PROTOCOL='PLAINTXT'" in r.stderr
    assert "'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'" in r.stderr
    assert "Traceback" not in r.stderr
    assert SECRET not in r.stdout + r.stderr


def test_a_misspelt_key_in_the_env_file_is_an_error_not_a_silent_default(tmp_path):
    (tmp_path / ".env").write_text("# local\nKAFKA_BOOTSTRAPP=10.0.0.9:9092\nUNRELATED_TOOL_SETTING=1\n")
    r = _cli(["topics"], {}, tmp_path)
    assert r.returncode == 2
    assert "KAFKA_BOOTSTRAPP in .env is not a setting; did you mean KAFKA_BOOTSTRAP?" in r.stderr


def test_bad_values_raise_config_error_in_process(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "plain")
    monkeypatch.setenv("CLICKHOUSE_URL", f"http://fs:{SECRET}@127.0.0.1:1/db")
    with pytest.raises(ConfigError) as err:
        read_settings()
    assert str(err.value).splitlines()[1].strip().startswith("KAFKA_SASL_MECHANISM='plain': Input should be 'PLAIN'")
    assert SECRET not in str(err.value)


def test_secrets_stay_out_of_repr_and_dumps_but_reach_the_client_config():
    s = Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512",
                 kafka_sasl_username="fs", kafka_sasl_password=SECRET,
                 clickhouse_url=f"http://fs:{SECRET}@ch:8123/db", kafka_ssl_cafile=Path("/etc/ca.pem"))
    for text in (repr(s), str(s), s.model_dump_json()):
        assert SECRET not in text
    assert s.kafka_client_config() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                       "sasl.username": "fs", "sasl.password": SECRET,
                                       "ssl.ca.location": "/etc/ca.pem"}
    assert s.clickhouse_dsn() == f"http://fs:{SECRET}@ch:8123/db"


def test_faust_gets_the_same_security_settings():
    import faust
    from faust.types.auth import AuthProtocol, SASLMechanism

    assert faust_credentials({}) is None
    c = faust_credentials({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                           "sasl.username": "fs", "sasl.password": SECRET})
    assert isinstance(c, faust.SASLCredentials)
    assert (c.protocol, c.mechanism, c.username, c.password) == (
        AuthProtocol.SASL_PLAINTEXT, SASLMechanism.SCRAM_SHA_256, "fs", SECRET)
    assert SECRET not in repr(c)
    tls = faust_credentials({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "fs",
                             "sasl.password": SECRET})
    assert tls.protocol == AuthProtocol.SASL_SSL and tls.ssl_context is not None
    assert faust_credentials({"security.protocol": "SSL"}).protocol == AuthProtocol.SSL
    with pytest.raises(ValueError, match="KAFKA_SECURITY_PROTOCOL='PLAINTXT'"):
        faust_credentials({"security.protocol": "PLAINTXT"})


def test_clickhouse_credentials_never_appear_in_errors(tmp_path):
    from sinks.clickhouse import ServerStore, StoreError

    with pytest.raises(StoreError) as err:
        ServerStore(f"http://fs:{SECRET}@127.0.0.1:{free_port()}/db")
    assert "CLICKHOUSE_URL" in str(err.value)
    assert SECRET not in str(err.value)
    r = _cli(["sink"], {"CLICKHOUSE_URL": f"http://fs:{SECRET}@127.0.0.1:{free_port()}/db",
                        "FABRICSCOPE_TOPIC_PREFIX": "never."}, tmp_path)
    assert r.returncode != 0
    assert "cannot reach the ClickHouse server at CLICKHOUSE_URL" in r.stdout + r.stderr
    assert SECRET not in r.stdout + r.stderr


@pytest.mark.kafka
def test_kafka_clients_speak_sasl_when_told_and_never_log_the_password(kafka_bootstrap, capfd, caplog, tmp_path):
    """AgentProducer and StoreWriter get the SASL settings; the plaintext broker refuses the handshake."""
    from producers.kafka_producer import AgentProducer
    from sinks.clickhouse import ChdbStore
    from sinks.kafka_sink import StoreWriter

    conf = Settings(**{k.lower(): v for k, v in SASL.items()}).kafka_client_config()
    caplog.set_level(logging.DEBUG)
    p = AgentProducer(kafka_bootstrap, kafka_config=conf)
    p.publish("never.probes.raw", b"x", "probe.v1", key="h0")
    assert p.flush(3) == 1  # not delivered: SASL against a plaintext listener
    assert p.close() == 1
    store = ChdbStore(tmp_path / "ch")
    w = StoreWriter(store, kafka_bootstrap, "never.", kafka_config=conf)
    w.poll_once(timeout=3)
    w.close()
    store.close()
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "SASL" in logged and "handshake failed" in logged
    assert SECRET not in logged


PRODUCT = ("fabricscope", "producers", "diagnose", "streams", "sinks", "schemas")


def test_subprocess_calls_take_argument_lists_never_shell_strings():
    bad = []
    for pkg in PRODUCT:
        for path in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f"{getattr(f.value, 'id', '')}.{f.attr}" if isinstance(f, ast.Attribute) else ""
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                if name in ("os.system", "os.popen"):
                    bad.append(f"{where} {name}")
                if name.startswith("subprocess.") or name.startswith("asyncio.create_subprocess_shell"):
                    if any(k.arg == "shell" and getattr(k.value, "value", False) for k in node.keywords):
                        bad.append(f"{where} shell=True")
                    if node.args and isinstance(node.args[0], ast.Constant | ast.JoinedStr | ast.BinOp):
                        bad.append(f"{where} command is a string")
    assert bad == []


@pytest.mark.kafka
def test_the_whole_pipeline_runs_on_a_sasl_broker_and_never_logs_the_password(kafka_bootstrap, tmp_path):
    """A private SASL_PLAINTEXT/PLAIN broker: agent producer, topics, Faust worker and sink all authenticate
    from the same variables; a wrong password delivers nothing; no log line holds the password."""
    from reliability import PrivateBroker, store_counts

    from fabricscope.kafka_admin import create_topics
    from producers.kafka_producer import AgentProducer
    from schemas.arrow_nano import encode_columns

    from conftest import Processes, wait_for
    from probe_rows import columns, known_rows

    broker = PrivateBroker(tmp_path / "kvar",
                           {"KAFKA_SASL_PLAIN_USER": "fs-agent", "KAFKA_SASL_PLAIN_PASSWORD": SECRET})
    broker.start()
    procs = Processes({**os.environ, **SASL, "KAFKA_BOOTSTRAP": broker.bootstrap, "FABRICSCOPE_TOPIC_PREFIX": "s.",
                       "FABRICSCOPE_VAR": str(tmp_path / "var")}, tmp_path)
    try:
        props = broker.var / "kafka" / "server.properties"
        assert oct(props.stat().st_mode & 0o777) == "0o600"
        # PrivateBroker made var/kafka with the default umask; kafka.sh start tightened it, made data/ 0700.
        for d in (broker.var / "kafka", broker.var / "kafka" / "data"):
            assert oct(d.stat().st_mode & 0o777) == "0o700", d
        conf = Settings(**{k.lower(): v for k, v in SASL.items()}).kafka_client_config()
        assert not broker.answers()  # plaintext clients are refused
        create_topics(broker.bootstrap, "s.", conf)
        wrong = AgentProducer(broker.bootstrap, kafka_config={**conf, "sasl.password": "wrong"})
        wrong.publish("s.probes.raw", b"x", "probe.v1")
        assert wrong.flush(3) == 1
        assert wrong.close() == 1
        p = AgentProducer(broker.bootstrap, kafka_config=conf)
        p.publish("s.probes.raw", encode_columns("probe.v1", columns(known_rows()[0])), "probe.v1", key="H1")
        assert p.flush(30) == 0
        procs.start("sink")
        procs.start("worker")
        wait_for(lambda: store_counts(tmp_path / "var" / "clickhouse") == (3, 3), timeout=90,
                 what="3 rows through the SASL broker")
    finally:
        procs.stop_all()
        broker.cleanup()
    logs = "".join(f.read_text() for f in tmp_path.glob("*.log"))
    assert "Sending username and password in the clear" in logs  # aiokafka's SASL PLAIN warning: Faust used it
    assert SECRET not in logs


def test_a_misspelt_setting_in_the_environment_is_named_not_ignored():
    from fabricscope.settings import environment_typos

    env = {"FABRICSCOPE_VRA": "/tmp/x", "FABRICSCOPE_RAW_RETENTION": "full", "KAFKA_BOOTSTRAPP": "h:1", "HOME": "/"}
    assert environment_typos(env) == [
        "FABRICSCOPE_VRA in the environment is not a setting; did you mean FABRICSCOPE_VAR?",
        "KAFKA_BOOTSTRAPP in the environment is not a setting; did you mean KAFKA_BOOTSTRAP?"]
    # the real name set beside it: the look-alike is another tool's, not a typo
    assert environment_typos({"FABRICSCOPE_VRA": "x", "FABRICSCOPE_VAR": "y"}) == []
