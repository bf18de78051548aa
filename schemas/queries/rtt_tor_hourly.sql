-- P50/P99/P999 network RTT (ns) per ToR pair per hour, all pinglists merged.
-- From the 400-day hourly ToR rollup; quantiles are histogram buckets (within 2.2 %).
-- param since UInt32 86400 seconds back from now (--since 1d)
-- param src_tor String '' only this prober ToR (-p src_tor=T01; default all)
-- param dst_tor String '' only this responder ToR (-p dst_tor=T03; default all)
SELECT
    toDateTime64(hour, 0, 'UTC') AS hour,
    prober_tor,
    responder_tor,
    sum(probes) AS probes,
    sum(timeouts) AS timeouts,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.5)) AS p50_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.99)) AS p99_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.999)) AS p999_ns
FROM probes_1h_tor
WHERE hour >= now() - toIntervalSecond({since:UInt32})
  AND ({src_tor:String} = '' OR prober_tor = {src_tor:String})
  AND ({dst_tor:String} = '' OR responder_tor = {dst_tor:String})
GROUP BY hour, prober_tor, responder_tor
ORDER BY hour, prober_tor, responder_tor
