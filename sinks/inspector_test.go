package sinks

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// collectiveBatches are two batches as the runner makes them: the first
// holds a collective_perf row after 3 records, the second the same row
// grown to 5 records (same coordinates) and a row of the next window of
// the same minute, and the communicator's summary (IB with GDR).
func collectiveBatches(t0 time.Time) (*pipeline.Batch, *pipeline.Batch) {
	src := func(off int64) pipeline.Source { return pipeline.Source{Topic: "nccl-logs", Partition: 2, Offset: off} }
	row := pipeline.CollectivePerf{Source: src(100), Minute: t0, Job: "llm", Namespace: "ml", Cluster: "c1",
		Pod: "llm-worker-0", Node: "gpu-1", Pool: "h200-ib", Host: "gpu-node-a", CommID: "0x4f2a9c31d07e15",
		Op: "AllReduce", SizeBucket: 1 << 28, NRanks: 16, NNodes: 2, Count: 3, BusBWMin: 260, BusBWMax: 266,
		BusBWSum: 789, BusBWP50: 263, ExecUSMin: 1890, ExecUSMax: 1910, ExecUSSum: 5700, ExecUSP50: 1900,
		ExecUSP99: 1910, BusBWHist: pipeline.Hist{Buckets: []uint8{192}, Counts: []uint32{3}},
		ExecHist: pipeline.Hist{Buckets: []uint8{87}, Counts: []uint32{3}}}
	first := &pipeline.Batch{Collectives: []pipeline.CollectivePerf{row},
		Offsets: []pipeline.Offset{{Topic: "nccl-logs", Partition: 2, Next: 110}}}
	grown := row
	grown.Count, grown.BusBWSum, grown.BusBWHist.Counts = 5, 1315, []uint32{5}
	next := row
	next.Source, next.Count, next.BusBWP50, next.BusBWHist.Counts = src(1024), 2, 250, []uint32{2}
	comm := pipeline.CommSummary{Job: "llm", Namespace: "ml", Cluster: "c1", CommID: "0x4f2a9c31d07e15",
		Network: ptr("IB"), NetworkClass: pipeline.ClassRDMA, GDR: ptr(true), NNodes: ptr(2), NRanks: ptr(16),
		Verdict: pipeline.VerdictOK, Env: map[string]string{}, FirstSeen: t0, LastSeen: t0, Version: 1}
	second := &pipeline.Batch{Collectives: []pipeline.CollectivePerf{grown, next}, Comms: []pipeline.CommSummary{comm},
		Offsets: []pipeline.Offset{{Topic: "nccl-logs", Partition: 2, Next: 1030}}}
	return first, second
}

func TestInspectorDDL(t *testing.T) {
	old := ddl(t, "18.16.1")
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS ncclwatch.collective_perf",
		"ENGINE = ReplacingMergeTree(records)\nPARTITION BY toYYYYMM(minute)\nORDER BY (topic, `partition`, `offset`, line)",
		"busbw_hist_buckets Array(UInt16),",
		"CREATE VIEW IF NOT EXISTS ncclwatch.collective_perf_fabric AS",
		"FROM ncclwatch.collective_perf FINAL",
		"FROM ncclwatch.comm_summaries FINAL\n    ) AS comms USING (cluster, namespace, job, comm_id)",
	} {
		if !strings.Contains(old, want) {
			t.Errorf("18.16 DDL lacks %q", want)
		}
	}
	if cur := ddl(t, "24.8.4.13"); !strings.Contains(cur, "op LowCardinality(String),") {
		t.Errorf("24.8 DDL lacks LowCardinality op")
	}
	for _, m := range inspectorMigrations(featuresOf(24, 8)) {
		if m.Version < 60 || m.Version > 69 {
			t.Errorf("inspector migration %d (%s) is outside 60–69", m.Version, m.Name)
		}
	}
	tb := &inspectorTables[0]
	for _, col := range tb.columns {
		name := strings.Trim(col, "`")
		if !strings.Contains(old, "    "+col+" ") && !strings.Contains(old, "    "+name+" ") {
			t.Errorf("collective_perf inserts column %s the DDL lacks", col)
		}
	}
}

