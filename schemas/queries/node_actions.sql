-- Node actions of `fabricscope jobs remediate`: every drain, resume, refusal and skip with its verdict,
-- reason and outcome (dry-run or done), newest first.
-- param since UInt32 604800 seconds back from now (--since 7d)
-- param limit UInt32 100 rows
SELECT
    at,
    action,
    node,
    host,
    outcome,
    dry_run,
    kind,
    location,
    verdict_id,
    why
FROM node_actions FINAL
WHERE at >= now() - toIntervalSecond({since:UInt32})
ORDER BY at_ns DESC, node
LIMIT {limit:UInt32}
