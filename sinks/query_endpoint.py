"""A local query endpoint served by the process that owns the embedded store.

chdb lets one process open a store path, so while the pipeline runs ``fabricscope
query`` and the commands that write (``verdict confirm|reject``, ``history inventory``)
reach the store here. The endpoint is a Unix domain socket inside the store's own 0700
directory (``<store>/query.sock``), so no other user can bind, squat or reach it, and a
socket left by a killed writer refuses connections instead of leading a client to another
process. The client checks, before it sends anything, that the directory is 0700 and owned
by the store's owner and that the process answering on the socket runs as that owner
(``SO_PEERCRED``). Every request also carries the secret token (``Authorization: Bearer``)
that the owner generates at start (:func:`secrets.token_urlsafe`, 256 bits) and writes,
mode 0600, to ``<store>/query.token``.

Routes (each a narrow operation; no route takes SQL that writes):

- ``POST /query``: the body is SQL; it runs read-only (:meth:`Store.query_readonly`),
  the answer is an Arrow IPC stream, or 400 with the engine's or the guard's message,
  or 503 at once when every reader is busy (:class:`ReaderGate`).
- ``POST /verdict-feedback``: JSON ``{"verdict_id", "decision", "note", "operator"}``
  (:func:`sinks.history.record_feedback`).
- ``POST /inventory``: JSON ``{"rnics": [{"rnic", "host", "tor"}, ...]}``
  (:func:`sinks.history.load_inventory`).
- ``GET /health``: ``{"service": "fabricscope-store-writer"}``, answered without a reader,
  so a busy writer is told from a dead one.

What a hostile or broken client can cost (docs/security.md): HTTP is parsed by h11, one
request per connection; ``Content-Length`` is required, non-negative and capped (411/400/413);
the whole request must arrive within ``request_timeout_s`` and no gap may exceed
``idle_timeout_s``; at most ``max_connections`` connections are open; connections are served
by one event-loop thread, and a pool thread is taken only by an authenticated request that a
reader lane admitted. A refused request costs one log line of bounded length (path cut and
escaped, never its query string; at most 20 such lines per 10 s, then a count).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Literal

import h11
import pyarrow as pa
from pydantic import BaseModel, Field, ValidationError

from schemas.codec import encode
from sinks.clickhouse import Store, StoreError
from sinks.history import load_inventory, record_feedback
from sinks.metrics import ENDPOINT_REQUESTS

log = logging.getLogger("fabricscope.query_endpoint")
SOCKET_NAME = "query.sock"
TOKEN_NAME = "query.token"
SERVICE = "fabricscope-store-writer"
MAX_HEAD_BYTES = 16 * 1024  # request line + headers; a longer head is refused (431) before any check
LOGGED_PATH_CHARS = 80
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the NUL
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class EndpointBusy(StoreError):
    """The store writer answered but every reader it may use is busy (HTTP 503); try again shortly."""


class FeedbackRequest(BaseModel):
    """An operator's decision on a verdict (``fabricscope verdict confirm|reject``)."""

    verdict_id: str = Field(max_length=200)
    decision: Literal["confirm", "reject"]
    note: str = Field("", max_length=10_000)
    operator: str = Field("", max_length=200)


class InventoryRow(BaseModel):
    """One RNIC of the cluster inventory: which host holds it and which ToR it is cabled to."""

    rnic: str = Field(max_length=200)
    host: str = Field(max_length=200)
    tor: str = Field(max_length=200)


class InventoryRequest(BaseModel):
    """RNIC -> host, ToR rows (``fabricscope history inventory FILE``)."""

    rnics: list[InventoryRow]


