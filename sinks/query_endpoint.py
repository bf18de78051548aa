"""A local query endpoint served by the process that owns the embedded store.

chdb lets one process open a store path, so while the pipeline runs
``fabricscope query`` sends its SQL here (``POST /query``, SQL in the body) and
gets an Arrow IPC stream back. Binds 127.0.0.1 only. The port is written to
``<store>.endpoint`` so clients find it.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pyarrow as pa

from schemas.codec import encode
from sinks.clickhouse import Store, StoreError


def endpoint_file(store_path: Path) -> Path:
    """Where the owner of ``store_path`` writes its endpoint URL."""
    return store_path.with_name(store_path.name + ".endpoint")


def serve(store: Store, store_path: Path, port: int = 0) -> ThreadingHTTPServer:
    """Start serving ``store`` on 127.0.0.1:``port`` (0 picks a free one) in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path != "/query":
                self.send_error(404, "POST /query with SQL in the body")
                return
            sql = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
            try:
                body = encode(store.query_arrow(sql))
                code, ctype = 200, "application/vnd.apache.arrow.stream"
            except StoreError as err:
                body, code, ctype = str(err).encode(), 400, "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # queries are not access-logged
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="query-endpoint", daemon=True).start()
    endpoint_file(store_path).write_text(f"http://127.0.0.1:{server.server_address[1]}/query")
    return server


def query_remote(url: str, sql: str, timeout: float = 60.0) -> pa.Table:
    """Run ``sql`` through a running owner's endpoint.

    Raises:
        StoreError: the engine rejected the SQL (its message is passed through).
        httpx.TransportError: nothing answers at ``url``.
    """
    r = httpx.post(url, content=sql.encode(), timeout=timeout)
    if r.status_code != 200:
        raise StoreError(r.text)
    return pa.ipc.open_stream(r.content).read_all()


def find_endpoint(store_path: Path) -> str | None:
    """The URL of a live endpoint for ``store_path``, or None when no owner answers."""
    f = endpoint_file(store_path)
    if not f.exists():
        return None
    url = f.read_text().strip()
    try:
        query_remote(url, "SELECT 1", timeout=2.0)
    except (httpx.TransportError, StoreError):
        return None
    return url
