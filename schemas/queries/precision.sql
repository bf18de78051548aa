-- Production precision per verdict kind from operator feedback
-- (`fabricscope verdict confirm|reject ID`): the newest decision per verdict counts.
-- precision = confirmed / (confirmed + rejected); NULL while nothing was reviewed.
-- param since UInt32 7776000 seconds back from now (--since 90d)
-- param origin String '' only verdicts of this origin: production, lab, sim or demo ('' = all; `fabricscope query` fills in the running pipeline's)
SELECT
    v.origin AS origin,
    v.kind AS kind,
    count() AS verdicts,
    countIf(f.decision = 'confirm') AS confirmed,
    countIf(f.decision = 'reject') AS rejected,
    countIf(f.decision = '') AS unreviewed,
    if(confirmed + rejected = 0, NULL, round(confirmed / (confirmed + rejected), 4)) AS precision
FROM verdicts AS v FINAL
LEFT JOIN
(
    SELECT verdict_id, argMax(decision, at_ns) AS decision FROM verdict_feedback GROUP BY verdict_id
) AS f ON f.verdict_id = v.verdict_id
WHERE v.window_start >= now() - toIntervalSecond({since:UInt32})
  AND ({origin:String} = '' OR v.origin = {origin:String})
  AND v.verdict_id NOT IN (SELECT revision_of FROM verdicts WHERE revision_of IS NOT NULL)
GROUP BY origin, kind
ORDER BY origin, kind
