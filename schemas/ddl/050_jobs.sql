-- Scheduler jobs (`fabricscope jobs sync`, producers/scheduler): one row per job and observation; the
-- newest observation per job_id is its current state (ReplacingMergeTree on observed_ns; read with FINAL).
-- nodes are the scheduler's names, hosts and rnics the inventory's (docs/scheduler.md). Partitioned by
-- the submit month, which never changes for a job, so every observation of a job replaces in one part set.
-- end_ns is NULL while the job is active. Kept two years, like the verdicts it explains.
CREATE TABLE IF NOT EXISTS jobs
(
    job_id       String,
    parent_id    String,
    name         String CODEC(ZSTD),
    user         LowCardinality(String),
    partition    LowCardinality(String),
    state        LowCardinality(String),
    nodes        Array(String) CODEC(ZSTD),
    hosts        Array(String) CODEC(ZSTD),
    rnics        Array(String) CODEC(ZSTD),
    unmapped     Array(String),
    submit_ns    Int64,
    start_ns     Int64,
    end_ns       Nullable(Int64),
    source       LowCardinality(String),
    observed_ns  Int64,
    submitted    DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(submit_ns)
)
ENGINE = ReplacingMergeTree(observed_ns)
PARTITION BY toYYYYMM(submitted)
ORDER BY job_id
TTL toDateTime(submitted) + INTERVAL 2 YEAR;
