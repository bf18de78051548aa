"""Prometheus metrics of the store writer (prometheus-client; served by ``fabricscope sink --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ROWS_WRITTEN = Counter("fabricscope_sink_rows_written_total", "rows inserted into ClickHouse", ["table"])
BATCHES_WRITTEN = Counter("fabricscope_sink_batches_total", "messages inserted into ClickHouse")
UNDECODABLE = Counter("fabricscope_sink_undecodable_total", "messages the sink could not decode (dead-lettered)")
STORE_RETRIES = Counter("fabricscope_sink_store_retries_total", "inserts retried because the store refused")
CONSUMER_LAG = Gauge("fabricscope_sink_consumer_lag_messages", "messages behind the log end", ["topic"])
