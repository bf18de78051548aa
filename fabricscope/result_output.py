"""Printing a query result for a person (a table that cannot hang the terminal) or a machine (CSV, JSON lines).

- Table mode shows at most ``limit`` rows (``--limit N``, ``--all``) and says ``N rows (showing M)``;
  an empty result says ``0 rows``. A result wider than the terminal, or ``--vertical``, is printed
  one field per line per row (``clickhouse-client``'s ``\\G``). On a terminal a result taller than
  the screen goes through the pager (``$PAGER``, else ``less``); colour only on a terminal and never
  with ``NO_COLOR`` set (rich's own rules).
- CSV and JSON lines stream batch by batch, every row (the store's own result limits bound them).
- Time columns are ISO 8601 (UTC or ``--tz local``) in every mode, unless ``--ns``
  (:func:`fabricscope.times.format_columns`); floats are rounded to 6 significant digits in table mode only.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from fabricscope.times import format_columns

DEFAULT_LIMIT = 100


def column_types(run: Callable[[str], pa.Table], sql: str, result: pa.Table) -> dict[str, str]:
    """ClickHouse types of ``result``'s columns, from ``DESCRIBE (sql)`` through ``run``.

    Asked only when some column could be a ``DateTime`` (Arrow ``uint32``, which is how ClickHouse
    hands it over); ``{}`` when none could, or when the statement cannot be described (``SHOW``).
    """
    if not any(pa.types.is_uint32(f.type) for f in result.schema):
        return {}
    try:
        described = run(f"DESCRIBE ({sql.strip().rstrip(';')})")
        return dict(zip(described.column("name").to_pylist(), described.column("type").to_pylist(), strict=True))
    except Exception:  # not a SELECT (SHOW, DESCRIBE): its columns are no DateTimes anyway
        return {}


def raw_times(result: pa.Table) -> pa.Table:
    """``result`` with every Arrow timestamp column as the integer it stores (seconds for ``DateTime``, the
    column's unit for ``DateTime64``): what ``--ns`` prints, whichever way the engine handed the column over."""
    for i, field in enumerate(result.schema):
        if pa.types.is_timestamp(field.type):
            result = result.set_column(i, field.name, result.column(i).cast(pa.int64()))
    return result


def _rows(result: pa.Table, types: dict[str, str], tz: str, ns: bool, limit: int | None = None
          ) -> Iterator[list[Any]]:
    if ns:
        result = raw_times(result)
    taken = 0
    for batch in result.to_batches(max_chunksize=10_000):
        if limit is not None and taken >= limit:
            return
        if limit is not None:
            batch = batch.slice(0, limit - taken)
        cols = batch.to_pydict()
        if not ns:
            cols = format_columns(cols, types, tz)
        values = list(cols.values())
        for i in range(batch.num_rows):
            yield [c[i] for c in values]
        taken += batch.num_rows


def write_json_lines(result: pa.Table, out: TextIO, types: dict[str, str] | None = None, tz: str = "utc",
                     ns: bool = False) -> None:
    """One JSON object per row; times as ISO strings (numbers with ``ns``)."""
    names = result.column_names
    for row in _rows(result, types or {}, tz, ns):
        out.write(json.dumps(dict(zip(names, row, strict=True)), default=str) + "\n")


def _arrow_iso_utc(result: pa.Table, types: dict[str, str]) -> pa.Table | None:
    """``result`` with its time columns as ISO 8601 UTC strings, computed by Arrow (fast); None when a column
    needs the row-by-row path (arrays, nested types)."""
    import pyarrow.compute as pc

    from fabricscope.times import is_datetime_type

    cols = []
    for name, col in zip(result.column_names, result.columns, strict=True):
        t = col.type
        if pa.types.is_timestamp(t):
            stamp = col if t.tz else pc.assume_timezone(col, "UTC")
        elif (pa.types.is_uint32(t) or pa.types.is_int64(t)) and is_datetime_type(types.get(name, "")):
            stamp = col.cast(pa.int64()).cast(pa.timestamp("s", tz="UTC"))
        elif is_datetime_type(types.get(name, "")) or pa.types.is_nested(t):
            return None
        else:
            cols.append(col)
            continue
        text = pc.strftime(pc.cast(stamp, pa.timestamp(stamp.type.unit, tz="UTC")), format="%Y-%m-%dT%H:%M:%S")
        cols.append(pc.binary_join_element_wise(text, pa.scalar("Z"), ""))
    return pa.table(cols, names=result.column_names)


def write_csv(result: pa.Table, out: TextIO, types: dict[str, str] | None = None, tz: str = "utc",
              ns: bool = False) -> None:
    """A header line and one CSV line per row; times as ISO strings (numbers with ``ns``). In UTC the
    conversion and the writing are Arrow's (a second for 186,871 rows of 31 columns); DateTime64 keeps its
    fraction (``18:29:00.000Z``)."""
    fast = raw_times(result) if ns else _arrow_iso_utc(result, types or {}) if tz == "utc" else None
    if fast is not None:
        import pyarrow.csv as pacsv

        sink = pa.BufferOutputStream()
        pacsv.write_csv(fast, sink, pacsv.WriteOptions(quoting_style="needed"))
        out.write(sink.getvalue().to_pybytes().decode())
        return
    w = csv.writer(out, lineterminator="\n")
    w.writerow(result.column_names)
    for row in _rows(result, types or {}, tz, ns):
        w.writerow(["" if v is None else v for v in row])


def _human(v: Any) -> str:  # noqa: ANN401
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def count_line(total: int, shown: int) -> str:
    """``0 rows``, ``1 row``, ``42 rows``, ``186,871 rows (showing 100; --limit N or --all for more)``."""
    text = f"{total:,} row{'' if total == 1 else 's'}"
    if shown < total:
        text += f" (showing {shown:,}; --limit N or --all for more, --csv/--json for every row)"
    return text


def _vertical(names: list[str], rows: list[list[str]]) -> list[str]:
    width = max((len(n) for n in names), default=0)
    lines: list[str] = []
    for i, row in enumerate(rows, 1):
        head = f"Row {i}:"
        lines += ["" if i > 1 else None, head, "─" * len(head)]  # type: ignore[list-item]
        lines += [f"{n + ':':<{width + 1}} {v}" for n, v in zip(names, row, strict=True)]
    return [ln for ln in lines if ln is not None]


def print_result_table(result: pa.Table, console: Console | None = None, types: dict[str, str] | None = None,
                       tz: str = "utc", ns: bool = False, limit: int | None = DEFAULT_LIMIT,
                       vertical: bool = False, pager: bool | None = None) -> None:
    """Print ``result`` for a person: at most ``limit`` rows (None: all), a count line, vertical when asked
    or when the table would not fit the console's width, through the pager when on a terminal and taller
    than the screen (``pager`` forces it on or off)."""
    console = console or Console()
    names = result.column_names
    rows = [[_human(v) for v in row] for row in _rows(result, types or {}, tz, ns, limit)]
    footer = count_line(result.num_rows, len(rows))
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
    natural = sum(widths) + 3 * len(names) + 1
    auto_vertical = not vertical and bool(rows) and natural > console.width and len(names) > 1
    if vertical or auto_vertical:
        body: Any = "\n".join(_vertical(names, rows))
        if auto_vertical:
            footer += f" — {len(names)} columns are wider than the terminal, so one field per line (--vertical)"
        tall = len(rows) * (len(names) + 2)
    else:
        body = Table(*names, show_lines=False)
        for r in rows:
            body.add_row(*r)
        tall = len(rows) + 4
    use_pager = (console.is_terminal and tall > console.height) if pager is None else pager
    if use_pager:
        with console.pager(styles=not console.no_color):
            _emit(console, body, rows, footer)
    else:
        _emit(console, body, rows, footer)


def _emit(console: Console, body: Any, rows: list[list[str]], footer: str) -> None:  # noqa: ANN401
    if rows:
        console.print(body, highlight=False, soft_wrap=isinstance(body, str))
    console.print(footer, highlight=False, style="dim", soft_wrap=True)


def print_result(result: pa.Table, mode: str = "table", types: dict[str, str] | None = None, tz: str = "utc",
                 ns: bool = False, limit: int | None = DEFAULT_LIMIT, vertical: bool = False,
                 out: TextIO | None = None) -> None:
    """Print ``result`` on stdout as ``table`` (see :func:`print_result_table`), ``csv`` or ``json`` lines."""
    if mode == "json":
        write_json_lines(result, out or sys.stdout, types, tz, ns)
    elif mode == "csv":
        write_csv(result, out or sys.stdout, types, tz, ns)
    else:
        print_result_table(result, Console(file=out) if out else None, types, tz, ns, limit, vertical)
