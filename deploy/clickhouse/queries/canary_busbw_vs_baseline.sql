-- Fabric canary bus bandwidth per node pool over time, against the pool's
-- baseline.
--
-- Each canary run (deploy/kubernetes/canary: a two-node nccl-tests job per
-- RDMA pool, pods labelled ncclwatch.io/canary=true and
-- ncclwatch.io/pool=<pool>) gives the out-of-place bus bandwidth of its
-- largest message size, in GB/s as nccl-tests prints it. The baseline is
-- the pool's median of that figure over the 14 days before now, counting
-- only runs whose verdict was ok (a canary that fell back to sockets must
-- not drag the baseline down); NULL for a pool with no ok run yet. ratio
-- compares the bucket's worst run; ratio < 0.8 is what the canary busbw rule
-- alerts on (deploy/kubernetes/canary/rules.yaml).
-- Window: hourly buckets over the last 7 days. ClickHouse 18.16 and later.
SELECT
    pool,
    collective,
    bucket,
    runs,
    busbw,
    min_busbw,
    if(pool_baseline > 0, pool_baseline, NULL) AS baseline,
    if(pool_baseline > 0, round(min_busbw / pool_baseline, 3), NULL) AS ratio
FROM
(
    SELECT
        pool,
        collective,
        toStartOfHour(first_time) AS bucket,
        count() AS runs,
        avg(max_size_busbw_oop) AS busbw,
        min(max_size_busbw_oop) AS min_busbw
    FROM ncclwatch.nccl_test_runs
    WHERE canary = 1
      AND first_time >= now() - INTERVAL 7 DAY
      AND row_count > 0
    GROUP BY pool, collective, bucket
) AS l
ANY LEFT JOIN
(
    SELECT
        pool,
        collective,
        medianExact(max_size_busbw_oop) AS pool_baseline
    FROM ncclwatch.nccl_test_runs
    WHERE canary = 1
      AND first_time >= now() - INTERVAL 14 DAY
      AND row_count > 0
      AND verdict = 'ok'
    GROUP BY pool, collective
) AS r USING (pool, collective)
ORDER BY pool, collective, bucket
