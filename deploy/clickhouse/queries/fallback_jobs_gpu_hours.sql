-- Jobs in socket fallback over the last day, and the GPU-hours they burnt.
--
-- A job counts when its verdict is socket_fallback and it was seen (NCCL
-- lines or training steps) in the last 24 hours. Its span runs from the
-- first to the last line ncclwatch stored for it: NCCL init lines
-- (job_verdicts.first_seen/last_seen) and training steps, whichever reach
-- further. gpu_hours multiplies the span by nranks (one GPU per rank);
-- gpu_hours_last_day counts only the part of the span inside the window.
-- Since a fallback job runs at about half speed, about half of those
-- GPU-hours bought nothing. Window: 24 hours. ClickHouse 18.16 and later.
SELECT
    cluster,
    namespace,
    job,
    net AS network,
    node_count AS nnodes,
    rank_count AS nranks,
    toDateTime(span_start) AS started,
    toDateTime(span_end) AS last_seen_at,
    round((span_end - span_start) / 3600, 3) AS hours,
    round(rank_count * (span_end - span_start) / 3600, 2) AS gpu_hours,
    round(rank_count * (span_end - greatest(span_start, toUInt32(now() - INTERVAL 1 DAY))) / 3600, 2) AS gpu_hours_last_day
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        ifNull(network, '') AS net,
        ifNull(nnodes, 0) AS node_count,
        ifNull(nranks, 0) AS rank_count,
        if(step_rows > 0, least(toUInt32(first_seen), step_first), toUInt32(first_seen)) AS span_start,
        if(step_rows > 0, greatest(toUInt32(last_seen), step_last), toUInt32(last_seen)) AS span_end
    FROM
    (
        SELECT cluster, namespace, job, network, nnodes, nranks, first_seen, last_seen
        FROM ncclwatch.job_verdicts
        WHERE verdict = 'socket_fallback'
    ) AS l
    ANY LEFT JOIN
    (
        SELECT
            cluster,
            namespace,
            job,
            count() AS step_rows,
            min(toUInt32(time)) AS step_first,
            max(toUInt32(time)) AS step_last
        FROM ncclwatch.training_steps FINAL
        GROUP BY cluster, namespace, job
    ) AS r USING (cluster, namespace, job)
)
WHERE span_end >= toUInt32(now() - INTERVAL 1 DAY)
ORDER BY gpu_hours DESC, cluster, namespace, job
