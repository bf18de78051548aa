-- Per window: what the probe plan in force could name (identifiability.v1, from `fabricscope pinglist loop`):
-- links identifiable for a single fault, the ones no probe crosses, and the groups no probe separates (a
-- fault there ends `undetermined` over the group: a probing limit). The fabric's, not a job's; one row per
-- window, so ordered by time alone; kept two years beside the verdicts it explains.
CREATE TABLE IF NOT EXISTS identifiability
(
    window_start_ns    Int64 CODEC(Delta, ZSTD),
    links              Int64,
    probed_tuples      Int64,
    identifiable       Int64,
    uncovered          String CODEC(ZSTD),
    ambiguous_groups   String CODEC(ZSTD),
    structural_groups  String CODEC(ZSTD),
    loop_entries       Int64,
    emitted_ns         Int64,
    window_start       DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(window_start_ns)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(window_start)
ORDER BY window_start_ns
TTL toDateTime(window_start) + INTERVAL 2 YEAR;
