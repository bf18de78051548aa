-- Raw probes: LZ4 instead of ZSTD on the compressed columns, and merge_selector_base 8 instead of 5.
-- The store writer inserts a part per block (up to 500,000 rows) for months, and the engine merges those
-- parts again and again: on 20 M writer blocks (`fabricscope bench raw-layout`, BENCHMARKS.md section 5)
-- most of the table's CPU per row is those merges, each one decompressing and recompressing every
-- column. LZ4 costs less on both sides; a higher selector base merges parts of more even size, so each row
-- is merged fewer times. Together they cut CPU per row (inserts and merges) to about 0.75x of the 001
-- layout, with every documented query over raw probes within 20 % of it; the price is about a quarter more
-- bytes per raw row. base 10 and 20 merged less still but slowed the pair-over-time and one-pinglist scans
-- by 50-70 % (more parts to open). The sort key stays: putting the hour into it, or partitioning by hour,
-- cost more CPU and made no query faster.
-- A codec change rewrites nothing: parts written before it keep ZSTD until a merge rewrites them, so an
-- existing store moves over as its parts merge, with no mutation and no copy.
ALTER TABLE probes MODIFY COLUMN upload_ns Int64 CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN seq UInt64 CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN t1 Nullable(Int64) CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN t2 Nullable(Int64) CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN t3 Nullable(Int64) CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN t4 Nullable(Int64) CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN t5 Nullable(Int64) CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN t6 Nullable(Int64) CODEC(Delta, LZ4);
ALTER TABLE probes MODIFY COLUMN network_rtt_ns Nullable(Int64) CODEC(T64, LZ4);
ALTER TABLE probes MODIFY COLUMN responder_delay_ns Nullable(Int64) CODEC(T64, LZ4);
ALTER TABLE probes MODIFY COLUMN prober_delay_ns Nullable(Int64) CODEC(T64, LZ4);
ALTER TABLE probes MODIFY COLUMN batch_id String CODEC(LZ4);
ALTER TABLE probes MODIFY SETTING merge_selector_base = 8;
