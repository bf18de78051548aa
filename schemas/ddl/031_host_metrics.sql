-- Hostping hardware monitor readings (`hostmetric.v1`/`v2` on `hostmetrics.raw`): PCIe link speed and
-- width per hop, AER counter deltas, netdev/ethtool/RDMA hw_counter deltas, NVML link and throughput,
-- bus utilisation with the counter it came from (`source`), host status. One row per
-- (host, device, metric, second). v1 rows (the sim source) store source = ''.
-- Queries: one device's metric over time, and "every metric of host H now" -> ORDER BY host, device,
-- metric, sample_ns. A 1 s monitor on a host with 8 RNICs, 8 GPUs and ~40 hops writes ~600 rows/s;
-- 30 days is the history an SRE looks back over for a link that started flapping.
CREATE TABLE IF NOT EXISTS host_metrics
(
    agent_id     LowCardinality(String),
    upload_ns    Int64 CODEC(Delta, ZSTD),
    host         LowCardinality(String),
    device       LowCardinality(String),
    metric       LowCardinality(String),
    value        Float64 CODEC(Gorilla, ZSTD),
    unit         LowCardinality(String),
    sample_ns    Int64 CODEC(Delta, ZSTD),
    source       LowCardinality(String) DEFAULT '',
    sample_time  DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(sample_ns)
)
ENGINE = MergeTree
PARTITION BY toDate(sample_time)
ORDER BY (host, device, metric, sample_ns)
TTL toDateTime(sample_time) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;
