"""The running store writer's endpoint: token, read-only SQL, typed writes, limits, file modes, and every
attack of issue 28 reproduced as it was reported (a hostile local client on the same host).

One real ``fabricscope sink`` process (real Kafka broker, real chdb) serves most tests of this module,
started with a 4 s query limit (1 s on the reader kept for short queries) and a 4 s request deadline;
attacks go through ``fabricscope query`` (as a local user would type them) and straight to the endpoint's
Unix socket. The last test kills a writer of its own with SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
from sinks.query_endpoint import (
    Endpoint,
    EndpointBusy,
    _short_path,
    endpoint_file,
    find_endpoint,
    legacy_token_file,
    socket_file,
    token_file,
)

from conftest import Processes, free_port, wait_for

pytestmark = pytest.mark.kafka
QUERY_LIMIT_S = 4
SHORT_LIMIT_S = 1
REQUEST_TIMEOUT_S = 4
MAX_CONNECTIONS = 40
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
    metrics_port: int

    def log(self) -> str:
        return (self.tmp / "sink-0.log").read_text()

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fabricscope", *args], env=self.env, capture_output=True,
                              text=True, timeout=120, cwd=self.tmp)

    def rows(self, sql: str) -> list[dict]:
        return self.endpoint.query(sql).to_pylist()

    def threads(self) -> int:
        return _proc_status(self.proc.pid, "Threads")

    def metric(self, outcome: str) -> float:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        key = f'fabricscope_sink_endpoint_requests_total{{outcome="{outcome}"}} '
        return next((float(x.split()[-1]) for x in text.splitlines() if x.startswith(key)), 0.0)


def _proc_status(pid: int, field: str) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def _writer_env(tmp: Path, kafka_bootstrap: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "FABRICSCOPE_TOPIC_PREFIX": prefix,
            "FABRICSCOPE_VAR": str(tmp / "var"), "FABRICSCOPE_QUERY_MAX_EXECUTION_TIME_S": str(QUERY_LIMIT_S),
            "FABRICSCOPE_QUERY_SHORT_S": str(SHORT_LIMIT_S),
            "FABRICSCOPE_ENDPOINT_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
            "FABRICSCOPE_ENDPOINT_IDLE_TIMEOUT_S": "3", "FABRICSCOPE_ENDPOINT_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
            # blocks of probe rows close every 0.5 s (default 10 s), so rows grow step by step while a query
            # runs; however few rows they hold (a slow input's block would otherwise wait on for more, up to 1.5 s)
            "FABRICSCOPE_SINK_BLOCK_S": "0.5", "FABRICSCOPE_SINK_BLOCK_MIN_ROWS": "0"}


@pytest.fixture(scope="module")
def writer(tmp_path_factory, kafka_bootstrap):
    from fabricscope.kafka_admin import create_topics, delete_topics

    prefix = f"t{uuid.uuid4().hex[:8]}."
    create_topics(kafka_bootstrap, prefix)
    tmp = tmp_path_factory.mktemp("writer")
    env = _writer_env(tmp, kafka_bootstrap, prefix)
    procs = Processes(env, tmp)
    metrics_port = free_port()
    proc = procs.start("sink", "--metrics-port", str(metrics_port))
    store = tmp / "var" / "clickhouse"
    try:
        endpoint = wait_for(lambda: find_endpoint(store), timeout=120, what="the store writer's endpoint")
        yield Writer(env, tmp, store, proc, endpoint, prefix, kafka_bootstrap, metrics_port)
    finally:
        procs.stop_all()
        delete_topics(kafka_bootstrap, prefix)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _connect(store: Path) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(60)
    with _short_path(socket_file(store)) as name:
        c.connect(name)
    return c


def _raw(store: Path, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection to the writer's socket; read until it closes."""
    c = _connect(store)
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            c.sendall(data)
        out = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := c.recv(65536):
                out += chunk
        return out
    finally:
        c.close()


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_the_writers_files_are_readable_by_their_owner_only(writer):
    assert _mode(writer.store) == 0o700
    assert _mode(writer.store.parent) == 0o700  # FABRICSCOPE_VAR, created by the writer
    assert stat.S_ISSOCK(os.lstat(socket_file(writer.store)).st_mode)
    assert (_mode(token_file(writer.store)), _mode(socket_file(writer.store))) == (0o600, 0o600)
    secret = token_file(writer.store).read_text()
    assert len(secret) >= 43  # 32 random bytes, URL-safe base64
    assert writer.endpoint.url == f"unix:{socket_file(writer.store)}"
    assert not endpoint_file(writer.store).exists() and not legacy_token_file(writer.store).exists()


