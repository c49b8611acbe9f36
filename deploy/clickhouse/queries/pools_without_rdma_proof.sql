-- Node pools with no RDMA proof recently: the dead-man's switch.
--
-- Proof is a job in the pool whose verdict is ok on an rdma network: a
-- canary run (deploy/kubernetes/canary) or any training job. A pool is
-- listed when ncclwatch saw it in the last 30 days (canary or training
-- rows name it) but has no proof in the last 6 hours — the canary did not
-- run, did not reach the pipeline, or fell back; last_proof is the epoch
-- (1970) for a pool never proven. Pools come from the pod label
-- ncclwatch.io/pool, or from the inventory's pool of the pod's node.
-- Windows: 30 days of pools, 6 hours of proof. ClickHouse 18.16 and later.
SELECT
    pool,
    last_proof,
    last_canary,
    last_canary_verdict,
    canary_runs,
    jobs_seen
FROM
(
    SELECT
        pool,
        maxIf(last_time, verdict = 'ok' AND job_network_class = 'rdma') AS last_proof,
        maxIf(last_time, canary = 1) AS last_canary,
        argMaxIf(verdict, last_time, canary = 1) AS last_canary_verdict,
        countIf(canary = 1) AS canary_runs,
        uniqExact(cluster, namespace, job) AS jobs_seen
    FROM
    (
        SELECT cluster, namespace, job, pool, canary, verdict, job_network_class, last_time
        FROM ncclwatch.nccl_test_runs
        WHERE pool != '' AND last_time >= now() - INTERVAL 30 DAY
        UNION ALL
        SELECT cluster, namespace, job, pool, toUInt8(0) AS canary, verdict, job_network_class, last_time
        FROM ncclwatch.training_series
        WHERE pool != '' AND last_time >= now() - INTERVAL 30 DAY
    )
    GROUP BY pool
)
WHERE last_proof < now() - INTERVAL 6 HOUR
ORDER BY pool
