-- Hostping loopback results (`loopback.v1` on `loopback.raw`): the bandwidth matrix of every round,
-- kept next to the link states it produced (`host_links`) so an operator can see the Gb/s behind
-- an `abnormal` link. Queries: one host's matrix per round -> ORDER BY host, upload_ns, rnic.
CREATE TABLE IF NOT EXISTS loopback
(
    agent_id        LowCardinality(String),
    upload_ns       Int64 CODEC(Delta, ZSTD),
    host            LowCardinality(String),
    rnic            LowCardinality(String),
    src_endpoint    LowCardinality(String),
    dst_endpoint    LowCardinality(String),
    msg_bytes       UInt32,
    latency_ns      Nullable(Int64),
    bandwidth_gbps  Nullable(Float64),
    mode            LowCardinality(String),
    status          LowCardinality(String),
    round_time      DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(upload_ns)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(round_time)
ORDER BY (host, upload_ns, rnic, dst_endpoint)
TTL toDateTime(round_time) + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000;