def test_a_request_without_the_right_token_gets_401_and_the_log_holds_no_token(writer):
    counts = "SELECT (SELECT count() FROM verdict_feedback) AS f, (SELECT count() FROM rnic_inventory) AS i"
    before = writer.rows(counts)
    forged = f"forged-{uuid.uuid4().hex}"
    bodies = {"/query": b"DROP TABLE verdict_feedback",
              "/verdict-feedback": b'{"verdict_id": "x", "decision": "reject"}',
              "/inventory": b'{"rnics": [{"rnic": "R9", "host": "H9", "tor": "T9"}]}'}
    for route, body in bodies.items():
        for token in (forged, ""):
            status, answer = Endpoint(writer.endpoint.socket_path, os.getuid(), token).request("POST", route, body)
            assert status == 401, (route, token, answer)
            assert b"DROP" not in answer
    assert writer.rows(counts) == before
    assert "verdict_feedback" in [t["name"] for t in writer.rows("SHOW TABLES")]
    log = wait_for(lambda: (lg := writer.log()).count("query endpoint: refused") >= 6 and lg, timeout=60,
                   what="6 refusals in the sink log")
    assert "refused POST /query from pid " in log and ": wrong token" in log
    assert forged not in log
    assert token_file(writer.store).read_text() not in log


def test_the_token_in_a_url_and_terminal_escapes_never_reach_the_log(writer):
    """Issue 28, 6: `POST /query?token=...` logged the token with the path; escape sequences went in raw."""
    token = token_file(writer.store).read_text()
    assert _status(_raw(writer.store, f"POST /query?token={token} HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n"
                                      "SELECT 1".encode())) == 401
    assert _status(_raw(writer.store, b"POST /\x1b]0;owned\x07\x1b[2J HTTP/1.1\r\nHost: x\r\n\r\n")) == 400
    marker = f"/mark-{uuid.uuid4().hex}"
    assert _status(_raw(writer.store, f"POST {marker} HTTP/1.1\r\nHost: x\r\n\r\n".encode())) == 401
    log = wait_for(lambda: marker in (lg := writer.log()) and lg, timeout=60, what="the marker's refusal")
    assert token not in log and "\x1b" not in log and "\x07" not in log
    assert f"refused POST {marker} from pid" in log


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
    """Publish agent uploads (200 rows each) every 0.1 s until ``stop``: the writer's input."""
    p = AgentProducer(writer.bootstrap)
    topic = f"{writer.prefix}probes.raw"
    peers = [f"H{i}-r0" for i in range(1, 9)]
    start_ns = time.time_ns() // 5_000_000_000 * 5_000_000_000  # recent: raw probes have a 14-day TTL
    k = 0
    while not stop.is_set():
        cols = synthetic_batch("H0", ["H0-r0"], peers, start_ns + k * 5_000_000_000, 200, seed=k, seq0=k * 200)
        p.publish(topic, encode(table_from_columns("probe.v1", cols)), "probe.v1", key="H0")
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


MEMORY_BOMB = ("SELECT sum(length(s)) FROM (SELECT groupArray(repeat(repeat('a', 1000), 1000000)) AS g "
               "FROM numbers(4)) ARRAY JOIN g AS s")


def test_the_memory_bomb_stops_at_the_per_query_cap_and_the_writer_stays_under_2_gib(writer):
    """Issue 28, 1: the writer went from 0.50 to 9.29 GB RSS and the query ran 22.8 s past a 10 s limit."""
    limited = writer.metric("limited")
    with pytest.raises(StoreError, match=r"MEMORY_LIMIT_EXCEEDED") as err:
        writer.endpoint.query(MEMORY_BOMB)
    assert "maximum: 512.00 MiB" in str(err.value)
    peak_kib = _proc_status(writer.proc.pid, "VmHWM")  # the writer's peak RSS over its whole life
    print(f"store writer peak RSS after the memory bomb: {peak_kib / 1024:.0f} MiB (bound 2048 MiB)")
    assert peak_kib < 2 * 1024 * 1024
    assert writer.rows("SELECT 1 AS x") == [{"x": 1}]
    assert writer.metric("limited") == limited + 1


