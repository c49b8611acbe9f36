-- Checkpoint time as a share of each job's wall time: the seconds its
-- printed save and load durations add up to, against the span of its
-- training progress lines (first to last), with the job's verdict. A job
-- that spends a fifth of its time checkpointing pays for its storage path
-- as surely as a socket fallback pays for its network.
--
-- Only jobs with at least one printed checkpoint duration and two progress
-- lines are listed. Window: 7 days. ClickHouse 18.16 and later.
SELECT
    cluster,
    namespace,
    job,
    saves,
    loads,
    checkpoint_s,
    wall_s,
    round(checkpoint_s / wall_s, 4) AS checkpoint_share,
    verdict
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        saves,
        loads,
        checkpoint_s,
        wall_s
    FROM
    (
        SELECT
            cluster,
            namespace,
            job,
            countIf(op = 'save') AS saves,
            countIf(op = 'load') AS loads,
            sum(duration_s) AS checkpoint_s
        FROM ncclwatch.checkpoint_events FINAL
        WHERE time > now() - INTERVAL 7 DAY
        GROUP BY cluster, namespace, job
        HAVING count(duration_s) > 0
    ) AS l
    ALL INNER JOIN
    (
        SELECT
            cluster,
            namespace,
            job,
            toFloat64(toUInt32(max(time))) - toFloat64(toUInt32(min(time))) AS wall_s
        FROM ncclwatch.training_steps FINAL
        WHERE time > now() - INTERVAL 7 DAY
        GROUP BY cluster, namespace, job
        HAVING count() > 1
    ) AS r USING (cluster, namespace, job)
) AS l
ANY LEFT JOIN
(
    SELECT cluster, namespace, job, verdict FROM ncclwatch.job_verdicts
) AS r USING (cluster, namespace, job)
ORDER BY checkpoint_share DESC, job
