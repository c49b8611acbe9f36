package sinks

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// legacyStepsTable is training_steps as the sink wrote it before the
// split (migration 20's table): every row with its strings.
var legacyStepsTable = table{
	name: "training_steps",
	columns: []string{"topic", "`partition`", "`offset`", "line", "time", "job", "namespace", "cluster", "pod", "node",
		"pool", "model", "framework", "kind", "rank", "step", "ranks", "network", "network_class", "step_time_s", "tokens_per_s",
		"samples_per_s", "it_per_s", "tflops", "mfu", "loss"},
	rows: func(b *pipeline.Batch) int { return len(b.Steps) },
	cols: func(c *columns, b *pipeline.Batch, _ *ClickHouseConfig) {
		st := b.Steps
		sourceColumns(c, func(j int) *pipeline.Source { return &st[j].Source })
		col(c, func(j int) time.Time { return clampTime(st[j].Time) })
		for _, s := range []func(r *pipeline.TrainingStep) string{
			func(r *pipeline.TrainingStep) string { return r.Job },
			func(r *pipeline.TrainingStep) string { return r.Namespace },
			func(r *pipeline.TrainingStep) string { return r.Cluster },
			func(r *pipeline.TrainingStep) string { return r.Pod },
			func(r *pipeline.TrainingStep) string { return r.Node },
			func(r *pipeline.TrainingStep) string { return r.Pool },
			func(r *pipeline.TrainingStep) string { return r.Model },
			func(r *pipeline.TrainingStep) string { return r.Framework },
			func(r *pipeline.TrainingStep) string { return r.Kind },
		} {
			col(c, func(j int) string { return s(&st[j]) })
		}
		col(c, func(j int) int32 { return int32(st[j].Rank) })
		col(c, func(j int) int64 { return st[j].Step })
		col(c, func(j int) uint32 { return uint32(max(st[j].Ranks, 1)) })
		col(c, func(j int) string { return st[j].Network })
		col(c, func(j int) string { return st[j].NetworkClass })
		for _, f := range []func(r *pipeline.TrainingStep) *float64{
			func(r *pipeline.TrainingStep) *float64 { return &r.StepTime },
			func(r *pipeline.TrainingStep) *float64 { return &r.TokensPerS },
			func(r *pipeline.TrainingStep) *float64 { return &r.SamplesPerS },
			func(r *pipeline.TrainingStep) *float64 { return &r.ItPerS },
			func(r *pipeline.TrainingStep) *float64 { return &r.TFLOPs },
			func(r *pipeline.TrainingStep) *float64 { return &r.MFU },
			func(r *pipeline.TrainingStep) *float64 { return &r.Loss },
		} {
			col(c, func(j int) *float64 { return nullFP(f(&st[j])) })
		}
	},
	key: stepRowsTable.key,
}

