"""Prometheus metrics of a stream worker (prometheus-client; served by ``fabricscope worker --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PROBE_BATCHES = Counter("fabricscope_worker_probe_batches_total", "probe.v1 messages processed")
PROBE_ROWS = Counter("fabricscope_worker_probe_rows_total", "probe rows in, by outcome", ["outcome"])
DEAD_LETTERS = Counter("fabricscope_worker_dead_letters_total", "dead-letter records sent")
WINDOWS_CLOSED = Counter("fabricscope_reducer_windows_closed_total", "20 s windows analyzed by the reducer")
VERDICTS = Counter("fabricscope_reducer_verdicts_total", "verdicts emitted", ["kind"])
DROPPED_STEPS = Gauge("fabricscope_reducer_dropped_steps",
                      "worker steps not merged: replay (every raw offset merged before), overlap (some were)",
                      ["reason"])
LATE_PARTIALS = Gauge("fabricscope_reducer_late_partials", "window partials that came after their window closed")
WINDOW_DELAY = Histogram(
    "fabricscope_reducer_window_delay_seconds",
    "wall time from a window's end to its verdicts (live streams; replays show their own age)",
    buckets=(5, 10, 15, 20, 30, 45, 60, 120, 300, float("inf")),
)

# Inputs of the pipeline's own alerting rules (infra/prometheus/fabricscope-rules.yml).
AGENT_LAST_UPLOAD = Gauge("fabricscope_reducer_agent_last_upload_seconds",
                          "event time (s since the epoch) of each agent's newest upload the reducer saw", ["agent"])
JOB_LINKS_UNCOVERED = Gauge("fabricscope_reducer_job_links_uncovered",
                            "links on a job's paths no probe crossed enough in the newest closed window", ["job"])

EVENT_LOOP_LAG = Histogram(
    "fabricscope_worker_event_loop_lag_seconds",
    "how late a 100 ms sleep of the worker's event loop wakes up (CPU work starving heartbeats and commits)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, float("inf")),
)
