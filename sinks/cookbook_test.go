package sinks

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The SQL cookbook (deploy/clickhouse/queries) and the Grafana dashboard
// run against a real server seeded with a small fleet, relative to now:
//
//   - qwen-rdma and qwen-socket: Qwen2.5-14B on 16 GPUs over 2 nodes, the
//     published case — 6.07 s median step time on IB, 12.36 s on sockets;
//   - llama-1node: one node, no inter-node network;
//   - qwen-restart: one job that moved from IB to Socket (no summary);
//   - fabric canaries: four ok runs on pool h200-ib (355–357 GB/s) and one
//     that fell back (40 GB/s), an ok run on a100-roce two days ago, a
//     fallen-back run on h100-eth;
//   - old-fallback: a socket fallback three days ago.
type fleet struct {
	now  time.Time // truncated to the second
	base time.Time // the start of the hour before now's
}

func newFleet() fleet {
	now := time.Now().UTC().Truncate(time.Second)
	return fleet{now: now, base: now.Truncate(time.Hour).Add(-time.Hour)}
}

func (f fleet) batch() *pipeline.Batch {
	nan := math.NaN()
	b := &pipeline.Batch{}
	job := func(ns, name, network, class string, nnodes, nranks int, verdict pipeline.Verdict, first time.Time, span time.Duration) {
		s := pipeline.JobSummary{Job: name, Namespace: ns, Cluster: "c1", NNodes: ptr(nnodes), NRanks: ptr(nranks),
			NetworkClass: ptr(class), Verdict: verdict, Intra: []string{}, Reasons: []string{}, FirstSeen: first,
			LastSeen: first.Add(span), Version: 1}
		if network != "" {
			s.Network = ptr(network)
		}
		b.Jobs = append(b.Jobs, s)
	}
	off := int64(0)
	src := func() pipeline.Source {
		off++
		return pipeline.Source{Topic: "nccl-logs", Partition: 0, Offset: off}
	}
	steps := func(name, model, pool, network string, first time.Time, every time.Duration, times ...float64) {
		for i, st := range times {
			class := ""
			if network != "" {
				class = pipeline.NetworkClass(network)
			}
			b.Steps = append(b.Steps, pipeline.TrainingStep{Source: src(), Time: first.Add(time.Duration(i) * every),
				StepSeries: &pipeline.StepSeries{Job: name, Namespace: "ml", Cluster: "c1", Pod: name + "-worker-0",
					Node: "n1", Pool: pool, Model: model, Framework: pipeline.FrameworkMegatron, Kind: "step",
					Network: network, NetworkClass: class}, Rank: -1, Step: int64(i + 1), StepTime: st, TokensPerS: nan,
				SamplesPerS: nan, ItPerS: nan, TFLOPs: nan, MFU: nan, Loss: nan})
		}
	}
	canary := func(name, pool string, verdict pipeline.Verdict, at time.Time, busbw float64) {
		network, class := "IB", pipeline.ClassRDMA
		if verdict == pipeline.VerdictSocketFallback {
			network, class = "Socket", pipeline.ClassTCP
		}
		job("ncclwatch-canary", name, network, class, 2, 16, verdict, at, 90*time.Second)
		run := "nccl-logs/0/" + strconv.FormatInt(off+1, 10) + "/0"
		row := func(kind string, bytes int64, bus float64) pipeline.NCCLTestRun {
			r := pipeline.NCCLTestRun{Source: src(), Time: at.Add(time.Minute), Job: name, Namespace: "ncclwatch-canary",
				Cluster: "c1", Pod: name + "-launcher", Node: "n9", Pool: pool, Canary: true, RunID: run, Context: 7,
				Kind: kind, Collective: "all_reduce_perf", Version: "2.17.1", NRanks: 16, Hosts: []string{"a", "b"},
				Bytes: bytes, Count: bytes / 4, Type: "float", Redop: "sum", Root: -1,
				OOP: pipeline.NCCLTestResult{TimeUS: 1000, AlgBW: bus / 1.875, BusBW: bus, Wrong: 0},
				IP:  pipeline.NCCLTestResult{TimeUS: 1000, AlgBW: bus / 1.875, BusBW: bus, Wrong: 0}, AvgBusBW: nan}
			if kind == "avg" {
				r.Bytes, r.Count, r.AvgBusBW = -1, -1, bus/3
				r.OOP = pipeline.NCCLTestResult{TimeUS: nan, AlgBW: nan, BusBW: nan, Wrong: nan}
				r.IP = r.OOP
			}
			return r
		}
		b.TestRuns = append(b.TestRuns, row("row", 1<<20, busbw/10), row("row", 8<<30, busbw), row("avg", 0, busbw))
	}

	job("ml", "qwen-rdma", "IB", pipeline.ClassRDMA, 2, 16, pipeline.VerdictOK, f.now.Add(-5*time.Hour), 2*time.Minute)
	steps("qwen-rdma", "qwen2.5-14b", "h200-ib", "IB", f.now.Add(-5*time.Hour+3*time.Minute), time.Minute, 6.0, 6.05, 6.07, 6.1, 6.2)
	job("ml", "qwen-socket", "Socket", pipeline.ClassTCP, 2, 16, pipeline.VerdictSocketFallback, f.now.Add(-4*time.Hour), time.Minute)
	steps("qwen-socket", "qwen2.5-14b", "h200-ib", "Socket", f.now.Add(-4*time.Hour+5*time.Minute), 28*time.Minute+45*time.Second,
		12.2, 12.3, 12.36, 12.4, 12.5) // the last at now-2h
	job("ml", "llama-1node", "", pipeline.ClassNone, 1, 8, pipeline.VerdictOK, f.now.Add(-3*time.Hour), time.Minute)
	steps("llama-1node", "llama-8b", "h200-ib", "", f.now.Add(-3*time.Hour+time.Minute), time.Minute, 0.5, 0.5, 0.5)
	steps("qwen-restart", "", "", "IB", f.now.Add(-6*time.Hour), time.Minute, 6.0, 6.0, 6.0)
	steps("qwen-restart", "", "", "Socket", f.now.Add(-5*time.Hour), time.Minute, 12.0, 12.0, 12.0)
	job("ml", "old-fallback", "Socket", pipeline.ClassTCP, 2, 16, pipeline.VerdictSocketFallback, f.now.Add(-72*time.Hour), time.Hour)
	// Checkpoints: qwen-rdma saves to Lustre (30, 32, 34 s) and loads once
	// (20 s); qwen-socket to node-local disk (5 s, 6 s and one save that
	// printed no duration); llama-1node once, relative path, no duration.
	ckpt := func(name, pool, op, path string, at time.Time, secs float64) {
		b.Checkpoints = append(b.Checkpoints, pipeline.CheckpointEvent{Source: src(), Time: at, EndTime: at, Job: name,
			Namespace: "ml", Cluster: "c1", Pod: name + "-worker-0", Node: "n1", Pool: pool,
			Framework: pipeline.FrameworkMegatron, Op: op, Rank: -1, Step: -1, Path: path, Duration: secs,
			Complete: true, Lines: 2})
	}
	for i, d := range []float64{30, 32, 34} {
		ckpt("qwen-rdma", "h200-ib", "save", "/lustre/ckpt/qwen-rdma", f.now.Add(-5*time.Hour+time.Duration(4+i)*time.Minute), d)
	}
	ckpt("qwen-rdma", "h200-ib", "load", "/lustre/ckpt/qwen-rdma", f.now.Add(-5*time.Hour+3*time.Minute), 20)
	for i, d := range []float64{5, 6, nan} {
		ckpt("qwen-socket", "h200-ib", "save", "/mnt/local/ckpt/qwen-socket", f.now.Add(-3*time.Hour+time.Duration(i)*time.Minute), d)
	}
	ckpt("llama-1node", "h200-ib", "save", "experiments/llama/global_step10", f.now.Add(-3*time.Hour+2*time.Minute), nan)

	// NCCL Inspector: qwen-restart's AllReduce over IB (communicator
	// 0x1111, a minute of two windows' rows: 340 over 50 records, 350
	// over 100; then 352 over 100) and after its restart over Socket
	// (0x2222: 11.5 over 80, 12.5 over 100); a 16 MiB row the query
	// leaves out; qwen-rdma's records of a communicator whose init was
	// not stored (no network: left out).
	comm := func(name, id, network, class string, gdr bool) {
		b.Comms = append(b.Comms, pipeline.CommSummary{Job: name, Namespace: "ml", Cluster: "c1", CommID: id,
			Network: ptr(network), NetworkClass: class, GDR: ptr(gdr), NNodes: ptr(2), NRanks: ptr(16),
			Verdict: pipeline.VerdictOK, Env: map[string]string{}, FirstSeen: f.now.Add(-6 * time.Hour),
			LastSeen: f.now.Add(-6 * time.Hour), Version: 1})
	}
	comm("qwen-restart", "0x1111", "IB", pipeline.ClassRDMA, true)
	comm("qwen-restart", "0x2222", "Socket", pipeline.ClassTCP, false)
	coll := func(name, id string, minute time.Time, size int64, n int64, p50 float64) {
		b.Collectives = append(b.Collectives, pipeline.CollectivePerf{Source: src(), Minute: minute, Job: name,
			Namespace: "ml", Cluster: "c1", Pod: name + "-worker-0", Node: "n1", Pool: "h200-ib", Host: "gpu-a",
			CommID: id, Op: "AllReduce", SizeBucket: size, NRanks: 16, NNodes: 2, Count: n, BusBWMin: p50 - 1,
			BusBWMax: p50 + 1, BusBWSum: p50 * float64(n), BusBWP50: p50, ExecUSMin: 900, ExecUSMax: 1100,
			ExecUSSum: 1000 * float64(n), ExecUSP50: 1000, ExecUSP99: 1100})
	}
	m1, m2 := f.now.Add(-6*time.Hour).Truncate(time.Minute), f.now.Add(-5*time.Hour).Truncate(time.Minute)
	coll("qwen-restart", "0x1111", m1, 1<<28, 50, 340)
	coll("qwen-restart", "0x1111", m1, 1<<28, 100, 350)
	coll("qwen-restart", "0x1111", m1.Add(time.Minute), 1<<28, 100, 352)
	coll("qwen-restart", "0x1111", m1, 1<<24, 100, 120)
	coll("qwen-restart", "0x2222", m2, 1<<28, 80, 11.5)
	coll("qwen-restart", "0x2222", m2, 1<<28, 100, 12.5)
	coll("qwen-rdma", "0x3333", f.now.Add(-5*time.Hour).Truncate(time.Minute), 1<<28, 100, 355)

	canary("canary-h200-1", "h200-ib", pipeline.VerdictOK, f.base.Add(-3*time.Hour+5*time.Minute), 355)
	canary("canary-h200-2", "h200-ib", pipeline.VerdictOK, f.base.Add(-2*time.Hour+5*time.Minute), 356)
	canary("canary-h200-3", "h200-ib", pipeline.VerdictOK, f.base.Add(-time.Hour+5*time.Minute), 354)
	canary("canary-h200-4", "h200-ib", pipeline.VerdictOK, f.base.Add(5*time.Minute), 357)
	canary("canary-h200-5", "h200-ib", pipeline.VerdictSocketFallback, f.base.Add(10*time.Minute), 40)
	canary("canary-a100-1", "a100-roce", pipeline.VerdictOK, f.base.Add(-48*time.Hour), 180)
	canary("canary-h100-1", "h100-eth", pipeline.VerdictSocketFallback, f.base.Add(15*time.Minute), 10)
	return b
}

