-- Tiered probe history. Raw `probes` keep 14 days; these rollups keep
-- months. Each rollup row holds counts, timeouts and three latency histograms
-- (network RTT, responder delay, prober delay) as sparse log-scale buckets:
--   bucket(ns) = floor(16 * log2(ns))   -- 16 buckets per doubling, width 4.4 %
--   value(b)   = 2^((b + 0.5) / 16)     -- the bucket's geometric middle, within 2.2 %
-- A histogram is Map(bucket, count) merged with sumMap: exact and associative, so
-- minutes sum to hours and RNIC pairs to ToR pairs with no further error. Measured
-- against quantile sketches (docs/storage.md "Tiers"): 49 B/row vs 594 (t-digest) and
-- 61 (DDSketch 2 %), and 2-3x faster to build.
--
-- ToRs: probe rows carry RNICs only. `rnic_inventory` maps RNIC -> ToR (loaded by
-- `fabricscope history inventory FILE`); the ToR-pair view joins it when a batch
-- is inserted, so a probe is rolled up under the ToR its RNIC had at that time.
-- An RNIC missing from the inventory rolls up under ToR ''.
--
-- Replays: each target has non_replicated_deduplication_window and the sink inserts
-- with deduplicate_blocks_in_dependent_materialized_views = 1 and the batch token,
-- so a replayed batch adds nothing to a rollup either.

CREATE TABLE IF NOT EXISTS rnic_inventory
(
    rnic        LowCardinality(String),
    host        LowCardinality(String),
    tor         LowCardinality(String),
    updated_ns  Int64
)
ENGINE = ReplacingMergeTree(updated_ns)
ORDER BY rnic;

-- The q-quantile (0..1) of a histogram, in ns; NULL when it is empty.
CREATE FUNCTION IF NOT EXISTS fs_hist_quantile AS (h, q) ->
    if(empty(h), NULL,
       exp2((arrayElement(mapKeys(mapSort(h)),
                          arrayFirstIndex(c -> c >= q * arraySum(mapValues(h)), arrayCumSum(mapValues(mapSort(h)))))
             + 0.5) / 16));

-- Minute rollup per (pinglist, src RNIC, dst RNIC), 30 days.
CREATE TABLE IF NOT EXISTS probes_1m
(
    minute           DateTime CODEC(DoubleDelta, ZSTD),
    pinglist         LowCardinality(String),
    prober_rnic      LowCardinality(String),
    responder_rnic   LowCardinality(String),
    probes           SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD),
    timeouts         SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD),
    rtt_hist         SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD),
    responder_hist   SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD),
    prober_hist      SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(minute)
ORDER BY (pinglist, prober_rnic, responder_rnic, minute)
TTL minute + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE MATERIALIZED VIEW IF NOT EXISTS probes_1m_mv TO probes_1m AS
SELECT
    toStartOfMinute(event_time) AS minute,
    pinglist,
    prober_rnic,
    responder_rnic,
    count() AS probes,
    countIf(status = 'timeout') AS timeouts,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(network_rtt_ns), 1)))), toUInt64(1)),
             network_rtt_ns IS NOT NULL) AS rtt_hist,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(responder_delay_ns), 1)))), toUInt64(1)),
             responder_delay_ns IS NOT NULL) AS responder_hist,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(prober_delay_ns), 1)))), toUInt64(1)),
             prober_delay_ns IS NOT NULL) AS prober_hist
FROM probes
GROUP BY minute, pinglist, prober_rnic, responder_rnic;

-- Hourly rollup per (src RNIC, dst RNIC), 400 days.
CREATE TABLE IF NOT EXISTS probes_1h_rnic
(
    hour             DateTime CODEC(DoubleDelta, ZSTD),
    prober_rnic      LowCardinality(String),
    responder_rnic   LowCardinality(String),
    probes           SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD),
    timeouts         SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD),
    rtt_hist         SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD),
    responder_hist   SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD),
    prober_hist      SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (prober_rnic, responder_rnic, hour)
TTL hour + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE MATERIALIZED VIEW IF NOT EXISTS probes_1h_rnic_mv TO probes_1h_rnic AS
SELECT
    toStartOfHour(event_time) AS hour,
    prober_rnic,
    responder_rnic,
    count() AS probes,
    countIf(status = 'timeout') AS timeouts,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(network_rtt_ns), 1)))), toUInt64(1)),
             network_rtt_ns IS NOT NULL) AS rtt_hist,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(responder_delay_ns), 1)))), toUInt64(1)),
             responder_delay_ns IS NOT NULL) AS responder_hist,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(prober_delay_ns), 1)))), toUInt64(1)),
             prober_delay_ns IS NOT NULL) AS prober_hist
FROM probes
GROUP BY hour, prober_rnic, responder_rnic;

-- Hourly rollup per (src ToR, dst ToR, pinglist), 400 days. pinglist is kept so the
-- tail-RTT report can plot each pinglist over the whole 400 days.
CREATE TABLE IF NOT EXISTS probes_1h_tor
(
    hour             DateTime CODEC(DoubleDelta, ZSTD),
    prober_tor       LowCardinality(String),
    responder_tor    LowCardinality(String),
    pinglist         LowCardinality(String),
    probes           SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD),
    timeouts         SimpleAggregateFunction(sum, UInt64) CODEC(T64, ZSTD),
    rtt_hist         SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD),
    responder_hist   SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD),
    prober_hist      SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) CODEC(ZSTD)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (prober_tor, responder_tor, pinglist, hour)
TTL hour + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE MATERIALIZED VIEW IF NOT EXISTS probes_1h_tor_mv TO probes_1h_tor AS
SELECT
    toStartOfHour(p.event_time) AS hour,
    src.tor AS prober_tor,
    dst.tor AS responder_tor,
    p.pinglist AS pinglist,
    count() AS probes,
    countIf(p.status = 'timeout') AS timeouts,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(p.network_rtt_ns), 1)))), toUInt64(1)),
             p.network_rtt_ns IS NOT NULL) AS rtt_hist,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(p.responder_delay_ns), 1)))), toUInt64(1)),
             p.responder_delay_ns IS NOT NULL) AS responder_hist,
    sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(p.prober_delay_ns), 1)))), toUInt64(1)),
             p.prober_delay_ns IS NOT NULL) AS prober_hist
FROM probes AS p
LEFT JOIN (SELECT rnic, argMax(tor, updated_ns) AS tor FROM rnic_inventory GROUP BY rnic) AS src
    ON src.rnic = p.prober_rnic
LEFT JOIN (SELECT rnic, argMax(tor, updated_ns) AS tor FROM rnic_inventory GROUP BY rnic) AS dst
    ON dst.rnic = p.responder_rnic
GROUP BY hour, prober_tor, responder_tor, pinglist;
