-- The store writer rolls each block's merged minute rows up into the hourly tiers itself and inserts
-- them under the block's deduplication token (sinks/probe_tiers.py, docs/storage.md "Exactly-once rows"). The
-- two views of 011 grouped and joined every minute row on insert: measured on one 480,000-probe block
-- of the profile fabric, 5.4-6.0 µs of the writer's CPU per probe with the views against 1.8 without
-- (BENCHMARKS.md section 4). The tables, their keys and ToRs from rnic_inventory at insert time stay
-- as they were; queries and saved queries read the same tables.
DROP VIEW IF EXISTS probes_1h_rnic_from_1m_mv;
DROP VIEW IF EXISTS probes_1h_tor_from_1m_mv;
-- Histogram columns: ZSTD(3) instead of ZSTD(6) (007). Measured on chdb (one insert and one merge of the
-- same tier rows, BENCHMARKS.md section 4): insert 2.0-2.6 -> 1.1-1.6 µs/row, merge 5.0-5.3 -> 3.8-4.1 µs/row,
-- 10.8 -> 11.1 B/row at 3 probes per row; on the profile fabric's tier 14.4 -> 12.6 B/row.
ALTER TABLE probes_1m MODIFY COLUMN rtt_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1m MODIFY COLUMN responder_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1m MODIFY COLUMN prober_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1h_rnic MODIFY COLUMN rtt_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1h_rnic MODIFY COLUMN responder_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1h_rnic MODIFY COLUMN prober_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1h_tor MODIFY COLUMN rtt_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1h_tor MODIFY COLUMN responder_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
ALTER TABLE probes_1h_tor MODIFY COLUMN prober_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(3));