// seeded returns a migrated test database holding the fleet, stored twice
// (a replay must change no answer).
func seeded(t *testing.T) (*ClickHouse, fleet) {
	t.Helper()
	c := migrated(t)
	f := newFleet()
	b := f.batch()
	for i := 0; i < 2; i++ {
		if err := c.Consume(t.Context(), b); err != nil {
			t.Fatalf("seed Consume() = %v", err)
		}
	}
	return c, f
}

// queryTable runs sql with the cookbook's database name replaced by the
// test's and renders every row as space-separated values: NULL for null,
// @<unix seconds> for times, shortest decimal for floats.
func queryTable(t *testing.T, c *ClickHouse, sql string) ([]string, error) {
	t.Helper()
	sql = strings.ReplaceAll(sql, "ncclwatch.", c.cfg.Database+".")
	rows, err := c.Query(t.Context(), sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	var out []string
	for rows.Next() {
		dst := make([]any, len(types))
		for i, ct := range types {
			dst[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dst...); err != nil {
			return nil, err
		}
		cells := make([]string, len(dst))
		for i, d := range dst {
			cells[i] = renderCell(reflect.ValueOf(d).Elem())
		}
		out = append(out, strings.Join(cells, " "))
	}
	return out, rows.Err()
}

func renderCell(v reflect.Value) string {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return "NULL"
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case time.Time:
		return "@" + strconv.FormatInt(x.Unix(), 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case string:
		if x == "" {
			return `""`
		}
		return x
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = renderCell(v.Index(i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(fmtValue(v), "\n", " "), "  ", " "))
}

func fmtValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	return v.String()
}

func at(t time.Time) string { return "@" + strconv.FormatInt(t.Unix(), 10) }

func f64(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// roundTo rounds v to d decimals as ClickHouse's round does.
func roundTo(v float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}

// cookbook lists every query of deploy/clickhouse/queries with the rows it
// must return from the seeded fleet.
func cookbook(f fleet) map[string][]string {
	h := func(d time.Duration) string { return at(f.base.Add(d)) }
	return map[string][]string{
		// The published comparison: 12.36 s on sockets, 6.07 s on RDMA,
		// same model and scale; the one-node job has no RDMA twin.
		"median_step_time_by_network_class.sql": {
			"llama-8b 1 8 none 1 3 0.5 0.5 NULL",
			"qwen2.5-14b 2 16 rdma 1 5 6.07 6.2 1",
			"qwen2.5-14b 2 16 tcp 1 5 12.36 12.5 " + f64(12.36/float64(6.07)),
		},
		// qwen-socket ran 2 h on 16 GPUs (init at now-4h, last step at
		// now-2h); the two fallen-back canaries 90 s each. old-fallback is
		// three days old.
		"fallback_jobs_gpu_hours.sql": {
			"c1 ml qwen-socket Socket 2 16 " + at(f.now.Add(-4*time.Hour)) + " " + at(f.now.Add(-2*time.Hour)) + " 2 32 32",
			"c1 ncclwatch-canary canary-h100-1 Socket 2 16 " + h(15*time.Minute) + " " + h(15*time.Minute+90*time.Second) + " 0.025 0.4 0.4",
			"c1 ncclwatch-canary canary-h200-5 Socket 2 16 " + h(10*time.Minute) + " " + h(10*time.Minute+90*time.Second) + " 0.025 0.4 0.4",
		},
		// h200-ib's baseline is the median of its four ok runs: 356, since
		// medianExact returns the upper middle value of an even count. The
		// last hour holds the 357 GB/s run and the 40 GB/s fallback, whose
		// ratio (0.112) is what the busbw rule fires on. h100-eth has no ok
		// run, so no baseline.
		"canary_busbw_vs_baseline.sql": {
			"a100-roce all_reduce_perf " + h(-48*time.Hour) + " 1 180 180 180 1",
			"h100-eth all_reduce_perf " + h(0) + " 1 10 10 NULL NULL",
			"h200-ib all_reduce_perf " + h(-3*time.Hour) + " 1 355 355 356 0.997",
			"h200-ib all_reduce_perf " + h(-2*time.Hour) + " 1 356 356 356 1",
			"h200-ib all_reduce_perf " + h(-time.Hour) + " 1 354 354 356 0.994",
			"h200-ib all_reduce_perf " + h(0) + " 2 198.5 40 356 0.112",
		},
		// a100-roce's last proof is two days old; h100-eth never had one.
		// h200-ib's canary proved RDMA within the hour.
		"pools_without_rdma_proof.sql": {
			"a100-roce " + h(-48*time.Hour+time.Minute) + " " + h(-48*time.Hour+time.Minute) + " ok 1 1",
			"h100-eth @0 " + h(16*time.Minute) + " socket_fallback 1 1",
		},
		"step_time_by_network_within_job.sql": {
			"c1 ml qwen-restart megatron IB rdma 3 " + at(f.now.Add(-6*time.Hour)) + " 6 1",
			"c1 ml qwen-restart megatron Socket tcp 3 " + at(f.now.Add(-5*time.Hour)) + " 12 2",
		},
		// Lustre saves take 32 s (median) against 6 s on local disk; the
		// relative path of llama-1node printed no duration.
		"checkpoint_duration_by_pool_and_storage.sql": {
			"h200-ib /lustre/ckpt load 1 1 20 20 20",
			"h200-ib /lustre/ckpt save 3 3 32 34 96",
			"h200-ib /mnt/local save 3 2 6 6 11",
			"h200-ib experiments/llama save 1 0 NULL NULL NULL",
		},
		// qwen-rdma's progress lines span 240 s and its checkpoints took
		// 116 s of printed time; qwen-socket's span 6900 s, 11 s of it.
		"checkpoint_share_of_wall_time.sql": {
			"c1 ml qwen-rdma 3 1 116 240 0.4833 ok",
			"c1 ml qwen-socket 3 0 11 6900 0.0016 socket_fallback",
		},
		// Weighted medians: IB 340 (50), 350 (100), 352 (100) → 350;
		// Socket 11.5 (80), 12.5 (100) → 12.5.
		"collective_busbw_before_after_network_change.sql": {
			"c1 ml qwen-restart AllReduce IB 250 " + at(f.now.Add(-6*time.Hour).Truncate(time.Minute)) + " " +
				at(f.now.Add(-6*time.Hour).Truncate(time.Minute).Add(time.Minute)) + " 350 1",
			"c1 ml qwen-restart AllReduce Socket 180 " + at(f.now.Add(-5*time.Hour).Truncate(time.Minute)) + " " +
				at(f.now.Add(-5*time.Hour).Truncate(time.Minute)) + " 12.5 " + f64(roundTo(12.5/350, 3)),
		},
		"jobs_by_verdict.sql": {
			"ok 6 88",
			"socket_fallback 3 48",
		},
	}
}

// cookbookQuery is one file of deploy/clickhouse/queries.
type cookbookQuery struct{ name, sql string }

// cookbookQueries reads the cookbook's queries, in file name order; none
// fails the test.
func cookbookQueries(t *testing.T) []cookbookQuery {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "deploy", "clickhouse", "queries", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cookbook queries: %v", err)
	}
	qs := make([]cookbookQuery, len(files))
	for i, path := range files {
		sql, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		qs[i] = cookbookQuery{name: filepath.Base(path), sql: string(sql)}
	}
	return qs
}

func TestCookbook(t *testing.T) {
	c, f := seeded(t)
	want := cookbook(f)
	queries := cookbookQueries(t)
	for _, q := range queries {
		name, sql := q.name, q.sql
		t.Run(name, func(t *testing.T) {
			if !strings.HasPrefix(sql, "-- ") {
				t.Errorf("%s does not start with a comment saying what it answers", name)
			}
			w, ok := want[name]
			if !ok {
				t.Fatalf("%s has no expected result in cookbook(): every query is tested", name)
			}
			got, err := queryTable(t, c, sql)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !slices.Equal(got, w) {
				t.Errorf("%s =\n\t%s\nwant\n\t%s", name, strings.Join(got, "\n\t"), strings.Join(w, "\n\t"))
			}
		})
	}
	if len(queries) != len(want) {
		t.Errorf("%d queries, %d expected results: a query file is missing", len(queries), len(want))
	}
}
