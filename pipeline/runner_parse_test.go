package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// dumpSink keeps every batch it accepts as YAML (pointers followed, NaN
// written out, maps sorted) and serves the stored events back for
// rebuilds.
type dumpSink struct {
	recordingSink
	mu    sync.Mutex
	dumps []string
	// activity counts the batches' activity samples, which the dumps
	// leave out when noActivity is set.
	activity   int
	noActivity bool
}

func (s *dumpSink) Consume(ctx context.Context, b *pipeline.Batch) error {
	if err := s.recordingSink.Consume(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	s.activity += len(b.Activity)
	s.mu.Unlock()
	if s.noActivity {
		c := *b
		c.Activity = nil
		b = &c
	}
	out, err := yaml.Marshal(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.dumps = append(s.dumps, string(out))
	s.mu.Unlock()
	return nil
}

// parseWorkersInput is the stream of TestRunParseWorkersSameAsInline, per
// partition in offset order: NCCL init lines of two jobs (glued messages
// among them), training
// progress lines of three ranks and a Composer job, nccl-tests rows, CRI
// partial lines whose pieces lie in several records, poison records
// (truncated JSON, a number for the text, one over max_record_bytes), and
// noise that is no prefilter candidate, over five partitions of two
// topics.
func parseWorkersInput(t *testing.T) map[pipeline.Partition][]pipeline.Message {
	t.Helper()
	read := func(dir, name string) []string { return testdataLines(t, dir, name) }
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	out := map[pipeline.Partition][]pipeline.Message{}
	n := 0
	add := func(topic string, part int32, key string, value []byte) {
		p := pipeline.Partition{Topic: topic, Partition: part}
		out[p] = append(out[p], pipeline.Message{Topic: topic, Partition: part, Offset: int64(len(out[p])), Key: []byte(key),
			Value: value, Time: t0.Add(time.Duration(n) * time.Millisecond)})
		n++
	}
	cri := "2025-11-29T12:00:00.000000000Z stdout "
	for i, l := range read("corpus", healthy) {
		add("logs", 0, "a", fluentBit(t, l, "a", fmt.Sprintf("a-worker-%d", i%2), "n0"))
		if i%9 == 4 {
			add("logs", 0, "a", []byte(cri+"P h1:10:10 [0] NCCL INFO NET/IB : Using "))
			add("logs", 0, "a", []byte(cri+"P [0]mlx5_0:1/IB ; OOB "))
			add("logs", 0, "a", []byte(cri+"F eth0:10.0.0.1<0>"))
		}
		if i%7 == 3 {
			add("logs", 0, "noise", fluentBit(t, "epoch 1 dataloader ready", "other", "other-0", "n1"))
		}
	}
	// Terminal-wrapped pastes: several NCCL messages glued on one line.
	for _, l := range read("corpus", "210_deepep_ibext_gdrdma_glued_wrapped_terminal_lines.log") {
		add("logs", 0, "a", fluentBit(t, l, "a", "a-worker-1", "n0"))
	}
	for i, l := range read("corpus", fallback) {
		add("logs", 1, "b", fluentBit(t, l, "b", "b-worker-0", "n2"))
		switch i % 11 {
		case 2:
			add("logs", 1, "b", []byte(`{"log":"h:1:1 [0] NCCL INFO Using network Socket\n","kubernetes":{"pod_name":"p`))
		case 5:
			add("logs", 1, "b", []byte(`{"log":7,"message":"NCCL INFO Using network IB"}`))
		case 8:
			add("logs", 1, "b", fluentBit(t, "NCCL INFO "+strings.Repeat("x", 5000), "b", "b-worker-0", "n2"))
		}
	}
	for i, l := range read("telemetry", "032_torchtitan_all_ranks_duplicate_step_lines_no_prefix.log") {
		for rank := range 3 {
			add("logs", 2, "titan", fluentBit(t, l, "titan", fmt.Sprintf("titan-worker-%d", rank), "n3"))
		}
		if i%3 == 0 {
			add("logs", 2, "noise", fluentBit(t, "epoch 1 dataloader ready", "other", "other-0", "n1"))
		}
	}
	for i, l := range read("telemetry", "054_composer_llm_foundry_mpt30b_2node_console_throughput_block.log") {
		add("logs", 3, "composer", fluentBit(t, l, "composer", "composer-0", "n4"))
		if i%5 == 1 {
			add("logs", 3, "composer", []byte(cri+"P [1]: NCCL INFO Channel 00/0 : 0[0] -> 1[0] "))
			add("logs", 3, "composer", []byte(cri+"F [receive] via NET/IB/0/GDRDMA"))
		}
	}
	for _, l := range read("telemetry", "017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log") {
		add("jobs", 0, "canary", fluentBit(t, l, "canary", "canary-launcher", "n5"))
	}
	// Left open at the end of the stream: Drain ends it.
	add("jobs", 0, "canary", []byte(cri+"P canary-host:1:1 [0] NCCL INFO Using network "))
	add("logs", 3, "composer", []byte(cri+"P [1]: NCCL INFO NET/IB : No device "))
	return out
}

// parseWorkersRun feeds the stream through Run with workers parse workers
// (0: inline) as a Kafka source would: an assignment, runs of records of
// one partition interleaved across partitions (and, as any source may,
// single records and a run across partitions), a revocation in the
// middle, a new assignment from the committed offsets with the records
// from there delivered again, then the end of the stream. Each generation
// ends just before its revocation (or the end of the stream), or with
// ended at once, before its first record: then the loop applies the
// records of the generation at the revocation (and at the end). It
// returns every stored batch and every commit.
func parseWorkersRun(t *testing.T, input map[pipeline.Partition][]pipeline.Message, workers int, ended bool) (batches []string, commits [][]pipeline.Offset) {
	t.Helper()
	batches, commits, _ = prefilterRun(t, input, workers, ended, parsers.Prefilter(true), false)
	return batches, commits
}

// prefilterRun is parseWorkersRun with cand as the runner's record
// prefilter (nil: none); with noActivity the batches are dumped without
// their activity samples, whose number it returns.
func prefilterRun(t *testing.T, input map[pipeline.Partition][]pipeline.Message, workers int, ended bool, cand func([]byte) bool, noActivity bool) (batches []string, commits [][]pipeline.Offset, activity int) {
	t.Helper()
	cfg := pipeline.DefaultRunnerConfig()
	cfg.ParseWorkers = workers
	cfg.MaxRecordBytes = 4096
	cfg.Batch.MaxRows = 7
	cfg.Batch.MaxWait = time.Hour // batches end by size, revocation and drain only: the same in every run
	cfg.Telemetry.FoldRecords = 10
	// Every batch carries its summaries and commits (the clock stands
	// still: with the default interval only the first, the revocation and
	// the drain would), so that each commit hold is compared.
	cfg.SummaryInterval = 0
	cfg.RetryBackoff, cfg.MaxBackoff = time.Millisecond, time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink := &dumpSink{noActivity: noActivity}
	commit := &recordingCommitter{}
	reg := prometheus.NewRegistry()
	m := pipeline.NewMetrics(reg)
	dcfg := parsers.DefaultDecoderConfig()
	newLines := func() pipeline.Classifier {
		return parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
	}
	now := time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC)
	r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) },
		Classifier: newLines(), NewClassifier: newLines, Candidate: cand,
		Sink: sink, Loader: sink, Committer: commit, Metrics: m, Logger: zerolog.Nop(), Observe: true,
		Now: func() time.Time { return now }})

	in := make(chan pipeline.Input, 2)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background(), in) }()
	var endGen context.CancelFunc = func() {}
	ask := func(kind pipeline.InputKind, parts []pipeline.Partition) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if kind == pipeline.InputAssigned && !ended {
			endGen = cancel // the generation lives until its revocation
		} else {
			defer cancel()
		}
		reply := make(chan error, 1)
		in <- pipeline.Input{Kind: kind, Partitions: parts, Ctx: ctx, Done: reply}
		if err := <-reply; err != nil {
			t.Fatalf("%v: %v", kind, err)
		}
	}
	parts := []pipeline.Partition{{Topic: "jobs", Partition: 0}, {Topic: "logs", Partition: 0}, {Topic: "logs", Partition: 1},
		{Topic: "logs", Partition: 2}, {Topic: "logs", Partition: 3}}
	// feed sends each partition's records from next[p] until stop[p],
	// in runs of up to run records, round-robin over the partitions.
	feed := func(next, stop map[pipeline.Partition]int, run int) {
		t.Helper()
		for round := 0; ; round++ {
			sent := false
			for _, p := range parts {
				ms := input[p]
				from, to := next[p], min(next[p]+run, stop[p])
				if from >= to {
					continue
				}
				sent = true
				next[p] = to
				switch {
				case round%5 == 4:
					for _, msg := range ms[from:to] {
						in <- pipeline.Input{Message: msg}
					}
				default:
					in <- pipeline.Input{Messages: append([]pipeline.Message(nil), ms[from:to]...)}
				}
			}
			if !sent {
				return
			}
		}
	}
	gen := func(committed map[pipeline.Partition]int) []pipeline.Partition {
		var ps []pipeline.Partition
		for _, p := range parts {
			p.Committed = int64(committed[p])
			if committed[p] == 0 {
				p.Committed = -1
			}
			ps = append(ps, p)
		}
		return ps
	}

	ask(pipeline.InputAssigned, gen(nil))
	next, half := map[pipeline.Partition]int{}, map[pipeline.Partition]int{}
	for _, p := range parts {
		half[p] = len(input[p]) / 2
	}
	feed(next, half, 5)
	// A run across partitions, as a source without per-partition runs
	// would send it.
	// Three rounds over the partitions: one job per record with parse
	// workers, several of them out at once.
	var mixed []pipeline.Message
	for range 3 {
		for _, p := range parts {
			mixed = append(mixed, input[p][next[p]])
			next[p]++
		}
	}
	in <- pipeline.Input{Messages: mixed} // the loop may take it after endGen
	endGen()
	ask(pipeline.InputRevoked, gen(nil))

	// The next generation starts at the committed offsets.
	committed := map[pipeline.Partition]int{}
	commit.mu.Lock()
	for _, c := range commit.commits {
		for _, o := range c {
			committed[pipeline.Partition{Topic: o.Topic, Partition: o.Partition}] = int(o.Next)
		}
	}
	commit.mu.Unlock()
	ask(pipeline.InputAssigned, gen(committed))
	end := map[pipeline.Partition]int{}
	for _, p := range parts {
		end[p] = len(input[p])
	}
	feed(committed, end, 3)
	close(in)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	endGen()
	if want := float64(2 * workers); workers > 1 && testutil.ToFloat64(m.ParseQueueCap) != want {
		t.Fatalf("workers %d: ncclwatch_parse_queue_capacity = %v; want %v (the parse workers did not run)",
			workers, testutil.ToFloat64(m.ParseQueueCap), want)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	commit.mu.Lock()
	defer commit.mu.Unlock()
	return sink.dumps, commit.commits, sink.activity
}