@dataclass(frozen=True)
class EndpointLimits:
    """What one client may cost the store writer (settings ``FABRICSCOPE_ENDPOINT_*``).

    Attributes:
        max_connections: connections open at once; one more is answered 503 and closed.
        request_timeout_s: seconds for the whole request (head and body) to arrive.
        idle_timeout_s: the longest gap between two received chunks, seconds.
        max_body_bytes: the largest ``Content-Length`` accepted (an inventory of 20k RNICs is ~1.5 MB).
        readers: queries that may run at once on the long lane (the store's reader sessions).
    """

    max_connections: int = 64
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 5.0
    max_body_bytes: int = 4 * 1024 * 1024
    readers: int = 3


LINGER_S = 1.0
"""After a refusal, how long the client's remaining bytes are read and dropped before the close (seconds)."""
LINGER_BYTES = 1024 * 1024
"""After a refusal, the most of the client's remaining bytes read and dropped before the close."""


def endpoint_file(store_path: Path) -> Path:
    """Where an earlier fabricscope wrote its TCP endpoint URL (removed at start, never trusted)."""
    return store_path.with_name(store_path.name + ".endpoint")


def legacy_token_file(store_path: Path) -> Path:
    """Where an earlier fabricscope wrote its token (removed at start, never read)."""
    return store_path.with_name(store_path.name + ".token")


def socket_file(store_path: Path) -> Path:
    """The endpoint's Unix socket, inside the store's 0700 directory."""
    return store_path / SOCKET_NAME


