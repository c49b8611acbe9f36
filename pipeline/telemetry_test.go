package pipeline

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// tline builds a telemetry line from a reset one.
func tline(edit func(l *TelemetryLine)) *TelemetryLine {
	var l TelemetryLine
	l.Reset()
	edit(&l)
	return &l
}

func stepLine(fw string, step int64, stepTime float64) *TelemetryLine {
	return tline(func(l *TelemetryLine) {
		l.Kind, l.Framework, l.Step, l.StepTime = TelemetryStep, fw, step, stepTime
	})
}

func testRowLine(size int64, oop, ip float64) *TelemetryLine {
	return tline(func(l *TelemetryLine) {
		l.Kind, l.Format = TelemetryTestRow, "redop_root_wrong"
		l.Row.Bytes, l.Row.Count, l.Row.Type, l.Row.Redop, l.Row.Root = size, size/4, []byte("float"), []byte("sum"), -1
		l.Row.OOP = NCCLTestResult{TimeUS: 10, AlgBW: oop / 2, BusBW: oop, Wrong: 0}
		l.Row.IP = NCCLTestResult{TimeUS: 10, AlgBW: ip / 2, BusBW: ip, Wrong: 0}
	})
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// feed adds lines to job j with consecutive offsets and returns the batch
// of rows they made.
func feed(a *TelemetryAssembler, job string, meta *Meta, lines ...*TelemetryLine) *Batch {
	var b Batch
	for i, l := range lines {
		a.Add(job, meta, l, t0.Add(time.Duration(i)*time.Second), Source{Topic: "logs", Partition: 3, Offset: int64(100 + i)}, &b)
	}
	return &b
}

func TestTelemetryAssemblerTestRuns(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	meta := &Meta{Job: "canary-1", Namespace: "fabric", Cluster: "c1", Pod: "canary-1-launcher", Node: "n1",
		Labels: map[string]string{LabelCanary: "true", LabelPool: "h100-ib"}}
	lines := []*TelemetryLine{
		tline(func(l *TelemetryLine) { l.Kind, l.Collective = TelemetryTestStart, []byte("all_reduce_perf") }),
		tline(func(l *TelemetryLine) { l.Kind, l.MinBytes, l.MaxBytes = TelemetryTestParams, 8, 1<<30 }),
		tline(func(l *TelemetryLine) {
			l.Kind, l.TestRank, l.Host, l.GPU = TelemetryTestDevice, 0, []byte("a"), []byte("H100")
		}),
		tline(func(l *TelemetryLine) { l.Kind, l.TestRank, l.Host = TelemetryTestDevice, 15, []byte("b") }),
		tline(func(l *TelemetryLine) { l.Kind, l.Format = TelemetryTestHeader, "redop_root_wrong" }),
		testRowLine(1<<20, 10, 11),
		testRowLine(1<<30, 355.5, 350),
		tline(func(l *TelemetryLine) { l.Kind, l.Avg = TelemetryTestAvg, 120.25 }),
		tline(func(l *TelemetryLine) { l.Kind, l.Collective = TelemetryTestEnd, []byte("all_reduce_perf") }),
		// A second collective in the same job: a new run.
		tline(func(l *TelemetryLine) { l.Kind, l.Collective = TelemetryTestStart, []byte("all_gather_perf") }),
		tline(func(l *TelemetryLine) { l.Kind, l.Format = TelemetryTestHeader, "redop_root_wrong" }),
		testRowLine(1<<30, 300, 301),
	}
	b := feed(a, "c1/fabric/canary-1", meta, lines...)
	tests, training := a.Report("c1/fabric/canary-1")
	if len(training) != 0 || len(tests) != 2 {
		t.Fatalf("Report = %v, %v; want 2 runs, no series", tests, training)
	}
	r := tests[0]
	if got := r.String(); got != "{collective all_reduce_perf nranks 16 hosts 2 rows 2 bytes 1048576..1073741824 avg 120.25 maxOOP 355.5}" {
		t.Errorf("run 0 = %s", got)
	}
	if *r.GPU != "H100" || *r.HeaderMaxBytes != 1<<30 || *r.MaxSizeBusBWIP != 350 {
		t.Errorf("run 0 extras = gpu %v hdr %v ip %v", *r.GPU, *r.HeaderMaxBytes, *r.MaxSizeBusBWIP)
	}
	if got := tests[1].String(); got != "{collective all_gather_perf nranks null hosts null rows 1 bytes 1073741824..1073741824 avg null maxOOP 300}" {
		t.Errorf("run 1 = %s", got)
	}
	// Rows: 3 table rows and the average, each with its run's context.
	if len(b.TestRuns) != 4 || len(b.Steps) != 0 {
		t.Fatalf("batch has %d test rows, %d steps; want 4, 0", len(b.TestRuns), len(b.Steps))
	}
	avg := b.TestRuns[2]
	if avg.Kind != "avg" || avg.AvgBusBW != 120.25 || avg.RunID != "logs/3/100/0" || avg.Context != 7 ||
		avg.NRanks != 16 || !reflect.DeepEqual(avg.Hosts, []string{"a", "b"}) || !avg.Canary || avg.Pool != "h100-ib" ||
		avg.Collective != "all_reduce_perf" || avg.Bytes != -1 || !math.IsNaN(avg.OOP.BusBW) {
		t.Errorf("avg row = %+v", avg)
	}
	last := b.TestRuns[3]
	if last.Kind != "row" || last.RunID != "logs/3/109/0" || last.Context != 5 || last.Bytes != 1<<30 || last.OOP.BusBW != 300 ||
		last.Type != "float" || last.Redop != "sum" || last.NRanks != -1 {
		t.Errorf("second run row = %+v", last)
	}
	if b.Bytes <= 0 {
		t.Errorf("batch bytes = %d; want > 0", b.Bytes)
	}
}

// A table seen without its header (a replay that starts mid-table, or a
// paste of rows only) is still a run, with less context; NCCL comm lines
// give it ranks and hosts.
func TestTelemetryAssemblerRowsOnly(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	b := feed(a, "j", nil,
		tline(func(l *TelemetryLine) { l.Kind, l.NRanks, l.Host = TelemetryNCCLComm, 2, []byte("h1") }),
		tline(func(l *TelemetryLine) { l.Kind, l.NRanks, l.Host = TelemetryNCCLComm, 2, []byte("h1") }),
		testRowLine(1<<27, 150, 151),
		testRowLine(1<<29, 192.43, 192.18),
		tline(func(l *TelemetryLine) { l.Kind, l.Avg = TelemetryTestAvg, 179.465 }),
		testRowLine(8, 0, 0), // rows after the average: the next run
	)
	tests, _ := a.Report("j")
	if len(tests) != 2 {
		t.Fatalf("%d runs; want 2: %v", len(tests), tests)
	}
	if got := tests[0].String(); got != "{collective null nranks 2 hosts 1 rows 2 bytes 134217728..536870912 avg 179.465 maxOOP 192.43}" {
		t.Errorf("run 0 = %s", got)
	}
	if b.TestRuns[0].Context != 0 || b.TestRuns[0].NRanks != 2 {
		t.Errorf("row context = %d, nranks %d; want 0, 2", b.TestRuns[0].Context, b.TestRuns[0].NRanks)
	}
}

func TestTelemetryAssemblerSeries(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	lines := []*TelemetryLine{
		tline(func(l *TelemetryLine) { l.Kind, l.Framework, l.TFLOPs = TelemetryAmend, FrameworkMegatron, 40 }), // nothing to amend
		stepLine(FrameworkMegatron, 1, 123.7424),
		tline(func(l *TelemetryLine) { l.Kind, l.Framework, l.TFLOPs = TelemetryAmend, FrameworkMegatron, 41.31 }),
		stepLine(FrameworkMegatron, 2, 128.917),
		stepLine(FrameworkMegatron, 2, 128.917), // another rank's copy
		stepLine(FrameworkMegatron, 3, 128.6427),
		tline(func(l *TelemetryLine) {
			l.Kind, l.Framework, l.Step, l.SamplesPerS = TelemetryStep, FrameworkDeepSpeed, 3, 58.7
		}),
		tline(func(l *TelemetryLine) { l.Kind, l.Framework, l.TFLOPs = TelemetryAmend, FrameworkMegatron, 40.01 }),
	}
	b := feed(a, "j", &Meta{Job: "j", Labels: map[string]string{LabelModel: "gpt-52b"}}, lines...)
	_, training := a.Report("j")
	if len(training) != 2 || training[0].Framework != FrameworkMegatron || training[1].Framework != FrameworkDeepSpeed {
		t.Fatalf("series = %+v", training)
	}
	m := training[0]
	if m.Steps != 4 || m.DistinctSteps != 3 || *m.FirstStep != 1 || *m.LastStep != 3 ||
		*m.FirstStepTime != 123.7424 || *m.LastStepTime != 128.6427 || math.Abs(*m.MedianStepTime-128.77985) > 1e-9 || *m.TFLOPsLast != 40.01 ||
		m.TokensPerSLast != nil || m.MFULast != nil {
		t.Errorf("megatron series = %+v", m)
	}
	if d := training[1]; d.Steps != 1 || *d.SamplesPerSLast != 58.7 || d.MedianStepTime != nil {
		t.Errorf("deepspeed series = %+v", d)
	}
	// Rows: every step, the two amendments that found a step and the one
	// that found none (step -1: its figures are kept); the other rank's
	// copy of step 2 is counted in step 2's row.
	if len(b.Steps) != 7 {
		t.Fatalf("%d step rows; want 7", len(b.Steps))
	}
	if r := b.Steps[0]; r.Kind != "amend" || r.Step != -1 || r.Ranks != 1 || r.TFLOPs != 40 {
		t.Errorf("amend row without a step = %+v", r)
	}
	if r := b.Steps[3]; r.Step != 2 || r.Ranks != 2 || b.Steps[4].Ranks != 1 {
		t.Errorf("step 2 row = %+v; want Ranks 2 (two lines)", r)
	}
	if r := b.Steps[2]; r.Kind != "amend" || r.Step != 1 || r.TFLOPs != 41.31 || r.Model != "gpt-52b" || !math.IsNaN(r.StepTime) {
		t.Errorf("amend row = %+v", r)
	}
	if r := b.Steps[6]; r.Kind != "amend" || r.Step != 3 || r.Framework != FrameworkMegatron {
		t.Errorf("last amend row = %+v", r)
	}
}

// A network change inside a job splits every series: the report keeps the
// median before the change and the one since, the regression rule's inputs.
func TestTelemetryAssemblerNetworkChange(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	netLine := func(name string) *TelemetryLine {
		return tline(func(l *TelemetryLine) { l.Kind, l.Name = TelemetryNCCLNetwork, []byte(name) })
	}
	lines := []*TelemetryLine{netLine("IB"), netLine("IB")}
	for i := int64(1); i <= 5; i++ {
		lines = append(lines, stepLine(FrameworkTorchtitan, i, 6.07))
	}
	lines = append(lines, netLine("Socket"))
	for i := int64(6); i <= 9; i++ {
		lines = append(lines, stepLine(FrameworkTorchtitan, i, 12.36))
	}
	b := feed(a, "j", nil, lines...)
	_, training := a.Report("j")
	s := training[0]
	if *s.Network != "Socket" || *s.NetworkClass != ClassTCP || *s.PreviousNetwork != "IB" || *s.PreviousMedian != 6.07 ||
		*s.SegmentMedian != 12.36 || *s.NetworkChangedAt != 5 || math.Abs(*s.StepTimeRegress-12.36/6.07) > 1e-12 {
		t.Errorf("series = %+v", s)
	}
	if r := b.Steps[0]; r.Network != "IB" || r.NetworkClass != ClassRDMA {
		t.Errorf("first step row network = %q %q", r.Network, r.NetworkClass)
	}
	if r := b.Steps[len(b.Steps)-1]; r.Network != "Socket" || r.NetworkClass != ClassTCP {
		t.Errorf("last step row network = %q %q", r.Network, r.NetworkClass)
	}
}

func TestTelemetryAssemblerBounds(t *testing.T) {
	cfg := DefaultTelemetryAssemblerConfig()
	cfg.MaxJobs, cfg.MaxRunsPerJob, cfg.MaxHostsPerRun, cfg.MedianSamples = 10, 3, 2, 16
	a := NewTelemetryAssembler(cfg, nil)
	for j := 0; j < 25; j++ {
		a.Add(strings.Repeat("j", j+1), nil, stepLine(FrameworkJSON, 1, 1), t0, Source{}, nil)
	}
	if a.Len() > 10 {
		t.Errorf("Len = %d; want <= MaxJobs 10", a.Len())
	}
	if _, tr := a.Report(strings.Repeat("j", 25)); len(tr) != 1 {
		t.Errorf("the newest job was evicted")
	}
	for i := 0; i < 5; i++ {
		a.Add("runs", nil, testRowLine(8, 1, 1), t0, Source{Offset: int64(2 * i)}, nil)
		a.Add("runs", nil, tline(func(l *TelemetryLine) { l.Kind, l.Avg = TelemetryTestAvg, float64(i) }), t0, Source{Offset: int64(2*i + 1)}, nil)
	}
	for i, h := range []string{"a", "b", "c", "a"} {
		a.Add("runs", nil, tline(func(l *TelemetryLine) { l.Kind, l.TestRank, l.Host = TelemetryTestDevice, i, []byte(h) }), t0, Source{}, nil)
	}
	a.Add("runs", nil, testRowLine(8, 1, 1), t0, Source{}, nil)
	tests, _ := a.Report("runs")
	if len(tests) != 3 || *tests[0].AvgBusBW != 3 || *tests[2].Hosts != 2 || *tests[2].NRanks != 4 {
		t.Errorf("runs = %v", tests)
	}
	// The median of 10 000 steps from a 16-value sample stays in the middle.
	for i := 1; i <= 10000; i++ {
		a.Add("long", nil, stepLine(FrameworkMegatron, int64(i), float64(i%100)), t0, Source{}, nil)
	}
	_, tr := a.Report("long")
	if m := *tr[0].MedianStepTime; m < 30 || m > 70 {
		t.Errorf("median of a 0..99 sawtooth = %v; want near 49.5", m)
	}
	a.Evict("long")
	if _, tr := a.Report("long"); len(tr) != 0 {
		t.Errorf("Report after Evict = %v", tr)
	}
}

func TestTelemetryPoolFromInventory(t *testing.T) {
	inv := &Inventory{nodes: map[string]NodeFacts{"gpu-7": {Node: "gpu-7", Pool: "a100-roce"}}}
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), inv)
	b := feed(a, "j", &Meta{Node: "gpu-7"}, stepLine(FrameworkMegatron, 1, 1))
	b2 := feed(a, "j", &Meta{Node: "gpu-7", Labels: map[string]string{LabelPool: "labelled"}}, stepLine(FrameworkMegatron, 2, 1))
	if b.Steps[0].Pool != "a100-roce" || b2.Steps[0].Pool != "labelled" {
		t.Errorf("pools = %q, %q; want a100-roce (inventory), labelled (label first)", b.Steps[0].Pool, b2.Steps[0].Pool)
	}
}