func TestInspectorDedupToken(t *testing.T) {
	_, b := collectiveBatches(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	tb := &inspectorTables[0]
	before := tb.token(b)
	if tb.token(b) != before || !strings.Contains(before, "collective_perf") {
		t.Errorf("token %q: want stable and naming the table", before)
	}
	b.Collectives[0].Count = 9
	if tb.token(b) == before {
		t.Errorf("collective_perf token unchanged by another records count (the row's version)")
	}
}

// TestClickHouseCollectivePerf stores both batches twice (the second time
// a replay) and the first once more after them on the real server: the
// grown row shows once, with 5 records; the view sums the minute's two
// rows and carries the communicator's network and GDR.
func TestClickHouseCollectivePerf(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	first, second := collectiveBatches(t0)
	for range 2 {
		for _, b := range []*pipeline.Batch{first, second} {
			if err := c.Consume(ctx, b); err != nil {
				t.Fatalf("Consume() = %v", err)
			}
		}
	}
	if err := c.Consume(ctx, first); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".collective_perf FINAL"); n != 2 {
		t.Errorf("collective_perf FINAL = %d rows; want 2", n)
	}
	if n := queryInt(t, c, "SELECT sum(records) FROM "+db+".collective_perf FINAL"); n != 7 {
		t.Errorf("collective_perf FINAL records = %d; want 7", n)
	}
	rows, err := c.Query(ctx, "SELECT op, size_bucket, records, busbw_p50, ifNull(comm_network, ''), "+
		"ifNull(comm_gdr, 9), pool FROM "+db+".collective_perf_fabric ORDER BY op")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var (
			op, network, pool string
			bucket            int64
			records           uint64
			p50               *float64
			gdr               uint8
		)
		if err := rows.Scan(&op, &bucket, &records, &p50, &network, &gdr, &pool); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{op, itoa64(bucket), itoa(records), fmtF(p50), network, itoa(uint64(gdr)), pool}, " "))
	}
	rows.Close()
	// Weighted by records: 263 (5) and 250 (2): the median is 263.
	want := []string{"AllReduce 268435456 7 263 IB 1 h200-ib"}
	if !slices.Equal(got, want) {
		t.Errorf("collective_perf_fabric =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestClickHouseCollectivePerfColumns stores rows whose histograms differ
// in length (one empty) and whose figures are partly NaN, and reads every
// row back: each row keeps its own arrays (the insert builds them in one
// scratch slice) and NaN is stored as NULL.
func TestClickHouseCollectivePerfColumns(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	row, _ := collectiveBatches(t0)
	base := row.Collectives[0]
	hists := []pipeline.Hist{
		{Buckets: []uint8{1, 2, 3, 200}, Counts: []uint32{4, 3, 2, 1}},
		{},
		{Buckets: []uint8{77}, Counts: []uint32{9}},
	}
	b := &pipeline.Batch{}
	for i, h := range hists {
		r := base
		r.Source.Offset = int64(1000 * (i + 1))
		r.BusBWHist, r.ExecHist = h, hists[len(hists)-1-i]
		if i == 1 {
			r.BusBWP50, r.ExecUSP99 = math.NaN(), math.Inf(1)
		}
		b.Collectives = append(b.Collectives, r)
	}
	if err := c.Consume(ctx, b); err != nil {
		t.Fatalf("Consume() = %v", err)
	}
	rows, err := c.Query(ctx, "SELECT `offset`, busbw_hist_buckets, busbw_hist_counts, exec_hist_buckets, "+
		"exec_hist_counts, busbw_p50, exec_us_p99, busbw_sum FROM "+db+".collective_perf FINAL ORDER BY `offset`")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for ; rows.Next(); i++ {
		var (
			off      int64
			bb, eb   []uint16
			bc, ec   []uint32
			p50, p99 *float64
			sum      float64
		)
		if err := rows.Scan(&off, &bb, &bc, &eb, &ec, &p50, &p99, &sum); err != nil {
			t.Fatal(err)
		}
		if i >= len(hists) {
			t.Fatalf("more rows than the %d stored", len(hists))
		}
		in := b.Collectives[i]
		wantB := func(h pipeline.Hist) []uint16 {
			out := []uint16{}
			for _, x := range h.Buckets {
				out = append(out, uint16(x))
			}
			return out
		}
		wantC := func(h pipeline.Hist) []uint32 {
			if h.Counts == nil {
				return []uint32{}
			}
			return h.Counts
		}
		if off != in.Source.Offset || !slices.Equal(bb, wantB(in.BusBWHist)) || !slices.Equal(bc, wantC(in.BusBWHist)) ||
			!slices.Equal(eb, wantB(in.ExecHist)) || !slices.Equal(ec, wantC(in.ExecHist)) || sum != in.BusBWSum {
			t.Errorf("row %d = offset %d busbw %v/%v exec %v/%v sum %v; want %d %v/%v %v/%v %v", i, off, bb, bc, eb, ec, sum,
				in.Source.Offset, wantB(in.BusBWHist), wantC(in.BusBWHist), wantB(in.ExecHist), wantC(in.ExecHist), in.BusBWSum)
		}
		if nan := i == 1; (p50 == nil) != nan || (p99 == nil) != nan {
			t.Errorf("row %d: busbw_p50 %v exec_us_p99 %v; want NULL both: %v", i, fmtF(p50), fmtF(p99), nan)
		}
	}
	if i != len(hists) {
		t.Errorf("%d rows read back; want %d", i, len(hists))
	}
}