def token_file(store_path: Path) -> Path:
    """Where the owner of ``store_path`` writes the endpoint's secret token (0600)."""
    return store_path / TOKEN_NAME


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically (a reader sees the old or the new file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the file may have existed with wider bits
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


@contextlib.contextmanager
def _short_path(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits ``sun_path``: itself, or ``/proc/self/fd/N/<name>`` through an
    ``O_PATH`` descriptor of its directory (a deep ``FABRICSCOPE_VAR`` exceeds 107 bytes)."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def peer_uid(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket (``SO_PEERCRED``)."""
    pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return pid, uid


def loggable_path(target: bytes) -> str:
    """A request target fit for the log: no query string, at most :data:`LOGGED_PATH_CHARS`
    characters, anything outside printable ASCII escaped (no terminal sequences, no forged lines)."""
    path = target.split(b"?", 1)[0].split(b"#", 1)[0]
    cut = len(path) > LOGGED_PATH_CHARS
    text = path[:LOGGED_PATH_CHARS].decode("latin-1")
    out = "".join(c if 0x20 <= ord(c) < 0x7F and c != "\\" else f"\\x{ord(c):02x}" for c in text)
    return out + ("..." if cut else "")


class RefusalLog:
    """One warning per refused request, at most ``burst`` per ``window_s``; the rest are counted
    and reported in one line when the window turns (a flood of bad requests cannot fill the disk)."""

    def __init__(self, burst: int = 20, window_s: float = 10.0) -> None:
        self.burst, self.window_s = burst, window_s
        self._start, self._n, self._suppressed = 0.0, 0, 0

    def __call__(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._start >= self.window_s:
            if self._suppressed:
                log.warning("query endpoint: %d more refused requests not logged in the last %.0f s",
                            self._suppressed, self.window_s)
            self._start, self._n, self._suppressed = now, 0, 0
        if self._n < self.burst:
            self._n += 1
            log.warning(msg, *args)
        else:
            self._suppressed += 1


@dataclass
class ReaderGate:
    """Admission of queries to the store's reader lanes, without waiting.

    ``readers`` queries may run at once on the long lane (the full limits); when it is full, one
    more runs on the short lane (one reader kept for short queries, stopped at the short time
    limit); when both are full, :meth:`acquire` returns None and the endpoint answers 503 at once.

    Attributes:
        readers: long-lane slots.
    """

    readers: int
    _long: int = 0
    _short: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self) -> bool | None:
        """A lane (False: long, True: short) now taken, or None when both are full."""
        with self._lock:
            if self._long < self.readers:
                self._long += 1
                return False
            if self._short < 1:
                self._short += 1
                return True
            return None

    def in_use(self) -> tuple[int, int]:
        """(long-lane slots taken, short-lane slots taken)."""
        with self._lock:
            return self._long, self._short

    def release(self, short: bool) -> None:
        """Give back a lane taken by :meth:`acquire`."""
        with self._lock:
            if short:
                self._short -= 1
            else:
                self._long -= 1


@dataclass
class _Reply:
    code: int
    body: bytes
    ctype: str = "text/plain"
    extra: dict[str, str] = field(default_factory=dict)


class QueryServer:
    """The store writer's endpoint (see the module text): an asyncio loop on its own thread.

    Args:
        store: the store it serves.
        store_path: the store's directory (0700); the socket and token go inside it.
        limits: what one client may cost.
    """

    def __init__(self, store: Store, store_path: Path, limits: EndpointLimits | None = None) -> None:
        self.store, self.store_path = store, Path(store_path)
        self.limits = limits or EndpointLimits()
        self.gate = ReaderGate(self.limits.readers)
        self._writes = threading.Semaphore(1)  # typed writes share the writer's session: one at a time
        self._token = secrets.token_urlsafe(32)
        self._expected = f"Bearer {self._token}".encode()
        self._open = 0
        self.refusal_log = RefusalLog()
        # Threads only for admitted work: every lane plus the one typed write, so nothing queues here.
        self._pool = ThreadPoolExecutor(self.limits.readers + 2, thread_name_prefix="query-endpoint-run")
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="query-endpoint", daemon=True)

    # ---- lifecycle -----------------------------------------------------------------

    def start(self) -> QueryServer:
        """Bind the socket, write the token and serve; removes files of an earlier fabricscope version."""
        for stale in (endpoint_file(self.store_path), legacy_token_file(self.store_path)):
            stale.unlink(missing_ok=True)  # a TCP endpoint and token of an earlier version: never valid again
        sock_path = socket_file(self.store_path)
        sock_path.unlink(missing_ok=True)  # left by a writer that was killed
        write_private(token_file(self.store_path), self._token)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with _short_path(sock_path) as name:
            sock.bind(name)
        os.chmod(sock_path, 0o600)
        sock.listen(1024)  # a burst of connections is accepted, then capped, not refused by the kernel
        self._thread.start()
        serving = asyncio.start_unix_server(self._connection, sock=sock, limit=64 * 1024, backlog=1024)
        self._server = asyncio.run_coroutine_threadsafe(serving, self._loop).result(30)
        return self

    def stop(self) -> None:
        """Stop serving (connections in progress are cancelled) and remove the socket and the token."""
        async def close() -> None:
            if self._server:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=10) if tasks else None

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        socket_file(self.store_path).unlink(missing_ok=True)
        token_file(self.store_path).unlink(missing_ok=True)

    # ---- one connection ------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        pid, uid = peer_uid(sock)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            if uid not in (os.getuid(), 0):
                self._refuse("peer", f"connection from pid {pid} uid {uid}: not the store's owner")
                return
            if self._open >= self.limits.max_connections:
                self._refuse("connections", f"connection from pid {pid}: {self._open} connections open "
                                            f"(FABRICSCOPE_ENDPOINT_MAX_CONNECTIONS)")
                await self._send(conn, writer, _Reply(503, b"too many connections to the store writer; "
                                                           b"try again", extra={"Retry-After": "1"}))
                return
            self._open += 1
            try:
                await self._serve_one(conn, reader, writer, pid)
            finally:
                self._open -= 1
        except (ConnectionError, OSError):  # the client went away: nothing to answer, nothing to log
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve_one(self, conn: h11.Connection, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter, pid: int) -> None:
        deadline = self._loop.time() + self.limits.request_timeout_s
        try:
            request, body = await self._receive(conn, reader, deadline, pid)
        except _Refused as r:
            if r.reply is not None:
                await self._send(conn, writer, r.reply)
                await self._linger(reader, writer)
            return
        reply = await self._dispatch(request, body)
        await self._send(conn, writer, reply)

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader, deadline: float) -> object:
        while True:
            ev = conn.next_event()
            if ev is not h11.NEED_DATA:
                return ev
            wait = min(self.limits.idle_timeout_s, deadline - self._loop.time())
            if wait <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(reader.read(64 * 1024), wait)
            conn.receive_data(data)  # b"": the client closed; h11 then raises on a cut request

    async def _receive(self, conn: h11.Connection, reader: asyncio.StreamReader, deadline: float,
                       pid: int) -> tuple[h11.Request, bytes]:
        who = f"pid {pid}"
        try:
            request = await self._next(conn, reader, deadline)
            if not isinstance(request, h11.Request):  # the client closed before a request
                raise _Refused("closed", None)
            path = loggable_path(request.target)
            headers = {k.lower(): v for k, v in request.headers}
            sent = headers.get(b"authorization", b"")
            if not hmac.compare_digest(sent, self._expected):
                self._refuse("token", f"{request.method.decode()} {path} from {who}: "
                                      f"{'wrong' if sent else 'no'} token")
                raise _Refused("token", _Reply(401, b"this endpoint needs the token of the store writer "
                                                    b"(Authorization: Bearer); fabricscope query reads it from "
                                                    b"the store's query.token file (mode 0600)",
                                               extra={"WWW-Authenticate": "Bearer"}))
            if request.method == b"POST":
                if b"content-length" not in headers or b"transfer-encoding" in headers:
                    self._refuse("length", f"POST {path} from {who}: no Content-Length")
                    raise _Refused("length", _Reply(411, b"a request body needs a Content-Length header "
                                                         b"(no chunked encoding)"))
                size = int(headers[b"content-length"])  # h11 has checked it is digits
                if size > self.limits.max_body_bytes:
                    self._refuse("size", f"POST {path} from {who}: body of {size} bytes")
                    raise _Refused("size", _Reply(413, f"request body over {self.limits.max_body_bytes} bytes "
                                                       "(FABRICSCOPE_ENDPOINT_MAX_BODY_BYTES)".encode()))
            chunks = []
            while True:
                ev = await self._next(conn, reader, deadline)
                if isinstance(ev, h11.Data):
                    chunks.append(bytes(ev.data))
                elif isinstance(ev, h11.EndOfMessage):
                    return request, b"".join(chunks)
                else:
                    raise h11.RemoteProtocolError("request cut short")
        except h11.RemoteProtocolError as err:
            # h11's message may quote the request line (a token in a URL): only its first words are kept.
            why = loggable_path(str(err).split(":", 1)[0].encode()[:60])
            self._refuse("malformed", f"malformed request from {who}: {why}")
            raise _Refused("malformed", _Reply(err.error_status_hint, f"malformed HTTP request: {why}".encode())) \
                from None
        except TimeoutError:
            self._refuse("timeout", f"request from {who} not received within its "
                                    f"{self.limits.request_timeout_s:g} s (or idle {self.limits.idle_timeout_s:g} s)")
            raise _Refused("timeout", _Reply(408, b"request not received in time")) from None

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """After refusing a request not read to its end: half-close, then discard what still comes, briefly.

        Closing a socket with unread bytes resets the connection, and the client may lose the answer
        it was sent (the 408, the 413). Bounded like every other cost: :data:`LINGER_S` and
        :data:`LINGER_BYTES` at most (nginx's ``lingering_close`` does the same).
        """
        with contextlib.suppress(ConnectionError, OSError, TimeoutError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
            end, got = self._loop.time() + LINGER_S, 0
            while got < LINGER_BYTES and (left := end - self._loop.time()) > 0:
                data = await asyncio.wait_for(reader.read(64 * 1024), left)
                if not data:
                    return
                got += len(data)

    def _refuse(self, reason: str, msg: str) -> None:
        if reason == "closed":  # a client that went away before a request: nothing to count or log
            return
        ENDPOINT_REQUESTS.labels(outcome=f"refused_{reason}").inc()
        self.refusal_log("query endpoint: refused %s", msg)

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, reply: _Reply) -> None:
        headers = [("Content-Type", reply.ctype), ("Content-Length", str(len(reply.body))),
                   ("Connection", "close"), *reply.extra.items()]
        try:
            data = conn.send(h11.Response(status_code=reply.code, headers=headers,
                                          reason=HTTPStatus(reply.code).phrase.encode()))
            data += conn.send(h11.Data(data=reply.body)) + conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:  # h11 cannot answer in this state (e.g. no request line)
            data = (f"HTTP/1.1 {reply.code} Refused\r\nContent-Length: {len(reply.body)}\r\n"
                    "Connection: close\r\n\r\n").encode() + reply.body
        writer.write(data)
        await asyncio.wait_for(writer.drain(), self.limits.request_timeout_s)

    # ---- routes --------------------------------------------------------------------

    async def _dispatch(self, request: h11.Request, body: bytes) -> _Reply:
        path = request.target.split(b"?", 1)[0]
        if request.method == b"GET" and path == b"/health":
            return _Reply(200, json.dumps({"service": SERVICE}).encode(), "application/json")
        routes: dict[bytes, Callable[[bytes, bool], bytes]] = {
            b"/query": self._query, b"/verdict-feedback": self._feedback, b"/inventory": self._inventory}
        if request.method != b"POST" or path not in routes:
            ENDPOINT_REQUESTS.labels(outcome="not_found").inc()
            return _Reply(404, b"POST /query (SQL), /verdict-feedback or /inventory (JSON); GET /health")
        # Admission in the loop thread, so a refused request never waits for (or holds) a pool thread.
        if path == b"/query":
            lane = self.gate.acquire()
            release: Callable[[], None] = lambda: self.gate.release(bool(lane))  # noqa: E731
            busy = f"{self.gate.readers} long queries and the short-query reader are all in use"
        else:
            lane = False if self._writes.acquire(blocking=False) else None
            release, busy = self._writes.release, "another write request runs"
        if lane is None:
            ENDPOINT_REQUESTS.labels(outcome="busy").inc()
            return _Reply(503, f"the store writer is busy: {busy}; try again shortly".encode(),
                          extra={"Retry-After": "1"})
        try:
            out = await self._loop.run_in_executor(self._pool, routes[path], body, lane)
        except ValidationError as err:
            ENDPOINT_REQUESTS.labels(outcome="bad_request").inc()
            return _Reply(400, f"bad request for {path.decode()}: {err}".encode())
        except (StoreError, UnicodeDecodeError, ValueError) as err:
            ENDPOINT_REQUESTS.labels(outcome="limited" if _over_limit(str(err)) else "bad_request").inc()
            return _Reply(400, str(err).encode())
        except Exception:  # a bug here, not the client's input: worth its traceback, and an answer
            log.exception("query endpoint: %s failed", path.decode())
            ENDPOINT_REQUESTS.labels(outcome="error").inc()
            return _Reply(500, b"the store writer failed on this request; its log has the details")
        finally:
            release()
        ENDPOINT_REQUESTS.labels(outcome="short_lane" if lane else "ok").inc()
        if path == b"/query":
            return _Reply(200, out, "application/vnd.apache.arrow.stream")
        return _Reply(200, out, "application/json")

    def _query(self, body: bytes, short: bool) -> bytes:
        return encode(self.store.query_readonly(body.decode(), short=short))

    def _feedback(self, body: bytes, _short: bool) -> bytes:
        r = FeedbackRequest.model_validate_json(body)
        record_feedback(self.store, r.verdict_id, r.decision, r.note, r.operator)
        return b'{"recorded": true}'

    def _inventory(self, body: bytes, _short: bool) -> bytes:
        r = InventoryRequest.model_validate_json(body)
        return json.dumps({"rnics": load_inventory(self.store, [(x.rnic, x.host, x.tor) for x in r.rnics])}).encode()


