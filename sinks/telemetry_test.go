package sinks

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// telemetryBatch is one batch as the runner makes it from a training job's
// and a canary's lines: steps with and without figures, an amendment, a
// summary, table rows of one nccl-tests run and its average.
func telemetryBatch(t0 time.Time) *pipeline.Batch {
	nan := math.NaN()
	src := func(off int64) pipeline.Source { return pipeline.Source{Topic: "nccl-logs", Partition: 2, Offset: off} }
	step := func(off, n int64, st float64) pipeline.TrainingStep {
		return pipeline.TrainingStep{Source: src(off), Time: t0.Add(time.Duration(off) * time.Second),
			StepSeries: &pipeline.StepSeries{Job: "train-a", Namespace: "ml", Cluster: "c1", Pod: "train-a-worker-0",
				Node: "gpu-1", Pool: "h100-ib", Model: "qwen2.5-14b", Framework: pipeline.FrameworkMegatron, Kind: "step",
				Network: "IB", NetworkClass: "rdma"},
			Rank: 15, Step: n, StepTime: st, TokensPerS: nan, SamplesPerS: nan, ItPerS: nan, TFLOPs: 300 + float64(n),
			MFU: nan, Loss: 2.5}
	}
	steps := []pipeline.TrainingStep{step(1, 1, 6.0), step(2, 2, 6.07), step(3, 3, 6.2)}
	amend := step(4, 3, nan)
	amend.Kind, amend.TFLOPs, amend.Loss = "amend", 41.31, nan
	summary := step(5, -1, nan)
	summary.Kind, summary.Framework, summary.SamplesPerS, summary.TFLOPs, summary.Loss = "summary", pipeline.FrameworkHF, 36.554, nan, nan
	steps = append(steps, amend, summary)

	res := func(bus float64) pipeline.NCCLTestResult {
		return pipeline.NCCLTestResult{TimeUS: 100, AlgBW: bus / 1.875, BusBW: bus, Wrong: 0}
	}
	run := func(off int64, kind string, bytes int64, bus float64) pipeline.NCCLTestRun {
		r := pipeline.NCCLTestRun{Source: src(off), Time: t0.Add(time.Duration(off) * time.Second), Job: "canary-h100-ib-1",
			Namespace: "ncclwatch-canary", Cluster: "c1", Pod: "canary-h100-ib-1-launcher", Node: "gpu-9", Pool: "h100-ib",
			Canary: true, RunID: "nccl-logs/2/10/0", Context: 7, Kind: kind, Collective: "all_reduce_perf", Version: "2.17.1",
			NRanks: 16, Hosts: []string{"gpu-9", "gpu-10"}, GPU: "NVIDIA H100 80GB HBM3", Bytes: bytes, Count: bytes / 4,
			Type: "float", Redop: "sum", Root: -1, OOP: res(bus), IP: res(bus - 1), AvgBusBW: nan}
		if kind == "avg" {
			r.Bytes, r.Count, r.Type, r.Redop = -1, -1, "", ""
			r.OOP = pipeline.NCCLTestResult{TimeUS: nan, AlgBW: nan, BusBW: nan, Wrong: nan}
			r.IP, r.AvgBusBW = r.OOP, bus
		}
		return r
	}
	tests := []pipeline.NCCLTestRun{run(11, "row", 1<<20, 40), run(12, "row", 1<<30, 355.2), run(13, "avg", 0, 120.5)}
	tests[0].OOP.Wrong = nan // N/A
	return &pipeline.Batch{Steps: steps, TestRuns: tests,
		Offsets: []pipeline.Offset{{Topic: "nccl-logs", Partition: 2, Next: 14}}}
}

func TestTelemetryDDL(t *testing.T) {
	old := ddl(t, "18.16.1")
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS ncclwatch.training_steps",
		"CREATE TABLE IF NOT EXISTS ncclwatch.nccl_test_results",
		"ENGINE = ReplacingMergeTree(context)\nPARTITION BY toYYYYMM(time)\nORDER BY (topic, `partition`, `offset`, line)",
		"CREATE VIEW IF NOT EXISTS ncclwatch.training_series AS",
		"CREATE VIEW IF NOT EXISTS ncclwatch.nccl_test_runs AS",
		"FROM ncclwatch.training_steps FINAL",
		"FROM ncclwatch.job_verdicts",
	} {
		if !strings.Contains(old, want) {
			t.Errorf("18.16 DDL lacks %q", want)
		}
	}
	cur := ddl(t, "24.8.4.13")
	for _, want := range []string{"framework LowCardinality(String),", "step_time_s Nullable(Float64),", "hosts Array(String),"} {
		if !strings.Contains(cur, want) {
			t.Errorf("24.8 DDL lacks %q", want)
		}
	}
	for _, m := range telemetryMigrations(featuresOf(24, 8)) {
		if m.Version < 20 || m.Version > 39 {
			t.Errorf("telemetry migration %d (%s) is outside 20–39", m.Version, m.Name)
		}
	}
}

