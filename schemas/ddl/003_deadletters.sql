-- Records that could not be processed, with the reason; nothing is lost.
CREATE TABLE IF NOT EXISTS deadletters
(
    source_topic      LowCardinality(String),
    source_partition  Int32,
    source_offset     Int64,
    schema            LowCardinality(String),
    reason            String,
    row               Nullable(Int64),
    payload           Nullable(String) CODEC(ZSTD),
    received_ns       Int64,
    received          DateTime64(9) MATERIALIZED fromUnixTimestamp64Nano(received_ns)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(received)
ORDER BY (source_topic, received_ns)
TTL toDateTime(received) + INTERVAL 90 DAY;
