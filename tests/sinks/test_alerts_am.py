"""Chatops through a real Prometheus Alertmanager (Debian's prometheus-alertmanager) and a
local HTTP receiver that records every notification; verdicts travel through the real
Kafka broker to the alert sink process (``fabricscope alerts``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pyarrow as pa
import pytest

from infra.alertmanager.render import render, write
from schemas.arrow_pa import arrow_schema
from schemas.codec import encode, headers_for
from schemas.verdicts import WINDOW_NS
from sinks.alerts import Hysteresis

from conftest import REPO, free_port, stays, wait_for

SECRET = "T0KEN-s3cr3t-9f8e7d"


def _verdict(i: int, window: int, kind: str, location: str, impact: str, job: str | None, base: int) -> dict:
    start = base + window * WINDOW_NS
    return {"verdict_id": f"v{window}-{i}", "window_start_ns": start, "window_end_ns": start + WINDOW_NS,
            "kind": kind, "location": location, "votes": 3.0, "confidence": 0.9, "failed_probes": 17,
            "total_probes": 200, "impact": impact, "job_id": job, "revision_of": None, "evidence": "{}",
            "emitted_ns": start + WINDOW_NS}


# ---- hysteresis alone (no services) ---------------------------------------------------------

def test_flapping_problem_fires_once_and_resolves_after_n_clear_windows():
    h = Hysteresis("c1", clear_windows=3)
    events = []
    for w in range(12):
        rows = [_verdict(0, w, "switch", "T01->S2", "P0", "j1", 0)] if w in (0, 1, 3, 5) else []
        rows.append(_verdict(1, w, "rnic", "R0009", "P2", None, 0))  # keeps time moving
        events += [(w, e.status, e.problem.labels["location"]) for e in h.observe(rows) + h.advance()]
    assert events == [(0, "firing", "T01->S2"), (0, "firing", "R0009"), (8, "resolved", "T01->S2")]
    assert h.active[("production", "rnic", "R0009", "", "P2")].labels == {
        "alertname": "FabricProblem", "cluster": "c1", "origin": "production", "kind": "rnic", "location": "R0009",
        "impact": "P2", "job": ""}


def test_undetermined_verdicts_raise_no_alert():
    h = Hysteresis("c1")
    assert h.observe([_verdict(0, 0, "undetermined", "?", "P2", None, 0)]) == []


def test_alert_origins_default_to_the_pipelines_own(monkeypatch):
    from fabricscope.settings import ORIGINS, ConfigError, read_settings
    from sinks import origin

    assert ORIGINS == origin.ORIGINS  # settings keeps its own copy (sinks.origin loads pyarrow)
    for var in ("FABRICSCOPE_ORIGIN", "FABRICSCOPE_ALERT_ORIGINS"):
        monkeypatch.delenv(var, raising=False)
    assert read_settings().alert_origins() == ("production",)
    monkeypatch.setenv("FABRICSCOPE_ORIGIN", "lab")  # what `up --source lab --alerts` sets
    assert read_settings().alert_origins() == ("lab",)
    monkeypatch.setenv("FABRICSCOPE_ALERT_ORIGINS", " lab, sim ")
    assert read_settings().alert_origins() == ("lab", "sim")
    monkeypatch.setenv("FABRICSCOPE_ALERT_ORIGINS", "all")
    assert read_settings().alert_origins() == ("production", "lab", "sim", "demo")
    monkeypatch.setenv("FABRICSCOPE_ALERT_ORIGINS", "production,labs")
    with pytest.raises(ConfigError, match=r"(?s)FABRICSCOPE_ALERT_ORIGINS.*production, lab, sim, demo"):
        read_settings()


def test_the_same_problem_of_two_origins_is_two_alerts():
    h = Hysteresis("c1")
    v = _verdict(0, 0, "busy_host", "H2", "P1", "j1", 0)
    fired = h.observe([v], "lab") + h.observe([v], "sim") + h.observe([v], "lab")
    assert [e.problem.labels["origin"] for e in fired] == ["lab", "sim"]


# ---- through Alertmanager -------------------------------------------------------------------

class Recorder:
    """A local webhook receiver: records (path, payload) of every POST."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict]] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                rec.got.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def notifications(self, path_part: str, location: str | None = None) -> list[dict]:
        out = []
        for path, payload in list(self.got):
            if path_part in path and (location is None or any(a["labels"]["location"] == location
                                                               for a in payload["alerts"])):
                out.append(payload)
        return out


