package sinks

import (
	"encoding/binary"
	"io"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// inspectorTables is collective_perf: NCCL Inspector records folded per
// job, communicator, operation, size bucket, minute and fold window
// (pipeline/collective.go). Consume writes it after the checkpoint table.
var inspectorTables = []table{
	{
		name: "collective_perf",
		columns: []string{"topic", "`partition`", "`offset`", "line", "minute", "job", "namespace", "cluster", "pod",
			"node", "pool", "host", "comm_id", "comm_name", "op", "p2p", "size_bucket", "nranks", "nnodes", "records",
			"busbw_min", "busbw_max", "busbw_sum", "busbw_p50", "exec_us_min", "exec_us_max", "exec_us_sum",
			"exec_us_p50", "exec_us_p99", "busbw_hist_buckets", "busbw_hist_counts", "exec_hist_buckets",
			"exec_hist_counts"},
		rows: func(b *pipeline.Batch) int { return len(b.Collectives) },
		// A column at a time (columns): the Inspector shape sends a row
		// per collective, operation, size bucket and minute, and a row of
		// 33 interface values boxed most of its cells.
		cols: func(c *columns, b *pipeline.Batch, _ *ClickHouseConfig) {
			rs := b.Collectives
			// The driver copies each row's array as it takes it, so one
			// scratch slice serves every row.
			scratch := make([]uint16, 0, 64)
			sourceColumns(c, func(j int) *pipeline.Source { return &rs[j].Source })
			col(c, func(j int) time.Time { return clampTime(rs[j].Minute.Truncate(time.Minute)) })
			col(c, func(j int) string { return rs[j].Job })
			col(c, func(j int) string { return rs[j].Namespace })
			col(c, func(j int) string { return rs[j].Cluster })
			col(c, func(j int) string { return rs[j].Pod })
			col(c, func(j int) string { return rs[j].Node })
			col(c, func(j int) string { return rs[j].Pool })
			col(c, func(j int) string { return rs[j].Host })
			col(c, func(j int) string { return rs[j].CommID })
			col(c, func(j int) string { return rs[j].CommName })
			col(c, func(j int) string { return rs[j].Op })
			col(c, func(j int) uint8 { return b2u(rs[j].P2P) })
			col(c, func(j int) int64 { return rs[j].SizeBucket })
			col(c, func(j int) int32 { return int32(clamp(rs[j].NRanks, -1<<31, 1<<31-1)) })
			col(c, func(j int) int32 { return int32(clamp(rs[j].NNodes, -1<<31, 1<<31-1)) })
			col(c, func(j int) uint64 { return uint64(max(rs[j].Count, 0)) })
			col(c, func(j int) *float64 { return nullFP(&rs[j].BusBWMin) })
			col(c, func(j int) *float64 { return nullFP(&rs[j].BusBWMax) })
			col(c, func(j int) float64 { return rs[j].BusBWSum })
			col(c, func(j int) *float64 { return nullFP(&rs[j].BusBWP50) })
			col(c, func(j int) *float64 { return nullFP(&rs[j].ExecUSMin) })
			col(c, func(j int) *float64 { return nullFP(&rs[j].ExecUSMax) })
			col(c, func(j int) float64 { return rs[j].ExecUSSum })
			col(c, func(j int) *float64 { return nullFP(&rs[j].ExecUSP50) })
			col(c, func(j int) *float64 { return nullFP(&rs[j].ExecUSP99) })
			arrayCol(c, func(j int) []uint16 { scratch = appendBuckets(scratch[:0], rs[j].BusBWHist); return scratch })
			arrayCol(c, func(j int) []uint32 { return histCounts(rs[j].BusBWHist) })
			arrayCol(c, func(j int) []uint16 { scratch = appendBuckets(scratch[:0], rs[j].ExecHist); return scratch })
			arrayCol(c, func(j int) []uint32 { return histCounts(rs[j].ExecHist) })
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			var n [8]byte
			for i := range b.Collectives {
				writeSource(h, b.Collectives[i].Source)
				// records is the row's version: the same row grown is
				// another insert.
				binary.LittleEndian.PutUint64(n[:], uint64(b.Collectives[i].Count))
				h.Write(n[:])
			}
		},
	},
}

// appendBuckets and histCounts are a Hist's arrays as stored
// (Array(UInt16), Array(UInt32); never nil).
func appendBuckets(dst []uint16, h pipeline.Hist) []uint16 {
	for _, b := range h.Buckets {
		dst = append(dst, uint16(b))
	}
	return dst
}

func histCounts(h pipeline.Hist) []uint32 {
	if h.Counts == nil {
		return []uint32{}
	}
	return h.Counts
}

// inspectorMigrations are migrations 60–69 (NCCL Inspector). The table is
// keyed by the coordinates of a row's first record, like training_steps,
// with records (how many records the row folds) as the version: a row
// written again as it grows replaces its poorer copy, and a replay shows
// nothing twice. A minute's records in several fold windows are several
// rows; collective_perf_fabric sums them per job, communicator, operation,
// size bucket and minute and joins the communicator's negotiated fabric
// (comm_summaries, by comm_id: Inspector's header.id is the commId of
// NCCL's init line) and the job's verdict. The join is in the view, not in
// the rows, since a row must be a function of its records alone while the
// init lines arrive on another input (the container log, not the dump
// directory) at their own pace.
func inspectorMigrations(f features) []migration {
	t := f.ddl()
	lc, codec, settings := t.lc, t.codec, t.settings
	return []migration{
		{Version: 60, Name: "collective_perf", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.collective_perf{on_cluster}
(
    topic String,
    ` + "`partition`" + ` Int32,
    ` + "`offset`" + ` Int64,
    line Int32,
    minute DateTime` + codec("Delta, ZSTD(1)") + `,
    job ` + lc + `,
    namespace ` + lc + `,
    cluster ` + lc + `,
    pod String,
    node ` + lc + `,
    pool ` + lc + `,
    host ` + lc + `,
    comm_id String,
    comm_name ` + lc + `,
    op ` + lc + `,
    p2p UInt8,
    size_bucket Int64,
    nranks Int32,
    nnodes Int32,
    records UInt64,
    busbw_min Nullable(Float64),
    busbw_max Nullable(Float64),
    busbw_sum Float64,
    busbw_p50 Nullable(Float64),
    exec_us_min Nullable(Float64),
    exec_us_max Nullable(Float64),
    exec_us_sum Float64,
    exec_us_p50 Nullable(Float64),
    exec_us_p99 Nullable(Float64),
    busbw_hist_buckets Array(UInt16),
    busbw_hist_counts Array(UInt32),
    exec_hist_buckets Array(UInt16),
    exec_hist_counts Array(UInt32),
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(records)
PARTITION BY toYYYYMM(minute)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		// The rows of one minute from several windows: counts and sums
		// add up, extremes are the extremes; the p50s are the medians of
		// the rows' p50s weighted by their records (the histograms merge
		// exactly with sumMap: docs/inspector.md), exec_us_p99 the
		// highest row p99 (an upper bound). The inner aliases are not
		// column names: ClickHouse would put sum(records) into the
		// weighted quantiles ("aggregate function found inside another").
		{Version: 61, Name: "collective_perf_fabric", Stmts: []string{`CREATE VIEW IF NOT EXISTS {db}.collective_perf_fabric{on_cluster} AS
SELECT
    cluster,
    namespace,
    job,
    comm_id,
    op,
    p2p,
    size_bucket,
    minute,
    sum_records AS records,
    min_busbw AS busbw_min,
    max_busbw AS busbw_max,
    p50_busbw AS busbw_p50,
    p50_exec_us AS exec_us_p50,
    p99_exec_us AS exec_us_p99,
    perf_pool AS pool,
    perf_nnodes AS nnodes,
    comm_network,
    comm_network_class,
    comm_gdr,
    network AS job_network,
    network_class AS job_network_class,
    verdict AS job_verdict
FROM
(
    SELECT *
    FROM
    (
        SELECT
            cluster,
            namespace,
            job,
            comm_id,
            op,
            p2p,
            size_bucket,
            minute,
            sum(records) AS sum_records,
            min(busbw_min) AS min_busbw,
            max(busbw_max) AS max_busbw,
            quantileExactWeighted(0.5)(busbw_p50, records) AS p50_busbw,
            quantileExactWeighted(0.5)(exec_us_p50, records) AS p50_exec_us,
            max(exec_us_p99) AS p99_exec_us,
            any(pool) AS perf_pool,
            max(nnodes) AS perf_nnodes
        FROM {db}.collective_perf FINAL
        GROUP BY cluster, namespace, job, comm_id, op, p2p, size_bucket, minute
    ) AS perf
    ANY LEFT JOIN
    (
        SELECT
            cluster,
            namespace,
            job,
            comm_id,
            network AS comm_network,
            network_class AS comm_network_class,
            gdr AS comm_gdr
        FROM {db}.comm_summaries FINAL
    ) AS comms USING (cluster, namespace, job, comm_id)
) AS l
ANY LEFT JOIN
(
    SELECT
        cluster,
        namespace,
        job,
        network,
        network_class,
        verdict
    FROM {db}.job_verdicts
) AS r USING (cluster, namespace, job)`}},
	}
}
