-- Bus bandwidth of a job's collectives before and after a network change:
-- a job that restarted on another network (IB, then Socket after a node
-- swap) shows one row per collective and network, in the order it used
-- them, with the median bus bandwidth of its large messages (64 MiB and
-- up) from NCCL Inspector, and the ratio to the job's first network.
--
-- network is what NCCL's init lines negotiated for the communicator the
-- Inspector records name (collective_perf_fabric joins comm_summaries by
-- comm_id); records of communicators whose init was not seen are left
-- out. busbw_p50 is the median of the minutes' medians weighted by their
-- records. Only jobs with more than one network in the window are listed.
-- Inner aliases are not column names: ClickHouse would substitute them into
-- the aggregates that read the columns.
-- Window: 7 days. ClickHouse 18.16 and later.
SELECT
    cluster,
    namespace,
    job,
    op,
    network,
    n_records AS records,
    first_minute,
    last_minute,
    p50 AS busbw_p50,
    round(p50 / first_busbw, 3) AS vs_first_network
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        op,
        comm_network AS network,
        sum(records) AS n_records,
        min(minute) AS first_minute,
        max(minute) AS last_minute,
        round(quantileExactWeighted(0.5)(busbw_p50, records), 1) AS p50
    FROM ncclwatch.collective_perf_fabric
    WHERE minute >= now() - INTERVAL 7 DAY
      AND size_bucket >= 67108864
      AND p2p = 0
      AND comm_network IS NOT NULL
    GROUP BY cluster, namespace, job, op, network
) AS l
ALL INNER JOIN
(
    SELECT
        cluster,
        namespace,
        job,
        op,
        argMin(net_busbw, net_first) AS first_busbw
    FROM
    (
        SELECT
            cluster,
            namespace,
            job,
            op,
            comm_network,
            min(minute) AS net_first,
            round(quantileExactWeighted(0.5)(busbw_p50, records), 1) AS net_busbw
        FROM ncclwatch.collective_perf_fabric
        WHERE minute >= now() - INTERVAL 7 DAY
          AND size_bucket >= 67108864
          AND p2p = 0
          AND comm_network IS NOT NULL
        GROUP BY cluster, namespace, job, op, comm_network
    )
    GROUP BY cluster, namespace, job, op
    HAVING count() > 1
) AS r USING (cluster, namespace, job, op)
ORDER BY cluster, namespace, job, op, first_minute