func TestTelemetryAssemblerConfigValidate(t *testing.T) {
	if err := DefaultTelemetryAssemblerConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	cfg := TelemetryAssemblerConfig{MedianSamples: 1}
	err := cfg.Validate()
	for _, want := range []string{"telemetry.max_jobs", "telemetry.max_runs_per_job", "telemetry.max_hosts_per_run", "telemetry.median_samples"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want %q", err, want)
		}
	}
}

func TestTelemetryReportEmpty(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	tests, training := a.Report("none")
	if tests == nil || training == nil || len(tests)+len(training) != 0 {
		t.Errorf("Report of an unknown job = %v, %v; want empty, not nil", tests, training)
	}
}

func TestTelemetryKindString(t *testing.T) {
	for k := TelemetryNone; k <= TelemetryNCCLNetwork; k++ {
		if s := k.String(); s == "" || s == "unknown" {
			t.Errorf("TelemetryKind(%d).String() = %q", k, s)
		}
	}
	if s := TelemetryKind(200).String(); s != "unknown" {
		t.Errorf("TelemetryKind(200) = %q", s)
	}
}

func TestTelemetryCanary(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	meta := &Meta{Labels: map[string]string{LabelCanary: "true", LabelPool: "h200-ib"}}
	feed(a, "canary", meta, testRowLine(8, 1, 1))
	feed(a, "train", &Meta{}, stepLine(FrameworkMegatron, 1, 1))
	if pool, ok := a.Canary("canary"); !ok || pool != "h200-ib" {
		t.Errorf("Canary(canary) = %q, %v; want h200-ib, true", pool, ok)
	}
	if _, ok := a.Canary("train"); ok {
		t.Errorf("Canary(train) = true")
	}
}

