package sinks

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSeriesSplitKeepsReads checks the storage split chosen for a stored
// step's per-series strings (docs/performance.md, "The cost of a stored
// step") before it is built: the seeded fleet's training_steps carried
// over into a row table with a series key and a series table, and
// training_steps made a view that joins them back and folds with FINAL,
// must give every cookbook query and every Grafana panel the answers the
// table gave.
func TestSeriesSplitKeepsReads(t *testing.T) {
	c, f := seeded(t)
	db := c.cfg.Database
	panels := func() map[string][]string {
		out := map[string][]string{}
		for name, d := range loadDashboards(t) {
			for _, p := range d.Panels {
				for i, tg := range p.Targets {
					sql := expandGrafana(tg.RawSQL, "ncclwatch", f.now.Add(-7*24*time.Hour), f.now.Add(time.Hour))
					got, err := queryTable(t, c, sql)
					if err != nil {
						t.Fatalf("%s: panel %q: %v", name, p.Title, err)
					}
					out[name+"/"+p.Title+"/"+strconv.Itoa(i)] = got
				}
			}
		}
		return out
	}
	before := panels()
	strs := "pod, node, pool, model, framework, kind, network, network_class"
	figs := "step_time_s, tokens_per_s, samples_per_s, it_per_s, tflops, mfu, loss"
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS {db}.training_step_rows (topic String, ` + "`partition`" + ` Int32, ` + "`offset`" + ` Int64, line Int32, time DateTime,
 job String, namespace String, cluster String, series UInt64, rank Int32, step Int64, ranks UInt32 DEFAULT 1,
 step_time_s Nullable(Float64), tokens_per_s Nullable(Float64), samples_per_s Nullable(Float64), it_per_s Nullable(Float64), tflops Nullable(Float64), mfu Nullable(Float64), loss Nullable(Float64),
 inserted_at DateTime DEFAULT now()) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(time) ORDER BY (topic, ` + "`partition`, `offset`" + `, line)`,
		`CREATE TABLE IF NOT EXISTS {db}.training_step_series (job String, namespace String, cluster String, series UInt64,
 pod String, node String, pool String, model String, framework String, kind String, network String, network_class String,
 inserted_at DateTime DEFAULT now()) ENGINE = ReplacingMergeTree ORDER BY (cluster, namespace, job, series)`,
		`INSERT INTO {db}.training_step_series (job, namespace, cluster, series, ` + strs + `) SELECT job, namespace, cluster, cityHash64(` + strs + `), ` + strs + ` FROM {db}.training_steps`,
		`INSERT INTO {db}.training_step_rows (topic, ` + "`partition`, `offset`" + `, line, time, job, namespace, cluster, series, rank, step, ranks, ` + figs + `, inserted_at) SELECT topic, ` + "`partition`, `offset`" + `, line, time, job, namespace, cluster, cityHash64(` + strs + `), rank, step, ranks, ` + figs + `, inserted_at FROM {db}.training_steps`,
		`DROP TABLE IF EXISTS {db}.training_steps`,
		`CREATE VIEW IF NOT EXISTS {db}.training_steps AS SELECT topic, ` + "`partition`, `offset`" + `, line, time, job, namespace, cluster, pod, node, pool, model, framework, kind, rank, step, ranks, network, network_class, ` + figs + `, inserted_at
FROM {db}.training_step_rows FINAL
ANY LEFT JOIN (SELECT job, namespace, cluster, series, ` + strs + ` FROM {db}.training_step_series) USING (cluster, namespace, job, series)`,
	}
	for _, s := range stmts {
		if err := c.conn.Exec(t.Context(), strings.ReplaceAll(s, "{db}", db)); err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
	}
	want := cookbook(f)
	for _, q := range cookbookQueries(t) {
		got, err := queryTable(t, c, q.sql)
		if err != nil {
			t.Errorf("%s: %v", q.name, err)
			continue
		}
		if !slices.Equal(got, want[q.name]) {
			t.Errorf("%s =\n\t%s\nwant\n\t%s", q.name, strings.Join(got, "\n\t"), strings.Join(want[q.name], "\n\t"))
		}
	}
	for k, got := range panels() {
		if !slices.Equal(got, before[k]) {
			t.Errorf("panel %s =\n\t%s\nbefore\n\t%s", k, strings.Join(got, "\n\t"), strings.Join(before[k], "\n\t"))
		}
	}
}
