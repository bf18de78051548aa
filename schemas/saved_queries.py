"""Saved queries: plain SQL files in ``schemas/queries/NAME.sql`` that a user can read and copy.

A file starts with ``--`` comment lines: a description, then one line per parameter::

    -- param since UInt32 604800 seconds back from now (--since 7d)
    -- param rnic String required the RNIC id (-p rnic=A3)
    -- param src_tor String '' only this prober ToR ('' = all)

The third word is the default; ``required`` means the user must give it.

The SQL uses ClickHouse's own parameter syntax ``{since:UInt32}``, so the file runs
unchanged in ``clickhouse-client --param_since=86400``. :func:`render` replaces each
placeholder by a literal after checking its value against the declared type
(integers are parsed as integers, strings are quoted with ``\\`` and ``'`` escaped),
so a parameter can never change the statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_PARAM_LINE = re.compile(r"^--\s*param\s+([a-z_][a-z0-9_]*)\s+(UInt32|UInt64|Int64|Float64|String)\s+(\S+)\s*(.*)$")
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*):(UInt32|UInt64|Int64|Float64|String)\}")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DURATION = re.compile(r"^(\d+)([smhdw]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_INT_RANGE = {"UInt32": (0, 2**32 - 1), "UInt64": (0, 2**64 - 1), "Int64": (-(2**63), 2**63 - 1)}


class SavedQueryError(ValueError):
    """A saved query is unknown, or a parameter is missing or of the wrong type; the message says which."""


@dataclass(frozen=True)
class Param:
    """One declared parameter: name, ClickHouse type, default (as text) and meaning."""

    name: str
    type: str
    default: str
    doc: str
    required: bool = False


@dataclass(frozen=True)
class SavedQuery:
    """One ``schemas/queries/NAME.sql`` file."""

    name: str
    description: str
    params: tuple[Param, ...]
    sql: str


def parse_duration(text: str) -> int:
    """Seconds in ``"90d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"2w"`` or a bare number of seconds.

    Raises:
        SavedQueryError: ``text`` is not such a duration.
    """
    m = _DURATION.match(text.strip())
    if not m:
        raise SavedQueryError(f"--since {text!r}: write a duration like 90d, 12h, 30m, 45s or 2w")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def _parse(name: str, text: str) -> SavedQuery:
    doc: list[str] = []
    params: list[Param] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        m = _PARAM_LINE.match(line)
        if m:
            default = m.group(3)
            required = default == "required"
            params.append(Param(m.group(1), m.group(2), "" if default in ("''", "required") else default,
                                m.group(4), required))
        else:
            doc.append(line[2:].strip())
    declared = {p.name for p in params}
    for used, _ in _PLACEHOLDER.findall(text):
        if used not in declared:
            raise SavedQueryError(f"schemas/queries/{name}.sql uses {{{used}}} but declares no '-- param {used}' line")
    return SavedQuery(name, " ".join(doc), tuple(params), text)


def names() -> list[str]:
    """The names of every saved query, sorted."""
    return sorted(e.name[:-4] for e in resources.files("schemas.queries").iterdir() if e.name.endswith(".sql"))


def load(name: str) -> SavedQuery:
    """The saved query ``name``.

    Raises:
        SavedQueryError: no file ``schemas/queries/NAME.sql``; the message lists the names.
    """
    if not _NAME.match(name) or name not in names():
        raise SavedQueryError(f"no saved query {name!r}; saved queries are: {', '.join(names())}")
    return _parse(name, resources.files("schemas.queries").joinpath(f"{name}.sql").read_text())


def check_query_text(text: str) -> None:
    """Refuse a single word that is not a saved query: it is a misspelt name, never SQL to run.

    Raises:
        SavedQueryError: ``text`` is one word (no spaces) and no saved query has that name; the
            message suggests the nearest names (difflib) and how to list them.
    """
    word = text.strip()
    if not word or any(c.isspace() for c in word) or word in names():
        return
    import difflib

    near = difflib.get_close_matches(word, names(), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise SavedQueryError(f"no saved query named {word!r}; {hint}`fabricscope queries` lists them "
                          "(SQL has spaces: SELECT ...)")


def is_saved_query(text: str) -> bool:
    """Whether ``text`` names a saved query (rather than being SQL)."""
    return bool(_NAME.match(text)) and text in names()


def _literal(param: Param, value: str) -> str:
    if param.type == "String":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if param.type == "Float64":
        try:
            return repr(float(value))
        except ValueError:
            raise SavedQueryError(f"parameter {param.name}={value!r}: expected a number") from None
    try:
        n = int(value)
    except ValueError:
        raise SavedQueryError(f"parameter {param.name}={value!r}: expected an integer ({param.type})") from None
    lo, hi = _INT_RANGE[param.type]
    if not lo <= n <= hi:
        raise SavedQueryError(f"parameter {param.name}={n}: outside {param.type} [{lo}, {hi}]")
    return str(n)


def render(query: SavedQuery, values: dict[str, str] | None = None) -> str:
    """The query's SQL with every ``{name:Type}`` replaced by a checked literal.

    Args:
        query: a loaded saved query.
        values: parameter values as text; ``since`` may be a duration (``90d``).
            Missing ones take the file's default.

    Raises:
        SavedQueryError: an unknown parameter, a missing one without a default, or a bad value.
    """
    values = dict(values or {})
    by_name = {p.name: p for p in query.params}
    unknown = set(values) - set(by_name)
    if unknown:
        raise SavedQueryError(
            f"saved query {query.name} has no parameter {', '.join(sorted(unknown))}; "
            f"it takes: {', '.join(by_name) or 'none'}"
        )
    literals: dict[str, str] = {}
    for p in query.params:
        value = values.get(p.name, p.default)
        if p.name == "since":
            value = str(parse_duration(value))
        if p.required and p.name not in values:
            raise SavedQueryError(f"saved query {query.name} needs -p {p.name}=VALUE ({p.doc})")
        literals[p.name] = _literal(p, value)
    body = "\n".join(line for line in query.sql.splitlines() if not line.lstrip().startswith("--"))
    return _PLACEHOLDER.sub(lambda m: literals[m.group(1)], body)


def render_named(name: str, values: dict[str, str] | None = None) -> str:
    """:func:`render` of the saved query ``name``."""
    return render(load(name), values)
