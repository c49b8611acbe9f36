package sinks

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func TestAddedColumn(t *testing.T) {
	for _, c := range []struct {
		stmt              string
		db, table, column string
		ok                bool
	}{
		{render(addColumnStmt("job_summaries", "zones", "Array(String)"), "nw", ""), "nw", "job_summaries", "zones", true},
		{render(addColumnStmt("job_summaries", "cliques", "Array(String)"), "nw", "c2"), "nw", "job_summaries", "cliques", true},
		{"ALTER TABLE nw.job_summaries_local ON CLUSTER 'c2'\n    ADD COLUMN racks Array(String)", "nw", "job_summaries_local", "racks", true},
		{"CREATE TABLE IF NOT EXISTS nw.x (a UInt8)", "", "", "", false},
		{"ALTER TABLE nw.x DROP COLUMN a", "", "", "", false},
		{"ALTER TABLE x ADD COLUMN a UInt8", "", "", "", false},
	} {
		db, table, column, ok := addedColumn(c.stmt)
		if db != c.db || table != c.table || column != c.column || ok != c.ok {
			t.Errorf("addedColumn(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", c.stmt, db, table, column, ok,
				c.db, c.table, c.column, c.ok)
		}
	}
}

// Migration 71's view shows every column of migration 5's and the
// topology columns, from one argMax tuple.
func TestJobVerdictsTopologyView(t *testing.T) {
	for _, v := range []string{"18.16.1", "24.8.4.13"} {
		major, minor, _ := parseVersion(v)
		var view, old string
		for _, m := range migrations(featuresOf(major, minor)) {
			for _, s := range m.Stmts {
				if strings.HasPrefix(s, "CREATE VIEW IF NOT EXISTS {db}.job_verdicts") {
					old, view = view, s
				}
			}
		}
		if old == "" || view == "" {
			t.Fatalf("%s: want migration 5's view and migration 71's", v)
		}
		for _, col := range []string{"network", "verdict", "reasons", "last_seen", "zones", "blocks", "racks", "cliques", "topology_crosses"} {
			if !strings.Contains(view, " AS "+col+",\n") && !strings.Contains(view, " AS "+col+"\nFROM") {
				t.Errorf("%s: job_verdicts lacks %s", v, col)
			}
		}
		if !strings.Contains(view, "first_seen, last_seen,\n            zones, blocks, racks, cliques, topology_crosses), version) AS latest") {
			t.Errorf("%s: the view does not take the topology from the same argMax tuple:\n%s", v, view)
		}
		if strings.Contains(render(view, "nw", ""), "{") {
			t.Errorf("%s: placeholder left in %s", v, view)
		}
	}
}

// A migration run interrupted after migration 70 added its columns (here:
// the record of every migration lost) applies again: the ADD COLUMNs are
// skipped, the view is recreated, and job_verdicts shows a job's topology
// as the sink stored it.
func TestClickHouseTopologyMigrationAgain(t *testing.T) {
	c := migrated(t)
	ctx := t.Context()
	if err := c.exec(ctx, "DROP TABLE "+c.cfg.Database+".schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Migrate(ctx); err != nil {
		t.Fatalf("Migrate() again = %v", err)
	}
	if err := c.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema() = %v", err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sum := func(version uint64, topo *pipeline.Topology) pipeline.JobSummary {
		return pipeline.JobSummary{Job: "llm-z", Namespace: "ml", Cluster: "c1", Verdict: pipeline.VerdictOK,
			Network: ptr("IB"), NetworkClass: ptr(pipeline.ClassRDMA), Reasons: []string{}, Intra: []string{},
			FirstSeen: t0, LastSeen: t0.Add(time.Minute), Version: version, Topology: topo}
	}
	b := &pipeline.Batch{Jobs: []pipeline.JobSummary{
		sum(1, nil),
		sum(2, &pipeline.Topology{Zones: []string{"us-east-1a", "us-east-1b"}, Racks: []string{"r1", "r7"},
			Cliques: []string{}, Blocks: []string{"b1"}, Crosses: pipeline.LevelZone}),
		{Job: "llm-plain", Namespace: "ml", Cluster: "c1", Verdict: pipeline.VerdictOK, Version: 1, FirstSeen: t0, LastSeen: t0},
	}}
	if err := c.Consume(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := c.JobVerdicts(ctx, JobQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Job != "llm-plain" || got[1].Job != "llm-z" {
		t.Fatalf("job_verdicts = %+v; want llm-plain, llm-z", got)
	}
	if got[0].Topology != nil {
		t.Errorf("llm-plain topology %+v; want nil", got[0].Topology)
	}
	tp := got[1].Topology
	if tp == nil || tp.Crosses != pipeline.LevelZone || !slices.Equal(tp.Zones, []string{"us-east-1a", "us-east-1b"}) ||
		!slices.Equal(tp.Racks, []string{"r1", "r7"}) || !slices.Equal(tp.Blocks, []string{"b1"}) {
		t.Errorf("llm-z topology %+v; want version 2's", tp)
	}
}
