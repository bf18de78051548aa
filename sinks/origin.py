"""Where a verdict or coverage row came from, so a demo or simulator run beside the lab is never read as
the lab's (or production's) finding.

The store writer stamps every ``verdicts`` and ``coverage`` row with an origin (column ``origin``,
migration ``040_origin.sql``): the message's ``origin`` Kafka header when it has one (a demo copying its
verdicts into a running pipeline's topic sets ``demo``), else the writer's own (``FABRICSCOPE_ORIGIN``,
which ``fabricscope up`` sets from its source). The running writer records its origin next to the store
(:func:`write_running`), so a ``fabricscope query`` in another shell shows that origin by default.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

ORIGINS = ("production", "lab", "sim", "demo")
HEADER = "origin"
STAMPED_TABLES = frozenset({"verdicts", "coverage"})
RUNNING_FILE = "running_origin"


class OriginError(ValueError):
    """An origin that is none of :data:`ORIGINS`."""


def check(origin: str) -> str:
    """``origin`` when it is one of :data:`ORIGINS`.

    Raises:
        OriginError: any other text; the message lists the origins.
    """
    if origin not in ORIGINS:
        raise OriginError(f"origin {origin!r}: choose one of {', '.join(ORIGINS)}")
    return origin


def for_source(source: str) -> str:
    """The origin of a probe source of ``fabricscope up`` / ``source``: ``lab`` for the netns lab, ``sim`` for
    the simulator and the synthetic prober, ``production`` for real agents."""
    return {"lab": "lab", "sim": "sim", "synthetic": "sim", "hostping-sim": "sim"}.get(source, "production")


def from_headers(headers: list[tuple[str, bytes]] | None, default: str) -> str:
    """The ``origin`` header of a Kafka message when it names an origin, else ``default``."""
    for k, v in headers or []:
        if k == HEADER:
            text = v.decode(errors="replace") if isinstance(v, bytes) else str(v)
            if text in ORIGINS:
                return text
    return default


def stamp(table: str, data: pa.Table, origin: str) -> pa.Table:
    """``data`` with an ``origin`` column when ``table`` is one the origin is kept for (else unchanged)."""
    if table not in STAMPED_TABLES or "origin" in data.column_names:
        return data
    return data.append_column("origin", pa.array([origin] * data.num_rows, pa.string()))


def write_running(store_path: Path, origin: str) -> Path:
    """Record the running writer's origin beside its store (``STORE/../running_origin``); returns the file."""
    f = Path(store_path).parent / RUNNING_FILE
    f.write_text(check(origin) + "\n")
    return f


def read_running(store_path: Path) -> str | None:
    """The origin a running writer recorded for ``store_path``, None when none did (or it was cleared)."""
    f = Path(store_path).parent / RUNNING_FILE
    try:
        text = f.read_text().strip()
    except OSError:
        return None
    return text if text in ORIGINS else None


def clear_running(store_path: Path) -> None:
    """Forget the running writer's origin (the writer stopped)."""
    (Path(store_path).parent / RUNNING_FILE).unlink(missing_ok=True)
