"""The store writer's endpoint in one process (real chdb, real Unix socket; no Kafka): who may talk
to it, what a malformed or hostile request gets, and what a client trusts.

The same attacks against a running ``fabricscope sink`` are in ``tests/sinks/test_store_security.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinks.clickhouse import ChdbStore, StoreError, migrate
from sinks.query_endpoint import (
    Endpoint,
    EndpointBusy,
    EndpointLimits,
    ReaderGate,
    RefusalLog,
    _short_path,
    endpoint_file,
    find_endpoint,
    legacy_token_file,
    loggable_path,
    serve,
    socket_file,
    token_file,
)
from sinks.readonly_sql import QueryLimits

from conftest import wait_for

LIMITS = EndpointLimits(max_connections=8, request_timeout_s=3.0, idle_timeout_s=1.5, max_body_bytes=64 * 1024,
                        readers=1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    # A path deeper than sun_path's 107 bytes: the socket is bound and reached through /proc/self/fd.
    path = tmp_path_factory.mktemp("ep") / ("d" * 90) / "clickhouse"
    path.parent.mkdir(mode=0o700)
    assert len(os.fsencode(socket_file(path))) > 107
    store = ChdbStore(path, QueryLimits(max_execution_time_s=20, short_execution_time_s=1.0, readers=1))
    migrate(store)
    server = serve(store, path, LIMITS)
    try:
        yield path, server
    finally:
        server.stop()
        store.close()


def _raw(path: Path, data: bytes, timeout: float = 30.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(timeout)
    try:
        with _short_path(socket_file(path)) as name:
            c.connect(name)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            c.sendall(data)  # the server may answer and close before all of it was sent
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out
    except ConnectionResetError:
        return out
    finally:
        c.close()


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _auth(path: Path) -> bytes:
    return b"Authorization: Bearer " + token_file(path).read_bytes().strip() + b"\r\n"


def test_the_socket_and_token_are_the_owners_and_old_files_are_gone(served):
    path, _ = served
    e = find_endpoint(path)
    assert e is not None and e.url == f"unix:{socket_file(path)}"
    assert e.query("SELECT 40 + 2 AS x").to_pylist() == [{"x": 42}]
    assert oct(os.stat(socket_file(path)).st_mode & 0o777) == "0o600"
    assert oct(os.stat(token_file(path)).st_mode & 0o777) == "0o600"
    assert not endpoint_file(path).exists() and not legacy_token_file(path).exists()


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n{auth}\r\nSELECT 1", 400),
    (b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n{auth}\r\nSELECT 1", 400),
    (b"POST /query HTTP/1.1\r\nHost: x\r\n{auth}\r\nSELECT 1", 411),
    (b"POST /query HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n{auth}\r\n8\r\nSELECT 1\r\n0\r\n\r\n", 411),
    (b"POST /inventory HTTP/1.1\r\nHost: x\r\nContent-Length: 6200000\r\n{auth}\r\n", 413),
    (b"POST /" + b"a" * 65536 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
    (b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nSELECT 1", 401),
    (b"GET /nothing HTTP/1.1\r\nHost: x\r\n{auth}\r\n", 404),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
], ids=["length-minus-1", "length-abc", "no-length", "chunked", "over-cap", "64k-path", "no-token", "404",
        "tls-hello"])
def test_content_length_tricks_and_malformed_requests_get_one_clear_status(served, request_bytes, status):
    path, _ = served
    answer = _raw(path, request_bytes.replace(b"{auth}", _auth(path)))
    assert _status(answer) == status, answer[:200]
    assert find_endpoint(path).query("SELECT 1 AS x").to_pylist() == [{"x": 1}]


def test_a_body_longer_than_its_content_length_is_cut_at_the_length(served):
    """Issue 28, 3: with the length given, the 8 MiB that follow never reach the parser."""
    path, _ = served
    sql = b"SELECT 7 AS x"
    answer = _raw(path, b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(sql) + _auth(path)
                  + b"\r\n" + sql + b" UNION ALL SELECT 8" * 400_000)
    assert _status(answer) == 200


def test_a_slow_client_is_cut_at_the_whole_request_deadline(served):
    """Issue 28, 4: one byte at a time, each well within the idle timeout: the request deadline ends it."""
    path, _ = served
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with _short_path(socket_file(path)) as name:
        c.connect(name)
    closed = threading.Event()
    answer = bytearray()

    def read() -> None:
        try:
            while chunk := c.recv(4096):
                answer.extend(chunk)
        finally:  # a reset counts as the cut too; the 408 check below says whether the answer came first
            closed.set()

    threading.Thread(target=read, daemon=True).start()
    head = b"POST /query HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 10_000
    sent = 0
    while not closed.is_set() and sent < len(head):
        try:
            c.send(head[sent:sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += 1
        closed.wait(LIMITS.idle_timeout_s / 3)  # the pace of the attack, not a synchronisation
    assert closed.wait(30), "the server kept a slow client past its deadline"
    c.close()
    assert _status(bytes(answer)) == 408
    # It got about request_timeout / (idle / 3) bytes in, never the whole head.
    assert sent < len(head)


def test_connections_over_the_cap_are_answered_503_at_once(served):
    path, _ = served
    e = Endpoint(socket_file(path), os.getuid(), token_file(path).read_text())

    def refused_at_cap() -> bool:
        # the held connections count until their request deadline (3 s): each try opens the cap's worth
        # afresh, so a slow machine that lets them expire tries again instead of never seeing the cap
        held = []
        try:
            for _ in range(LIMITS.max_connections):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                held.append(c)
                with _short_path(socket_file(path)) as name:
                    c.connect(name)
                c.send(b"P")  # a request begun: the connection counts until its deadline
            return e.request("GET", "/health")[0] == 503
        finally:
            for c in held:
                c.close()

    wait_for(refused_at_cap, timeout=60, what="a refusal once the cap is reached")
    wait_for(lambda: e.alive(), timeout=30, what="the endpoint answering once the connections closed")


def test_a_query_beyond_the_lanes_is_answered_busy_at_once_and_a_short_one_still_answers(served):
    path, server = served
    e = find_endpoint(path)
    long_sql = "SELECT count() FROM numbers(1000000000000)"
    outcome: dict[str, str] = {}
    t = threading.Thread(target=lambda: outcome.update(long=_error(e, long_sql)), daemon=True)
    t.start()  # takes the one long-lane reader for its 20 s limit
    wait_for(lambda: server.gate.in_use() == (1, 0), timeout=30, what="the long query admitted")
    # The reader kept for short queries answers, under its own 1 s limit.
    assert e.query("SELECT 1 AS x").to_pylist() == [{"x": 1}]
    with pytest.raises(StoreError, match=r"maximum: 1000\.000 ms"):
        e.query(long_sql)
    # Both lanes taken: the third query is refused at once with 503.
    blocker = threading.Thread(target=lambda: outcome.update(short=_error(e, long_sql)), daemon=True)
    blocker.start()
    wait_for(lambda: server.gate.in_use() == (1, 1), timeout=30, what="the short lane taken")
    with pytest.raises(EndpointBusy, match="busy"):
        e.post("/query", b"SELECT 2")
    blocker.join(60)
    assert "maximum: 1000.000 ms" in outcome["short"]
    t.join(60)
    assert "maximum: 20000.000 ms" in outcome["long"]


def _error(e: Endpoint, sql: str) -> str:
    try:
        e.query(sql, timeout=60)
        return ""
    except StoreError as err:
        return str(err)


def test_the_log_holds_one_bounded_escaped_line_per_refusal_and_never_the_query_string(served, caplog):
    path, server = served
    server.refusal_log = RefusalLog()  # earlier tests' refusals may have used this window's lines
    token = token_file(path).read_text()
    with caplog.at_level(logging.WARNING, logger="fabricscope.query_endpoint"):
        assert _status(_raw(path, b"POST /query?token=" + token.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Length: 1\r\n\r\n1")) == 401
        assert _status(_raw(path, b"POST /\x1b[2J\x1b]0;owned\x07 HTTP/1.1\r\nHost: x\r\n\r\n")) == 400
        assert _status(_raw(path, b"POST /" + b"%1b" * 30 + b"x" * 200 + b" HTTP/1.1\r\nHost: x\r\n\r\n")) == 401
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0] == f"query endpoint: refused POST /query from pid {os.getpid()}: no token"
    assert token not in "\n".join(lines) and "\x1b" not in "\n".join(lines)
    assert lines[1] == f"query endpoint: refused malformed request from pid {os.getpid()}: illegal request line"
    assert "%1b" * 26 + "%... from pid" in lines[2] and len(lines[2]) < 200


def test_loggable_path_cuts_escapes_and_drops_the_query_string():
    assert loggable_path(b"/query?token=secret") == "/query"
    assert loggable_path(b"/a\\b\x1b[31m") == "/a\\x5cb\\x1b[31m"
    assert loggable_path(b"/" + b"x" * 500) == "/" + "x" * 79 + "..."


def test_refusal_lines_are_rate_limited(served, caplog):
    path, server = served
    server.refusal_log = RefusalLog()
    with caplog.at_level(logging.WARNING, logger="fabricscope.query_endpoint"):
        for _ in range(60):
            _raw(path, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(caplog.records) <= 20


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(
    st.binary(max_size=300),
    st.builds(lambda m, t, h, b: m + b" " + t + b" HTTP/1.1\r\n" + h + b"\r\n" + b,
              st.sampled_from([b"GET", b"POST", b"PUT", b"", b"P\x00ST"]),
              st.binary(min_size=0, max_size=40),
              st.lists(st.sampled_from([b"Content-Length: 5\r\n", b"Content-Length: -5\r\n", b"Content-Length:\r\n",
                                        b"Content-Length: 1\r\nContent-Length: 2\r\n", b"Transfer-Encoding: x\r\n",
                                        b"Host: a\r\n", b"Authorization: Bearer x\r\n", b"\x00: \x01\r\n",
                                        b"Expect: 100-continue\r\n"]), max_size=4).map(b"".join),
              st.binary(max_size=20))))
def test_fuzzed_requests_get_a_status_or_a_close_and_the_endpoint_lives_on(served, data):
    path, _ = served
    answer = _raw(path, data)
    # 501: h11's status for a transfer coding it does not implement (a fuzzed Transfer-Encoding header)
    assert answer == b"" or _status(answer) in (400, 401, 404, 408, 411, 413, 431, 501), answer[:120]


def test_the_fuzz_left_the_endpoint_serving(served):
    path, _ = served
    assert find_endpoint(path).query("SELECT 3 AS x").to_pylist() == [{"x": 3}]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser") or not Path("/usr/bin/python3").exists(),
                    reason="needs root to act as another user, and a python that user may run")
def test_a_client_refuses_a_socket_served_by_another_user(tmp_path):
    """Issue 28, 7: the client checks who answers before the token or any SQL leave it."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        store_dir = base / "clickhouse"
        store_dir.mkdir(mode=0o777)
        os.chmod(store_dir, 0o777)
        os.chmod(base, 0o777)
        token_file(store_dir).write_text("the-real-token")
        got = base / "impostor-got"
        impostor = subprocess.Popen(
            ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
             "import socket,sys;s=socket.socket(socket.AF_UNIX);s.bind(sys.argv[1]);s.listen(1);"
             "c,_=s.accept();d=c.recv(65536);open(sys.argv[2],'wb').write(d)", str(socket_file(store_dir)),
             str(got)])
        try:
            wait_for(lambda: socket_file(store_dir).exists(), timeout=30, what="the impostor's socket")
            os.chmod(store_dir, 0o700)  # now private and root's, with nobody's socket inside
            with pytest.raises(StoreError, match=r"uid 65534\) on .* is not the store's owner \(uid 0\)"):
                find_endpoint(store_dir)
        finally:
            impostor.kill()
            impostor.wait(10)
        assert not got.exists() or b"the-real-token" not in got.read_bytes()
    finally:
        shutil.rmtree(base)


