-- P50/P99/P999 network RTT (ns) per pinglist per minute over the whole fabric (minute tier, 30 days):
-- the tail-RTT report's series for short ranges, where hours would be one or two points.
-- param since UInt32 3600 seconds back from now (--since 1h)
SELECT
    toDateTime64(minute, 0, 'UTC') AS minute,
    pinglist,
    sum(probes) AS probes,
    sum(timeouts) AS timeouts,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.5)) AS p50_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.99)) AS p99_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.999)) AS p999_ns
FROM probes_1m
WHERE minute >= now() - toIntervalSecond({since:UInt32})
GROUP BY minute, pinglist
ORDER BY minute, pinglist