// TestTelemetryLineReset: Reset of a collective line with every field set
// gives the blank line (NaN and -1 where the doc says so), field for
// field; a field added to TelemetryLine and not to Reset fails here.
func TestTelemetryLineReset(t *testing.T) {
	var l TelemetryLine
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		for i := range v.NumField() {
			switch f := v.Field(i); f.Kind() {
			case reflect.Struct:
				fill(f)
			case reflect.Slice:
				if f.Type().Elem().Kind() == reflect.Uint8 {
					f.SetBytes([]byte("x"))
				} else {
					f.Set(reflect.MakeSlice(f.Type(), 1, 1))
				}
			case reflect.String:
				f.SetString("x")
			case reflect.Bool:
				f.SetBool(true)
			case reflect.Int, reflect.Int64:
				f.SetInt(7)
			case reflect.Uint8:
				f.SetUint(7)
			case reflect.Float64:
				f.SetFloat(7)
			default:
				t.Fatalf("field %s of kind %s: teach the test to set it", v.Type().Field(i).Name, f.Kind())
			}
		}
	}
	fill(reflect.ValueOf(&l).Elem())
	l.Kind = TelemetryCollective
	l.Reset()
	nan := math.NaN()
	want := TelemetryLine{Rank: -1, TrainingFigures: TrainingFigures{Step: -1, StepTime: nan, TokensPerS: nan,
		SamplesPerS: nan, ItPerS: nan, TFLOPs: nan, MFU: nan, Loss: nan, Runtime: nan}, MinBytes: -1, MaxBytes: -1,
		TestRank: -1, Dev: -1, Avg: nan, NRanks: -1,
		Row: NCCLTestRow{Bytes: -1, Count: -1, Root: -1,
			OOP: NCCLTestResult{nan, nan, nan, nan}, IP: NCCLTestResult{nan, nan, nan, nan}},
		Checkpoint: CheckpointLine{Step: -1, Duration: nan},
		Coll: CollectiveRecord{Rank: -1, NRanks: -1, NNodes: -1, PID: -1, DumpTimeUS: -1, SN: -1, Peer: -1,
			Bytes: -1, ExecUS: nan, AlgBW: nan, BusBW: nan}}
	// %#v prints NaN as NaN, so equal NaNs compare equal.
	if got, w := fmt.Sprintf("%#v", l), fmt.Sprintf("%#v", want); got != w {
		t.Errorf("Reset() = %s\nwant %s", got, w)
	}
	if got, w := fmt.Sprintf("%#v", blankTelemetryLine), fmt.Sprintf("%#v", want); got != w {
		t.Errorf("blankTelemetryLine = %s\nwant %s", got, w)
	}
}

