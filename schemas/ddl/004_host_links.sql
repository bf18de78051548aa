-- Intra-host link states of Hostping (Algorithm 1), kept two years.
CREATE TABLE IF NOT EXISTS host_links
(
    host       LowCardinality(String),
    link       LowCardinality(String),
    state      LowCardinality(String),
    cause      LowCardinality(String),
    round_ns   Int64 CODEC(Delta, ZSTD),
    evidence   String CODEC(ZSTD),
    round_time DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(round_ns)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(round_time)
ORDER BY (host, link, round_ns)
TTL toDateTime(round_time) + INTERVAL 2 YEAR;
