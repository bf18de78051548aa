"""Kafka message headers of fabricscope (stdlib only, so agents can use them without pyarrow)."""

from __future__ import annotations

SCHEMA_HEADER = "schema"


def headers_for(key: str) -> list[tuple[str, bytes]]:
    """Kafka headers for a message of schema ``key`` (not checked here: the reader checks)."""
    return [(SCHEMA_HEADER, key.encode())]


def schema_key_from_headers(headers: object) -> str | None:
    """The schema key in Kafka ``headers`` (a list of pairs or a dict), or None."""
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    for k, v in items:
        if k == SCHEMA_HEADER:
            # a corrupt header must not crash the reader: bad UTF-8 becomes U+FFFD, then an unknown schema key
            return bytes(v).decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else str(v)
    return None
