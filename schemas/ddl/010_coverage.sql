-- Per job and window: the coverage behind a blame answer (coverage.v1), kept two years.
CREATE TABLE IF NOT EXISTS coverage
(
    window_start_ns       Int64,
    window_end_ns         Int64,
    job_id                LowCardinality(String),
    connections_expected  Int64,
    connections_probed    Int64,
    links_total           Int64,
    links_covered         Int64,
    agents_silent         String,
    sufficient            Bool,
    window_start          DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(window_start_ns)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(window_start)
ORDER BY (job_id, window_start_ns)
TTL toDateTime(window_start) + INTERVAL 2 YEAR
SETTINGS non_replicated_deduplication_window = 10000;
