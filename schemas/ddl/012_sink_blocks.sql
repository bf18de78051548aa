-- The store writer's own state (docs/storage.md "Exactly-once rows"), kept in the store itself as ClickHouse
-- Kafka Connect keeps it in Keeper: per consumed topic partition, the offset range of the last block
-- it started to insert, written BEFORE the block's inserts, and the source high-water marks the
-- block was filtered with. A restarted writer skips offsets below `first_offset`, re-forms exactly
-- [first_offset, last_offset] with the same filter and re-inserts it under the same tokens (a no-op
-- where the first attempt got through), then goes on. Newest row per partition wins.
CREATE TABLE IF NOT EXISTS sink_blocks
(
    topic         LowCardinality(String),
    partition     UInt32,
    first_offset  Int64,
    last_offset   Int64,
    source_hwm    String,
    written_ns    Int64
)
ENGINE = ReplacingMergeTree(written_ns)
ORDER BY (topic, partition)
