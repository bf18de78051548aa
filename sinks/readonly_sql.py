"""What a user's SQL may do: read the fabricscope tables, never write, never reach outside the store.

Every query that arrives as text (``fabricscope query``, saved queries, the local
endpoint) runs on a connection with ClickHouse's ``readonly = 1`` and the limits of
:class:`QueryLimits`, after :class:`ReadonlyGuard` has checked it with the engine's
own parser.

Why both. ``readonly = 1`` (ClickHouse docs, "Permissions for queries") refuses DDL,
INSERT, ALTER, DELETE, ``SET``/``SETTINGS`` and the table functions file(), url(),
remote(), s3(), executable(), mysql(), ... But chdb runs in-process as the all-powerful
``default`` user, and there ``readonly = 1`` still lets through (tried on chdb
26.9, ``tests/sinks/test_readonly_sql.py``): the *scalar* ``file('/etc/hostname')``,
``SELECT ... INTO OUTFILE`` (writes a file), ``KILL QUERY``, ``SYSTEM STOP MERGES``,
``USE`` (would switch the database of a shared connection), and several statements in one
string (chdb runs them all). ``readonly = 2`` would also let a query raise its own
``max_execution_time``, so ``1`` it is.

The guard therefore asks the engine to parse the text (``formatQuerySingleLine``:
exactly one statement, canonical text; then ``EXPLAIN AST`` of that text) and accepts:

- statements: SELECT/WITH (one union of selects), DESCRIBE, SHOW TABLES/DATABASES/
  COLUMNS/PROCESSLIST/CREATE TABLE, EXISTS, EXPLAIN of a SELECT; nothing after them
  (no INTO OUTFILE, no FORMAT, no SETTINGS);
- tables: the current database's (the fabricscope tables; a read-only connection can
  create no other) and common table expressions; of ``system`` only :data:`SYSTEM_TABLES`;
  ``information_schema`` (views over those);
- table functions: :data:`ALLOWED_TABLE_FUNCTIONS` (generators that read nothing);
- scalar functions: all but :data:`REFUSED_FUNCTIONS` (those that read files, dictionaries
  or remote servers by name).

The statement that runs is the checked canonical text, never the raw one.

``EXPLAIN AST`` prints identifiers raw, so a quoted name with a newline adds lines to its
output. Every rule here reads lines independently (a node type and its name) or by their
absolute indentation under the first line, which no name can precede: an injected line
can only add a refusal, never hide a real node.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from sinks.store_errors import StoreError

#: ``system`` tables a user needs to find their way (schema, parts, merges, running queries,
#: settings and metrics). Not: users, roles, grants, quotas, query_log, zookeeper, ...
SYSTEM_TABLES = frozenset({
    "one", "numbers", "numbers_mt", "zeros", "zeros_mt", "databases", "tables", "columns", "parts",
    "parts_columns", "detached_parts", "merges", "mutations", "disks", "storage_policies", "processes",
    "settings", "merge_tree_settings", "functions", "table_functions", "table_engines", "formats",
    "data_type_families", "time_zones", "metrics", "events", "asynchronous_metrics", "build_options",
    "errors", "replicas", "clusters", "projection_parts",
})
INFORMATION_SCHEMA = frozenset({"information_schema", "INFORMATION_SCHEMA"})

#: Table functions that read nothing outside the query itself (``view`` wraps a subquery that is
#: checked like any other).
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries", "primes", "values",
    "sqlstandardvalues", "view", "null", "generaterandom",
})
#: Scalar functions that reach outside the store or name a table in a string (so bypass the
#: table list): file() reads the server's files, dictionaries may be sourced from anywhere,
#: hasColumnInTable() connects to a host, catboostEvaluate() loads a model path, joinGet()
#: reads any Join table, generateSerialID() writes to Keeper. ``dict*`` covers dictGet & co.
REFUSED_FUNCTIONS = frozenset({
    "file", "hascolumnintable", "catboostevaluate", "modelevaluate", "joinget", "joingetornull",
    "generateserialid", "naivebayesclassifier", "python",
})
#: Names that are both a table function and a harmless scalar function.
_BOTH_HARMLESS = frozenset({"format"})

# First line kind -> the node types allowed directly under it (indentation 1), in any order but
# at most the listed count each. INTO OUTFILE / FORMAT / SETTINGS show up there as Literal,
# Identifier and Set nodes.
_STATEMENTS: dict[str, dict[str, int]] = {
    "SelectWithUnionQuery": {"ExpressionList": 1},
    "DescribeQuery": {"TableExpression": 1},
    "ShowTables": {"Identifier": 1},
    "ShowColumns": {},
    "ShowProcesslistQuery": {},
    "ShowCreateTableQuery": {"Identifier": 2},
    "ExistsTableQuery": {"Identifier": 2},
    "Explain": {"SelectWithUnionQuery": 1, "Set": 1},
}
_LINE = re.compile(r"^(?P<indent> *)(?P<type>\S+)(?: (?P<name>.*?))?(?: \(alias .*\))?(?: \(children \d+\))?$")
_LIMITS_HINT = "a query may read the fabricscope tables only (docs/security.md)"
_SETTINGS_REFUSED = "SETTINGS in a query: the read-only connection's settings and limits cannot be changed by a query"


class QueryRefused(StoreError):
    """A user's SQL would write, change a setting, or read outside the store; the message says which."""


