-- Histogram columns: ZSTD(6) instead of ZSTD(1), by measurement (docs/storage.md "Tiers"):
-- minute rollup at the paper's probe rate 42.9 -> 39.6 B/row, sparse (1 probe/row) 8.3 -> 6.3;
-- LZ4 was 104 B/row. The sort key (pair, minute) beat (minute, pair) at the paper rate.
ALTER TABLE probes_1m MODIFY COLUMN rtt_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1m MODIFY COLUMN responder_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1m MODIFY COLUMN prober_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1h_rnic MODIFY COLUMN rtt_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1h_rnic MODIFY COLUMN responder_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1h_rnic MODIFY COLUMN prober_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1h_tor MODIFY COLUMN rtt_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1h_tor MODIFY COLUMN responder_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
ALTER TABLE probes_1h_tor MODIFY COLUMN prober_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD(6));
