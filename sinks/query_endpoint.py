"""A local query endpoint served by the process that owns the embedded store.

chdb lets one process open a store path, so while the pipeline runs ``fabricscope
query`` and the commands that write (``verdict confirm|reject``, ``history inventory``)
reach the store here. Binds 127.0.0.1 only, and every request must carry the secret
token (``Authorization: Bearer <token>``) that the owner generates at start
(:func:`secrets.token_urlsafe`, 256 bits) and writes, mode 0600, to ``<store>.token``;
its URL goes to ``<store>.endpoint`` (0600 too). A request without the right token
gets 401 and a log line naming the client, never the token it sent.

Routes (each a narrow operation; no route takes SQL that writes):

- ``POST /query``: the body is SQL; it runs read-only (:meth:`Store.query_readonly`),
  the answer is an Arrow IPC stream, or 400 with the engine's or the guard's message.
- ``POST /verdict-feedback``: JSON ``{"verdict_id", "decision", "note", "operator"}``
  (:func:`sinks.history.record_feedback`).
- ``POST /inventory``: JSON ``{"rnics": [{"rnic", "host", "tor"}, ...]}``
  (:func:`sinks.history.load_inventory`).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

import httpx
import pyarrow as pa
from pydantic import BaseModel, Field, ValidationError

from schemas.codec import encode
from sinks.clickhouse import Store, StoreError
from sinks.history import load_inventory, record_feedback

log = logging.getLogger("fabricscope.query_endpoint")
MAX_BODY_BYTES = 4 * 1024 * 1024  # an inventory of 20k RNICs is ~1.5 MB of JSON


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


def endpoint_file(store_path: Path) -> Path:
    """Where the owner of ``store_path`` writes its endpoint URL."""
    return store_path.with_name(store_path.name + ".endpoint")


def token_file(store_path: Path) -> Path:
    """Where the owner of ``store_path`` writes the endpoint's secret token."""
    return store_path.with_name(store_path.name + ".token")


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


def serve(store: Store, store_path: Path, port: int = 0) -> ThreadingHTTPServer:
    """Start serving ``store`` on 127.0.0.1:``port`` (0 picks a free one) in a daemon thread.

    Generates a new token, writes ``<store>.token`` and ``<store>.endpoint`` (0600).
    """
    token = secrets.token_urlsafe(32)
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        timeout = 30  # a client that stops sending does not hold a thread

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            sent = self.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(sent, expected):
                log.warning("query endpoint: refused %s from %s:%d: %s token", self.path, *self.client_address[:2],
                            "wrong" if sent else "no")
                self._reply(401, b"this endpoint needs the token of the store writer (Authorization: Bearer); "
                                 b"fabricscope query reads it from the store's .token file (mode 0600)",
                            extra={"WWW-Authenticate": "Bearer"})
                return
            size = int(self.headers.get("Content-Length", "0") or 0)
            if size > MAX_BODY_BYTES:
                self._reply(413, f"request body over {MAX_BODY_BYTES} bytes".encode())
                return
            body = self.rfile.read(size)
            route = {"/query": self._query, "/verdict-feedback": self._feedback, "/inventory": self._inventory}
            if self.path not in route:
                self._reply(404, b"POST /query (SQL), /verdict-feedback or /inventory (JSON)")
                return
            try:
                route[self.path](body)
            except ValidationError as err:
                self._reply(400, f"bad request for {self.path}: {err}".encode())
            except (StoreError, UnicodeDecodeError, ValueError) as err:
                self._reply(400, str(err).encode())

        def _query(self, body: bytes) -> None:
            self._reply(200, encode(store.query_readonly(body.decode())), "application/vnd.apache.arrow.stream")

        def _feedback(self, body: bytes) -> None:
            r = FeedbackRequest.model_validate_json(body)
            record_feedback(store, r.verdict_id, r.decision, r.note, r.operator)
            self._reply(200, b'{"recorded": true}', "application/json")

        def _inventory(self, body: bytes) -> None:
            r = InventoryRequest.model_validate_json(body)
            n = load_inventory(store, [(x.rnic, x.host, x.tor) for x in r.rnics])
            self._reply(200, json.dumps({"rnics": n}).encode(), "application/json")

        def _reply(self, code: int, body: bytes, ctype: str = "text/plain",
                   extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # queries are not access-logged
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="query-endpoint", daemon=True).start()
    write_private(token_file(store_path), token)
    write_private(endpoint_file(store_path), f"http://127.0.0.1:{server.server_address[1]}")
    return server


def stop_serving(server: ThreadingHTTPServer, store_path: Path) -> None:
    """Stop the endpoint and remove its URL and token files."""
    server.shutdown()
    endpoint_file(store_path).unlink(missing_ok=True)
    token_file(store_path).unlink(missing_ok=True)


@dataclass(frozen=True)
class Endpoint:
    """A running owner's endpoint: base URL and the token its requests need."""

    url: str
    token: str

    def post(self, route: str, content: bytes, timeout: float = 60.0) -> httpx.Response:
        """POST ``content`` to ``route``.

        Raises:
            StoreError: the owner refused it (the message is the owner's).
            httpx.TransportError: nothing answers at the URL.
        """
        r = httpx.post(self.url + route, content=content, timeout=timeout,
                       headers={"Authorization": f"Bearer {self.token}"})
        if r.status_code != 200:
            raise StoreError(r.text)
        return r

    def query(self, sql: str, timeout: float = 60.0) -> pa.Table:
        """Run ``sql`` read-only on the owner's store."""
        return pa.ipc.open_stream(self.post("/query", sql.encode(), timeout).content).read_all()

    def record_feedback(self, verdict_id: str, decision: str, note: str = "", operator: str = "") -> None:
        """:func:`sinks.history.record_feedback` on the owner's store."""
        body = FeedbackRequest(verdict_id=verdict_id, decision=decision, note=note, operator=operator)
        self.post("/verdict-feedback", body.model_dump_json().encode())

    def load_inventory(self, rnics: list[tuple[str, str, str]]) -> int:
        """:func:`sinks.history.load_inventory` on the owner's store; returns the RNICs written."""
        body = InventoryRequest(rnics=[InventoryRow(rnic=r, host=h, tor=t) for r, h, t in rnics])
        return int(self.post("/inventory", body.model_dump_json().encode()).json()["rnics"])


def query_remote(endpoint: Endpoint, sql: str, timeout: float = 60.0) -> pa.Table:
    """Run ``sql`` read-only through a running owner's endpoint.

    Raises:
        StoreError: the engine or the read-only guard rejected the SQL (the message is passed through).
        httpx.TransportError: nothing answers at the endpoint.
    """
    return endpoint.query(sql, timeout)


def find_endpoint(store_path: Path) -> Endpoint | None:
    """The live endpoint of ``store_path``'s owner, or None when no owner answers.

    Raises:
        StoreError: the endpoint's files exist but this user may not read them (they are
            the owner's, mode 0600); the message says to run as that user.
    """
    url_file, tok_file = endpoint_file(store_path), token_file(store_path)
    if not url_file.exists():
        return None
    try:
        endpoint = Endpoint(url_file.read_text().strip().removesuffix("/query"), tok_file.read_text().strip())
    except PermissionError:
        raise StoreError(f"the store writer's token {tok_file} is readable by its owner only; run "
                         "`fabricscope query` as the user that runs `fabricscope sink`") from None
    except FileNotFoundError:
        return None  # the owner is starting or stopping
    try:
        endpoint.query("SELECT 1", timeout=10.0)  # a dead port refuses at once; a busy owner may be slow
    except (httpx.TransportError, StoreError):
        return None
    return endpoint
