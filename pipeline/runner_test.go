package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// recordingSink stores copies of the batches it accepts; it fails the
// first failures calls.
type recordingSink struct {
	mu       sync.Mutex
	failures int
	calls    int
	events   []pipeline.EventRow
	jobs     []pipeline.JobSummary
	comms    []pipeline.CommSummary
	dead     []pipeline.DeadLetter
	offsets  [][]pipeline.Offset // offsets of each accepted batch
	steps    []pipeline.TrainingStep
}

func (s *recordingSink) Consume(_ context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.failures > 0 {
		s.failures--
		return errors.New("clickhouse: connection refused")
	}
	s.events = append(s.events, b.Events...)
	s.jobs = append(s.jobs, b.Jobs...)
	s.comms = append(s.comms, b.Comms...)
	s.steps = append(s.steps, b.Steps...)
	for _, d := range b.DeadLetters {
		d.Raw = append([]byte(nil), d.Raw...)
		s.dead = append(s.dead, d)
	}
	s.offsets = append(s.offsets, append([]pipeline.Offset(nil), b.Offsets...))
	return nil
}

// LoadEvents serves the stored events back, as the ClickHouse sink does.
func (s *recordingSink) LoadEvents(_ context.Context, topic string, parts []int32, _ time.Time, fn func(pipeline.EventRow) error) error {
	s.mu.Lock()
	rows := append([]pipeline.EventRow(nil), s.events...)
	s.mu.Unlock()
	seen := map[pipeline.Source]bool{}
	for _, r := range rows {
		if r.Source.Topic != topic || seen[r.Source] {
			continue
		}
		seen[r.Source] = true
		for _, p := range parts {
			if p == r.Source.Partition {
				if err := fn(r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *recordingSink) latestJob(job string) (pipeline.JobSummary, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best pipeline.JobSummary
	ok := false
	for _, j := range s.jobs {
		if j.Job == job && (!ok || j.Version >= best.Version) {
			best, ok = j, true
		}
	}
	return best, ok
}

type recordingCommitter struct {
	mu      sync.Mutex
	commits [][]pipeline.Offset
}

func (c *recordingCommitter) Commit(_ context.Context, offs []pipeline.Offset) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits = append(c.commits, append([]pipeline.Offset(nil), offs...))
	return nil
}

// fluentBit builds a record of exactly the shape deploy/fluent-bit
// produces (deploy/fluent-bit/README.md).
func fluentBit(t testing.TB, line, job, pod, node string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"@timestamp": 1764417600.5,
		"log":        line + "\n",
		"stream":     "stdout",
		"time":       "2025-11-29T12:00:00.5Z",
		"job":        job,
		"cluster":    "gpu-east-1",
		"kubernetes": map[string]any{
			"pod_name": pod, "namespace_name": "ml", "pod_id": "6f0c1c1e-4a4b-4d55-9f0e-2f0d4c8f1000",
			"host": node, "container_name": "pytorch", "docker_id": "5f1e0b9c2d7a",
			"container_hash": "nvcr.io/nvidia/pytorch@sha256:0", "container_image": "nvcr.io/nvidia/pytorch:25.01-py3",
			"labels": map[string]string{"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": "worker"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func corpusLines(t testing.TB, name string) []string {
	t.Helper()
	return testdataLines(t, "corpus", name)
}

// testdataLines returns the lines of testdata/dir/name.
func testdataLines(t testing.TB, dir, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

type harness struct {
	r       *pipeline.Runner
	decoder func() pipeline.Decoder
	cls     pipeline.Classifier
	newCls  func() pipeline.Classifier // a line parser like cls, for parse workers
	cand    func([]byte) bool
	sink    *recordingSink
	commit  *recordingCommitter
	reg     *prometheus.Registry
	m       *pipeline.Metrics
	now     time.Time
	offset  map[int32]int64
}

func newHarness(t testing.TB, sink *recordingSink, mutate func(*pipeline.RunnerConfig)) *harness {
	t.Helper()
	cfg := pipeline.DefaultRunnerConfig()
	cfg.RetryBackoff = time.Millisecond
	cfg.MaxBackoff = 4 * time.Millisecond
	cfg.MaxRecordBytes = 4096
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &harness{sink: sink, commit: &recordingCommitter{}, reg: prometheus.NewRegistry(),
		now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), offset: map[int32]int64{}}
	h.m = pipeline.NewMetrics(h.reg)
	dcfg := parsers.DefaultDecoderConfig()
	h.decoder = func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }
	h.cls, h.cand = &parsers.Lines{}, parsers.Candidate
	h.newCls = func() pipeline.Classifier { return &parsers.Lines{} }
	deps := pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: h.decoder, Classifier: h.cls, Candidate: h.cand,
		Committer: h.commit, Metrics: h.m, Logger: zerolog.Nop(),
		Now: func() time.Time { return h.now },
	}
	if sink != nil {
		deps.Sink, deps.Loader = sink, sink
	}
	h.r = pipeline.NewRunner(cfg, deps)
	return h
}

// next returns the next offset of part and advances it.
func (h *harness) next(part int32) int64 {
	off := h.offset[part]
	h.offset[part]++
	return off
}

func (h *harness) send(t testing.TB, part int32, key string, value []byte) {
	t.Helper()
	off := h.offset[part]
	h.offset[part]++
	if err := h.r.Message(context.Background(), pipeline.Message{Topic: "logs", Partition: part, Offset: off,
		Key: []byte(key), Value: value, Time: h.now}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) sendFile(t testing.TB, part int32, job, name string) {
	t.Helper()
	for _, l := range corpusLines(t, name) {
		h.send(t, part, job, fluentBit(t, l, job, job+"-worker-0", "node-"+job))
	}
}

const (
	healthy  = "083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log"
	fallback = "022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log"
)

func TestRunnerClassifiesAndCommitsAfterStore(t *testing.T) {
	sink := &recordingSink{}
	h := newHarness(t, sink, nil)
	h.sendFile(t, 0, "llm-ib", healthy)
	h.sendFile(t, 1, "llm-sock", fallback)
	if len(h.commit.commits) != 0 {
		t.Fatalf("committed %v before any batch was stored", h.commit.commits)
	}
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ib, ok := sink.latestJob("llm-ib")
	if !ok || ib.Verdict != pipeline.VerdictOK || ib.Network == nil || *ib.Network != "IB" {
		t.Fatalf("llm-ib summary = %+v; want ok on IB", ib)
	}
	sock, ok := sink.latestJob("llm-sock")
	if !ok || sock.Verdict != pipeline.VerdictSocketFallback || sock.Fallback == nil || !*sock.Fallback {
		t.Fatalf("llm-sock summary = %+v; want socket_fallback", sock)
	}
	if sock.Namespace != "ml" {
		t.Errorf("namespace = %q; want ml", sock.Namespace)
	}
	if len(h.commit.commits) != 1 {
		t.Fatalf("commits = %v; want one after the stored batch", h.commit.commits)
	}
	want := map[int32]int64{0: h.offset[0], 1: h.offset[1]}
	for _, o := range h.commit.commits[0] {
		if o.Next != want[o.Partition] {
			t.Errorf("committed partition %d at %d; want %d", o.Partition, o.Next, want[o.Partition])
		}
	}
	if got := testutil.ToFloat64(h.m.NCCLLines); int(got) != len(sink.events) || got == 0 {
		t.Errorf("nccl lines metric %v, events stored %d", got, len(sink.events))
	}
}

// TestRunnerEndToEndEqualsScan checks that the streaming path classifies a
// file exactly as scan's path (Processor over a file) does.
func TestRunnerMatchesDirectAssembly(t *testing.T) {
	for _, name := range []string{healthy, fallback, "069_nccl2.27.5_ofi_plugin_rejected_fallback_internal_ib_roce_part2.log"} {
		sink := &recordingSink{}
		h := newHarness(t, sink, nil)
		h.sendFile(t, 0, "job", name)
		if err := h.r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, _ := sink.latestJob("job")

		asm := assemble.New(pipeline.DefaultAssemblerConfig())
		proc := pipeline.NewProcessor(asm, &parsers.Lines{}, nil)
		// The same envelope metadata as the stream: the Kubernetes node
		// decides node identity (CLASSIFICATION.md, multi_node).
		meta := &pipeline.Meta{Job: "job", Namespace: "ml", Pod: "job-worker-0", Node: "node-job"}
		for _, l := range corpusLines(t, name) {
			proc.Record(&pipeline.Record{Text: []byte(l), Meta: meta})
		}
		_, want, _ := asm.Summaries("")
		if show(got.Network) != show(want.Network) || show(got.GDR) != show(want.GDR) || show(got.MultiNode) != show(want.MultiNode) ||
			show(got.NRanks) != show(want.NRanks) || got.Verdict != want.Verdict || show(got.Fallback) != show(want.Fallback) {
			t.Errorf("%s: stream %s/%s/%s/%s/%s; direct %s/%s/%s/%s/%s", name,
				show(got.Network), show(got.GDR), show(got.MultiNode), got.Verdict, show(got.Fallback),
				show(want.Network), show(want.GDR), show(want.MultiNode), want.Verdict, show(want.Fallback))
		}
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRunnerRetriesWithoutCommitting(t *testing.T) {
	sink := &recordingSink{failures: 3}
	h := newHarness(t, sink, nil)
	h.sendFile(t, 0, "llm-sock", fallback)
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sink.calls != 4 {
		t.Fatalf("sink calls = %d; want 3 failures then 1 success", sink.calls)
	}
	if len(h.commit.commits) != 1 {
		t.Fatalf("commits = %d; want exactly 1, after the successful store", len(h.commit.commits))
	}
	if got := testutil.ToFloat64(h.m.InsertErrors); got != 3 {
		t.Errorf("insert errors metric = %v; want 3", got)
	}
	// Every event of the file is stored once, not once per attempt.
	n := 0
	for _, l := range corpusLines(t, fallback) {
		if parsers.Candidate([]byte(l)) {
			n++
		}
	}
	if len(sink.events) == 0 || len(sink.events) > n {
		t.Errorf("stored %d events; want between 1 and %d", len(sink.events), n)
	}
}

func TestRunnerCancelledWhileSinkDownCommitsNothing(t *testing.T) {
	sink := &recordingSink{failures: 1 << 30}
	h := newHarness(t, sink, nil)
	h.sendFile(t, 0, "llm-sock", fallback)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.r.Flush(ctx); err == nil {
		t.Fatal("Flush with the sink down returned nil")
	}
	if len(h.commit.commits) != 0 {
		t.Fatalf("committed %v with nothing stored", h.commit.commits)
	}
}

func TestRunnerDeadLetters(t *testing.T) {
	sink := &recordingSink{}
	h := newHarness(t, sink, nil)
	h.send(t, 0, "j", []byte(`{"log":"h:1:1 [0] NCCL INFO Using network IB\q","kubernetes":{"pod_name":1}}`)) // bad escape
	h.send(t, 0, "j", []byte(`{"log":"`+strings.Repeat("NCCL ", 2000)+`"}`))                                  // over 4096 bytes
	h.sendFile(t, 0, "llm-sock", fallback)
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.dead) != 2 {
		t.Fatalf("dead letters = %d; want 2", len(sink.dead))
	}
	reasons := sink.dead[0].Reason + " | " + sink.dead[1].Reason
	if !strings.Contains(reasons, "json_syntax: ") || !strings.Contains(reasons, "oversized: ") {
		t.Errorf("reasons = %q; want json_syntax and oversized", reasons)
	}
	if got := testutil.ToFloat64(h.m.DeadLetters.WithLabelValues("oversized")); got != 1 {
		t.Errorf("oversized dead letters metric = %v; want 1", got)
	}
	// The stream went on after the poison records.
	if s, ok := sink.latestJob("llm-sock"); !ok || s.Verdict != pipeline.VerdictSocketFallback {
		t.Errorf("job after poison records = %+v", s)
	}
	if c := h.commit.commits; len(c) != 1 || c[0][0].Next != h.offset[0] {
		t.Errorf("commits = %v; want all of partition 0 including the dead letters", c)
	}
}

// TestRunnerRebuildAfterRestart stops a runner mid-stream without
// committing its last batch, starts a new one on the same storage, and
// replays from the last commit: the final summary is the one an
// uninterrupted run stores, with the same version.
func TestRunnerRebuildAfterRestart(t *testing.T) {
	lines := corpusLines(t, healthy)
	records := make([][]byte, len(lines))
	for i, l := range lines {
		records[i] = fluentBit(t, l, "llm-ib", "w-0", "n-0")
	}

	// Uninterrupted run.
	ref := &recordingSink{}
	h := newHarness(t, ref, nil)
	for _, r := range records {
		h.send(t, 0, "llm-ib", r)
	}
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, _ := ref.latestJob("llm-ib")

	// Interrupted: first third committed, second third stored but not
	// committed (crash after insert), then a new runner replays.
	sink := &recordingSink{}
	a := newHarness(t, sink, nil)
	third := len(records) / 3
	for _, r := range records[:third] {
		a.send(t, 0, "llm-ib", r)
	}
	if err := a.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	committed := a.commit.commits[len(a.commit.commits)-1][0].Next
	for _, r := range records[third : 2*third] {
		a.send(t, 0, "llm-ib", r)
	}
	stored := a.commit
	a.r.Flush(context.Background())
	_ = stored // the crash: pretend this commit never reached Kafka

	b := newHarness(t, sink, nil)
	if err := b.r.Assigned(context.Background(), []pipeline.Partition{{Topic: "logs", Partition: 0, Committed: committed}}); err != nil {
		t.Fatal(err)
	}
	b.offset[0] = committed
	for _, r := range records[committed:] {
		b.send(t, 0, "llm-ib", r)
	}
	if err := b.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := sink.latestJob("llm-ib")
	if got.Version != want.Version || got.Verdict != want.Verdict || show(got.NNodes) != show(want.NNodes) || show(got.GDR) != show(want.GDR) {
		t.Fatalf("after restart: version %d verdict %s nnodes %s gdr %s; uninterrupted: version %d verdict %s nnodes %s gdr %s",
			got.Version, got.Verdict, show(got.NNodes), show(got.GDR), want.Version, want.Verdict, show(want.NNodes), show(want.GDR))
	}
	// The rebuild folds in exactly the stored events below the commit;
	// the rest arrive again.
	below := 0
	for _, e := range ref.events {
		if e.Source.Offset < committed {
			below++
		}
	}
	if got := testutil.ToFloat64(b.m.RebuiltEvents); int(got) != below || below == 0 {
		t.Errorf("rebuilt events = %v; want the %d stored below the committed offset %d", got, below, committed)
	}
	// Storage holds every coordinate at least once and nothing else.
	seen := map[pipeline.Source]bool{}
	for _, e := range sink.events {
		seen[e.Source] = true
	}
	if len(seen) != len(ref.events) {
		t.Errorf("distinct stored events = %d; uninterrupted run stored %d", len(seen), len(ref.events))
	}
}

func TestRunnerEvictsIdleJobsAfterFinalSummary(t *testing.T) {
	sink := &recordingSink{}
	h := newHarness(t, sink, func(c *pipeline.RunnerConfig) { c.IdleEvict = time.Minute })
	h.sendFile(t, 0, "llm-ib", healthy)
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.r.Jobs() != 1 {
		t.Fatalf("jobs held = %d; want 1", h.r.Jobs())
	}
	before := len(sink.jobs)
	h.now = h.now.Add(2 * time.Minute)
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.r.Jobs() != 0 {
		t.Fatalf("jobs held after idle window = %d; want 0", h.r.Jobs())
	}
	if len(sink.jobs) != before+1 {
		t.Fatalf("job summaries stored = %d; want a final one before eviction", len(sink.jobs)-before)
	}
}

func TestRunnerManyJobsBoundedMemory(t *testing.T) {
	sink := &recordingSink{}
	h := newHarness(t, sink, func(c *pipeline.RunnerConfig) {
		c.IdleEvict = time.Minute
		c.Assembler.MaxJobs = 50
	})
	for i := 0; i < 200; i++ {
		job := fmt.Sprintf("job-%d", i)
		h.send(t, 0, job, fluentBit(t, "h:1:1 [0] NCCL INFO Using network IB", job, job, "n"))
		if i%40 == 39 { // a batch every 40 jobs: fewer pushed out per batch than MaxJobs
			if err := h.r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := h.r.Jobs(); n > 50 {
		t.Fatalf("jobs held = %d; want at most MaxJobs 50", n)
	}
	// The jobs pushed out for new ones still got their summaries stored,
	// with their one line, while the commit covers their records.
	stored := map[string]int64{}
	for _, j := range sink.jobs {
		stored[j.Job] = max(stored[j.Job], j.NCCLLines)
	}
	for i := 0; i < 200; i++ {
		if job := fmt.Sprintf("job-%d", i); stored[job] != 1 {
			t.Errorf("%s: stored summary with %d NCCL lines; want 1 (stored %d jobs of 200)", job, stored[job], len(stored))
			break
		}
	}
}

// TestRunnerStoresTelemetry checks that training-progress and nccl-tests
// lines reach the batch as Steps and TestRuns rows when telemetry is on.
func TestRunnerStoresTelemetry(t *testing.T) {
	sink := &recordingSink{}
	var steps, runs int
	counting := pipeline.ConsumerFunc(func(ctx context.Context, b *pipeline.Batch) error {
		steps += len(b.Steps)
		runs += len(b.TestRuns)
		return sink.Consume(ctx, b)
	})
	cfg := pipeline.DefaultRunnerConfig()
	dcfg := parsers.DefaultDecoderConfig()
	r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Candidate: parsers.Prefilter(true), Sink: counting, Logger: zerolog.Nop(),
	})
	off := int64(0)
	for _, name := range []string{"026_megatron_core_moe_ep8_throughput_params_norm_warnings_interleaved_a100.log",
		"017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "telemetry", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if err := r.Message(context.Background(), pipeline.Message{Topic: "logs", Offset: off, Key: []byte("job"),
				Value: fluentBit(t, l, "job", "job-0", "n0"), Time: time.Now()}); err != nil {
				t.Fatal(err)
			}
			off++
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if steps != 5 {
		t.Errorf("training step rows = %d; want the 5 Megatron iteration lines", steps)
	}
	if runs == 0 {
		t.Error("no nccl-tests rows stored")
	}
}

// TestRunnerConfigBacklogLimits: backlog limits below zero are refused;
// each limit in force behind is at least its live one.
func TestRunnerConfigBacklogLimits(t *testing.T) {
	cfg := pipeline.DefaultRunnerConfig()
	cfg.Batch.Backlog.MaxWait = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pipeline.batch.backlog") {
		t.Errorf("Validate(backlog.max_wait -1s) = %v; want an error naming pipeline.batch.backlog", err)
	}
	cfg = pipeline.DefaultRunnerConfig()
	cfg.Batch.MaxRows = 1000000 // above the backlog's default: allowed, the backlog's becomes as large
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate(max_rows 1000000) = %v; want nil", err)
	}
}
