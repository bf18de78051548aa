-- Loss heatmap ToR x ToR (Pingmesh style): probes, timeouts and loss ratio per
-- ordered ToR pair over the period, all pinglists merged, with the tail RTT.
-- param since UInt32 86400 seconds back from now (--since 1d)
SELECT
    prober_tor,
    responder_tor,
    sum(probes) AS probes,
    sum(timeouts) AS timeouts,
    round(timeouts / probes, 6) AS loss,
    round(fs_hist_quantile(sumMap(rtt_hist), 0.99)) AS p99_ns
FROM probes_1h_tor
WHERE hour >= now() - toIntervalSecond({since:UInt32})
GROUP BY prober_tor, responder_tor
ORDER BY prober_tor, responder_tor
