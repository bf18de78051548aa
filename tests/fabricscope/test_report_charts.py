"""`report tail-rtt` charts show the fault: loss on an axis of its own, legends outside the data, plain tick
labels, heatmap cells with their values, the period in every title, minutes for short ranges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import matplotlib.pyplot as plt
import pyarrow as pa
import pytest

from fabricscope.report_tail_rtt import plot_services, plot_tail_rtt, plot_tor_heatmap, tail_rtt_report

T0 = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
PERIOD = "2026-12-01T18:00:00Z – 19:00:00Z (1 h)"


def _series() -> pa.Table:
    rows = []
    for m in range(4):
        rows.append({"minute": T0 + timedelta(minutes=m), "pinglist": "inter_tor", "probes": 1000,
                     "timeouts": 70 if m >= 2 else 0, "p50_ns": 14000.0, "p99_ns": 60000.0, "p999_ns": 250000.0})
    return pa.Table.from_pylist(rows)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_loss_has_its_own_axis_and_the_legend_is_outside(tmp_path):
    fig = plot_tail_rtt(_series(), tmp_path / "p.png", PERIOD)
    rtt_ax, loss_ax = fig.axes
    assert [round(b.get_height(), 6) for b in loss_ax.patches] == [0.0, 0.0, 7.0, 7.0]  # 70 of 1,000 probes: 7 %
    assert loss_ax.get_ylabel() == "loss (%)" and loss_ax.get_ylim()[1] >= 7.0
    assert PERIOD in rtt_ax.get_title()
    fig.canvas.draw()
    legend = rtt_ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["P50", "P99", "P999", "loss %"]
    assert legend.get_window_extent().x0 > loss_ax.get_window_extent().x1  # right of the plot, over no data
    labels = [t.get_text() for t in rtt_ax.get_yticklabels(minor=False) + rtt_ax.get_yticklabels(minor=True)]
    assert "20" in labels and "50" in labels and not any("×" in t or "$" in t for t in labels)
    assert {"18:00", "18:01", "18:02", "18:03"} <= {t.get_text() for t in rtt_ax.get_xticklabels()}


def test_heatmap_cells_carry_their_values(tmp_path):
    heat = pa.Table.from_pylist([
        {"prober_tor": "A", "responder_tor": "B", "probes": 1000, "timeouts": 70, "loss": 0.07, "p99_ns": 61000.0},
        {"prober_tor": "B", "responder_tor": "A", "probes": 1000, "timeouts": 0, "loss": 0.0, "p99_ns": 20400.0}])
    fig = plot_tor_heatmap(heat, tmp_path / "h.png", PERIOD)
    rtt_ax, loss_ax = fig.axes[:2]  # then the two colour bars
    assert sorted(t.get_text() for t in rtt_ax.texts) == ["20", "61"]  # µs
    assert sorted(t.get_text() for t in loss_ax.texts) == ["0.00", "7.00"]
    assert PERIOD in rtt_ax.get_title() and PERIOD in loss_ax.get_title()


def test_services_per_minute_for_an_hour(tmp_path):
    rows = [{"hour": T0 + timedelta(minutes=m), "job": "job-lab", "probes": 50, "timeouts": 0,
             "p50_ns": 15000.0, "p99_ns": 30000.0, "p999_ns": 90000.0} for m in range(5)]
    fig = plot_services(pa.Table.from_pylist(rows), tmp_path / "s.png", period=PERIOD, step_s=60)
    ax = fig.axes[0]
    assert "per minute" in ax.get_title() and len(ax.lines[0].get_xdata()) == 5
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1


def test_the_report_asks_for_minutes_when_since_is_short(migrated_store, tmp_path):
    asked: list[str] = []

    def query(sql: str) -> pa.Table:
        asked.append(sql)
        return migrated_store.query_readonly(sql)

    tail_rtt_report(query, "3600", tmp_path / "r", now_ns=1_796_151_600 * 10**9)
    assert "FROM probes_1m" in asked[0] and "toIntervalSecond(60)" in asked[1]
    asked.clear()
    tail_rtt_report(query, "2592000", tmp_path / "r")
    assert "toIntervalSecond(3600)" in asked[1]
    for png in ("tail_rtt_by_pinglist.png", "tail_rtt_by_service.png", "tor_heatmap.png"):
        assert (tmp_path / "r" / png).read_bytes()[:4] == b"\x89PNG"