class _Refused(Exception):  # noqa: N818 - control flow inside the server, never raised to a caller
    def __init__(self, reason: str, reply: _Reply | None) -> None:
        self.reason, self.reply = reason, reply


def _over_limit(msg: str) -> bool:
    return any(k in msg for k in ("MEMORY_LIMIT_EXCEEDED", "TIMEOUT_EXCEEDED", "TOO_MANY_ROWS_OR_BYTES"))


def serve(store: Store, store_path: Path, limits: EndpointLimits | None = None) -> QueryServer:
    """Start serving ``store`` on ``<store_path>/query.sock`` (writes ``query.token``, 0600).

    Raises:
        OSError: the socket cannot be bound.
    """
    return QueryServer(store, store_path, limits).start()


def stop_serving(server: QueryServer, store_path: Path) -> None:  # noqa: ARG001 - kept for callers
    """Stop the endpoint and remove its socket and token files."""
    server.stop()


# ---- client --------------------------------------------------------------------------


def _trusted_owner(store_path: Path) -> int:
    """The uid a genuine store writer runs as: the store directory's owner, if the directory is
    private (0700) and the caller may trust it (it is the caller's own, or the caller is root)."""
    st = os.lstat(store_path)
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & 0o077:
        raise StoreError(f"the store directory {store_path} is not private (mode {stat.S_IMODE(st.st_mode):o}, "
                         "want 700); refusing its endpoint")
    if st.st_uid not in (os.getuid(), 0) and os.getuid() != 0:
        raise StoreError(f"the store directory {store_path} belongs to uid {st.st_uid}; run as that user")
    return st.st_uid