// sameRun reports where a run's batches and commits differ from the
// reference run's.
func sameRun(t *testing.T, name string, got, want []string, gotCommits, wantCommits [][]pipeline.Offset) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d batches; the reference run stored %d", name, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: batch %d differs from the reference run's (+ only here, - only there):\n%s", name, i,
				diffLines(strings.Split(got[i], "\n"), strings.Split(want[i], "\n")))
			break
		}
	}
	if g, w := show(gotCommits), show(wantCommits); g != w {
		t.Errorf("%s: commits\n%s\nwant\n%s", name, g, w)
	}
}

// TestRunWithoutPrefilterSameRows: `run` with telemetry on passes every
// record to the decoder (no record prefilter: cmd/ncclwatch's
// recordPrefilter), and the line parser finds the same lines: every batch
// and commit is the one with the prefilter, with either parse mode, but
// for the activity samples (a record that gives nothing is sampled as a
// skipped one was).
func TestRunWithoutPrefilterSameRows(t *testing.T) {
	input := parseWorkersInput(t)
	for _, workers := range []int{1, 2} {
		want, wantCommits, wantAct := prefilterRun(t, input, workers, false, parsers.Prefilter(true), true)
		got, gotCommits, gotAct := prefilterRun(t, input, workers, false, nil, true)
		sameRun(t, fmt.Sprintf("workers %d without the prefilter", workers), got, want, gotCommits, wantCommits)
		if wantAct == 0 || gotAct == 0 {
			t.Errorf("workers %d: activity samples %d with the prefilter, %d without; want some in both", workers, wantAct, gotAct)
		}
	}
}

