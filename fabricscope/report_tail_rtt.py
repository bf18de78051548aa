"""``fabricscope report tail-rtt``: the tail-RTT capacity study (R-Pingmesh §6; Pingmesh-style heatmap).

Reads four saved queries (``rtt_pinglist_hourly``, or ``rtt_pinglist_minutely`` when ``--since`` is
at most :data:`MINUTE_RESOLUTION_S`, ``rtt_service_hourly``, ``loss_heatmap``, ``rtt_pinglist_summary``)
and writes, into one directory:

- ``tail_rtt_by_pinglist.png``: P50/P99/P999 network RTT per hour (per minute for short ranges), one
  panel per pinglist;
- ``tail_rtt_by_service.png``: P50 and P99 per hour of each service (job), from raw probes (14 days);
- ``tor_heatmap.png``: ToR x ToR P99 network RTT and loss ratio;
- ``rtt_pinglist_hourly.csv`` (or ``rtt_pinglist_minutely.csv``), ``rtt_service_hourly.csv`` and
  ``tor_heatmap.csv``: the query results.

No analytics here: every number is the SQL's. Plots stay readable after a short run: points carry
markers (one hour is one point), the time axis spans the data, the loss colour scale starts at 0
(zero loss is the palest colour), and a panel without data says so instead of showing empty axes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from schemas.saved_queries import parse_duration, render_named

Query = Callable[[str], pa.Table]
MINUTE_RESOLUTION_S = 6 * 3600  # up to 6 h back: per-minute points (at most 360 per series)


def _plt():  # noqa: ANN202 - matplotlib.pyplot
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_axis(ax, times: list, step_s: int, tz: str = "utc") -> None:  # noqa: ANN001 - a matplotlib Axes
    """Span the data (plus one step each side), not matplotlib's default years around a lone point; tick labels
    as clock times (``18:20``) for minutes, with the date (``12-01 18:00``) for hours."""
    from datetime import timedelta

    import matplotlib.dates as mdates

    from fabricscope.times import zone

    if times:
        pad = timedelta(seconds=step_s)
        ax.set_xlim(min(times) - pad, max(times) + pad)
    locator = mdates.AutoDateLocator(minticks=4, maxticks=10, tz=zone(tz))
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M" if step_s < 3600 else "%m-%d %H:%M", tz=zone(tz)))


def _plain_log_ticks(ax) -> None:  # noqa: ANN001 - a matplotlib Axes
    """Log-axis labels as plain numbers (``60``, ``200``), never ``6×10¹``; minor ticks labelled at 2 and 5."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    def plain(v: float, _pos: int) -> str:
        return f"{v:,.0f}" if v >= 1 else f"{v:g}"

    ax.yaxis.set_major_formatter(FuncFormatter(plain))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    ax.yaxis.set_minor_formatter(FuncFormatter(plain))
    ax.tick_params(axis="y", which="minor", labelsize=7)


def _empty(ax, text: str) -> None:  # noqa: ANN001 - a matplotlib Axes
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _write_csv(table: pa.Table, path: Path) -> None:
    pacsv.write_csv(table, str(path))


def _loss(r: dict) -> float:
    return (r["timeouts"] or 0) / r["probes"] if r.get("probes") else np.nan


