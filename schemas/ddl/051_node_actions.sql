-- Node actions of `fabricscope jobs remediate` (sinks/remediate.py): every drain, resume, refusal and
-- skip, dry-run or applied, with the verdict and the reason; kept two years. The blast-radius guard's
-- hourly count reads the applied drains from here, so a restart does not reset it.
CREATE TABLE IF NOT EXISTS node_actions
(
    action_id   String,
    at_ns       Int64 CODEC(Delta, ZSTD),
    action      LowCardinality(String),
    node        LowCardinality(String),
    host        LowCardinality(String),
    verdict_id  String,
    kind        LowCardinality(String),
    location    String,
    reason      String CODEC(ZSTD),
    why         String CODEC(ZSTD),
    outcome     String,
    dry_run     Bool,
    at          DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(at_ns)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (at_ns, action_id)
TTL toDateTime(at) + INTERVAL 2 YEAR;