def test_eight_long_queries_leave_select_1_answering_and_the_rest_busy_at_once(writer):
    """Issue 28, 2: eight of these made `SELECT 1` wait 9.2 s. Now 3 run on the long lane, one more on the
    short lane until its 1 s limit, 4 are refused at once (503), and `SELECT 1` answers while the 3 run."""
    long_sql = "SELECT count() FROM numbers(1000000000000)"
    busy_before = writer.metric("busy")
    outcomes: list[str] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            writer.endpoint.query(long_sql)
            out = "finished"
        except EndpointBusy:
            out = "busy"
        except StoreError as err:
            out = f"stopped at {str(err).split('maximum: ')[1].split(' ms')[0]} ms"
        with lock:
            outcomes.append(out)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    # The refusals come at once and the short-lane query stops at its 1 s: five outcomes while three run on.
    wait_for(lambda: len(outcomes) >= 5, timeout=QUERY_LIMIT_S * 10, every=0.05, what="five of eight answered")
    start = time.monotonic()
    assert writer.rows("SELECT 1 AS x") == [{"x": 1}]
    took = time.monotonic() - start
    with lock:
        still_running = 8 - len(outcomes)
    for t in threads:
        t.join(120)
    print(f"SELECT 1 answered in {took * 1000:.0f} ms with {still_running} long queries running; {sorted(outcomes)}")
    assert still_running >= 1, "the long queries ended before SELECT 1 ran: nothing was shown"
    assert sorted(outcomes) == sorted(["busy"] * 4 + [f"stopped at {QUERY_LIMIT_S * 1000:.3f} ms"] * 3 + [
        f"stopped at {SHORT_LIMIT_S * 1000:.3f} ms"])
    assert writer.metric("busy") == busy_before + 4


