-- P50/P99/P999 network RTT (ns) per service (the job whose 5-tuples the service
-- pinglist copies) per hour, or per -p step=SECONDS (60: per minute; the column keeps the name hour).
-- Reads raw `probes`, so it reaches back 14 days (the raw TTL);
-- quantiles use the rollups' histogram buckets, so they compare with the other queries.
-- param since UInt32 604800 seconds back from now (--since 7d)
-- param step UInt32 3600 seconds per point (3600 = hourly, 60 = per minute)
SELECT
    hour,
    job,
    probes,
    timeouts,
    round(fs_hist_quantile(h, 0.5)) AS p50_ns,
    round(fs_hist_quantile(h, 0.99)) AS p99_ns,
    round(fs_hist_quantile(h, 0.999)) AS p999_ns
FROM
(
    SELECT
        toDateTime64(toStartOfInterval(event_time, toIntervalSecond({step:UInt32})), 0, 'UTC') AS hour,
        assumeNotNull(job_id) AS job,
        count() AS probes,
        countIf(status = 'timeout') AS timeouts,
        sumMapIf(map(toUInt16(floor(16 * log2(greatest(assumeNotNull(network_rtt_ns), 1)))), toUInt64(1)),
                 network_rtt_ns IS NOT NULL) AS h
    FROM probes
    WHERE pinglist = 'service' AND job_id IS NOT NULL
      AND event_time >= now() - toIntervalSecond({since:UInt32})
    GROUP BY hour, job
)
ORDER BY hour, job
