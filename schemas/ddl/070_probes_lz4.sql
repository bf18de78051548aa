-- Raw probes: LZ4 instead of ZSTD on the compressed columns.
-- The store writer inserts a part per block (up to 500,000 rows) for months, and the engine merges those
-- parts again and again, decompressing and recompressing every column each time. Measured with
-- `fabricscope bench raw-layout` (20 M rows in the writer's blocks, 3 runs, BENCHMARKS.md section 17):
-- LZ4 costs 0.82-0.87x of ZSTD's CPU per row (inserts and merges), 12.4 against 12.2 bytes a row, and
-- keeps the documented queries over raw probes within about 20 % of ZSTD's CPU.
-- Merging less was measured and left out: merge_selector_base 8 (ZSTD or LZ4) merges each row 0.9
-- times instead of 1.45-1.6 and costs 0.70-0.82x, but leaves about twice the parts, and one RNIC pair
-- over time then costs 40-75 % more CPU (each part is one more index to search). The sort key stays:
-- the hour in it, or parts by hour, cost more CPU and made no query faster.
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
