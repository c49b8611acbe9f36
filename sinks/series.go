package sinks

import (
	"context"
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// A training step is stored in two parts (docs/performance.md, "The cost of
// a stored step"): training_step_rows holds each row's coordinates, the
// job's identity (cluster, namespace, job: the cluster sharding key and
// every per-job read need them), its figures and its series key
// (pipeline.SeriesKey); training_step_series holds the strings that are
// the same for every row of a series (pod, node, pool, model, framework,
// kind, network, network class) once per key. training_steps is a view that
// joins them back, so every query keeps its SQL and its answers.

// stepRowsTable is the table of the rows' own columns.
var stepRowsTable = table{
	name: "training_step_rows",
	columns: []string{"topic", "`partition`", "`offset`", "line", "time", "job", "namespace", "cluster", "series",
		"rank", "step", "ranks", "step_time_s", "tokens_per_s", "samples_per_s", "it_per_s", "tflops", "mfu", "loss"},
	rows: func(b *pipeline.Batch) int { return len(b.Steps) },
	cols: func(c *columns, b *pipeline.Batch, _ *ClickHouseConfig) {
		st := b.Steps
		sourceColumns(c, func(j int) *pipeline.Source { return &st[j].Source })
		col(c, func(j int) time.Time { return clampTime(st[j].Time) })
		col(c, func(j int) string { return st[j].Job })
		col(c, func(j int) string { return st[j].Namespace })
		col(c, func(j int) string { return st[j].Cluster })
		col(c, func(j int) uint64 { return stepSeries(&st[j]) })
		col(c, func(j int) int32 { return int32(clamp(st[j].Rank, -1<<31, 1<<31-1)) })
		col(c, func(j int) int64 { return st[j].Step })
		col(c, func(j int) uint32 { return uint32(clamp(st[j].Ranks, 1, 1<<32-1)) })
		col(c, func(j int) *float64 { return nullFP(&st[j].StepTime) })
		col(c, func(j int) *float64 { return nullFP(&st[j].TokensPerS) })
		col(c, func(j int) *float64 { return nullFP(&st[j].SamplesPerS) })
		col(c, func(j int) *float64 { return nullFP(&st[j].ItPerS) })
		col(c, func(j int) *float64 { return nullFP(&st[j].TFLOPs) })
		col(c, func(j int) *float64 { return nullFP(&st[j].MFU) })
		col(c, func(j int) *float64 { return nullFP(&st[j].Loss) })
	},
	// A row is written again as its count grows (pipeline.
	// TrainingStep.Ranks): the count is part of its identity here, or
	// the server would drop the update as a repeat.
	key: func(b *pipeline.Batch, h io.Writer) {
		var buf [12]byte
		for i := range b.Steps {
			writeSource(h, b.Steps[i].Source)
			h.Write(strconv.AppendInt(buf[:0], int64(b.Steps[i].Ranks), 10))
		}
	},
}

// stepSeries is the series key of r: the one it carries, or, for a row
// made without one, its strings' key.
func stepSeries(r *pipeline.TrainingStep) uint64 {
	if r.Series != 0 {
		return r.Series
	}
	return pipeline.SeriesKey(r.StepSeries)
}

const seriesTableName = "training_step_series"

// seriesTable is the table of the series strings: one row for each series
// of a batch that plan(b) lists (indices of b.Steps, one per key).
func seriesTable(plan func(b *pipeline.Batch) []int32) table {
	return table{
		name: seriesTableName,
		columns: []string{"job", "namespace", "cluster", "series", "pod", "node", "pool", "model", "framework", "kind",
			"network", "network_class"},
		rows: func(b *pipeline.Batch) int { return len(plan(b)) },
		cols: func(c *columns, b *pipeline.Batch, _ *ClickHouseConfig) {
			st, idx := b.Steps, plan(b)
			col(c, func(j int) string { return st[idx[j]].Job })
			col(c, func(j int) string { return st[idx[j]].Namespace })
			col(c, func(j int) string { return st[idx[j]].Cluster })
			col(c, func(j int) uint64 { return stepSeries(&st[idx[j]]) })
			col(c, func(j int) string { return st[idx[j]].Pod })
			col(c, func(j int) string { return st[idx[j]].Node })
			col(c, func(j int) string { return st[idx[j]].Pool })
			col(c, func(j int) string { return st[idx[j]].Model })
			col(c, func(j int) string { return st[idx[j]].Framework })
			col(c, func(j int) string { return st[idx[j]].Kind })
			col(c, func(j int) string { return st[idx[j]].Network })
			col(c, func(j int) string { return st[idx[j]].NetworkClass })
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			var buf [8]byte
			for _, i := range plan(b) {
				h.Write(binary.LittleEndian.AppendUint64(buf[:0], stepSeries(&b.Steps[i])))
			}
		},
	}
}

// everySeries lists the first row of each series of b: what the series
// table gets from a batch when nothing was sent before (tests, and the
// tables' listing).
func everySeries(b *pipeline.Batch) []int32 {
	seen := map[uint64]bool{}
	var out []int32
	for i := range b.Steps {
		if k := stepSeries(&b.Steps[i]); !seen[k] {
			seen[k] = true
			out = append(out, int32(i))
		}
	}
	return out
}

// maxSentSeries bounds the series keys a sink remembers having sent: 2^18
// keys take a few MiB, more than the series of the jobs a process holds at
// once (pipeline's telemetry max_jobs, a few dozen series each); past it
// the memory is cleared, and a series sent again is folded by the
// series table's ReplacingMergeTree.
const maxSentSeries = 1 << 18

// sentSeries is what a sink remembers of the series it stored: a series
// row is sent the first time this process sends a key. Other processes
// and replays send their own; the table folds the repeats. Not safe for
// concurrent use (Consume is not called concurrently).
type sentSeries struct {
	sent map[uint64]struct{}
	// rows are the indices in the batch being consumed of the rows whose
	// series it sends (plan).
	rows []int32
	keys []uint64 // their keys
}

// plan lists the rows of b whose series were not sent, one per key, for
// the series table's insert of b.
func (s *sentSeries) plan(b *pipeline.Batch) {
	s.rows, s.keys = s.rows[:0], s.keys[:0]
	if s.sent == nil {
		s.sent = map[uint64]struct{}{}
	}
	for i := range b.Steps {
		k := stepSeries(&b.Steps[i])
		if _, ok := s.sent[k]; ok {
			continue
		}
		// A key sent only once the insert succeeds; marked now so the
		// batch lists it once, unmarked by forget when it fails.
		s.sent[k] = struct{}{}
		s.rows = append(s.rows, int32(i))
		s.keys = append(s.keys, k)
	}
}

// planned returns the rows plan listed.
func (s *sentSeries) planned(*pipeline.Batch) []int32 { return s.rows }

// stored keeps the planned keys as sent, within the bound.
func (s *sentSeries) stored() {
	if len(s.sent) > maxSentSeries {
		clear(s.sent)
	}
	s.rows, s.keys = s.rows[:0], s.keys[:0]
}

// forget unmarks the planned keys of a batch whose series insert did not
// succeed (or was not reached): the next batch sends them.
func (s *sentSeries) forget() {
	for _, k := range s.keys {
		delete(s.sent, k)
	}
	s.rows, s.keys = s.rows[:0], s.keys[:0]
}

// stepSeriesMigrations are migrations 24–26: training_steps split into
// the row table and the series table, and made a view that joins them.
// 24 and 25 create the tables. 26 carries the rows of the training_steps
// table over (each INSERT … SELECT is skipped by Migrate where
// training_steps holds no rows of its own any more, copySource: a re-run
// after an interruption copies nothing twice that a query could see, and
// a copy repeated before the table was dropped is folded by the tables'
// ReplacingMergeTree), drops the table and creates the view. The view
// folds the row table with FINAL itself: 18.16 accepts FINAL on a view
// and ignores it, so the queries' own FINAL does not reach the table.
func stepSeriesMigrations(f features) []migration {
	t := f.ddl()
	timeType, lc, codec, settings := t.time, t.lc, t.codec, t.settings
	strs := "pod, node, pool, model, framework, kind, network, network_class"
	key := "cityHash64(cluster, namespace, job, " + strs + ")"
	figs := "step_time_s, tokens_per_s, samples_per_s, it_per_s, tflops, mfu, loss"
	coords := "topic, `partition`, `offset`, line, time"
	return []migration{
		{Version: 24, Name: "training_step_rows", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.training_step_rows{on_cluster}
(
    topic String,
    ` + "`partition`" + ` Int32,
    ` + "`offset`" + ` Int64,
    line Int32,
    time ` + timeType + codec("Delta, ZSTD(1)") + `,
    job ` + lc + `,
    namespace ` + lc + `,
    cluster ` + lc + `,
    series UInt64,
    rank Int32,
    step Int64,
    ranks UInt32 DEFAULT 1,
    step_time_s Nullable(Float64),
    tokens_per_s Nullable(Float64),
    samples_per_s Nullable(Float64),
    it_per_s Nullable(Float64),
    tflops Nullable(Float64),
    mfu Nullable(Float64),
    loss Nullable(Float64),
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		{Version: 25, Name: "training_step_series", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.training_step_series{on_cluster}
(
    job ` + lc + `,
    namespace ` + lc + `,
    cluster ` + lc + `,
    series UInt64,
    pod String,
    node ` + lc + `,
    pool ` + lc + `,
    model ` + lc + `,
    framework ` + lc + `,
    kind ` + lc + `,
    network ` + lc + `,
    network_class ` + lc + `,
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree
ORDER BY (cluster, namespace, job, series)` + settings}},

		{Version: 26, Name: "training_steps", Stmts: []string{
			`INSERT INTO {db}.training_step_series (job, namespace, cluster, series, ` + strs + `)
SELECT job, namespace, cluster, ` + key + `, ` + strs + `
FROM (SELECT DISTINCT job, namespace, cluster, ` + strs + `
FROM {db}.training_steps)`,
			`INSERT INTO {db}.training_step_rows (` + coords + `, job, namespace, cluster, series, rank, step, ranks, ` + figs + `, inserted_at)
SELECT ` + coords + `, job, namespace, cluster, ` + key + `, rank, step, ranks, ` + figs + `, inserted_at
FROM {db}.training_steps`,
			`DROP TABLE IF EXISTS {db}.training_steps{on_cluster}`,
			`CREATE VIEW IF NOT EXISTS {db}.training_steps{on_cluster} AS
SELECT
    ` + coords + `,
    job, namespace, cluster, pod, node, pool, model, framework, kind,
    rank, step, ranks, network, network_class,
    ` + figs + `,
    inserted_at
FROM {db}.training_step_rows FINAL
ANY LEFT JOIN
(
    SELECT job, namespace, cluster, series, ` + strs + `
    FROM {db}.training_step_series
) AS s USING (cluster, namespace, job, series)`,
		}},
	}
}

// copySource returns the table an INSERT … SELECT of a migration copies
// from (the last table its text names after FROM), ok false for any
// other statement.
func copySource(stmt string) (db, table string, ok bool) {
	if !strings.HasPrefix(stmt, "INSERT INTO ") {
		return "", "", false
	}
	at := strings.LastIndex(stmt, "\nFROM ")
	if at < 0 {
		return "", "", false
	}
	name := stmt[at+len("\nFROM "):]
	if end := strings.IndexAny(name, " \n)"); end >= 0 {
		name = name[:end]
	}
	db, table, ok = strings.Cut(name, ".")
	return db, table, ok && table != ""
}

// holdsRows reports whether db.table is a table that stores rows: a
// MergeTree, or a Distributed table over a MergeTree table_local (the
// cluster form, expand). A missing table or a view holds none.
func (c *ClickHouse) holdsRows(ctx context.Context, db, table string) (bool, error) {
	engine, err := c.engine(ctx, db, table)
	if err != nil || strings.HasSuffix(engine, "MergeTree") {
		return err == nil, err
	}
	if engine != "Distributed" {
		return false, nil
	}
	engine, err = c.engine(ctx, db, table+"_local")
	return strings.HasSuffix(engine, "MergeTree"), err
}

// engine returns the engine of db.table, "" when there is no such table.
func (c *ClickHouse) engine(ctx context.Context, db, table string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	rows, err := c.conn.Query(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = ?", db, table)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var engine string
	for rows.Next() {
		if err := rows.Scan(&engine); err != nil {
			return "", err
		}
	}
	return engine, rows.Err()
}
