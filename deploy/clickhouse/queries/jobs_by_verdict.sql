-- Jobs by verdict over the last day: the fleet's fabric health at a glance.
--
-- One row per verdict (ok, socket_fallback, gdr_off, degraded,
-- no_evidence, unknown) with the jobs and the GPUs (nranks) they hold; a
-- job counts when its latest NCCL line is in the window.
-- Window: 24 hours. ClickHouse 18.16 and later.
SELECT
    verdict,
    count() AS jobs,
    sum(ifNull(nranks, 0)) AS gpus
FROM ncclwatch.job_verdicts
WHERE last_seen >= now() - INTERVAL 1 DAY
GROUP BY verdict
ORDER BY jobs DESC, verdict