// TestSeriesSplitKeepsReads migrates a database whose training_steps is
// the table of before the split (migration 20), holding the seeded fleet,
// to the split (migration 26: the rows carried over into
// training_step_rows and training_step_series, training_steps made a view)
// and checks that every cookbook query and every Grafana panel answers as
// the table did: after a migration interrupted after its first copy and
// again after the table was dropped, after the whole migration applied
// again (an interruption before it was recorded), and after the sink
// stores the fleet again into the split tables (a replay of the copied
// rows, under the keys the migration computed: no series twice).
func TestSeriesSplitKeepsReads(t *testing.T) {
	c := newTestClickHouse(t)
	ctx, db := t.Context(), c.cfg.Database
	var before []migration
	var split migration
	for _, m := range migrations(c.features) {
		if m.Version == 26 {
			split = m
		} else {
			before = append(before, m)
		}
	}
	if split.Version != 26 || len(split.Stmts) != 4 {
		t.Fatalf("migration 26 = %+v; want the split's four statements", split)
	}
	if _, err := c.migrate(ctx, before); err != nil {
		t.Fatalf("migrate all but 26: %v", err)
	}
	f := newFleet()
	b := f.batch()
	for i := range 2 { // stored twice: a replay must change no answer
		steps := *b
		steps.Steps = nil
		if err := c.Consume(ctx, &steps); err != nil {
			t.Fatalf("seed Consume() = %v", err)
		}
		if err := c.insert(ctx, &legacyStepsTable, b, len(b.Steps)); err != nil {
			t.Fatalf("seed #%d of the training_steps table: %v", i, err)
		}
	}
	if e, err := c.engine(ctx, db, "training_steps"); err != nil || e != "ReplacingMergeTree" {
		t.Fatalf("training_steps before the split: engine %q (%v); want ReplacingMergeTree", e, err)
	}

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
	// The table's answers, and the cookbook's from the fleet itself.
	beforePanels := panels()
	want := cookbook(f)
	steps := queryInt(t, c, "SELECT count() FROM "+db+".training_steps FINAL")
	series := queryInt(t, c, "SELECT count() FROM (SELECT DISTINCT cluster, namespace, job, pod, node, pool, model, framework, kind, network, network_class FROM "+db+".training_steps)")
	if steps == 0 || series < 2 {
		t.Fatalf("seeded training_steps: %d rows, %d series; want some of each", steps, series)
	}
	check := func(when string) {
		t.Helper()
		if e, err := c.engine(ctx, db, "training_steps"); err != nil || e != "View" {
			t.Fatalf("%s: training_steps engine %q (%v); want View", when, e, err)
		}
		if n := queryInt(t, c, "SELECT count() FROM "+db+".training_steps"); n != steps {
			t.Errorf("%s: %d rows through training_steps; want the table's %d", when, n, steps)
		}
		if n := queryInt(t, c, "SELECT count() FROM (SELECT DISTINCT series FROM "+db+".training_step_series)"); n != series {
			t.Errorf("%s: %d series keys; want the table's %d series", when, n, series)
		}
		// Every row finds its series: the keys made in SQL and in Go agree.
		if n := queryInt(t, c, "SELECT count() FROM "+db+".training_step_rows WHERE series NOT IN (SELECT series FROM "+db+".training_step_series)"); n != 0 {
			t.Errorf("%s: %d rows without a series", when, n)
		}
		for _, q := range cookbookQueries(t) {
			got, err := queryTable(t, c, q.sql)
			if err != nil {
				t.Errorf("%s: %s: %v", when, q.name, err)
				continue
			}
			if !slices.Equal(got, want[q.name]) {
				t.Errorf("%s: %s =\n\t%s\nwant\n\t%s", when, q.name, strings.Join(got, "\n\t"), strings.Join(want[q.name], "\n\t"))
			}
		}
		for k, got := range panels() {
			if !slices.Equal(got, beforePanels[k]) {
				t.Errorf("%s: panel %s =\n\t%s\nbefore\n\t%s", when, k, strings.Join(got, "\n\t"), strings.Join(beforePanels[k], "\n\t"))
			}
		}
	}

	// Interrupted after the series' copy, then after the drop: the rows
	// are copied while the table holds them, never from the view.
	for _, n := range []int{1, 3} {
		part := split
		part.Stmts = split.Stmts[:n]
		if err := c.apply(ctx, part); err != nil {
			t.Fatalf("migration 26, first %d statements: %v", n, err)
		}
	}
	if applied, err := c.Migrate(ctx); err != nil || !slices.Equal(applied, []int{26}) {
		t.Fatalf("Migrate() after an interruption = %v, %v; want [26] applied", applied, err)
	}
	check("after an interrupted migration")
	if err := c.apply(ctx, split); err != nil {
		t.Fatalf("migration 26 applied again: %v", err)
	}
	check("after migration 26 applied again")
	if err := c.Consume(ctx, b); err != nil {
		t.Fatalf("Consume() after the split = %v", err)
	}
	check("after the sink stored the fleet again")
}
