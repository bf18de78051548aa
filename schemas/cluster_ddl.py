"""The migrations rendered for a sharded, replicated ClickHouse cluster (``fabricscope store ddl --cluster``).

Per table of ``schemas/ddl``:

* ``NAME_local ON CLUSTER c`` with the replicated engine of the same family
  (``ReplacingMergeTree(v)`` -> ``ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}',
  '{replica}', v)``), and ``replicated_deduplication_window`` where the single-node table had
  ``non_replicated_deduplication_window`` (added to every other replicated table too), so a batch
  re-inserted with the same ``insert_deduplication_token`` is dropped on its shard;
* ``NAME ON CLUSTER c`` as ``Distributed(c, currentDatabase(), NAME_local, key)`` for reads and
  inserts, under the table's own name, so queries and the store writer need no change. The sharding
  key is deterministic (a retried batch splits across shards exactly as the first attempt did): the
  key of :data:`SHARD_KEYS`, else ``cityHash64`` of the first ``ORDER BY`` column;
* small dimension tables that materialized views join (:data:`EVERYWHERE`) are replicated to every
  node of every shard (one replica path without ``{shard}``) and keep their name, so a view joining
  them on one shard sees all of it.

Materialized views are created on every node and read and write the local tables; functions, views
and ``ALTER``/``DROP`` statements get ``ON CLUSTER``. A statement of a shape not listed here raises
:class:`ClusterDDLError` rather than rendering something wrong.

Source: ClickHouse documentation, "Data Replication" (Replicated*MergeTree, macros,
``replicated_deduplication_window``), "Distributed" table engine, "Distributed DDL" (ON CLUSTER).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from schemas.migrations import LEDGER_DDL, Migration, migrations

REPLICA_PATH = "/clickhouse/tables/{shard}/{database}/{table}"
EVERYWHERE_PATH = "/clickhouse/tables/all/{database}/{table}"
DEDUP_WINDOW = 10_000
LOCAL_SUFFIX = "_local"

# Inserted tables: whole batches land on one shard where the key is per batch (probes: one agent upload),
# rows that replace each other (same ORDER BY key) always land on the same shard.
SHARD_KEYS: dict[str, str] = {
    "probes": "cityHash64(agent_id)",
    "verdicts": "cityHash64(verdict_id)",
    "verdict_feedback": "cityHash64(verdict_id)",
    "coverage": "cityHash64(job_id)",
    "deadletters": "cityHash64(source_topic, source_partition)",
    "host_links": "cityHash64(host)",
}
# Small dimension tables (joined by materialized views when 005 created them; the store writer
# reads rnic_inventory since 013): a full copy on every node.
EVERYWHERE = frozenset({"rnic_inventory", "schema_migrations"})

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CREATE_TABLE = re.compile(r"^CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?(\w+)\s*\(", re.I)
_ENGINE = re.compile(r"ENGINE\s*=\s*(\w*MergeTree)\b(\s*\(([^()]*)\))?", re.I)
_ORDER_BY = re.compile(r"\bORDER\s+BY\s+\(?\s*([A-Za-z_][A-Za-z0-9_]*)", re.I)
_SETTINGS = re.compile(r"\bSETTINGS\b", re.I)
_NON_REPL = re.compile(r"\bnon_replicated_deduplication_window\b", re.I)
_CREATE_MV = re.compile(r"^CREATE\s+MATERIALIZED\s+VIEW\s+(IF\s+NOT\s+EXISTS\s+)?(\w+)\s+TO\s+(\w+)\s+AS\s", re.I)
_CREATE_OTHER = re.compile(r"^CREATE\s+(FUNCTION|VIEW)\s+(IF\s+NOT\s+EXISTS\s+)?(\w+)\s", re.I)
_DROP = re.compile(r"^DROP\s+(VIEW|TABLE|FUNCTION)\s+(IF\s+EXISTS\s+)?(\w+)\s*$", re.I)
_ALTER = re.compile(r"^ALTER\s+TABLE\s+(\w+)\s+(.*)$", re.I | re.S)
_FROM_JOIN = re.compile(r"\b(FROM|JOIN)\s+(\w+)\b", re.I)
_CODEC = re.compile(r"\s+CODEC\((?:[^()]|\([^()]*\))*\)", re.I)
_SCHEMA_CHANGE = re.compile(r"^\s*(ADD|DROP|RENAME|MODIFY)\s+COLUMN\b", re.I)


class ClusterDDLError(ValueError):
    """A migration statement the cluster renderer does not know how to render (the message names it)."""


@dataclass
class ClusterRenderer:
    """Renders statements in migration order; remembers which tables are sharded (``NAME_local`` +
    ``Distributed``) so later views, ``ALTER`` and ``DROP`` statements address the right table."""

    cluster: str
    sharded: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not _IDENT.match(self.cluster):
            raise ClusterDDLError(f"cluster name {self.cluster!r}: use letters, digits and _ (as in remote_servers)")

    @property
    def on(self) -> str:
        """The ``ON CLUSTER`` clause of every statement."""
        return f"ON CLUSTER {self.cluster}"

    def local(self, name: str) -> str:
        """The table that holds ``name``'s rows on a node."""
        return name + LOCAL_SUFFIX if name in self.sharded else name

    def render(self, stmt: str, where: str = "") -> list[str]:
        """The cluster statements for one single-node statement.

        Raises:
            ClusterDDLError: an unknown statement shape or engine (``where`` names the migration).
        """
        s = stmt.strip()
        if m := _CREATE_TABLE.match(s):
            return self._table(s, m.group(2), where)
        if m := _CREATE_MV.match(s):
            name, target = m.group(2), m.group(3)
            body = s[m.end():]
            body = _FROM_JOIN.sub(lambda j: f"{j.group(1)} {self.local(j.group(2))}", body)
            ine = m.group(1) or ""
            return [f"CREATE MATERIALIZED VIEW {ine}{name} {self.on} TO {self.local(target)} AS {body}"]
        if m := _CREATE_OTHER.match(s):
            return [s[:m.end(3)] + f" {self.on}" + s[m.end(3):]]
        if m := _DROP.match(s):
            kind, ie, name = m.group(1).upper(), m.group(2) or "", m.group(3)
            out = [f"DROP {kind} {ie}{name} {self.on}"]
            if kind == "TABLE" and name in self.sharded:
                out.append(f"DROP TABLE {ie}{self.local(name)} {self.on} SYNC")
                self.sharded.discard(name)
            return out
        if m := _ALTER.match(s):
            name, rest = m.group(1), m.group(2)
            out = [f"ALTER TABLE {self.local(name)} {self.on} {rest}"]
            if name in self.sharded and _SCHEMA_CHANGE.match(rest):
                out.append(f"ALTER TABLE {name} {self.on} {_CODEC.sub('', rest)}")  # the Distributed table's columns
            return out
        raise ClusterDDLError(f"{where or 'statement'}: cannot render for a cluster: {s[:80]!r}")

    def _table(self, s: str, name: str, where: str) -> list[str]:
        e = _ENGINE.search(s)
        if not e:
            raise ClusterDDLError(f"{where}: table {name}: only *MergeTree engines render for a cluster")
        family, args = e.group(1), (e.group(3) or "").strip()
        everywhere = name in EVERYWHERE
        path = EVERYWHERE_PATH if everywhere else REPLICA_PATH
        engine = f"ENGINE = Replicated{family}('{path}', '{{replica}}'{', ' + args if args else ''})"
        body = s[:e.start()] + engine + s[e.end():]
        if _NON_REPL.search(body):
            body = _NON_REPL.sub("replicated_deduplication_window", body)
        elif _SETTINGS.search(body[e.start():]):
            body += f", replicated_deduplication_window = {DEDUP_WINDOW}"
        else:
            body += f"\nSETTINGS replicated_deduplication_window = {DEDUP_WINDOW}"
        head = _CREATE_TABLE.match(body)
        ine = head.group(1) or ""
        table = name if everywhere else name + LOCAL_SUFFIX
        body = f"CREATE TABLE {ine}{table} {self.on} (" + body[head.end():]
        if everywhere:
            return [body]
        self.sharded.add(name)
        key = SHARD_KEYS.get(name)
        if key is None:
            o = _ORDER_BY.search(s)
            if not o:
                raise ClusterDDLError(f"{where}: table {name} has no ORDER BY column to shard by; add it to SHARD_KEYS")
            key = f"cityHash64({o.group(1)})"
        dist = (f"CREATE TABLE {ine}{name} {self.on} AS {table}\n"
                f"ENGINE = Distributed('{self.cluster}', currentDatabase(), '{table}', {key})")
        return [body, dist]


