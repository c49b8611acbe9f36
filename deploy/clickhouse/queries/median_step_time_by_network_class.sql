-- Median step time by network class, for the same model and scale.
--
-- The published case is this query's answer: Qwen2.5-14B FSDP on 16 H200
-- over two nodes, 12.36 s median step time on `tcp` (a silent socket
-- fallback) against 6.07 s on `rdma`. Compare rows with the same model,
-- nnodes and nranks; the slowdown column divides each class's median by
-- the `rdma` median of the same model and scale (NULL where there is none).
--
-- model is the pod label ncclwatch.io/model; network_class, nnodes and
-- nranks are the job's (job_verdicts: the largest communicator). Step
-- times come from "step" and "amend" rows; a series that prints no step
-- time (torchtitan, Lightning, Hugging Face dicts) does not count.
-- Window: the last 30 days of steps. ClickHouse 18.16 and later.
SELECT
    model,
    job_nnodes AS nnodes,
    job_nranks AS nranks,
    job_class AS network_class,
    jobs,
    steps,
    median_step_time_s,
    p90_step_time_s,
    if(rdma_median > 0, median_step_time_s / rdma_median, NULL) AS slowdown
FROM
(
    SELECT
        model,
        job_nnodes,
        job_nranks,
        job_class,
        uniqExact(cluster, namespace, job) AS jobs,
        count() AS steps,
        medianExact(step_time_s) AS median_step_time_s,
        quantileExact(0.9)(step_time_s) AS p90_step_time_s
    FROM
    (
        SELECT cluster, namespace, job, model, step_time_s
        FROM ncclwatch.training_steps FINAL
        WHERE time >= now() - INTERVAL 30 DAY
          AND kind IN ('step', 'amend')
          AND step_time_s IS NOT NULL
          AND model != ''
    ) AS l
    ALL INNER JOIN
    (
        SELECT
            cluster,
            namespace,
            job,
            ifNull(nnodes, 0) AS job_nnodes,
            ifNull(nranks, 0) AS job_nranks,
            ifNull(network_class, 'unknown') AS job_class
        FROM ncclwatch.job_verdicts
    ) AS r USING (cluster, namespace, job)
    GROUP BY model, job_nnodes, job_nranks, job_class
) AS l
ANY LEFT JOIN
(
    SELECT
        model,
        job_nnodes,
        job_nranks,
        medianExact(step_time_s) AS rdma_median
    FROM
    (
        SELECT cluster, namespace, job, model, step_time_s
        FROM ncclwatch.training_steps FINAL
        WHERE time >= now() - INTERVAL 30 DAY
          AND kind IN ('step', 'amend')
          AND step_time_s IS NOT NULL
          AND model != ''
    ) AS l
    ALL INNER JOIN
    (
        SELECT
            cluster,
            namespace,
            job,
            ifNull(nnodes, 0) AS job_nnodes,
            ifNull(nranks, 0) AS job_nranks
        FROM ncclwatch.job_verdicts
        WHERE network_class = 'rdma'
    ) AS r USING (cluster, namespace, job)
    GROUP BY model, job_nnodes, job_nranks
) AS r USING (model, job_nnodes, job_nranks)
ORDER BY model, nnodes, nranks, median_step_time_s