@pytest.mark.parametrize(("name", "head", "status"), [
    ("minus-one", b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n", 400),
    ("abc", b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n", 400),
    ("none", b"POST /query HTTP/1.1\r\nHost: x\r\n", 411),
    ("over-cap", b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n", 413),
    ("inventory-minus-one", b"POST /inventory HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n", 400),
])
def test_the_body_cap_cannot_be_bypassed_with_content_length_tricks(writer, name, head, status):
    """Issue 28, 3: `Content-Length: -1` and a body read to EOF put 8 MiB of SQL in the parser and 140,000
    inventory rows in the store; `Content-Length: abc` left a traceback and no answer."""
    if name.startswith("inventory"):
        rows = ",".join(f'{{"rnic": "X{i}", "host": "H{i}", "tor": "T{i % 50}"}}' for i in range(140_000))
        body = f'{{"rnics": [{rows}]}}'.encode()
        assert len(body) > 6_000_000
    else:
        body = b"SELECT 1 " + b"UNION ALL SELECT 1 " * (8 * 1024 * 1024 // 19)
    inventory = writer.rows("SELECT count() AS n FROM rnic_inventory")
    auth = b"Authorization: Bearer " + token_file(writer.store).read_bytes().strip() + b"\r\n"
    answer = _raw(writer.store, head + auth + b"\r\n" + body)
    assert _status(answer) == status, answer[:300]
    assert writer.rows("SELECT count() AS n FROM rnic_inventory") == inventory
    assert "Traceback" not in writer.log()


def test_slowloris_holds_no_thread_and_every_connection_is_cut_at_its_deadline(writer):
    """Issue 28, 4: 300 connections sending a byte every 20 s held 300 threads (44 -> 344) past 60 s. Here
    a byte every second (under the 3 s idle timeout): the cap answers all but 40 with 503 at once, and
    the request deadline (4 s) closes those 40; the writer's threads do not grow with them."""
    before = writer.threads()
    conns = [_connect(writer.store) for _ in range(300)]
    for c in conns:
        c.setblocking(False)
    answers: dict[int, bytes] = {}
    most_threads = before
    head = b"POST /query HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
    step = 0
    deadline = time.monotonic() + 120  # only bounds a failure
    while len(answers) < len(conns) and time.monotonic() < deadline:
        for i, c in enumerate(conns):
            if i in answers:
                continue
            try:
                chunk = c.recv(4096)
                answers[i] = chunk or b"closed"
                continue
            except BlockingIOError:
                pass
            except ConnectionResetError:
                answers[i] = b"reset"
                continue
            with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
                c.send(head[step:step + 1])
        most_threads = max(most_threads, writer.threads())
        step += 1
        time.sleep(1.0)  # the attack's pace: one byte per connection per second
    for c in conns:
        c.close()
    codes = sorted(_status(a) for a in answers.values())
    tally = {c: codes.count(c) for c in set(codes)}
    print(f"slowloris: threads {before} -> at most {most_threads}; answers {tally}")
    assert len(answers) == 300, "connections still open past the deadline"
    assert codes.count(503) >= 300 - MAX_CONNECTIONS and codes.count(408) + codes.count(503) == 300
    assert most_threads <= before + 8  # chdb's own pools may move a little; never one thread per client


def test_a_flood_of_long_paths_costs_a_bounded_log(writer):
    """Issue 28, 5: 300 requests with 64 KB paths added 19.5 MB to the log in 0.18 s."""
    size = len(writer.log())
    for _ in range(300):
        assert _status(_raw(writer.store, b"POST /" + b"a" * 65536 + b" HTTP/1.1\r\nHost: x\r\n\r\n")) == 431
    grown = len(writer.log()) - size
    print(f"log grew {grown} B for 300 refused 64 KB paths")
    assert grown < 300 * 200
    assert "Traceback" not in writer.log()


def test_after_kill_9_nothing_leads_a_client_to_another_process(tmp_path, kafka_bootstrap):
    """Issue 28, 7: after `kill -9` the endpoint and token files stayed; whoever bound the freed port got the
    token, the SQL and the operator's note, and the CLI printed its answers (`confirmed`, nothing stored).
    Now: the socket left behind refuses, an earlier version's TCP endpoint file is never followed (an
    impostor on its port gets no connection), the CLI opens the store itself, and a new writer cleans up."""
    from fabricscope.kafka_admin import create_topics, delete_topics

    prefix = f"t{uuid.uuid4().hex[:8]}."
    create_topics(kafka_bootstrap, prefix)
    env = _writer_env(tmp_path, kafka_bootstrap, prefix)
    procs = Processes(env, tmp_path)
    store = tmp_path / "var" / "clickhouse"
    got: list[bytes] = []

    class Impostor(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            got.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"recorded": true}')

        def log_message(self, *args: object) -> None:
            return

    impostor = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        proc = procs.start("sink")
        wait_for(lambda: find_endpoint(store), timeout=120, what="the store writer's endpoint")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert stat.S_ISSOCK(os.lstat(socket_file(store)).st_mode)  # left behind, as after any crash
        # What an earlier fabricscope left, pointing where an impostor listens.
        endpoint_file(store).write_text(f"http://127.0.0.1:{impostor.server_address[1]}")
        legacy_token_file(store).write_text("old-token")
        assert find_endpoint(store) is None
        r = subprocess.run([sys.executable, "-m", "fabricscope", "verdict", "confirm", "v-none", "--note", "secret"],
                           env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert r.returncode != 0 and "confirmed" not in r.stdout.lower(), r.stdout + r.stderr
        r = subprocess.run([sys.executable, "-m", "fabricscope", "query", "--csv", "SELECT 41 + 1 AS x"], env=env,
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "42", r.stderr
        assert got == []
        # A writer of this version removes the earlier version's files and the stale socket at start.
        procs.start("sink")
        e = wait_for(lambda: find_endpoint(store), timeout=120, what="the restarted writer's endpoint")
        assert e.query("SELECT 1 AS x").to_pylist() == [{"x": 1}]
        assert not endpoint_file(store).exists() and not legacy_token_file(store).exists()
    finally:
        impostor.shutdown()
        procs.stop_all()
        delete_topics(kafka_bootstrap, prefix)