@dataclass(frozen=True)
class QueryLimits:
    """Limits every user query runs under (ClickHouse settings of the same names).

    A query past one of them stops with the engine's error (TIMEOUT_EXCEEDED,
    TOO_MANY_ROWS_OR_BYTES, MEMORY_LIMIT_EXCEEDED) instead of stalling the store writer's host.

    Attributes:
        max_execution_time_s: seconds of wall time.
        max_result_rows: rows in the result.
        max_result_bytes: uncompressed bytes in the result.
        max_threads: threads one query may use (the settings default to half the cores, so the
            inserts keep the other half).
        max_memory_bytes: memory one query may take (``max_memory_usage``; a per-user cap would also
            cap the writer's inserts, which chdb runs as the same ``default`` user).
        readers: queries that may run at once on the long lane; one more reader is kept for short
            queries, so every reader together takes at most ``(readers + 1) * max_memory_bytes``.
        short_execution_time_s: the time limit on the reader kept for short queries.
    """

    max_execution_time_s: float = 60.0
    max_result_rows: int = 1_000_000
    max_result_bytes: int = 256 * 1024 * 1024
    max_threads: int = 2
    max_memory_bytes: int = 512 * 1024 * 1024
    readers: int = 3
    short_execution_time_s: float = 2.0

    def short_lane(self) -> QueryLimits:
        """The limits of the reader kept for short queries: the same, with the short time limit."""
        return replace(self, max_execution_time_s=min(self.max_execution_time_s, self.short_execution_time_s))

    def settings(self) -> dict[str, int | float | str]:
        """The per-query settings: ``readonly = 1`` (no writes, no settings changes) and the limits."""
        return {
            "readonly": 1,
            "max_execution_time": self.max_execution_time_s,
            "timeout_overflow_mode": "throw",
            "max_result_rows": self.max_result_rows,
            "max_result_bytes": self.max_result_bytes,
            "result_overflow_mode": "throw",
            "max_threads": self.max_threads,
            "max_memory_usage": self.max_memory_bytes,
            # The query's threads run at nice 10, so the inserts win the CPU when both want it.
            "os_thread_priority": 10,
        }


