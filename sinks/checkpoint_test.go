package sinks

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// checkpointBatches are two batches as the runner makes them from a
// Megatron job: the first holds a save's start line, the second its end
// line and timer (the same event again, under the first line's
// coordinates, with more lines) and a load with no printed duration.
func checkpointBatches(t0 time.Time) (*pipeline.Batch, *pipeline.Batch) {
	src := func(off int64) pipeline.Source { return pipeline.Source{Topic: "nccl-logs", Partition: 1, Offset: off} }
	ev := pipeline.CheckpointEvent{Source: src(10), Time: t0, EndTime: t0, Job: "llm", Namespace: "ml", Cluster: "c1",
		Pod: "llm-worker-0", Node: "gpu-1", Pool: "h100-ib", Framework: pipeline.FrameworkMegatron, Op: "save", Rank: -1,
		Step: 35, Path: "/lustre/ckpt/llm", Duration: math.NaN(), Lines: 1}
	first := &pipeline.Batch{Checkpoints: []pipeline.CheckpointEvent{ev},
		Offsets: []pipeline.Offset{{Topic: "nccl-logs", Partition: 1, Next: 11}}}
	ended := ev
	ended.Lines, ended.Complete, ended.EndTime = 2, true, t0.Add(109*time.Second)
	timed := ended
	timed.Lines, timed.Duration = 3, 109.33257
	load := pipeline.CheckpointEvent{Source: src(40), Time: t0.Add(time.Hour), EndTime: t0.Add(time.Hour), Job: "llm",
		Namespace: "ml", Cluster: "c1", Pod: "llm-worker-0", Node: "gpu-1", Pool: "h100-ib",
		Framework: pipeline.FrameworkMegatron, Op: "load", Rank: -1, Step: 35, Path: "/lustre/ckpt/llm",
		Duration: math.NaN(), Lines: 1}
	second := &pipeline.Batch{Checkpoints: []pipeline.CheckpointEvent{ended, timed, load},
		Offsets: []pipeline.Offset{{Topic: "nccl-logs", Partition: 1, Next: 41}}}
	return first, second
}

func TestCheckpointDDL(t *testing.T) {
	old := ddl(t, "18.16.1")
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS ncclwatch.checkpoint_events",
		"ENGINE = ReplacingMergeTree(lines)\nPARTITION BY toYYYYMM(time)\nORDER BY (topic, `partition`, `offset`, line)",
		"CREATE VIEW IF NOT EXISTS ncclwatch.checkpoint_series AS",
		"FROM ncclwatch.checkpoint_events FINAL",
		"duration_s Nullable(Float64),",
		"time DateTime,",
	} {
		if !strings.Contains(old, want) {
			t.Errorf("18.16 DDL lacks %q", want)
		}
	}
	if cur := ddl(t, "24.8.4.13"); !strings.Contains(cur, "framework LowCardinality(String),") ||
		!strings.Contains(cur, "end_time DateTime64(6),") {
		t.Errorf("24.8 DDL lacks LowCardinality framework or DateTime64 end_time")
	}
	for _, m := range checkpointMigrations(featuresOf(24, 8)) {
		if m.Version < 40 || m.Version > 49 {
			t.Errorf("checkpoint migration %d (%s) is outside 40–49", m.Version, m.Name)
		}
	}
}

func TestCheckpointDedupToken(t *testing.T) {
	_, b := checkpointBatches(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	tb := &checkpointTables[0]
	before := tb.token(b)
	if tb.token(b) != before || !strings.Contains(before, "checkpoint_events") {
		t.Errorf("token %q: want stable and naming the table", before)
	}
	b.Checkpoints[0].Lines = 9
	if tb.token(b) == before {
		t.Errorf("checkpoint_events token unchanged by another lines count (the row's version)")
	}
}

// TestClickHouseCheckpoints stores both batches twice (the second time a
// replay) on the real server: the event shows once, with its end and
// duration; the view rolls it up per operation.
func TestClickHouseCheckpoints(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	first, second := checkpointBatches(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	for i := 0; i < 2; i++ {
		for _, b := range []*pipeline.Batch{first, second} {
			if err := c.Consume(ctx, b); err != nil {
				t.Fatalf("Consume() #%d = %v", i, err)
			}
		}
	}
	// A replay of the first batch alone after the second: its poorer copy
	// must not replace the completed event.
	if err := c.Consume(ctx, first); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".checkpoint_events FINAL"); n != 2 {
		t.Errorf("checkpoint_events FINAL = %d rows; want 2", n)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".checkpoint_events FINAL WHERE op = 'save' AND complete = 1 AND lines = 3 AND duration_s = 109.33257 AND end_time > time"); n != 1 {
		t.Errorf("completed timed saves = %d; want 1", n)
	}
	rows, err := c.Query(ctx, "SELECT op, events, timed_events, total_duration_s, pool, ifNull(verdict, '') FROM "+db+
		".checkpoint_series ORDER BY op")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var (
			op, pool, verdict string
			events, timed     uint64
			total             *float64
		)
		if err := rows.Scan(&op, &events, &timed, &total, &pool, &verdict); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{op, itoa(events), itoa(timed), fmtF(total), pool, verdict}, " "))
	}
	rows.Close()
	want := []string{"load 1 0 null h100-ib ", "save 1 1 109.33257 h100-ib "}
	if !slices.Equal(got, want) {
		t.Errorf("checkpoint_series =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