def test_a_client_refuses_a_store_directory_others_may_write(tmp_path):
    d = tmp_path / "clickhouse"
    d.mkdir()
    os.chmod(d, 0o755)
    with pytest.raises(StoreError, match="is not private"):
        find_endpoint(d)


def test_a_stale_socket_and_an_old_tcp_endpoint_file_lead_nowhere(tmp_path):
    """Issue 28, 7: after kill -9 the socket stays but refuses; an earlier version's URL file is never read."""
    path = tmp_path / "clickhouse"
    path.mkdir(mode=0o700)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(socket_file(path)))
    s.close()  # bound, never listening: what a killed writer leaves
    token_file(path).write_text("t")
    listener = socket.create_server(("127.0.0.1", 0))
    endpoint_file(path).write_text(f"http://127.0.0.1:{listener.getsockname()[1]}")
    listener.settimeout(0.5)
    assert find_endpoint(path) is None
    with pytest.raises(TimeoutError):
        listener.accept()  # nobody connected to the old TCP port
    listener.close()


def test_reader_gate_admits_long_then_short_then_refuses():
    g = ReaderGate(2)
    assert [g.acquire() for _ in range(4)] == [False, False, True, None]
    g.release(True)
    assert g.acquire() is True
    g.release(False)
    assert g.acquire() is False


def test_an_answer_sent_before_the_request_was_read_still_reaches_the_client(tmp_path):
    """A writer at its cap answers 503 and closes before reading; a client still sending its body
    gets EPIPE, and must read the answer queued on its socket instead of failing."""
    sock_path = tmp_path / "query.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(1)

    def answer_and_close() -> None:
        c, _ = listener.accept()
        c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nfull")
        c.close()

    t = threading.Thread(target=answer_and_close, daemon=True)
    t.start()
    try:
        # 8 MiB outgrows the socket's buffers, so the send meets the closed end.
        status, body = Endpoint(sock_path, os.getuid(), "t").request("POST", "/query", b"x" * (8 << 20), timeout=30)
    finally:
        t.join(30)
        listener.close()
    assert (status, body) == (503, b"full")
