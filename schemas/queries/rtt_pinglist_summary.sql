-- Network RTT per pinglist over the whole period: probes, loss and P50/P99/P999 (ns)
-- of the merged histograms (the summary table of `fabricscope report tail-rtt`).
-- param since UInt32 2592000 seconds back from now (--since 30d)
SELECT
    pinglist,
    sum(probes) AS probes,
    sum(timeouts) AS timeouts,
    round(timeouts / probes, 6) AS loss,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.5)) AS p50_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.99)) AS p99_ns,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.999)) AS p999_ns
FROM probes_1h_tor
WHERE hour >= now() - toIntervalSecond({since:UInt32})
GROUP BY pinglist
ORDER BY pinglist
