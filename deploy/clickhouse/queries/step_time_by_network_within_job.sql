-- Step time per network within one job: a job that restarted on another
-- network (IB, then Socket after a node swap) shows one row per network,
-- in the order it used them, and how much slower each is than the job's
-- first. This is the SQL face of the step-time regression rule
-- (deploy/kubernetes/canary/rules.yaml), which the rules engine evaluates
-- on the same figures as they stream.
--
-- network is the job's latest NCCL "Using network" when the step was
-- printed. Only jobs that used more than one network in the window are
-- listed. Window: 7 days. ClickHouse 18.16 and later.
SELECT
    cluster,
    namespace,
    job,
    framework,
    network,
    net_class AS network_class,
    steps,
    first_time,
    median_step_time_s,
    round(median_step_time_s / first_median, 3) AS vs_first_network
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        framework,
        network,
        any(network_class) AS net_class,
        count() AS steps,
        min(time) AS first_time,
        medianExact(step_time_s) AS median_step_time_s
    FROM ncclwatch.training_steps FINAL
    WHERE time >= now() - INTERVAL 7 DAY
      AND step_time_s IS NOT NULL
      AND network != ''
    GROUP BY cluster, namespace, job, framework, network
) AS l
ALL INNER JOIN
(
    SELECT
        cluster,
        namespace,
        job,
        framework,
        argMin(median_net, first_net) AS first_median
    FROM
    (
        SELECT
            cluster,
            namespace,
            job,
            framework,
            network,
            min(time) AS first_net,
            medianExact(step_time_s) AS median_net
        FROM ncclwatch.training_steps FINAL
        WHERE time >= now() - INTERVAL 7 DAY
          AND step_time_s IS NOT NULL
          AND network != ''
        GROUP BY cluster, namespace, job, framework, network
    )
    GROUP BY cluster, namespace, job, framework
    HAVING count() > 1
) AS r USING (cluster, namespace, job, framework)
ORDER BY cluster, namespace, job, framework, first_time
