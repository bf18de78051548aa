-- The verdict timeline of one job with its impact classes: one row per window and
-- verdict, oldest first; a revised verdict shows its final revision only.
-- param since UInt32 2592000 seconds back from now (--since 30d)
-- param job String required the job id (-p job=train-42)
-- param origin String '' only verdicts of this origin: production, lab, sim or demo ('' = all; `fabricscope query` fills in the running pipeline's)
SELECT
    window_start,
    fromUnixTimestamp64Nano(window_end_ns) AS window_end,
    impact,
    kind,
    location,
    confidence,
    failed_probes,
    total_probes,
    verdict_id,
    origin
FROM verdicts FINAL
WHERE window_start >= now() - toIntervalSecond({since:UInt32})
  AND job_id = {job:String}
  AND ({origin:String} = '' OR origin = {origin:String})
  AND verdict_id NOT IN (SELECT revision_of FROM verdicts WHERE revision_of IS NOT NULL)
ORDER BY window_start, impact, location
