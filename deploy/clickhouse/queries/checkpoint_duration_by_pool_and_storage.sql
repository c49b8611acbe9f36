-- Checkpoint save and load time by node pool and storage path prefix: are
-- saves to the parallel file system (/lustre/…) slower than to node-local
-- disk (/mnt/local/…), and on which pool? The prefix is a path's first two
-- components as the trainer printed it ("/lustre/ckpt", "/mnt/local",
-- "experiments/run-1" for a relative path).
--
-- Durations count only where the trainer printed one (Megatron's
-- save-checkpoint timer, torchtitan's "Finished saving … in X seconds",
-- fairseq's "writing took"); events counts every save or load.
-- Window: 7 days. ClickHouse 18.16 and later.
SELECT
    pool,
    storage_prefix,
    op,
    count() AS events,
    count(duration_s) AS timed_events,
    medianExact(duration_s) AS median_duration_s,
    max(duration_s) AS max_duration_s,
    sum(duration_s) AS total_duration_s
FROM
(
    SELECT
        pool,
        op,
        duration_s,
        arrayStringConcat(arraySlice(splitByChar('/', path), 1, if(startsWith(path, '/'), 3, 2)), '/') AS storage_prefix
    FROM ncclwatch.checkpoint_events FINAL
    WHERE time > now() - INTERVAL 7 DAY
)
GROUP BY pool, storage_prefix, op
ORDER BY pool, storage_prefix, op
