"""The running store writer's endpoint: token, read-only SQL, typed writes, limits, file modes.

One real ``fabricscope sink`` process (real Kafka broker, real chdb) serves every test
of this module, started with a 4 s query limit; attacks go through ``fabricscope
query`` (as a local user would type them) and straight to the endpoint.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from producers.kafka_producer import AgentProducer
from producers.sim.fabrics import panel1
from producers.synthetic import synthetic_batch
from schemas.arrow_pa import arrow_schema, table_from_columns
from schemas.codec import encode
from sinks.clickhouse import StoreError
from sinks.query_endpoint import Endpoint, endpoint_file, find_endpoint, token_file
from streams.pingmesh.rtt import decompose

from conftest import Processes, wait_for

pytestmark = pytest.mark.kafka
QUERY_LIMIT_S = 4
HOSTNAME = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else "no-hostname-file"


@dataclass
class Writer:
    env: dict[str, str]
    tmp: Path
    store: Path
    proc: subprocess.Popen
    endpoint: Endpoint
    prefix: str
    bootstrap: str

    def log(self) -> str:
        return (self.tmp / "sink-0.log").read_text()

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fabricscope", *args], env=self.env, capture_output=True,
                              text=True, timeout=120, cwd=self.tmp)

    def rows(self, sql: str) -> list[dict]:
        return self.endpoint.query(sql).to_pylist()


@pytest.fixture(scope="module")
def writer(tmp_path_factory, kafka_bootstrap):
    from fabricscope.kafka_admin import create_topics, delete_topics

    prefix = f"t{uuid.uuid4().hex[:8]}."
    create_topics(kafka_bootstrap, prefix)
    tmp = tmp_path_factory.mktemp("writer")
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "FABRICSCOPE_TOPIC_PREFIX": prefix,
           "FABRICSCOPE_VAR": str(tmp / "var"), "FABRICSCOPE_QUERY_MAX_EXECUTION_TIME_S": str(QUERY_LIMIT_S),
           # blocks of probe rows close every 0.5 s (default 10 s), so rows grow step by step while a query runs;
           # however few rows they hold (a slow input's block would otherwise wait on for more, up to 1.5 s)
           "FABRICSCOPE_SINK_BLOCK_S": "0.5", "FABRICSCOPE_SINK_BLOCK_MIN_ROWS": "0"}
    procs = Processes(env, tmp)
    proc = procs.start("sink")
    store = tmp / "var" / "clickhouse"
    try:
        endpoint = wait_for(lambda: find_endpoint(store), timeout=120, what="the store writer's endpoint")
        yield Writer(env, tmp, store, proc, endpoint, prefix, kafka_bootstrap)
    finally:
        procs.stop_all()
        delete_topics(kafka_bootstrap, prefix)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_the_writers_files_are_readable_by_their_owner_only(writer):
    assert _mode(writer.store) == 0o700
    assert _mode(writer.store.parent) == 0o700  # FABRICSCOPE_VAR, created by the writer
    token, url = token_file(writer.store), endpoint_file(writer.store)
    assert (_mode(token), _mode(url)) == (0o600, 0o600)
    secret = token.read_text()
    assert len(secret) >= 43  # 32 random bytes, URL-safe base64
    assert secret not in url.read_text()
    assert url.read_text().startswith("http://127.0.0.1:")


def test_a_request_without_the_right_token_gets_401_and_the_log_holds_no_token(writer):
    counts = "SELECT (SELECT count() FROM verdict_feedback) AS f, (SELECT count() FROM rnic_inventory) AS i"
    before = writer.rows(counts)
    forged = f"forged-{uuid.uuid4().hex}"
    bodies = {"/query": b"DROP TABLE verdict_feedback",
              "/verdict-feedback": b'{"verdict_id": "x", "decision": "reject"}',
              "/inventory": b'{"rnics": [{"rnic": "R9", "host": "H9", "tor": "T9"}]}'}
    for route, body in bodies.items():
        for headers in ({}, {"Authorization": f"Bearer {forged}"}, {"Authorization": forged}):
            r = httpx.post(writer.endpoint.url + route, content=body, headers=headers, timeout=10)
            assert r.status_code == 401, (route, headers, r.text)
            assert r.headers["WWW-Authenticate"] == "Bearer"
    assert "DROP" not in r.text
    assert writer.rows(counts) == before
    assert "verdict_feedback" in [t["name"] for t in writer.rows("SHOW TABLES")]
    log = wait_for(lambda: (lg := writer.log()).count("query endpoint: refused") >= 9 and lg, timeout=60,
                   what="9 refusals in the sink log")
    assert "refused /query from 127.0.0.1:" in log and ": wrong token" in log and ": no token" in log
    assert forged not in log
    assert token_file(writer.store).read_text() not in log


def _publish_verdict(writer: Writer, verdict_id: str) -> None:
    now = time.time_ns()
    v = {"verdict_id": verdict_id, "window_start_ns": now, "window_end_ns": now, "kind": "rnic", "location": "R0003",
         "votes": 1.0, "confidence": 0.8, "failed_probes": 30, "total_probes": 200, "impact": "P1", "job_id": "j",
         "revision_of": None, "evidence": "{}", "emitted_ns": now}
    p = AgentProducer(writer.bootstrap)
    p.publish(f"{writer.prefix}verdicts", encode(pa.Table.from_pylist([v], schema=arrow_schema("verdict.v1"))),
              "verdict.v1", key="window")
    assert p.flush(30) == 0


def _snapshot(writer: Writer) -> dict:
    return {
        "tables": sorted(t["name"] for t in writer.rows("SHOW TABLES")),
        "feedback": writer.rows("SELECT verdict_id, decision, note FROM verdict_feedback ORDER BY at_ns"),
        "verdicts": writer.rows("SELECT verdict_id FROM verdicts ORDER BY verdict_id"),
        "inventory": writer.rows("SELECT count() AS n, uniqExact(tor) AS tors FROM rnic_inventory FINAL"),
    }


CLI_ATTACKS = [  # as the report tried them, plus the rest of the write and escape routes
    ("SELECT * FROM file('/etc/hostname', 'LineAsString')", "function file() reaches outside the store"),
    ("DROP TABLE verdict_feedback", "DROP is not a read"),
    ("INSERT INTO verdict_feedback (verdict_id, decision) VALUES ('v-sec', 'reject')", "INSERT is not a read"),
    ("SET max_execution_time = 3600", "SET is not a read"),
    ("SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')", "function url() reaches outside the store"),
    ("SELECT * FROM remote('127.0.0.1:9000', system.one)", "function remote() reaches outside the store"),
]
ENDPOINT_ATTACKS = [
    ("SELECT file('/etc/hostname')", "function file()"),
    ("SELECT * FROM s3('http://b.s3.amazonaws.com/x.csv', 'CSV')", "function s3()"),
    ("SELECT * FROM executable('id', 'LineAsString', 'x String')", "function executable()"),
    ("TRUNCATE TABLE verdict_feedback", "is not a read"),
    ("ALTER TABLE verdict_feedback DELETE WHERE 1", "ALTER is not a read"),
    ("DETACH TABLE probes", "is not a read"),
    ("SELECT 1; DROP TABLE verdict_feedback", "one statement per query"),
    ("SELECT 1 SETTINGS readonly = 0", "SETTINGS in a query"),
    ("SELECT 1 INTO OUTFILE '/tmp/fabricscope-endpoint-outfile'", "INTO OUTFILE"),
    ("KILL QUERY WHERE 1", "KILL QUERY is not a read"),
    ("SYSTEM STOP MERGES", "SYSTEM is not a read"),
    ("SELECT * FROM system.users", "system.users is not one a query may read"),
]


def test_each_attack_is_refused_with_a_clear_message_and_the_data_is_intact(writer, tmp_path):
    _publish_verdict(writer, "v-sec")
    wait_for(lambda: writer.rows("SELECT count() AS n FROM verdicts WHERE verdict_id = 'v-sec'") == [{"n": 1}],
             timeout=60, what="the verdict in the store")
    # The two writes that belong, through their typed routes on the running writer.
    r = writer.cli("verdict", "confirm", "v-sec", "--note", "bad optic; it's replaced")
    assert r.returncode == 0, r.stderr
    inv = tmp_path / "inventory.yaml"
    panel1().dump(inv)
    r = writer.cli("history", "inventory", str(inv))
    assert r.returncode == 0, r.stderr
    before = _snapshot(writer)
    assert before["feedback"] == [{"verdict_id": "v-sec", "decision": "confirm", "note": "bad optic; it's replaced"}]
    assert before["inventory"][0]["n"] == len(panel1().rnics)

    for sql, message in CLI_ATTACKS:
        r = writer.cli("query", sql)
        assert r.returncode == 1, (sql, r.stdout)
        assert message in r.stderr, (sql, r.stderr)
        assert HOSTNAME not in r.stdout + r.stderr
    for sql, message in ENDPOINT_ATTACKS:
        with pytest.raises(StoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
            writer.endpoint.query(sql)
    assert _snapshot(writer) == before
    assert not Path("/tmp/fabricscope-endpoint-outfile").exists()
    # Reads still work, from the command line too.
    r = writer.cli("query", "--csv", "SELECT verdict_id, decision FROM verdict_feedback")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == ['"verdict_id","decision"', '"v-sec","confirm"']


def _feed(writer: Writer, stop: threading.Event, sent: list[int]) -> None:
    """Publish enriched probe batches (200 rows each) every 0.1 s until ``stop``: the writer's input."""
    p = AgentProducer(writer.bootstrap)
    topic = f"{writer.prefix}probes.enriched"
    peers = [f"H{i}-r0" for i in range(1, 9)]
    start_ns = time.time_ns() // 5_000_000_000 * 5_000_000_000  # recent: raw probes have a 14-day TTL
    k = 0
    while not stop.is_set():
        cols = synthetic_batch("H0", ["H0-r0"], peers, start_ns + k * 5_000_000_000, 200, seed=k, seq0=k * 200)
        table = decompose(table_from_columns("probe.v1", cols), f"probes.raw/0/{k}")
        p.publish(topic, encode(table), "probe_enriched.v1", key="H0")
        sent.append(200)
        k += 1
        stop.wait(0.1)
    p.flush(30)


