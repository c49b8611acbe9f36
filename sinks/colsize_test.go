package sinks

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func TestStrSizesHint(t *testing.T) {
	nccl := &allTables()[0]
	if nccl.name != "nccl_events" || nccl.cols == nil {
		t.Fatalf("first table is %s (cols %v); want nccl_events written a column at a time", nccl.name, nccl.cols != nil)
	}
	cfg := DefaultClickHouseConfig()
	var s strSizes
	b := &pipeline.Batch{}
	if h := s.hint(nccl, b, &cfg, 0); h != nil {
		t.Errorf("hint for no rows = %+v; want nil", h)
	}
	b.Events = []pipeline.EventRow{
		{Source: pipeline.Source{Topic: "nccl", Offset: 1}, Job: "train-a", Pod: "", Line: strings.Repeat("x", 100)},
		{Source: pipeline.Source{Topic: "nccl", Offset: 2}, Job: "b", Pod: "", Line: strings.Repeat("y", 20)},
	}
	// Before any insert every column of Go strings is measured, whatever
	// the server made it.
	h := s.hint(nccl, b, &cfg, 0)
	if h == nil {
		t.Fatal("hint = nil; want the measured sizes")
	}
	if h.rows != 2 {
		t.Errorf("hint rows = %d; want 2", h.rows)
	}
	want := map[string]int{"topic": 8, "job": 8, "namespace": 0, "cluster": 0, "pod": 0, "container": 0, "node": 0,
		"host": 0, "pid": 0, "kind": 0, "text": 120}
	if len(h.bytes) != len(want) {
		t.Errorf("hint bytes = %v; want %v", h.bytes, want)
	}
	for name, n := range want {
		if got, ok := h.bytes[name]; !ok || got != n {
			t.Errorf("hint bytes[%s] = %d (present %v); want %d", name, got, ok, n)
		}
	}
	// Once the server's block said which columns are plain String, only
	// those are announced (here: not job).
	plain := make([]column.Interface, len(nccl.columns))
	for i, name := range nccl.columns {
		typ := "String"
		if name == "job" {
			typ = "LowCardinality(String)"
		} else if _, ok := want[strings.Trim(name, "`")]; !ok {
			typ = "Int64"
		}
		c, err := column.Type(typ).Column(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		plain[i] = c
	}
	s.learn(nccl, plain)
	h = s.hint(nccl, b, &cfg, 0)
	if _, ok := h.bytes["job"]; ok || h.bytes["text"] != 120 || len(h.bytes) != len(want)-1 {
		t.Errorf("after learning, hint bytes = %v; want %v less job", h.bytes, want)
	}
	// The text column is measured as stored: capped at max_line_bytes.
	cfg.MaxLineBytes = 50
	if got := s.hint(nccl, b, &cfg, 0).bytes["text"]; got != len(capText(b.Events[0].Line, 50))+20 {
		t.Errorf("hint bytes[text] with max_line_bytes 50 = %d; want %d", got, len(capText(b.Events[0].Line, 50))+20)
	}
	for _, tb := range allTables() {
		if tb.cols == nil {
			if h := s.hint(&tb, b, &cfg, 0); h != nil {
				t.Errorf("hint for %s, written row by row = %+v; want nil", tb.name, h)
			}
		}
	}
}

// TestSizedColStr announces hints of its own: no insert may run beside it
// (no test of this package is parallel).
func TestSizedColStr(t *testing.T) {
	h := &colHint{rows: 50, bytes: map[string]int{"job": 1000}}
	announce(h)
	c := sizedColStr("job")
	if cap(c.Buf) != 1000 || cap(c.Pos) != 50 || len(c.Buf) != 0 || len(c.Pos) != 0 {
		t.Errorf("announced job column: len/cap Buf %d/%d, Pos %d/%d; want 0/1000, 0/50", len(c.Buf), cap(c.Buf), len(c.Pos), cap(c.Pos))
	}
	if c := sizedColStr("pod"); cap(c.Buf) != 0 || cap(c.Pos) != 0 {
		t.Errorf("column not announced: cap Buf %d, Pos %d; want 0", cap(c.Buf), cap(c.Pos))
	}
	// Another insert announced meanwhile: withdrawing h leaves its hint.
	other := &colHint{rows: 1, bytes: map[string]int{"job": 7}}
	announce(other)
	withdraw(h)
	if c := sizedColStr("job"); cap(c.Buf) != 7 {
		t.Errorf("after withdrawing an older hint, cap = %d; want the newer hint's 7", cap(c.Buf))
	}
	withdraw(other)
	if c := sizedColStr("job"); cap(c.Buf) != 0 {
		t.Errorf("after withdrawing, cap = %d; want 0", cap(c.Buf))
	}
}

// TestClickHouseSizedColumns stores batches of the tables written a
// column at a time whose strings grow and shrink from one insert to the
// next, checks that every plain String column of each insert's block is
// made at the size of its values, and reads every value back.
func TestClickHouseSizedColumns(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var want []string
	off := int64(0)
	// The training steps' strings are in the series table: a round's
	// jobs are new, so each round writes its series.
	const names = "('nccl_events', 'training_step_rows', 'training_step_series')"
	plain := queryInt(t, c, "SELECT count() FROM system.columns WHERE database = ? AND table IN "+names+" AND type = 'String'", db)
	if plain < 20 {
		t.Fatalf("%d String columns in %s; want 20 or more", plain, names)
	}
	var tables []*table
	for _, name := range []string{"nccl_events", "training_step_rows", seriesTableName} {
		for _, tb := range allTables() {
			if tb.name == name {
				tables = append(tables, &tb)
			}
		}
	}
	for round, rows := range []int{10, 300, 40} {
		b := &pipeline.Batch{}
		for i := range rows {
			// Round 1's strings are 20 times the length of round 0's;
			// each round's jobs are new, so each round writes its series.
			job := fmt.Sprintf("j%d-%d-%s", round, i, strings.Repeat("x", 1+round%2*40))
			line := fmt.Sprintf("host:1:2 [0] NCCL INFO r%d-%d %s", round, i, strings.Repeat("y", i%97*(1+round%2*19)))
			src := pipeline.Source{Topic: "t", Partition: 0, Offset: off}
			off++
			b.Events = append(b.Events, pipeline.EventRow{Source: src, Time: t0, Job: job, Namespace: "ml", Cluster: "c1",
				Pod: job + "-0", Container: "trainer", Node: "n1", Host: "n1", PID: "42", Kind: "info", Line: line})
			b.Steps = append(b.Steps, pipeline.TrainingStep{Source: src, Time: t0,
				StepSeries: &pipeline.StepSeries{Job: job, Namespace: "ml", Cluster: "c1", Pod: job + "-0", Node: "n1",
					Pool: "h100", Model: "m", Framework: "megatron", Kind: "step", Network: "IB", NetworkClass: "rdma"},
				Step: int64(i), Ranks: 1})
			want = append(want, job+"|"+line)
		}
		// The blocks an insert of b gets: each plain String column made
		// at its values' size, by the driver's provider (read from the
		// driver's column; no other accessor has its capacity).
		seen, filled := uint64(0), 0
		for _, tb := range tables {
			sizes := c.strSizes.hint(tb, b, &c.cfg, 0)
			batch, err := c.prepareInsert(ctx, tb, b, 0)
			if err != nil {
				t.Fatalf("round %d: prepareInsert(%s) = %v", round, tb.name, err)
			}
			for _, col := range batch.Columns() {
				if col.Type() != "String" {
					continue
				}
				seen++
				s := reflect.ValueOf(col).Elem().FieldByName("col")
				want, ok := sizes.bytes[col.Name()]
				if got := s.FieldByName("Buf").Cap(); !ok || got != want {
					t.Errorf("round %d: %s.%s made with %d bytes (announced %v); want its values' %d", round, tb.name, col.Name(), got, ok, want)
				}
				if want > 0 {
					filled++
				}
				if got := s.FieldByName("Pos").Cap(); got != rows {
					t.Errorf("round %d: %s.%s made for %d values; want %d", round, tb.name, col.Name(), got, rows)
				}
			}
			_ = batch.Abort()
		}
		if seen != plain || filled < 15 {
			t.Errorf("round %d: %d String columns in the blocks, %d with values; want %d, 15 or more with values", round, seen, filled, plain)
		}
		if err := c.Consume(ctx, b); err != nil {
			t.Fatalf("round %d: Consume() = %v", round, err)
		}
		if h := announced.Load(); h != nil {
			t.Fatalf("round %d: a hint is still announced after the inserts: %+v", round, h)
		}
	}
	rows, err := c.Query(ctx, "SELECT e.job, e.text, s.job FROM "+db+".nccl_events AS e ANY LEFT JOIN (SELECT `offset`, job FROM "+db+".training_steps) AS s USING `offset` ORDER BY `offset`")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var job, text, stepJob string
		if err := rows.Scan(&job, &text, &stepJob); err != nil {
			t.Fatal(err)
		}
		if stepJob != job {
			t.Errorf("offset %d: training_steps job %q; nccl_events job %q", len(got), stepJob, job)
		}
		got = append(got, job+"|"+text)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d rows back; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d = %.60q; want %.60q", i, got[i], want[i])
		}
	}
}

