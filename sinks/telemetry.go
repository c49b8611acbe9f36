package sinks

import (
	"io"
	"math"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// telemetryTables are the tables of job telemetry (training steps,
// nccl-tests results); Consume writes them after the core tables and the
// series of the batch's training steps (seriesTable).
var telemetryTables = []table{
	stepRowsTable,
	{
		name: "nccl_test_results",
		columns: []string{"topic", "`partition`", "`offset`", "line", "time", "job", "namespace", "cluster", "pod", "node",
			"pool", "canary", "run_id", "context", "kind", "collective", "nccl_tests_version", "nranks", "hosts", "gpu",
			"bytes", "elements", "dtype", "redop", "root", "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong",
			"ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong", "avg_busbw"},
		rows: func(b *pipeline.Batch) int { return len(b.TestRuns) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.TestRuns {
				r := &b.TestRuns[i]
				if err := d.Append(r.Source.Topic, r.Source.Partition, r.Source.Offset, r.Source.Line, clampTime(r.Time),
					r.Job, r.Namespace, r.Cluster, r.Pod, r.Node, r.Pool, b2u(r.Canary), r.RunID, r.Context, r.Kind,
					r.Collective, r.Version, nullInt(r.NRanks), strs(r.Hosts), r.GPU, nullI64(r.Bytes), nullI64(r.Count),
					r.Type, r.Redop, int32(clamp(r.Root, -1<<31, 1<<31-1)),
					nullF(r.OOP.TimeUS), nullF(r.OOP.AlgBW), nullF(r.OOP.BusBW), nullF(r.OOP.Wrong),
					nullF(r.IP.TimeUS), nullF(r.IP.AlgBW), nullF(r.IP.BusBW), nullF(r.IP.Wrong),
					nullF(r.AvgBusBW)); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.TestRuns {
				writeSource(h, b.TestRuns[i].Source)
				// The context is the row's version: a richer copy of the
				// same coordinates is another insert.
				h.Write([]byte{b.TestRuns[i].Context})
			}
		},
	},
}

// nullF stores NaN (the domain's "not printed") and infinities as NULL.
func nullF(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// nullFP is nullF without a copy: p itself, or nil for NaN and infinities.
func nullFP(p *float64) *float64 {
	if math.IsNaN(*p) || math.IsInf(*p, 0) {
		return nil
	}
	return p
}

// nullInt stores a negative count (unknown) as NULL.
func nullInt(n int) *int32 {
	if n < 0 {
		return nil
	}
	v := int32(clamp(n, 0, 1<<31-1))
	return &v
}

func nullI64(n int64) *int64 {
	if n < 0 {
		return nil
	}
	return &n
}

// telemetryMigrations are migrations 20–39 (job telemetry): the two row
// tables, keyed by source coordinates like nccl_events so that a replay
// shows nothing twice, and views that roll them up per training series and
// per nccl-tests run, joined with job_verdicts. No alias inside them
// names a column (ClickHouse's old analyzer would substitute it into the
// aggregate that defines it). The views read the tables
// with FINAL: a replayed coordinate folds into one row before it is
// counted, on 18.16 and on current servers alike.
func telemetryMigrations(f features) []migration {
	t := f.ddl()
	timeType, lc, codec, settings := t.time, t.lc, t.codec, t.settings
	coords := "    topic String,\n    `partition` Int32,\n    `offset` Int64,\n    line Int32,\n    time " + timeType + codec("Delta, ZSTD(1)") + ",\n"
	who := "    job " + lc + ",\n    namespace " + lc + ",\n    cluster " + lc + ",\n    pod String,\n    node " + lc + ",\n    pool " + lc + ",\n"
	tail := "    inserted_at DateTime DEFAULT now()\n)\n"

	seriesView := `CREATE VIEW IF NOT EXISTS {db}.training_series{on_cluster} AS
SELECT
    cluster,
    namespace,
    job,
    framework,
    series_model AS model,
    series_pool AS pool,
    steps,
    first_step,
    last_step,
    timed_steps,
    median_step_time_s,
    p90_step_time_s,
    tokens_per_s_last,
    samples_per_s_last,
    mfu_last,
    tflops_last,
    first_time,
    last_time,
    job_network,
    job_network_class,
    verdict,
    nnodes,
    nranks
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        framework,
        anyLast(model) AS series_model,
        anyLast(pool) AS series_pool,
        countIf(kind = 'step') AS steps,
        minIf(step, step >= 0) AS first_step,
        maxIf(step, step >= 0) AS last_step,
        count(step_time_s) AS timed_steps,
        medianExact(step_time_s) AS median_step_time_s,
        quantileExact(0.9)(step_time_s) AS p90_step_time_s,
        argMax(tokens_per_s, (toUInt32(time), ` + "`offset`" + `)) AS tokens_per_s_last,
        argMax(samples_per_s, (toUInt32(time), ` + "`offset`" + `)) AS samples_per_s_last,
        argMax(mfu, (toUInt32(time), ` + "`offset`" + `)) AS mfu_last,
        argMax(tflops, (toUInt32(time), ` + "`offset`" + `)) AS tflops_last,
        min(time) AS first_time,
        max(time) AS last_time
    FROM {db}.training_steps FINAL
    GROUP BY cluster, namespace, job, framework
) AS l
ANY LEFT JOIN
(
    SELECT
        cluster,
        namespace,
        job,
        network AS job_network,
        network_class AS job_network_class,
        verdict,
        nnodes,
        nranks
    FROM {db}.job_verdicts
) AS r USING (cluster, namespace, job)`
	// A row stands for its ranks' lines (pipeline.TrainingStep.Ranks): the
	// series view counts and weighs lines, as the in-process report does.
	weighted := strings.NewReplacer(
		"countIf(kind = 'step') AS steps", "sumIf(ranks, kind = 'step') AS steps",
		"count(step_time_s) AS timed_steps", "sumIf(ranks, isNotNull(step_time_s)) AS timed_steps",
		"medianExact(step_time_s) AS", "quantileExactWeighted(0.5)(step_time_s, ranks) AS",
		"quantileExact(0.9)(step_time_s) AS", "quantileExactWeighted(0.9)(step_time_s, ranks) AS",
	).Replace(seriesView)

	out := []migration{
		{Version: 20, Name: "training_steps", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.training_steps{on_cluster}
(
` + coords + who + `    model ` + lc + `,
    framework ` + lc + `,
    kind ` + lc + `,
    rank Int32,
    step Int64,
    ranks UInt32 DEFAULT 1,
    network ` + lc + `,
    network_class ` + lc + `,
    step_time_s Nullable(Float64),
    tokens_per_s Nullable(Float64),
    samples_per_s Nullable(Float64),
    it_per_s Nullable(Float64),
    tflops Nullable(Float64),
    mfu Nullable(Float64),
    loss Nullable(Float64),
` + tail + `ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		// context is the version: of two rows with the same coordinates
		// the one written with more of its run's header wins (a replay
		// that starts mid-table knows less).
		{Version: 21, Name: "nccl_test_results", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.nccl_test_results{on_cluster}
(
` + coords + who + `    canary UInt8,
    run_id String,
    context UInt8,
    kind ` + lc + `,
    collective ` + lc + `,
    nccl_tests_version ` + lc + `,
    nranks Nullable(Int32),
    hosts Array(String),
    gpu ` + lc + `,
    bytes Nullable(Int64),
    elements Nullable(Int64),
    dtype ` + lc + `,
    redop ` + lc + `,
    root Int32,
    oop_time_us Nullable(Float64),
    oop_algbw Nullable(Float64),
    oop_busbw Nullable(Float64),
    oop_wrong Nullable(Float64),
    ip_time_us Nullable(Float64),
    ip_algbw Nullable(Float64),
    ip_busbw Nullable(Float64),
    ip_wrong Nullable(Float64),
    avg_busbw Nullable(Float64),
` + tail + `ENGINE = ReplacingMergeTree(context)
PARTITION BY toYYYYMM(time)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		// One row per training series (job and framework). Step times
		// count from "step" and "amend" rows (a DeepSpeed profiler's iter
		// latency arrives on its own line); "summary" rows give only
		// throughput. argMax over (time, offset) takes the latest printed
		// figure; argMax skips NULLs, so a figure a later line does not
		// print stays the last one printed.
		{Version: 22, Name: "training_series", Stmts: []string{weighted}},

		// One row per nccl-tests run: its average and the bus bandwidth of
		// its largest message size, with the job's verdict. A run's rows
		// share run_id; the canary flag and pool come from the pod labels,
		// the collective from the row that knew most of the run.
		{Version: 23, Name: "nccl_test_runs", Stmts: []string{`CREATE VIEW IF NOT EXISTS {db}.nccl_test_runs{on_cluster} AS
SELECT
    cluster,
    namespace,
    job,
    run_id,
    run_pool AS pool,
    run_canary AS canary,
    run_collective AS collective,
    test_nranks,
    test_hosts,
    row_count,
    min_bytes,
    max_bytes,
    avg_busbw,
    max_size_busbw_oop,
    max_size_busbw_ip,
    first_time,
    last_time,
    job_network,
    job_network_class,
    verdict,
    nnodes
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        run_id,
        anyLast(pool) AS run_pool,
        max(canary) AS run_canary,
        argMax(collective, context) AS run_collective,
        max(nranks) AS test_nranks,
        max(length(hosts)) AS test_hosts,
        countIf(kind = 'row') AS row_count,
        minIf(bytes, kind = 'row') AS min_bytes,
        maxIf(bytes, kind = 'row') AS max_bytes,
        maxIf(avg_busbw, kind = 'avg') AS avg_busbw,
        argMaxIf(oop_busbw, bytes, kind = 'row') AS max_size_busbw_oop,
        argMaxIf(ip_busbw, bytes, kind = 'row') AS max_size_busbw_ip,
        min(time) AS first_time,
        max(time) AS last_time
    FROM {db}.nccl_test_results FINAL
    GROUP BY cluster, namespace, job, run_id
) AS l
ANY LEFT JOIN
(
    SELECT
        cluster,
        namespace,
        job,
        network AS job_network,
        network_class AS job_network_class,
        verdict,
        nnodes
    FROM {db}.job_verdicts
) AS r USING (cluster, namespace, job)`}},
	}
	return append(out, stepSeriesMigrations(f)...)
}
