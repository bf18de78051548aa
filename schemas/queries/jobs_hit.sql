-- Jobs hit by problems: each scheduler job (table jobs) with the P0/P1 verdicts that named it (graded on
-- its service-pinglist paths) or that blamed one of its RNICs or hosts while it ran (from its placement
-- alone, when no service probes named it). A revised verdict counts once, as its final revision.
-- param since UInt32 86400 seconds back from now (--since 1d)
SELECT
    j.job_id AS job_id,
    any(j.name) AS name,
    any(j.user) AS user,
    min(v.impact) AS worst_impact,
    count() AS verdicts,
    groupUniqArray(10)(concat(v.kind, ' ', v.location)) AS problems,
    min(v.window_start) AS first_window,
    max(v.window_start) AS last_window
FROM (SELECT window_start, window_start_ns, window_end_ns, kind, location, impact, job_id FROM verdicts FINAL
      WHERE window_start >= now() - toIntervalSecond({since:UInt32})
        AND impact IN ('P0', 'P1')
        AND verdict_id NOT IN (SELECT revision_of FROM verdicts WHERE revision_of IS NOT NULL)) AS v
CROSS JOIN (SELECT job_id, name, user, hosts, rnics, start_ns, end_ns FROM jobs FINAL) AS j
WHERE (v.job_id = j.job_id
       OR has(j.rnics, v.location) OR has(j.hosts, v.location))
  AND j.start_ns > 0
  AND v.window_end_ns > j.start_ns
  AND (j.end_ns IS NULL OR v.window_start_ns < j.end_ns)
GROUP BY j.job_id
ORDER BY worst_impact, verdicts DESC, job_id