def sql_string(text: str) -> str:
    """``text`` as a ClickHouse string literal (backslash and quote escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _clean_engine_error(err: Exception) -> str:
    msg = str(err).split("\nquery:")[0].split("\nstatement:")[0]
    return re.sub(r"\s*In scope SELECT formatQuerySingleLine\(.*$", "", msg, flags=re.S).strip()


class ReadonlyGuard:
    """Checks a user's SQL with the engine's parser before it runs read-only.

    Args:
        run_text: runs a statement on a read-only connection and returns its result as
            TabSeparatedRaw text (used for ``formatQuerySingleLine``, ``EXPLAIN AST`` and the
            engine's lists of table functions and databases).
    """

    def __init__(self, run_text: Callable[[str], str]) -> None:
        self._run = run_text
        self._catalog: tuple[str, frozenset[str], frozenset[str]] | None = None

    def _engine_catalog(self) -> tuple[str, frozenset[str], frozenset[str]]:
        """(current database, other databases, refused table functions), asked once."""
        if self._catalog is None:
            current = self._run("SELECT currentDatabase()").strip()
            dbs = frozenset(self._run("SELECT name FROM system.databases").split()) - {current}
            tfs = frozenset(n.lower() for n in self._run("SELECT name FROM system.table_functions").split())
            self._catalog = (current, dbs, tfs - ALLOWED_TABLE_FUNCTIONS - _BOTH_HARMLESS)
        return self._catalog

    def check(self, sql: str) -> str:
        """The canonical single-line text of ``sql`` to run read-only.

        Raises:
            QueryRefused: more than one statement, a statement that is not a read, INTO OUTFILE,
                FORMAT or SETTINGS, a table outside the store's, or a function that reaches outside.
            StoreError: the engine cannot parse ``sql`` (its syntax error).
        """
        if not sql.strip():
            raise QueryRefused("empty query")
        try:
            text = self._run(f"SELECT formatQuerySingleLine({sql_string(sql)})").rstrip("\n")
        except StoreError as err:
            msg = _clean_engine_error(err)
            if "Multi-statements are not allowed" in msg:
                raise QueryRefused("one statement per query: the text holds more than one") from None
            raise StoreError(msg) from None
        try:
            ast = self._run(f"EXPLAIN AST {text}").rstrip("\n").split("\n")
        except StoreError as err:  # the engine applies a SETTINGS clause while it explains
            if "(READONLY)" in str(err):
                raise QueryRefused(f"{_SETTINGS_REFUSED} ({_clean_engine_error(err).split('(version')[0].strip()})") \
                    from None
            raise StoreError(_clean_engine_error(err)) from None
        self._check_ast(ast, text)
        return text

    def _check_ast(self, lines: list[str], text: str = "") -> None:
        current, other_dbs, refused_tfs = self._engine_catalog()
        root = _LINE.match(lines[0])
        kind = root.group("type") if root else lines[0]
        if kind not in _STATEMENTS:
            raise QueryRefused(f"{_statement_name(kind)} is not a read; queries may only SELECT, SHOW, DESCRIBE, "
                               "EXISTS or EXPLAIN (the store is changed by the pipeline and by `fabricscope verdict` "
                               "/ `history inventory` only)")
        under_root: dict[str, int] = {}
        for line in lines[1:]:
            m = _LINE.match(line)
            if not m:
                continue
            node, name = m.group("type"), (m.group("name") or "").strip()
            if len(m.group("indent")) == 1:
                under_root[node] = under_root.get(node, 0) + 1
            if node == "Set" and not (kind == "Explain" and len(m.group("indent")) == 1):
                raise QueryRefused(_SETTINGS_REFUSED)
            if node == "Function":
                fn = name.lower()
                if fn in refused_tfs or fn in REFUSED_FUNCTIONS or fn.startswith("dict"):
                    raise QueryRefused(f"function {name}() reaches outside the store or names a table in a "
                                       f"string; {_LIMITS_HINT}")
            elif node == "TableIdentifier":
                _check_table(name, current, other_dbs)
            elif node == "Identifier" and "." in name:
                db, _, table = name.partition(".")
                if db in other_dbs and not _table_allowed(db, table):
                    raise QueryRefused(f"table {name} is not one a query may read; {_LIMITS_HINT}")
        allowed = _STATEMENTS[kind]
        extra = {n: c for n, c in under_root.items() if c > allowed.get(n, 0)}
        if extra:
            raise QueryRefused("INTO OUTFILE, FORMAT and SETTINGS clauses are refused: results come back "
                               "to the caller only, in the caller's format")
        # Statements that name a table without a TableIdentifier node: it must be one a query may read.
        if kind in ("ShowCreateTableQuery", "ExistsTableQuery"):
            ids = [(m.group("name") or "").strip() for m in map(_LINE.match, lines[1:])
                   if m and m.group("type") == "Identifier" and len(m.group("indent")) == 1]
            if len(ids) == 2:
                _check_table(".".join(ids), current, other_dbs)
        elif kind == "ShowColumns":
            _check_table(_show_columns_table(text), current, other_dbs)


_QUOTED_OR_BARE = r"`(?:[^`\\]|\\.)*`|[^\s`]+"
_SHOW_COLUMNS = re.compile(rf"^SHOW (?:EXTENDED )?(?:FULL )?COLUMNS FROM (?P<t>{_QUOTED_OR_BARE})"
                           rf"(?: FROM (?P<d>{_QUOTED_OR_BARE}))?(?: |$)")


def _show_columns_table(text: str) -> str:
    """``db.table`` (or ``table``) of a canonical ``SHOW COLUMNS`` text; refuses what it cannot read."""
    m = _SHOW_COLUMNS.match(text)
    if not m:
        raise QueryRefused(f"cannot tell which table SHOW COLUMNS reads; {_LIMITS_HINT}")
    table, db = m.group("t"), m.group("d")
    unquote = lambda n: n[1:-1] if n.startswith("`") else n  # noqa: E731
    return f"{unquote(db)}.{unquote(table)}" if db else unquote(table)


def _statement_name(kind: str) -> str:
    if kind.isupper():
        return kind
    words = re.sub(r"Query$", "", kind)
    return re.sub(r"(?<!^)(?=[A-Z])", " ", words).upper() or kind


def _table_allowed(db: str, table: str) -> bool:
    return (db == "system" and table in SYSTEM_TABLES) or db in INFORMATION_SCHEMA


def _check_table(name: str, current: str, other_dbs: frozenset[str]) -> None:
    """Unqualified names are the current database's tables or CTEs; qualified ones must be allowed."""
    if "." not in name:
        return
    db, _, table = name.partition(".")
    if db == current or _table_allowed(db, table):
        return
    if db == "system":
        raise QueryRefused(f"table {name} is not one a query may read; of system: "
                           f"{', '.join(sorted(SYSTEM_TABLES))}")
    raise QueryRefused(f"table {name} is outside the store's database {current}; {_LIMITS_HINT}")
