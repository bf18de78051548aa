-- One RNIC's problem history: every verdict naming it (as the RNIC, or as one end of
-- a suspect link 'a->b'), newest first, with the operator's feedback if any.
-- param since UInt32 7776000 seconds back from now (--since 90d)
-- param rnic String required the RNIC id (-p rnic=A3)
-- param origin String '' only verdicts of this origin: production, lab, sim or demo ('' = all; `fabricscope query` fills in the running pipeline's)
SELECT
    v.window_start AS window_start,
    v.kind AS kind,
    v.location AS location,
    v.impact AS impact,
    v.confidence AS confidence,
    v.failed_probes AS failed_probes,
    v.total_probes AS total_probes,
    v.job_id AS job_id,
    v.verdict_id AS verdict_id,
    f.decision AS feedback,
    v.origin AS origin
FROM verdicts AS v FINAL
LEFT JOIN
(
    SELECT verdict_id, argMax(decision, at_ns) AS decision FROM verdict_feedback GROUP BY verdict_id
) AS f ON f.verdict_id = v.verdict_id
WHERE v.window_start >= now() - toIntervalSecond({since:UInt32})
  AND ({origin:String} = '' OR v.origin = {origin:String})
  AND (v.location = {rnic:String} OR has(splitByString('->', v.location), {rnic:String}))
  AND v.verdict_id NOT IN (SELECT revision_of FROM verdicts WHERE revision_of IS NOT NULL)
ORDER BY window_start DESC, verdict_id