// TestRunParseWorkersSameAsInline: records parsed by parse workers give the
// same batches (rows, summaries, dead letters with their line numbers,
// activity samples, released jobs, the offsets each batch covers) and the
// same commits as records parsed on the loop, over a stream that exercises
// every piece of state the parsing keeps or the loop derives from it:
// partial lines whose pieces lie in several records (the commit holds at
// their first piece; one is open at the revocation, one at the end and
// ended by Drain), telemetry fold windows (commit holds), poison records,
// a revocation and a new assignment in the middle (decoder state dropped,
// the records from the commit delivered again). The same again with
// generations that end at once, before their first record, so that the
// loop applies their records at the revocation (and at the end of the
// stream): the batches do not depend on when the generation ended either
// (TestRunLoopRebalanceKeepsBatches).
func TestRunParseWorkersSameAsInline(t *testing.T) {
	input := parseWorkersInput(t)
	want, wantCommits := parseWorkersRun(t, input, 1, false)
	all := strings.Join(want, "\n")
	// The stream covers what it claims: otherwise equality proves little.
	for _, s := range []string{"VM-17-82-centos:11978:12548 [0] NCCL INFO Channel 12/0", "json_truncated", "json_type", "oversized", "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
		"canary-host:1:1 [0] NCCL INFO Using network", "steps:\n", "testruns:\n", "activity:\n", "released:\n"} {
		if !strings.Contains(all, s) {
			t.Fatalf("the inline run's batches lack %q: the input does not exercise what the test claims", s)
		}
	}
	if len(want) < 10 || len(wantCommits) < 10 {
		t.Fatalf("inline run: %d batches, %d commits; want many (small batches)", len(want), len(wantCommits))
	}
	for _, ended := range []bool{false, true} {
		for _, workers := range []int{1, 2, 3, 4} {
			if workers == 1 && !ended {
				continue // the reference
			}
			name := fmt.Sprintf("workers %d, generations ended %v", workers, ended)
			got, gotCommits := parseWorkersRun(t, input, workers, ended)
			sameRun(t, name, got, want, gotCommits, wantCommits)
		}
	}
}