@pytest.fixture
def alertmanager(tmp_path):
    if not (shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")):
        pytest.skip("prometheus-alertmanager is not installed (scripts/setup installs it as root)")
    rec = Recorder()
    env = {"FABRICSCOPE_CHAT_WEBHOOK_URL": f"{rec.base}/chat/{SECRET}",
           "FABRICSCOPE_DIGEST_WEBHOOK_URL": f"{rec.base}/digest/{SECRET}"}
    cfg = tmp_path / "am.yml"
    write(render(env, timings={"group_wait": "1s", "group_interval": "2s", "repeat_interval": "4s"}), cfg)
    port = free_port()
    am_env = {"PATH": "/usr/bin:/bin", "FABRICSCOPE_VAR": str(tmp_path / "var"), "ALERTMANAGER_PORT": str(port),
              "ALERTMANAGER_CONFIG": str(cfg)}
    script = str(REPO / "infra" / "alertmanager" / "alertmanager.sh")
    subprocess.run(["bash", script, "start"], env=am_env, check=True, timeout=60)
    yield rec, f"http://127.0.0.1:{port}", tmp_path / "var" / "alertmanager" / "alertmanager.log"
    subprocess.run(["bash", script, "stop"], env=am_env, timeout=30)
    rec.server.shutdown()


def _publish(bootstrap: str, topic: str, rows: list[dict], origin: str | None = None) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    extra = [("origin", origin.encode())] if origin else []  # as a demo stamps the verdicts it copies
    p.produce(topic, encode(pa.Table.from_pylist(rows, schema=arrow_schema("verdict.v1"))), key=b"x",
              headers=[*headers_for("verdict.v1"), *extra])
    assert p.flush(10) == 0


@pytest.mark.kafka
@pytest.mark.slow
def test_flapping_p2_digest_silence_and_secret_urls(alertmanager, pipeline_env, kafka_bootstrap, tmp_path):
    rec, am_url, am_log = alertmanager
    env, procs = pipeline_env
    topic = f"{env['FABRICSCOPE_TOPIC_PREFIX']}verdicts"
    sink = procs.start("alerts", "--alertmanager-url", am_url, "--cluster", "c1", "--clear-windows", "3",
                       "--resend", "2", "--no-idle-advance")
    base = (time.time_ns() // WINDOW_NS - 20) * WINDOW_NS
    flap = "T01->S2"

    # Phase 1: a P0 switch problem flaps (windows 0, 1, 3, 5); a P2 RNIC problem stays.
    rows = []
    for w in range(6):
        if w in (0, 1, 3, 5):
            rows.append(_verdict(0, w, "switch", flap, "P0", "j1", base))
        rows.append(_verdict(1, w, "rnic", "R0009", "P2", None, base))
    for w in range(6):  # one message per window, as the analyzer emits them
        _publish(kafka_bootstrap, topic, [r for r in rows if r["window_start_ns"] == base + w * WINDOW_NS])
    wait_for(lambda: rec.notifications("/chat/", flap), timeout=60, what="the first chat notification")
    t_first = time.monotonic()
    # the flapping problem stays one alert: what follows are Alertmanager's 4 s repeats of it
    wait_for(lambda: len(rec.notifications("/chat/", flap)) >= 2, timeout=60, what="a repeat of the chat notification")

    # Phase 2: the switch problem is clear for windows 6..9; it resolves after 3 clear windows.
    for w in range(6, 10):
        _publish(kafka_bootstrap, topic, [_verdict(1, w, "rnic", "R0009", "P2", None, base)])
    wait_for(lambda: [n for n in rec.notifications("/chat/", flap) if n["status"] == "resolved"], timeout=60,
             what="the resolve notification")
    elapsed = time.monotonic() - t_first
    n_chat = len(rec.notifications("/chat/", flap))
    # nothing may follow the resolve (a repeat would come 4 s later)
    stays(lambda: len(rec.notifications("/chat/", flap)) == n_chat, 6, what="no notification after the resolve")

    chat = rec.notifications("/chat/", flap)
    statuses = [n["status"] for n in chat]
    print(f"\nchat notifications for {flap}: {statuses} over {elapsed:.1f} s")
    assert statuses[-1] == "resolved" and statuses.count("resolved") == 1, statuses
    firing = statuses[:-1]
    assert set(firing) == {"firing"}
    assert 2 <= len(firing) <= elapsed / 4 + 2, (len(firing), elapsed)  # first + repeats, not a flood
    starts = {a["startsAt"] for n in chat for a in n["alerts"]}
    assert len(starts) == 1  # one alert all along: it never resolved and re-fired while flapping
    labels = chat[0]["alerts"][0]["labels"]
    assert {k: labels[k] for k in ("kind", "location", "impact", "job", "cluster")} == {
        "kind": "switch", "location": flap, "impact": "P0", "job": "j1", "cluster": "c1"}

    # P2 reaches the digest only.
    assert rec.notifications("/digest/", "R0009")
    assert not rec.notifications("/chat/", "R0009")
    assert all(a["labels"]["impact"] == "P2" for n in rec.notifications("/digest/") for a in n["alerts"])

    # Phase 3: a maintenance silence on R0010 suppresses its P0 alert.
    now = datetime.now(UTC)
    r = httpx.post(f"{am_url}/api/v2/silences", json={
        "matchers": [{"name": "location", "value": "R0010", "isRegex": False, "isEqual": True}],
        "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "test", "comment": "maintenance window"})
    assert r.status_code == 200, r.text
    _publish(kafka_bootstrap, topic, [_verdict(2, 10, "rnic", "R0010", "P0", "j2", base)])

    def suppressed() -> bool:
        alerts = httpx.get(f"{am_url}/api/v2/alerts").json()
        return any(a["labels"]["location"] == "R0010" and a["status"]["state"] == "suppressed" for a in alerts)

    wait_for(suppressed, timeout=60, what="the silenced alert in Alertmanager")
    # past group_wait (1 s) and a group_interval (2 s): a silenced alert still notified would show here
    stays(lambda: not rec.notifications("/chat/", "R0010"), 4, what="no chat notification of the silenced alert")

    # The webhook URLs (their secret path) appear in no log line.
    sink.terminate()
    sink.wait(timeout=20)
    logs = [am_log, *tmp_path.glob("*.log")]
    assert any(p.stat().st_size for p in logs)
    for p in logs:
        assert SECRET not in p.read_text(errors="replace"), p
    assert "firing alertname=FabricProblem" in "".join(p.read_text() for p in tmp_path.glob("alerts-*.log"))


@pytest.mark.kafka
@pytest.mark.slow
def test_quiet_topic_resolves_by_the_wall_clock(alertmanager, pipeline_env, kafka_bootstrap):
    """Live mode: no more verdicts arrive at all; the idle clock still ends the problem after N windows."""
    rec, am_url, _ = alertmanager
    env, procs = pipeline_env
    procs.start("alerts", "--alertmanager-url", am_url, "--cluster", "c1", "--clear-windows", "3", "--resend", "1")
    one_s = 10**9
    base = time.time_ns() // one_s * one_s
    v = _verdict(0, 0, "rnic", "R0042", "P0", "j9", base)
    v["window_end_ns"] = v["window_start_ns"] + one_s  # 1 s windows keep the test short
    _publish(kafka_bootstrap, f"{env['FABRICSCOPE_TOPIC_PREFIX']}verdicts", [v])
    wait_for(lambda: [n for n in rec.notifications("/chat/", "R0042") if n["status"] == "firing"], timeout=60,
             what="the firing notification")
    # Alertmanager would end the alert by itself only at its endsAt, 120 s after the push (the sink's
    # hold_s), or after resolve_timeout (5 min): a resolve inside 90 s is the sink's idle clock.
    wait_for(lambda: [n for n in rec.notifications("/chat/", "R0042") if n["status"] == "resolved"], timeout=90,
             what="the resolve after 3 idle windows")
    assert [n["status"] for n in rec.notifications("/chat/", "R0042")].count("resolved") == 1


@pytest.mark.kafka
@pytest.mark.slow
def test_a_production_sink_pages_for_production_verdicts_only(alertmanager, pipeline_env, kafka_bootstrap):
    """Lab, simulator and demo verdicts on the production pipeline's topic reach neither the chat nor
    Alertmanager; the production one after them does, labelled with its origin."""
    rec, am_url, _ = alertmanager
    env, procs = pipeline_env
    for var in ("FABRICSCOPE_ORIGIN", "FABRICSCOPE_ALERT_ORIGINS"):  # the defaults: a production sink
        env.pop(var, None)
    procs.start("alerts", "--alertmanager-url", am_url, "--cluster", "c1", "--resend", "1", "--no-idle-advance")
    topic = f"{env['FABRICSCOPE_TOPIC_PREFIX']}verdicts"
    base = (time.time_ns() // WINDOW_NS - 5) * WINDOW_NS
    for i, origin in enumerate(("lab", "sim", "demo")):  # one partition (one key): read before the last
        _publish(kafka_bootstrap, topic, [_verdict(i, 0, "busy_host", f"H-{origin}", "P0", "j1", base)], origin)
    _publish(kafka_bootstrap, topic, [_verdict(9, 0, "busy_host", "H-prod", "P0", "j1", base)])

    wait_for(lambda: rec.notifications("/chat/", "H-prod"), timeout=60, what="the production alert in the chat")
    in_am = httpx.get(f"{am_url}/api/v2/alerts").json()
    assert [(a["labels"]["location"], a["labels"]["origin"]) for a in in_am] == [("H-prod", "production")]
    assert {a["labels"]["location"] for _, n in rec.got for a in n["alerts"]} == {"H-prod"}