// BenchmarkColStr fills eleven 30 000-row String columns the way the
// driver does (ColStr.AppendArr), made empty or at their size (colsize.go).
func BenchmarkColStr(b *testing.B) {
	vals := make([]string, 30000)
	total := 0
	for i := range vals {
		vals[i] = fmt.Sprintf("load-j%04d-worker-%d", i%64, i%8)
		total += len(vals[i])
	}
	for _, sized := range []bool{false, true} {
		b.Run(fmt.Sprintf("sized=%v", sized), func(b *testing.B) {
			for b.Loop() {
				for range 11 {
					var c chproto.ColStr
					if sized {
						c = chproto.ColStr{Buf: make([]byte, 0, total), Pos: make([]chproto.Position, 0, len(vals))}
					}
					c.AppendArr(vals)
				}
			}
		})
	}
}

// BenchmarkStrSizesHint measures a 30 000-row training_steps batch's
// String values (strSizes.hint), the pass that replaced the columns'
// growth BenchmarkColStr measures.
func BenchmarkStrSizesHint(b *testing.B) {
	var tb *table
	for i := range telemetryTables {
		if telemetryTables[i].name == "training_steps" {
			tb = &telemetryTables[i]
		}
	}
	batch := &pipeline.Batch{}
	for i := range 30000 {
		job := fmt.Sprintf("load-j%04d", i%64)
		batch.Steps = append(batch.Steps, pipeline.TrainingStep{
			Source: pipeline.Source{Topic: "ncclwatch-load", Offset: int64(i)},
			StepSeries: &pipeline.StepSeries{Job: job, Namespace: "ml-research", Cluster: "c1",
				Pod: fmt.Sprintf("%s-worker-%d", job, i%8), Node: fmt.Sprintf("gpu-node-%d", i%8), Pool: "h100",
				Model: "llama-7b", Framework: "megatron", Kind: "step", Network: "IB", NetworkClass: "rdma"},
			Step: int64(i), Ranks: 16})
	}
	cfg := DefaultClickHouseConfig()
	var s strSizes
	for b.Loop() {
		if h := s.hint(tb, batch, &cfg, 0); h == nil || h.bytes["job"] != 30000*len("load-j0000") {
			b.Fatalf("hint = %+v", h)
		}
	}
}

