"""Prometheus metrics of the store writer (prometheus-client; served by ``fabricscope sink --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ROWS_WRITTEN = Counter("fabricscope_sink_rows_written_total", "rows inserted into ClickHouse", ["table"])
BATCHES_WRITTEN = Counter("fabricscope_sink_batches_total", "messages inserted into ClickHouse")
UNDECODABLE = Counter("fabricscope_sink_undecodable_total", "messages the sink could not decode (dead-lettered)")
STORE_RETRIES = Counter("fabricscope_sink_store_retries_total", "inserts retried because the store refused")
CONSUMER_LAG = Gauge("fabricscope_sink_consumer_lag_messages", "messages behind the log end", ["topic"])
ENDPOINT_REQUESTS = Counter(
    "fabricscope_sink_endpoint_requests_total",
    "requests to the store writer's query endpoint by outcome: ok, short_lane, busy (503), limited (a query "
    "stopped by a memory, time or result limit), bad_request, not_found, error (a bug: logged), "
    "refused_<why> (token, length, size, malformed, timeout, connections, peer)", ["outcome"])