def test_a_long_query_is_stopped_while_inserts_go_on(writer):
    """A heavy query runs into the writer's 4 s limit and gets TIMEOUT_EXCEEDED; meanwhile the writer keeps
    inserting the batches that arrive (the rows in `probes` grow while the query runs)."""
    stop, sent = threading.Event(), []
    feeder = threading.Thread(target=_feed, args=(writer, stop, sent), daemon=True)
    feeder.start()
    count = lambda: writer.rows("SELECT count() AS n FROM probes")[0]["n"]  # noqa: E731

    def sample(running: Callable[[], bool]) -> list[tuple[float, int]]:
        """(time, rows) every 0.25 s while ``running()``: the same load on the writer in both windows."""
        out = [(time.monotonic(), count())]
        while running():
            time.sleep(0.25)
            out.append((time.monotonic(), count()))
        return out

    outcome: dict = {}

    def heavy() -> None:
        start = time.monotonic()
        try:
            writer.endpoint.query("SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) % 7 = 1")
            outcome["error"] = None
        except StoreError as err:
            outcome["error"] = str(err)
        outcome["took_s"] = time.monotonic() - start

    try:
        wait_for(lambda: count() >= 2000, timeout=60, what="the first rows from the feeder")
        t_end = time.monotonic() + QUERY_LIMIT_S
        before = sample(lambda: time.monotonic() < t_end)  # the same span without a heavy query
        q = threading.Thread(target=heavy)
        q.start()
        samples = sample(q.is_alive)
    finally:
        stop.set()
        feeder.join(30)
    rate = lambda s: (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0])  # noqa: E731
    base_rate = rate(before)
    assert outcome["error"] is not None, "the heavy query was not stopped"
    assert "TIMEOUT_EXCEEDED" in outcome["error"] and f"maximum: {QUERY_LIMIT_S * 1000:.3f} ms" in outcome["error"]
    assert QUERY_LIMIT_S <= outcome["took_s"] < QUERY_LIMIT_S + 10
    grown = samples[-1][1] - samples[0][1]
    steps = sum(1 for a, b in zip(samples, samples[1:], strict=False) if b[1] > a[1])
    during_rate = rate(samples)
    # Two inserts landed while the query ran: a writer blocked by it could finish at most the one in flight.
    # (Not more: on a loaded machine the sampler's own count() takes up to seconds, so it sees few steps.)
    assert grown > 0 and steps >= 2, f"inserts stalled while the query ran: {samples}"
    print(f"heavy query stopped after {outcome['took_s']:.2f} s (limit {QUERY_LIMIT_S} s); rows inserted "
          f"{base_rate:.0f}/s before, {during_rate:.0f}/s during it ({grown} rows in {len(samples)} samples, "
          f"{steps} increases); fed {sum(sent)} rows in all")