@dataclass(frozen=True)
class Endpoint:
    """A running owner's endpoint: its socket, the uid it must answer as, and the token."""

    socket_path: Path
    owner_uid: int
    token: str

    @property
    def url(self) -> str:
        """Where it listens, for messages."""
        return f"unix:{self.socket_path}"

    def request(self, method: str, route: str, content: bytes = b"", timeout: float = 60.0) -> tuple[int, bytes]:
        """Send one request and return (status, body).

        Raises:
            StoreError: the process on the socket is not the store's owner.
            ConnectionError, TimeoutError: nothing answers (a writer that died leaves a socket that refuses).
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            with _short_path(self.socket_path) as name:
                sock.connect(name)
            pid, uid = peer_uid(sock)
            if uid != self.owner_uid:  # checked before the token or the SQL leave this process
                raise StoreError(f"the process (pid {pid}, uid {uid}) on {self.socket_path} is not the store's "
                                 f"owner (uid {self.owner_uid}); refusing to talk to it")
            conn = h11.Connection(h11.CLIENT)
            headers = [("Host", "store-writer"), ("Content-Length", str(len(content))), ("Connection", "close")]
            if self.token:
                headers.append(("Authorization", f"Bearer {self.token}"))
            # The writer may answer (a 503 at its connection cap) and close before reading the
            # request; its answer is still queued on this socket, so it is read, as curl does.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(conn.send(h11.Request(method=method, target=route, headers=headers))
                             + conn.send(h11.Data(data=content)) + conn.send(h11.EndOfMessage()))
            status, chunks = 0, []
            while True:
                ev = conn.next_event()
                if ev is h11.NEED_DATA:
                    conn.receive_data(sock.recv(256 * 1024))
                elif isinstance(ev, h11.Response):
                    status = ev.status_code
                elif isinstance(ev, h11.Data):
                    chunks.append(bytes(ev.data))
                elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed):
                    return status, b"".join(chunks)
        except h11.ProtocolError as err:
            raise ConnectionError(f"the store writer's answer was cut short: {err}") from None
        except TimeoutError:
            raise TimeoutError(f"no answer from the store writer on {self.socket_path} within {timeout:g} s") \
                from None
        finally:
            sock.close()

    def post(self, route: str, content: bytes, timeout: float = 60.0) -> bytes:
        """POST ``content`` to ``route`` and return the answer's body.

        Raises:
            EndpointBusy: every reader is busy (503).
            StoreError: the owner refused it (the message is the owner's).
            ConnectionError, TimeoutError: nothing answers.
        """
        status, body = self.request("POST", route, content, timeout)
        if status == 503:
            raise EndpointBusy(body.decode(errors="replace"))
        if status != 200:
            raise StoreError(body.decode(errors="replace"))
        return body

    def alive(self, timeout: float = 10.0) -> bool:
        """Whether the store writer answers ``GET /health`` (no reader needed: busy is alive, and so is
        a writer at its connection cap, which answers 503)."""
        try:
            status, body = self.request("GET", "/health", timeout=timeout)
        except (ConnectionError, TimeoutError, FileNotFoundError):
            return False
        if status == 503:
            return True
        try:
            return status == 200 and json.loads(body).get("service") == SERVICE
        except ValueError:
            return False

    def query(self, sql: str, timeout: float = 60.0) -> pa.Table:
        """Run ``sql`` read-only on the owner's store."""
        return pa.ipc.open_stream(self.post("/query", sql.encode(), timeout)).read_all()

    def record_feedback(self, verdict_id: str, decision: str, note: str = "", operator: str = "") -> None:
        """:func:`sinks.history.record_feedback` on the owner's store."""
        body = FeedbackRequest(verdict_id=verdict_id, decision=decision, note=note, operator=operator)
        self.post("/verdict-feedback", body.model_dump_json().encode())

    def load_inventory(self, rnics: list[tuple[str, str, str]]) -> int:
        """:func:`sinks.history.load_inventory` on the owner's store; returns the RNICs written."""
        body = InventoryRequest(rnics=[InventoryRow(rnic=r, host=h, tor=t) for r, h, t in rnics])
        return int(json.loads(self.post("/inventory", body.model_dump_json().encode()))["rnics"])


def query_remote(endpoint: Endpoint, sql: str, timeout: float = 60.0) -> pa.Table:
    """Run ``sql`` read-only through a running owner's endpoint.

    Raises:
        EndpointBusy: every reader of the writer is busy.
        StoreError: the engine or the read-only guard rejected the SQL (the message is passed through).
        ConnectionError, TimeoutError: nothing answers at the endpoint.
    """
    return endpoint.query(sql, timeout)


def find_endpoint(store_path: Path) -> Endpoint | None:
    """The live endpoint of ``store_path``'s owner, or None when no owner answers (then the
    caller may open the store itself: chdb's lock refuses it if a writer still holds it).

    Files of an earlier fabricscope version (a TCP URL in ``<store>.endpoint``) are never
    followed. A writer that is busy running queries is alive (``/health`` needs no reader).

    Raises:
        StoreError: the store directory is not private, or another user's; the token is readable
            by its owner only (the message says to run as that user); the process on the socket
            is not the store's owner.
    """
    sock_path, tok_file = socket_file(store_path), token_file(store_path)
    try:
        owner = _trusted_owner(store_path)
        if not stat.S_ISSOCK(os.lstat(sock_path).st_mode):
            return None
        token = tok_file.read_text().strip()
    except PermissionError:
        raise StoreError(f"the store writer's files in {store_path} are readable by their owner only; run "
                         "`fabricscope query` as the user that runs `fabricscope sink`") from None
    except FileNotFoundError:
        return None  # no writer, or one starting or stopping
    endpoint = Endpoint(sock_path, owner, token)
    return endpoint if endpoint.alive() else None