// TestParseWorkersConfig: pipeline.parse_workers is read from YAML,
// defaults to 2 (1 where GOMAXPROCS is 1), and is checked with its field path.
func TestParseWorkersConfig(t *testing.T) {
	def := pipeline.DefaultRunnerConfig()
	if want := min(2, runtime.GOMAXPROCS(0)); def.ParseWorkers != want {
		t.Errorf("default parse_workers = %d; want %d (2, at most GOMAXPROCS %d)", def.ParseWorkers, want, runtime.GOMAXPROCS(0))
	}
	cfg := pipeline.DefaultRunnerConfig()
	if err := yaml.Unmarshal([]byte("parse_workers: 3\n"), &cfg); err != nil || cfg.ParseWorkers != 3 {
		t.Errorf("parse_workers: 3 read as %d (%v)", cfg.ParseWorkers, err)
	}
	for _, n := range []int{0, 1, 64} {
		cfg.ParseWorkers = n
		if err := cfg.Validate(); err != nil {
			t.Errorf("parse_workers %d: Validate() = %v; want nil", n, err)
		}
	}
	for _, n := range []int{-1, 65} {
		cfg.ParseWorkers = n
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pipeline.parse_workers: must be between 0 and 64") {
			t.Errorf("parse_workers %d: Validate() = %v; want the field's error", n, err)
		}
	}
}