def plot_tail_rtt(series: pa.Table, path: Path, period: str = "", tz: str = "utc"):  # noqa: ANN201 - a Figure
    """P50/P99/P999 (µs, log axis, left) and loss (%, linear axis of its own, right, red) over time, one panel
    per pinglist; legends outside the data. Returns the (saved) matplotlib Figure; the caller closes it.

    ``series`` is ``rtt_pinglist_hourly`` (time column ``hour``) or ``rtt_pinglist_minutely`` (``minute``),
    with ``probes`` and ``timeouts``; ``period`` goes into the titles (``18:00–19:00 UTC``).
    """
    plt = _plt()
    tcol = "minute" if "minute" in series.column_names else "hour"
    step_s = 60 if tcol == "minute" else 3600
    pinglists = sorted(set(series["pinglist"].to_pylist()))
    fig, axes = plt.subplots(len(pinglists) or 1, 1, figsize=(12, 3.4 * max(len(pinglists), 1)), sharex=True,
                             squeeze=False)
    every = [r[tcol] for r in series.to_pylist()]
    for ax, name in zip(axes[:, 0], pinglists, strict=False):
        rows = [r for r in series.to_pylist() if r["pinglist"] == name]
        times = [r[tcol] for r in rows]
        for col, colour in (("p50_ns", "C0"), ("p99_ns", "C1"), ("p999_ns", "C2")):
            ax.plot(times, [(r[col] or np.nan) / 1000 for r in rows], "-o", ms=3, lw=1.2, color=colour,
                    label=col[:-3].upper())
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_ylabel("network RTT (µs)")
        ax.set_title(f"{name}: network RTT and loss per {tcol}" + (f", {period}" if period else ""))
        ax.grid(True, which="major", alpha=0.3)
        loss_ax = ax.twinx()
        loss = [100 * _loss(r) for r in rows]
        loss_ax.bar(times, loss, width=step_s / 86400 * 0.8, color="tab:red", alpha=0.35, label="loss %")
        loss_ax.set_ylabel("loss (%)", color="tab:red")
        loss_ax.tick_params(axis="y", colors="tab:red")
        top = np.nanmax(loss) if np.isfinite(loss).any() else 0.0
        loss_ax.set_ylim(0, max(1.0, top * 1.25))  # 0-1 % when healthy, room above the worst minute otherwise
        ax.set_zorder(loss_ax.get_zorder() + 1)  # RTT lines over the loss bars
        ax.patch.set_visible(False)
        handles = ax.get_legend_handles_labels()[0] + loss_ax.get_legend_handles_labels()[0]
        ax.legend(handles, [h.get_label() for h in handles], loc="upper left", bbox_to_anchor=(1.07, 1.0),
                  fontsize=8, borderaxespad=0)
        _time_axis(ax, every, step_s, tz)
    if not pinglists:
        _empty(axes[0, 0], "no probes in this period")
    axes[-1, 0].set_xlabel(f"{tcol} ({tz.upper() if tz == 'utc' else 'local time'})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def plot_services(by_service: pa.Table, path: Path, top: int = 8, period: str = "", step_s: int = 3600,
                  tz: str = "utc"):  # noqa: ANN201 - a Figure
    """P50 (dotted) and P99 (solid) per ``step_s`` of the ``top`` services with the most probes; legend outside
    the data. Returns the (saved) Figure; the caller closes it."""
    plt = _plt()
    rows = by_service.to_pylist()
    volume: dict[str, int] = {}
    for r in rows:
        volume[r["job"]] = volume.get(r["job"], 0) + r["probes"]
    jobs = sorted(volume, key=lambda j: (-volume[j], j))[:top]
    fig, ax = plt.subplots(figsize=(12, 4.4))
    for n, job in enumerate(jobs):
        mine = [r for r in rows if r["job"] == job]
        color = f"C{n % 10}"
        when = [r["hour"] for r in mine]
        ax.plot(when, [(r["p99_ns"] or np.nan) / 1000 for r in mine], "-o", ms=3, color=color, lw=1.2,
                label=f"{job} P99")
        ax.plot(when, [(r["p50_ns"] or np.nan) / 1000 for r in mine], ":o", ms=3, color=color, lw=1.2,
                label=f"{job} P50")
    unit = "minute" if step_s < 3600 else "hour"
    ax.set_title(f"service pinglist: network RTT per job per {unit}" + (f", {period}" if period else ""))
    if jobs:
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_ylabel("network RTT (µs)")
        ax.set_xlabel(f"{unit} ({tz.upper() if tz == 'utc' else 'local time'})")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
        _time_axis(ax, [r["hour"] for r in rows], step_s, tz)
    else:
        _empty(ax, "no service probes in this period (no job's connections on the service pinglist)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def plot_tor_heatmap(heat: pa.Table, path: Path, period: str = ""):  # noqa: ANN201 - a Figure
    """Two ToR x ToR heatmaps: P99 network RTT (µs) and loss (%) (Pingmesh Fig. style), each cell labelled with
    its value (up to 16 ToRs), the period in the title. Returns the (saved) Figure; the caller closes it."""
    plt = _plt()
    rows = heat.to_pylist()
    tors = sorted({r["prober_tor"] for r in rows} | {r["responder_tor"] for r in rows})
    at = {t: i for i, t in enumerate(tors)}
    p99 = np.full((len(tors), len(tors)), np.nan)
    loss = np.full((len(tors), len(tors)), np.nan)
    for r in rows:
        i, j = at[r["prober_tor"]], at[r["responder_tor"]]
        p99[i, j] = (r["p99_ns"] or np.nan) / 1000
        loss[i, j] = 100 * r["loss"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.0))
    # Loss from 0: zero loss is the palest red, never the middle of a symmetric scale (orange).
    top = float(np.nanmax(loss)) if np.isfinite(loss).any() else 0.0
    for ax, data, title, cmap, lim, fmt in (
            (axes[0], p99, "P99 network RTT (µs)", "viridis", {}, "{:,.0f}"),
            (axes[1], loss, "loss (%)", "Reds", {"vmin": 0.0, "vmax": max(top, 1.0)}, "{:.2f}")):
        ax.set_title(title + (f"\n{period}" if period else ""))
        if not tors:
            _empty(ax, "no probes in this period")
            continue
        im = ax.imshow(data, cmap=cmap, interpolation="nearest", **lim)
        ax.set_xlabel("responder ToR")
        ax.set_ylabel("prober ToR")
        step = max(1, len(tors) // 20)
        ax.set_xticks(range(0, len(tors), step), tors[::step], rotation=90)
        ax.set_yticks(range(0, len(tors), step), tors[::step])
        if len(tors) <= 16:
            lo, hi = im.get_clim()
            for (i, j), v in np.ndenumerate(data):
                if np.isfinite(v):
                    dark = (v - lo) / ((hi - lo) or 1) > 0.6 if cmap == "Reds" else (v - lo) / ((hi - lo) or 1) < 0.4
                    ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=8,
                            color="white" if dark else "black")
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def tail_rtt_report(query: Query, since: str, out: Path, tz: str = "utc",
                    now_ns: int | None = None) -> dict[str, pa.Table | list[Path]]:
    """Run the report's saved queries through ``query`` and write PNGs and CSVs into ``out``.

    Args:
        query: runs SQL and returns a pyarrow table (e.g. :func:`fabricscope.store_access.run_query`).
        since: how far back (``30d``, or seconds).
        out: the directory to write (created).
        tz: times in the charts: ``utc`` or ``local``.
        now_ns: the end of the period in the titles (default: now).

    Returns:
        ``hourly`` (per minute when ``since`` is at most 6 h), ``by_service`` (likewise), ``heatmap``,
        ``summary`` (the query results) and ``files`` (paths written).

    Raises:
        SavedQueryError: ``since`` is not a duration.
        OSError: ``out`` cannot be written.
    """
    import time

    from fabricscope.times import NS, format_window

    out.mkdir(parents=True, exist_ok=True)
    seconds = parse_duration(since)
    minutes = seconds <= MINUTE_RESOLUTION_S
    series = "rtt_pinglist_minutely" if minutes else "rtt_pinglist_hourly"
    end = (time.time_ns() if now_ns is None else now_ns) // NS * NS  # whole seconds in the titles
    period = format_window(end - seconds * NS, end, tz)
    hourly = query(render_named(series, {"since": since}))
    by_service = query(render_named("rtt_service_hourly", {"since": since, "step": "60" if minutes else "3600"}))
    heat = query(render_named("loss_heatmap", {"since": since}))
    summary = query(render_named("rtt_pinglist_summary", {"since": since}))
    files = [out / f"{series}.csv", out / "rtt_service_hourly.csv", out / "tor_heatmap.csv",
             out / "tail_rtt_by_pinglist.png", out / "tail_rtt_by_service.png", out / "tor_heatmap.png"]
    _write_csv(hourly, files[0])
    _write_csv(by_service, files[1])
    _write_csv(heat, files[2])
    plt = _plt()
    for fig in (plot_tail_rtt(hourly, files[3], period, tz),
                plot_services(by_service, files[4], period=period, step_s=60 if minutes else 3600, tz=tz),
                plot_tor_heatmap(heat, files[5], period)):
        plt.close(fig)
    return {"hourly": hourly, "by_service": by_service, "heatmap": heat, "summary": summary, "files": files}
