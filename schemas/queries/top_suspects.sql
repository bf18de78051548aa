-- Top suspect links and RNICs: each verdict location over the period, most windows first.
-- A verdict replaced by a revision (revision_of) is not counted; impact is the worst seen.
-- Probe noise (stale_qpn: a restarted host's old QPNs) is no suspect; -p noise=1 lists it too.
-- param since UInt32 604800 seconds back from now (--since 7d)
-- param limit UInt32 20 rows
-- param origin String '' only verdicts of this origin: production, lab, sim or demo ('' = all; `fabricscope query` fills in the running pipeline's)
-- param noise UInt32 0 1 = also list probe noise (stale_qpn)
SELECT
    origin,
    kind,
    location,
    count() AS windows,
    if(kind = 'stale_qpn', 'noise', min(impact)) AS worst_impact,
    sum(failed_probes) AS failed_probes,
    round(avg(confidence), 3) AS confidence,
    uniqExact(job_id) AS jobs,
    min(window_start) AS first_seen,
    max(window_start) AS last_seen
FROM verdicts FINAL
WHERE window_start >= now() - toIntervalSecond({since:UInt32})
  AND kind NOT IN ('undetermined')
  AND ({noise:UInt32} = 1 OR kind != 'stale_qpn')
  AND ({origin:String} = '' OR origin = {origin:String})
  AND verdict_id NOT IN (SELECT revision_of FROM verdicts WHERE revision_of IS NOT NULL)
GROUP BY origin, kind, location
ORDER BY windows DESC, failed_probes DESC, location
LIMIT {limit:UInt32}
