"""Numbered, idempotent ClickHouse migrations: ``schemas/ddl/NNN_name.sql``.

Each file holds one or more statements separated by ``;`` at a line end. A
migration is recorded in ``schema_migrations`` once applied; every statement is
also idempotent (``IF NOT EXISTS``), so re-running is harmless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    """One DDL file: its number, file name and statements."""

    number: int
    name: str
    statements: tuple[str, ...]


def split_statements(sql: str) -> list[str]:
    """Split SQL text on ``;`` at line ends, dropping ``--`` comment lines and empty statements."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", body) if s.strip()]


def migrations() -> list[Migration]:
    """All migrations shipped in ``schemas/ddl``, in number order.

    Raises:
        ValueError: a file name does not match ``NNN_name.sql`` or two share a number.
    """
    found: dict[int, Migration] = {}
    for entry in resources.files("schemas.ddl").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = _NAME.match(entry.name)
        if not m:
            raise ValueError(f"schemas/ddl/{entry.name}: name must be NNN_lowercase_name.sql")
        n = int(m.group(1))
        if n in found:
            raise ValueError(f"schemas/ddl: {entry.name} and {found[n].name} share number {n:03d}")
        found[n] = Migration(n, entry.name, tuple(split_statements(entry.read_text())))
    return [found[n] for n in sorted(found)]


LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (number UInt32, name String, applied_ns Int64) "
    "ENGINE = ReplacingMergeTree ORDER BY number"
)
