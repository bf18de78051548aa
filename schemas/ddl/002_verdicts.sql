-- Verdicts of the analyzer (verdict.v1), kept two years. A revision is its own
-- row whose revision_of names the verdict it replaces.
CREATE TABLE IF NOT EXISTS verdicts
(
    verdict_id       String,
    window_start_ns  Int64,
    window_end_ns    Int64,
    kind             LowCardinality(String),
    location         LowCardinality(String),
    votes            Float64,
    confidence       Float64,
    failed_probes    Int64,
    total_probes     Int64,
    impact           LowCardinality(String),
    job_id           LowCardinality(Nullable(String)),
    revision_of      Nullable(String),
    evidence         String CODEC(ZSTD),
    emitted_ns       Int64,
    window_start     DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(window_start_ns)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(window_start)
ORDER BY (verdict_id)
TTL toDateTime(window_start) + INTERVAL 2 YEAR
SETTINGS non_replicated_deduplication_window = 10000;
