-- P50/P99/P999 network RTT (ns) per pinglist per hour over the whole fabric:
-- the tail-RTT capacity study's time series (`fabricscope report tail-rtt`).
-- param since UInt32 2592000 seconds back from now (--since 30d)
SELECT
    toDateTime64(hour, 0, 'UTC') AS hour,
    pinglist,
    sum(probes) AS probes,
    sum(timeouts) AS timeouts,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.5)) AS p50_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.99)) AS p99_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.999)) AS p999_ns
FROM probes_1h_tor
WHERE hour >= now() - toIntervalSecond({since:UInt32})
GROUP BY hour, pinglist
ORDER BY hour, pinglist