@dataclass(frozen=True)
class RenderedMigration:
    """One migration's statements for a target: single node (``cluster`` None) or a named cluster."""

    number: int
    name: str
    statements: tuple[str, ...]


def render_migrations(cluster: str | None = None, found: list[Migration] | None = None) -> list[RenderedMigration]:
    """Every migration (and the ledger table first, as number 0) for one node, or for ``cluster``.

    Raises:
        ClusterDDLError: a statement cannot be rendered for a cluster, or a bad cluster name.
    """
    found = migrations() if found is None else found
    ledger = RenderedMigration(0, "schema_migrations", (LEDGER_DDL,))
    if cluster is None:
        return [ledger, *(RenderedMigration(m.number, m.name, m.statements) for m in found)]
    r = ClusterRenderer(cluster)
    out = [RenderedMigration(0, ledger.name, tuple(r.render(LEDGER_DDL, "ledger")))]
    for m in found:
        out.append(RenderedMigration(m.number, m.name, tuple(s for st in m.statements for s in r.render(st, m.name))))
    return out


def ddl_script(cluster: str | None = None) -> str:
    """The rendered migrations as one SQL script (``;`` after each statement, a comment per migration).

    Each migration is followed by its row in ``schema_migrations``, as :func:`sinks.clickhouse.migrate`
    records it, so a store writer started afterwards finds every migration applied and runs none
    (on a cluster it must not: the single-node DDL would create plain tables on its one server).
    """
    parts = []
    for m in render_migrations(cluster):
        parts.append(f"-- {m.number:03d} {m.name}" + (f" (cluster {cluster})" if cluster else ""))
        parts.extend(f"{s};" for s in m.statements)
        if m.number:
            parts.append(f"INSERT INTO schema_migrations (number, name, applied_ns) VALUES ({m.number}, "
                         f"'{m.name}', toUnixTimestamp64Nano(now64(9)));")
    return "\n".join(parts) + "\n"