// BenchmarkTelemetryLineReset: Reset runs for every line the line parser
// reads with telemetry on, and most lines are no collective.
func BenchmarkTelemetryLineReset(b *testing.B) {
	var l TelemetryLine
	for b.Loop() {
		l.Reset()
	}
	if l.Rank != -1 || !math.IsNaN(l.Loss) {
		b.Fatalf("reset line %+v", l)
	}
}

// TestTelemetryRowMetaReload: the rows of a pod's lines take their pool
// from the inventory as it is at each line, and their labels from each
// line's own metadata, though Add keeps what it derived for the last one.
func TestTelemetryRowMetaReload(t *testing.T) {
	p := filepath.Join(t.TempDir(), "inv.yaml")
	write := func(pool string) {
		if err := os.WriteFile(p, []byte("nodes:\n  - node: n1\n    pool: "+pool+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p1")
	inv, err := LoadInventory(p)
	if err != nil {
		t.Fatal(err)
	}
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), inv)
	meta := &Meta{Job: "j", Pod: "j-0", Node: "n1"}
	other := &Meta{Job: "j", Pod: "j-1", Node: "n1", Labels: map[string]string{LabelPool: "labelled", LabelModel: "m7"}}
	var b Batch
	add := func(m *Meta, step int64) TrainingStep {
		a.Add("j", m, stepLine(FrameworkMegatron, step, 1), t0, Source{Topic: "logs", Offset: step}, &b)
		return b.Steps[len(b.Steps)-1]
	}
	if r := add(meta, 1); r.Pool != "p1" || r.Pod != "j-0" {
		t.Errorf("first row: pool %q, pod %q; want p1, j-0", r.Pool, r.Pod)
	}
	write("pool-two")
	if ok, err := inv.Reload(); !ok || err != nil {
		t.Fatalf("Reload() = %v, %v", ok, err)
	}
	if r := add(meta, 2); r.Pool != "pool-two" {
		t.Errorf("row after reload: pool %q; want pool-two", r.Pool)
	}
	if r := add(other, 3); r.Pool != "labelled" || r.Model != "m7" || r.Pod != "j-1" {
		t.Errorf("other pod's row: pool %q, model %q, pod %q; want labelled, m7, j-1", r.Pool, r.Model, r.Pod)
	}
	if r := add(nil, 4); r.Pool != "" || r.Pod != "" {
		t.Errorf("row without metadata: pool %q, pod %q; want none", r.Pool, r.Pod)
	}
	if r := add(meta, 5); r.Pool != "pool-two" || r.Model != "" {
		t.Errorf("first pod's row again: pool %q, model %q; want pool-two, no model", r.Pool, r.Model)
	}
}

// TestAddNCCLHost: a job's NCCL hosts are kept once each, in the order
// first seen, up to the limit, past the few a pass serves as well.
func TestAddNCCLHost(t *testing.T) {
	for _, limit := range []int{3, hostScan, 20, 1024} {
		var j telJob
		var want []string
		for round := range 3 {
			for i := range 30 {
				h := fmt.Sprintf("node-%02d", (i*7)%30)
				j.addNCCLHost([]byte(h), limit)
				if round == 0 && len(want) < limit && !slices.Contains(want, h) {
					want = append(want, h)
				}
			}
		}
		if !slices.Equal(j.ncclHosts, want) {
			t.Errorf("limit %d: hosts %q; want %q", limit, j.ncclHosts, want)
		}
	}
}