func TestTelemetryDedupToken(t *testing.T) {
	b := telemetryBatch(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	for i := range telemetryTables {
		tb := &telemetryTables[i]
		if a1, a2 := tb.token(b), tb.token(b); a1 != a2 || !strings.Contains(a1, tb.name) {
			t.Errorf("%s: token %q, %q; want stable and naming the table", tb.name, a1, a2)
		}
	}
	before := telemetryTables[1].token(b)
	b.TestRuns[0].Context = 1
	if telemetryTables[1].token(b) == before {
		t.Errorf("nccl_test_results token unchanged by another context (the row's version)")
	}
}

func TestClickHouseTelemetry(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := telemetryBatch(t0)
	for i := 0; i < 2; i++ { // the second is a replay
		if err := c.Consume(ctx, b); err != nil {
			t.Fatalf("Consume() #%d = %v", i, err)
		}
	}
	// A replay that started mid-table knows less of the run: it must not
	// replace the richer row.
	poor := telemetryBatch(t0)
	poor.Steps = nil
	for i := range poor.TestRuns {
		poor.TestRuns[i].Context, poor.TestRuns[i].Collective, poor.TestRuns[i].RunID = 0, "", "nccl-logs/2/11/0"
	}
	if err := c.Consume(ctx, poor); err != nil {
		t.Fatalf("Consume(poor replay) = %v", err)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".training_steps FINAL"); n != 5 {
		t.Errorf("training_steps FINAL = %d rows; want 5", n)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".nccl_test_results FINAL WHERE context = 7 AND collective = 'all_reduce_perf'"); n != 3 {
		t.Errorf("nccl_test_results FINAL with full context = %d rows; want 3", n)
	}
	// The replay is stored twice (no insert token on 18.16); the view
	// folds the row table itself.
	if n := queryInt(t, c, "SELECT count() FROM "+db+".training_step_rows WHERE step_time_s IS NULL"); c.features.DedupToken && n != 2 || !c.features.DedupToken && n != 4 {
		t.Errorf("NULL step times in training_step_rows = %d; want 4 (amend and summary, twice) without insert tokens, 2 with", n)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".training_steps WHERE step_time_s IS NULL"); n != 2 {
		t.Errorf("NULL step times through training_steps = %d; want 2 (amend and summary)", n)
	}
	// A series is sent once by a process: the replay sends none.
	if n, want := queryInt(t, c, "SELECT count() FROM "+db+".training_step_series"), len(everySeries(b)); n != uint64(want) || want < 2 {
		t.Errorf("training_step_series = %d rows; want %d, one per series of the batch (2 or more)", n, want)
	}

	rows, err := c.Query(ctx, "SELECT framework, steps, first_step, last_step, timed_steps, median_step_time_s, tflops_last, "+
		"samples_per_s_last, model, pool, ifNull(verdict, '') FROM "+db+".training_series ORDER BY framework")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var (
			fw, model, pool, verdict string
			steps, timed             uint64
			first, last              int64
			median, tflops, samples  *float64
		)
		if err := rows.Scan(&fw, &steps, &first, &last, &timed, &median, &tflops, &samples, &model, &pool, &verdict); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{fw, itoa(steps), itoa64(first), itoa64(last), itoa(timed), fmtF(median), fmtF(tflops),
			fmtF(samples), model, pool, verdict}, " "))
	}
	rows.Close()
	want := []string{
		"hf_trainer 0 0 0 0 null null 36.554 qwen2.5-14b h100-ib ",
		"megatron 3 1 3 3 6.07 41.31 null qwen2.5-14b h100-ib ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("training_series =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}

	rows, err = c.Query(ctx, "SELECT run_id, collective, pool, canary, test_nranks, test_hosts, row_count, min_bytes, max_bytes, avg_busbw, "+
		"max_size_busbw_oop FROM "+db+".nccl_test_runs ORDER BY run_id")
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for rows.Next() {
		var (
			id, coll, pool string
			canary         uint8
			nranks         *int32
			hosts          uint64
			nrows          uint64
			minB, maxB     *int64
			avg, busOOP    *float64
		)
		if err := rows.Scan(&id, &coll, &pool, &canary, &nranks, &hosts, &nrows, &minB, &maxB, &avg, &busOOP); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{id, coll, pool, itoa(uint64(canary)), itoa64(int64(*nranks)), itoa(hosts), itoa(nrows),
			itoa64(*minB), itoa64(*maxB), fmtF(avg), fmtF(busOOP)}, " "))
	}
	rows.Close()
	want = []string{"nccl-logs/2/10/0 all_reduce_perf h100-ib 1 16 2 2 1048576 1073741824 120.5 355.2"}
	if !slices.Equal(got, want) {
		t.Errorf("nccl_test_runs =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func itoa(n uint64) string  { return strconv.FormatUint(n, 10) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func fmtF(p *float64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}