// TestFillBlocks: a table written a column at a time in blocks of k rows
// appends the same values, in the same order, as in one block, sending
// every block but the last; the hint announces the largest block.
func TestFillBlocks(t *testing.T) {
	cfg := DefaultClickHouseConfig()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	b := &pipeline.Batch{}
	for i := range 10 {
		src := pipeline.Source{Topic: "t", Partition: 1, Offset: int64(100 + i)}
		b.Steps = append(b.Steps, pipeline.TrainingStep{Source: src, Time: t0,
			StepSeries: &pipeline.StepSeries{Job: fmt.Sprintf("job-%d", i%3), Namespace: strings.Repeat("n", i),
				Cluster: "c", Pod: "p", Framework: "megatron", Kind: "step"}, Step: int64(i), Ranks: 1 + i%2,
			StepTime: float64(i) / 4})
	}
	tb := &stepRowsTable
	whole := &recordingBatch{ncols: len(tb.columns)}
	if err := tb.fill(whole, b, &cfg, 0); err != nil {
		t.Fatal(err)
	}
	want, err := whole.recorded()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(b.Steps) || whole.flushes != 0 {
		t.Fatalf("one block: %d rows, %d flushes; want %d rows, 0 flushes", len(want), whole.flushes, len(b.Steps))
	}
	var s strSizes
	for _, k := range []int{1, 3, 4, 9, 10, 11} {
		rec := &recordingBatch{ncols: len(tb.columns)}
		if err := tb.fill(rec, b, &cfg, k); err != nil {
			t.Fatalf("blocks of %d: %v", k, err)
		}
		got, err := rec.recorded()
		if err != nil {
			t.Fatalf("blocks of %d: %v", k, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("blocks of %d: rows differ from one block:\n got %v\nwant %v", k, got, want)
		}
		if blocks := (len(b.Steps) + k - 1) / k; rec.flushes != blocks-1 {
			t.Errorf("blocks of %d: %d flushes; want %d", k, rec.flushes, blocks-1)
		}
		h := s.hint(tb, b, &cfg, k)
		rows, ns := min(k, len(b.Steps)), 0
		for lo := 0; lo < len(b.Steps); lo += rows {
			n := 0
			for j := lo; j < min(lo+rows, len(b.Steps)); j++ {
				n += len(b.Steps[j].Namespace)
			}
			ns = max(ns, n)
		}
		if h.rows != rows || h.bytes["namespace"] != ns {
			t.Errorf("blocks of %d: hint rows %d, namespace bytes %d; want %d, %d", k, h.rows, h.bytes["namespace"], rows, ns)
		}
	}
}
