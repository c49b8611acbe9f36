package sinks

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestClickHouseLoadEventsBounded stores what a partition holds after
// months: finished jobs' events at lower offsets, ingested long ago, in
// older months and in the current one; live events; an event backfilled
// now with a time a year old; an old coordinate replayed now; a partition
// with no event since. LoadEvents bounds its query to the months and the
// offsets of the events stored since; what it returns must be what the
// query without bounds returns, row for row: the events stored since,
// one per coordinate, the replay's latest copy.
func TestClickHouseLoadEventsBounded(t *testing.T) {
	checkLoadEventsBounded(t, migrated(t))
}

// checkLoadEventsBounded is TestClickHouseLoadEventsBounded on c, a
// server or a cluster (TestClusterLoadEventsBounded), whose jobs land on
// different shards.
func checkLoadEventsBounded(t *testing.T, c *ClickHouse) {
	t.Helper()
	db := c.cfg.Database
	// Through a Distributed table, the insert returns once the shards hold
	// the rows (as the sink's inserts do).
	ctx := clickhouse.Context(t.Context(), clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	now := time.Now().UTC().Truncate(time.Second)
	old, older, oldest := now.Add(-2*time.Hour), now.Add(-40*24*time.Hour), now.Add(-400*24*time.Hour)
	type row struct {
		p        int32
		off      int64
		at, ins  time.Time
		job, txt string
	}
	stored := []row{
		{0, 1, older, older, "done-1", "first"},
		{0, 2, older, older, "done-1", "first"},
		{0, 3, older, older, "done-1", "first"},
		{0, 4, older, older, "done-1", "first"},
		{0, 5, old, old, "done-2", "first"},
		{1, 1, older, older, "done-3", "first"},
		{1, 3, oldest, older, "done-3", "first"},
		{2, 2, older, older, "done-4", "first"},
		{0, 3, older, now, "done-1", "replayed"}, // a new group read the partition again
		{0, 10, now, now, "live", "first"},
		{0, 11, now, now, "live", "first"},
		{0, 12, oldest, now, "backfill", "first"},
		{2, 7, now, now, "live-2", "first"},
		{3, 9, now, now, "other-topic", "first"},
	}
	// One insert per ingest time and kind, in ingest order: each is a part
	// of its own, and the replay's copy is the later one.
	for _, group := range [][]row{stored[:8], stored[8:]} {
		b, err := c.conn.PrepareBatch(ctx, "INSERT INTO "+db+".nccl_events (topic, `partition`, `offset`, line, time, job, "+
			"namespace, cluster, pod, container, node, host, pid, dev, rank, kind, warn, text, inserted_at)")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range group {
			topic := "t"
			if r.job == "other-topic" {
				topic = "u"
			}
			line := fmt.Sprintf("%s-w0:1:1 [0] NCCL INFO %s %d", r.job, r.txt, r.off)
			if err := b.Append(topic, r.p, r.off, int32(0), r.at, r.job, "ml", "c1", r.job+"-w0", "trainer", "n1",
				r.job+"-w0", "1", int16(0), int32(0), "network", uint8(0), line, r.ins); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}

	since := now.Add(-time.Hour)
	var got []string
	if err := c.LoadEvents(ctx, "t", []int32{0, 1, 2}, since, func(e pipeline.EventRow) error {
		got = append(got, fmtEvent(e))
		return nil
	}); err != nil {
		t.Fatalf("LoadEvents() = %v", err)
	}
	want := []string{
		fmtEvent(eventRow("t", 0, 3, older, "done-1", "replayed")),
		fmtEvent(eventRow("t", 0, 10, now, "live", "first")),
		fmtEvent(eventRow("t", 0, 11, now, "live", "first")),
		fmtEvent(eventRow("t", 0, 12, oldest, "backfill", "first")),
		fmtEvent(eventRow("t", 2, 7, now, "live-2", "first")),
	}
	if !slices.Equal(got, want) {
		t.Errorf("LoadEvents() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The query without bounds, as LoadEvents ran it before them.
	rows, err := c.Query(ctx, "SELECT topic, `partition`, `offset`, line, time, job, namespace, cluster, pod, container, "+
		"node, host, pid, dev, rank, kind, warn, text FROM "+db+".nccl_events FINAL "+
		"WHERE topic = 't' AND `partition` IN (0, 1, 2) AND inserted_at >= toDateTime('"+since.Format(time.DateTime)+"', 'UTC') "+
		"ORDER BY `partition`, `offset`, line LIMIT 1 BY `partition`, `offset`, line")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var unbounded []string
	for rows.Next() {
		var (
			e    pipeline.EventRow
			dev  int16
			rank int32
			warn uint8
		)
		if err := rows.Scan(&e.Source.Topic, &e.Source.Partition, &e.Source.Offset, &e.Source.Line, &e.Time,
			&e.Job, &e.Namespace, &e.Cluster, &e.Pod, &e.Container, &e.Node, &e.Host, &e.PID,
			&dev, &rank, &e.Kind, &warn, &e.Line); err != nil {
			t.Fatal(err)
		}
		e.Dev, e.Rank, e.Warn, e.Time = int(dev), int(rank), warn != 0, e.Time.UTC()
		unbounded = append(unbounded, fmtEvent(e))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, unbounded) {
		t.Errorf("LoadEvents() =\n%s\nthe query without bounds:\n%s", strings.Join(got, "\n"), strings.Join(unbounded, "\n"))
	}

	// A partition with no event since: nothing.
	if err := c.LoadEvents(ctx, "t", []int32{1}, since, func(e pipeline.EventRow) error {
		t.Errorf("LoadEvents(partition 1) returned %s", fmtEvent(e))
		return nil
	}); err != nil {
		t.Errorf("LoadEvents(partition 1) = %v", err)
	}
}

// eventRow is a row as checkLoadEventsBounded stores it.
func eventRow(topic string, p int32, off int64, at time.Time, job, txt string) pipeline.EventRow {
	return pipeline.EventRow{
		Source: pipeline.Source{Topic: topic, Partition: p, Offset: off}, Time: at,
		Job: job, Namespace: "ml", Cluster: "c1", Pod: job + "-w0", Container: "trainer", Node: "n1", Host: job + "-w0",
		PID: "1", Kind: "network", Line: fmt.Sprintf("%s-w0:1:1 [0] NCCL INFO %s %d", job, txt, off),
	}
}

// fmtEvent prints every field of an event row.
func fmtEvent(e pipeline.EventRow) string {
	return fmt.Sprintf("%s/%d/%d/%d %s %s/%s/%s %s %s %s %s %s dev=%d rank=%d %s warn=%v %q",
		e.Source.Topic, e.Source.Partition, e.Source.Offset, e.Source.Line, e.Time.UTC().Format(time.RFC3339Nano),
		e.Cluster, e.Namespace, e.Job, e.Pod, e.Container, e.Node, e.Host, e.PID, e.Dev, e.Rank, e.Kind, e.Warn, e.Line)
}
