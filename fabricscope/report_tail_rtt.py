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


def _time_axis(ax, times: list, step_s: int) -> None:  # noqa: ANN001 - a matplotlib Axes
    """Span the data (plus one step each side), not matplotlib's default years around a lone point."""
    from datetime import timedelta

    if times:
        pad = timedelta(seconds=step_s)
        ax.set_xlim(min(times) - pad, max(times) + pad)


def _empty(ax, text: str) -> None:  # noqa: ANN001 - a matplotlib Axes
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _write_csv(table: pa.Table, path: Path) -> None:
    pacsv.write_csv(table, str(path))


def plot_tail_rtt(series: pa.Table, path: Path) -> None:
    """P50/P99/P999 (µs) over time, one panel per pinglist, log y axis.

    ``series`` is ``rtt_pinglist_hourly`` (time column ``hour``) or ``rtt_pinglist_minutely`` (``minute``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tcol = "minute" if "minute" in series.column_names else "hour"
    step_s = 60 if tcol == "minute" else 3600
    pinglists = sorted(set(series["pinglist"].to_pylist()))
    fig, axes = plt.subplots(len(pinglists) or 1, 1, figsize=(11, 3.2 * max(len(pinglists), 1)), sharex=True,
                             squeeze=False)
    every = [r[tcol] for r in series.to_pylist()]
    for ax, name in zip(axes[:, 0], pinglists, strict=False):
        rows = [r for r in series.to_pylist() if r["pinglist"] == name]
        times = [r[tcol] for r in rows]
        for col in ("p50_ns", "p99_ns", "p999_ns"):
            ax.plot(times, [(r[col] or np.nan) / 1000 for r in rows], "-o", ms=3, lw=1.2, label=col[:-3].upper())
        ax.set_yscale("log")
        ax.set_ylabel("network RTT (µs)")
        ax.set_title(f"{name}: network RTT per {tcol}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper right", ncols=3)
        _time_axis(ax, every, step_s)
    if not pinglists:
        _empty(axes[0, 0], "no probes in this period")
    axes[-1, 0].set_xlabel(f"{tcol} (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_services(by_service: pa.Table, path: Path, top: int = 8) -> None:
    """P50 (dotted) and P99 (solid) per hour of the ``top`` services with the most probes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = by_service.to_pylist()
    volume: dict[str, int] = {}
    for r in rows:
        volume[r["job"]] = volume.get(r["job"], 0) + r["probes"]
    jobs = sorted(volume, key=lambda j: (-volume[j], j))[:top]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for n, job in enumerate(jobs):
        mine = [r for r in rows if r["job"] == job]
        color = f"C{n % 10}"
        hours = [r["hour"] for r in mine]
        ax.plot(hours, [(r["p99_ns"] or np.nan) / 1000 for r in mine], "-o", ms=3, color=color, lw=1.2,
                label=f"{job} P99")
        ax.plot(hours, [(r["p50_ns"] or np.nan) / 1000 for r in mine], ":o", ms=3, color=color, lw=1.2,
                label=f"{job} P50")
    ax.set_title("service pinglist: network RTT per job per hour")
    if jobs:
        ax.set_yscale("log")
        ax.set_ylabel("network RTT (µs)")
        ax.set_xlabel("hour (UTC)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        _time_axis(ax, [r["hour"] for r in rows], 3600)
    else:
        _empty(ax, "no service probes in this period (no job's connections on the service pinglist)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tor_heatmap(heat: pa.Table, path: Path) -> None:
    """Two ToR x ToR heatmaps: P99 network RTT (µs) and loss ratio (Pingmesh Fig. style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = heat.to_pylist()
    tors = sorted({r["prober_tor"] for r in rows} | {r["responder_tor"] for r in rows})
    at = {t: i for i, t in enumerate(tors)}
    p99 = np.full((len(tors), len(tors)), np.nan)
    loss = np.full((len(tors), len(tors)), np.nan)
    for r in rows:
        i, j = at[r["prober_tor"]], at[r["responder_tor"]]
        p99[i, j] = (r["p99_ns"] or np.nan) / 1000
        loss[i, j] = r["loss"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6))
    # Loss from 0: zero loss is the palest red, never the middle of a symmetric scale (orange).
    top = float(np.nanmax(loss)) if np.isfinite(loss).any() else 0.0
    for ax, data, title, cmap, lim in ((axes[0], p99, "P99 network RTT (µs)", "viridis", {}),
                                       (axes[1], loss, "loss ratio (timeouts / probes)", "Reds",
                                        {"vmin": 0.0, "vmax": max(top, 0.01)})):
        if not tors:
            ax.set_title(title)
            _empty(ax, "no probes in this period")
            continue
        im = ax.imshow(data, cmap=cmap, interpolation="nearest", **lim)
        ax.set_title(title)
        ax.set_xlabel("responder ToR")
        ax.set_ylabel("prober ToR")
        step = max(1, len(tors) // 20)
        ax.set_xticks(range(0, len(tors), step), tors[::step], rotation=90)
        ax.set_yticks(range(0, len(tors), step), tors[::step])
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tail_rtt_report(query: Query, since: str, out: Path) -> dict[str, pa.Table | list[Path]]:
    """Run the report's saved queries through ``query`` and write PNGs and CSVs into ``out``.

    Args:
        query: runs SQL and returns a pyarrow table (e.g. :func:`fabricscope.store_access.run_query`).
        since: how far back (``30d``).
        out: the directory to write (created).

    Returns:
        ``hourly`` (per minute when ``since`` is at most 6 h), ``by_service``, ``heatmap``, ``summary``
        (the query results) and ``files`` (paths written).

    Raises:
        SavedQueryError: ``since`` is not a duration.
    """
    out.mkdir(parents=True, exist_ok=True)
    series = "rtt_pinglist_minutely" if parse_duration(since) <= MINUTE_RESOLUTION_S else "rtt_pinglist_hourly"
    hourly = query(render_named(series, {"since": since}))
    by_service = query(render_named("rtt_service_hourly", {"since": since}))
    heat = query(render_named("loss_heatmap", {"since": since}))
    summary = query(render_named("rtt_pinglist_summary", {"since": since}))
    files = [out / f"{series}.csv", out / "rtt_service_hourly.csv", out / "tor_heatmap.csv",
             out / "tail_rtt_by_pinglist.png", out / "tail_rtt_by_service.png", out / "tor_heatmap.png"]
    _write_csv(hourly, files[0])
    _write_csv(by_service, files[1])
    _write_csv(heat, files[2])
    plot_tail_rtt(hourly, files[3])
    plot_services(by_service, files[4])
    plot_tor_heatmap(heat, files[5])
    return {"hourly": hourly, "by_service": by_service, "heatmap": heat, "summary": summary, "files": files}
