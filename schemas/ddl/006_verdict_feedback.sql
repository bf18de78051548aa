-- Operator feedback on verdicts (`fabricscope verdict confirm|reject ID --note ...`),
-- kept two years. The newest row per verdict_id is the operator's decision; older
-- rows stay as history. Production precision per kind is saved query `precision`.
CREATE TABLE IF NOT EXISTS verdict_feedback
(
    verdict_id   String,
    decision     LowCardinality(String),
    note         String CODEC(ZSTD),
    operator     LowCardinality(String),
    at_ns        Int64 CODEC(Delta, ZSTD),
    at           DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(at_ns)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (verdict_id, at_ns)
TTL toDateTime(at) + INTERVAL 2 YEAR;
