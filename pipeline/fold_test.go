package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// finalTables is training_steps and nccl_test_results as their
// ReplacingMergeTree engines show them after FINAL: training_steps keeps
// the last row written for a key, nccl_test_results the one with the
// highest context (of equal ones the last written).
type finalTables struct {
	recordingSink
	mu    sync.Mutex
	rows  map[pipeline.Source]pipeline.TrainingStep
	tests map[pipeline.Source]pipeline.NCCLTestRun
	folds map[string][]byte // fold snapshots by topic/partition/offset
}

func foldAt(topic string, part int32, at int64) string { return fmt.Sprint(topic, "/", part, "/", at) }

// LoadFold returns the snapshot stored with at (pipeline.FoldLoader).
func (s *finalTables) LoadFold(_ context.Context, topic string, part int32, at int64) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.folds[foldAt(topic, part, at)]
	return st, ok, nil
}

func (s *finalTables) Consume(ctx context.Context, b *pipeline.Batch) error {
	if err := s.recordingSink.Consume(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows, s.tests = map[pipeline.Source]pipeline.TrainingStep{}, map[pipeline.Source]pipeline.NCCLTestRun{}
		s.folds = map[string][]byte{}
	}
	for _, f := range b.Sealed {
		s.folds[foldAt(f.Topic, f.Partition, f.At)] = f.State
	}
	for _, r := range b.Steps {
		s.rows[r.Source] = r
	}
	for _, r := range b.TestRuns {
		if old, ok := s.tests[r.Source]; !ok || r.Context >= old.Context {
			s.tests[r.Source] = r
		}
	}
	return nil
}

// dump lists the table's rows in key order, one line each.
func (s *finalTables) dump() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.rows))
	for _, r := range s.rows {
		out = append(out, fmt.Sprintf("%s/%d/%06d/%d %s %s step %d ranks %d pod %s net %q tflops %v",
			r.Source.Topic, r.Source.Partition, r.Source.Offset, r.Source.Line, r.Framework, r.Kind, r.Step, r.Ranks,
			r.Pod, r.Network, r.TFLOPs))
	}
	slices.Sort(out)
	return out
}

// foldInput is a stream on two partitions: torchtitan step lines printed
// by three ranks (pods) of one job, interleaved on partition 0 with NCCL
// init lines and noise, and a Composer job whose throughput block lines
// amend its steps on partition 1.
func foldInput(t *testing.T) []pipeline.Message {
	t.Helper()
	read := func(dir, name string) []string { return testdataLines(t, dir, name) }
	titan := read("telemetry", "032_torchtitan_all_ranks_duplicate_step_lines_no_prefix.log")
	composer := read("telemetry", "054_composer_llm_foundry_mpt30b_2node_console_throughput_block.log")
	nccl := read("corpus", healthy)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var msgs []pipeline.Message
	next := map[int32]int64{}
	add := func(part int32, key string, value []byte) {
		msgs = append(msgs, pipeline.Message{Topic: "logs", Partition: part, Offset: next[part], Key: []byte(key),
			Value: value, Time: t0.Add(time.Duration(len(msgs)) * time.Millisecond)})
		next[part]++
	}
	for i, l := range nccl[:min(len(nccl), 12)] {
		add(0, "titan", fluentBit(t, l, "titan", fmt.Sprintf("titan-worker-%d", i%3), "n0"))
	}
	for i, l := range titan {
		for rank := range 3 {
			add(0, "titan", fluentBit(t, l, "titan", fmt.Sprintf("titan-worker-%d", rank), "n0"))
			if (i+rank)%2 == 0 {
				add(0, "noise", fluentBit(t, "epoch 1 dataloader ready", "other", "other-0", "n1"))
			}
		}
	}
	for _, l := range composer {
		add(1, "composer", fluentBit(t, l, "composer", "composer-0", "n2"))
	}
	return msgs
}

// foldRunner is a runner over tbl with the telemetry parser and a small
// fold window (window offsets; 10 makes the fold tests' input cross
// several windows).
func foldRunner(t *testing.T, tbl *finalTables, commit pipeline.Committer, window int64) *pipeline.Runner {
	t.Helper()
	return foldRunnerWith(t, tbl, commit, window, nil)
}

// foldRunnerWith is foldRunner with deps changed by set.
func foldRunnerWith(t *testing.T, tbl *finalTables, commit pipeline.Committer, window int64, set func(*pipeline.RunnerDeps)) *pipeline.Runner {
	t.Helper()
	cfg := pipeline.DefaultRunnerConfig()
	cfg.Telemetry.FoldRecords = window
	cfg.MaxRecordBytes = 8192
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	dcfg := parsers.DefaultDecoderConfig()
	deps := pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Candidate: parsers.Prefilter(true),
		Sink:      tbl, Loader: tbl, Committer: commit, Logger: zerolog.Nop(),
		Now: func() time.Time { return time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC) }}
	if set != nil {
		set(&deps)
	}
	return pipeline.NewRunner(cfg, deps)
}

func feedAll(t *testing.T, r *pipeline.Runner, msgs []pipeline.Message, flushAfter func(i int) bool) {
	t.Helper()
	for i, m := range msgs {
		if err := r.Message(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if flushAfter(i) {
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestTrainingStepsIndependentOfBatches: the stored training_steps rows
// depend only on the input, never on where batches end. Before the fold
// windows, the copies of one step were folded per batch, and a batch
// boundary between two ranks' copies gave two rows (ranks 1 + 2) instead
// of one (ranks 3).
func TestTrainingStepsIndependentOfBatches(t *testing.T) {
	msgs := foldInput(t)
	control := &finalTables{}
	feedAll(t, foldRunner(t, control, nil, 10), msgs, func(int) bool { return false })
	want := control.dump()
	folded := false
	for _, r := range control.rows {
		folded = folded || r.Ranks == 3
	}
	if !folded || len(want) == 0 {
		t.Fatalf("control has no row folding three ranks' copies:\n%s", strings.Join(want, "\n"))
	}
	for cut := range len(msgs) - 1 {
		got := &finalTables{}
		feedAll(t, foldRunner(t, got, nil, 10), msgs, func(i int) bool { return i == cut })
		if d := diffLines(got.dump(), want); d != "" {
			t.Fatalf("batch boundary after record %d: training_steps differs from one batch:\n%s", cut, d)
		}
	}
	// And with a flush after every record.
	got := &finalTables{}
	feedAll(t, foldRunner(t, got, nil, 10), msgs, func(int) bool { return true })
	if d := diffLines(got.dump(), want); d != "" {
		t.Fatalf("a batch per record: training_steps differs from one batch:\n%s", d)
	}
}

// TestTrainingStepsIdempotentReplay: a process that stored batches up to
// any point, committed (or crashed before committing its last batch), is
// followed by a fresh one that rebuilds and replays from the committed
// offsets; the table ends equal to a fault-free run's.
func TestTrainingStepsIdempotentReplay(t *testing.T) {
	msgs := foldInput(t)
	control := &finalTables{}
	feedAll(t, foldRunner(t, control, nil, 10), msgs, func(int) bool { return false })
	want := control.dump()
	for _, every := range []int{3, 7} {
		for crash := 1; crash < len(msgs); crash++ {
			for _, lostCommit := range []bool{false, true} {
				tbl := &finalTables{}
				commits := &recordingCommitter{}
				r := foldRunner(t, tbl, commits, 10)
				feedAll(t, r, msgs[:crash], func(i int) bool { return i%every == every-1 })
				// The crash: the runner is dropped. lostCommit: its last
				// batch was stored but its offsets never committed.
				committed := lastCommits(t, commits, lostCommit)
				r2 := foldRunner(t, tbl, commits, 10)
				rest := resume(t, r2, msgs, committed)
				feedAll(t, r2, rest, func(i int) bool { return i%every == every-1 })
				if d := diffLines(tbl.dump(), want); d != "" {
					t.Fatalf("flush every %d, crash after %d records (commit lost %v, committed %v): training_steps differs from the fault-free run:\n%s",
						every, crash, lostCommit, committed, d)
				}
			}
		}
	}
}

// TestTrainingStepsHandedOverWhenQuiet: a member reads the stream up to
// any record, finds its partitions at their end and quiet for fold_idle,
// so that its flush commits past the open rows (sealing their window), and
// the partitions go to another member, which goes on from the commits.
// The table ends equal to one member's reading the whole stream: a step
// whose lines straddle the hand-over is one row, not two.
func TestTrainingStepsHandedOverWhenQuiet(t *testing.T) {
	msgs := foldInput(t)
	control := &finalTables{}
	feedAll(t, foldRunner(t, control, nil, 10), msgs, func(int) bool { return false })
	want := control.dump()
	t0 := time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC)
	snaps, split := 0, false
	for cut := 1; cut < len(msgs); cut++ {
		for _, restore := range []bool{true, false} {
			tbl := &finalTables{}
			commits := &recordingCommitter{}
			now := t0
			clock := func(d *pipeline.RunnerDeps) { d.Now = func() time.Time { return now } }
			a := foldRunnerWith(t, tbl, commits, 10, clock)
			// What the first member reads is, when it reads it, all the
			// partition holds.
			end := map[int32]int64{}
			for _, m := range msgs[:cut] {
				end[m.Partition] = m.Offset + 1
			}
			for _, m := range msgs[:cut] {
				m.HighWaterMark = end[m.Partition]
				if err := a.Message(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(pipeline.DefaultRunnerConfig().FoldIdle + time.Second)
			if err := a.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			committed := lastCommits(t, commits, false)
			snaps += len(tbl.folds)
			b := foldRunnerWith(t, tbl, commits, 10, func(d *pipeline.RunnerDeps) {
				clock(d)
				if restore {
					d.Folds = tbl
				}
			})
			rest := resume(t, b, msgs, committed)
			feedAll(t, b, rest, func(int) bool { return false })
			d := diffLines(tbl.dump(), want)
			switch {
			case restore && d != "":
				t.Fatalf("handed over after %d records (committed %v): training_steps differs from one member's:\n%s", cut, committed, d)
			case !restore && d != "":
				// Without the snapshots some hand-over splits a row:
				// what the test guards against.
				split = true
			}
		}
	}
	if snaps == 0 || !split {
		t.Fatalf("%d fold snapshots stored, a row split without them: %v; want both: the input must exercise the hand-over", snaps, split)
	}
}

// TestTrainingStepsCommitHeldUntilQuiet: offsets are not committed past
// the first line of an open row; once the partition was read to its end
// and stayed quiet for pipeline.fold_idle, a flush commits it to the end.
// At the end of a backlog (the partition was more than 10 000 records
// behind) the silence counts from when the last record was made (its Kafka
// timestamp): records made fold_idle before they were read are committed
// to the end by the first flush. A live partition counts from when the
// record was read, whatever its timestamp, and so does a record stamped
// later than it was read.
func TestTrainingStepsCommitHeldUntilQuiet(t *testing.T) {
	idle := pipeline.DefaultRunnerConfig().FoldIdle
	for _, tc := range []struct {
		name    string
		backlog bool          // a record far behind the high water mark comes first
		more    bool          // a record comes after the partition was read to its end
		age     time.Duration // how long before they were read the records were made
		want    []int64       // the last commit after the first flush, and after a second one fold_idle later
	}{
		{"live", false, false, 0, []int64{20001, 20004}},
		{"live, stamped in the past", false, false, idle, []int64{20001, 20004}},
		{"end of a backlog", true, false, idle, []int64{20004, 20004}},
		{"end of a backlog, made just now", true, false, idle / 2, []int64{20001, 20004}},
		{"end of a backlog, stamped ahead", true, false, -time.Hour, []int64{20001, 20004}},
		{"live after the end of a backlog", true, true, idle, []int64{20001, 20005}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, dump := quietRun(t, tc.backlog, tc.more, tc.age)
			if !slices.Equal(got, tc.want) {
				t.Errorf("last commit after each flush %v; want %v", got, tc.want)
			}
			if d := diffLines(dump, []string{"logs/0/020001/0 torchtitan step step 4 ranks 2 pod j-0 net \"\" tflops 314.71"}); d != "" {
				t.Error(d)
			}
		})
	}
}

// quietRun stores the last four records of one partition (offsets 20000
// to 20003, a step row among them), made age before they are read, with
// two flushes fold_idle apart, and returns the last offset committed by
// each and the stored rows. With backlog a record at offset 0 comes first,
// read with the partition 20 000 records behind; with more a record at
// offset 20004 comes last, after the partition was read to its end.
func quietRun(t *testing.T, backlog, more bool, age time.Duration) ([]int64, []string) {
	t.Helper()
	tbl := &finalTables{}
	commits := &recordingCommitter{}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cfg := pipeline.DefaultRunnerConfig()
	dcfg := parsers.DefaultDecoderConfig()
	r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Candidate: parsers.Prefilter(true),
		Sink:      tbl, Committer: commits, Logger: zerolog.Nop(), Now: func() time.Time { return now }})
	step := "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%"
	const end = 20004
	var msgs []pipeline.Message
	if backlog {
		msgs = append(msgs, pipeline.Message{Topic: "logs", Offset: 0, Value: fluentBit(t, "epoch 0", "j", "j-0", "n0")})
	}
	for i, v := range [][]byte{fluentBit(t, "warming up", "j", "j-0", "n0"), fluentBit(t, step, "j", "j-0", "n0"),
		fluentBit(t, step, "j", "j-1", "n0"), fluentBit(t, "noise", "j", "j-0", "n0")} {
		msgs = append(msgs, pipeline.Message{Topic: "logs", Offset: int64(20000 + i), Value: v})
	}
	for _, m := range msgs {
		m.Time, m.HighWaterMark = now.Add(-age), end
		if err := r.Message(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if more {
		if err := r.Message(context.Background(), pipeline.Message{Topic: "logs", Offset: end, Time: now.Add(-age),
			HighWaterMark: end + 1, Value: fluentBit(t, "noise", "j", "j-0", "n0")}); err != nil {
			t.Fatal(err)
		}
	}
	var got []int64
	for range 2 {
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(commits.commits) == 0 {
			t.Fatal("nothing committed")
		}
		c := commits.commits[len(commits.commits)-1]
		got = append(got, c[len(c)-1].Next)
		now = now.Add(cfg.FoldIdle)
	}
	return got, tbl.dump()
}

// diffLines returns the lines only in got (+) and only in want (-).
func diffLines(got, want []string) string {
	var b strings.Builder
	g, w := map[string]int{}, map[string]int{}
	for _, l := range got {
		g[l]++
	}
	for _, l := range want {
		w[l]++
	}
	for _, l := range got {
		if g[l] > w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
			g[l]--
		}
	}
	for _, l := range want {
		if w[l] > 0 && w[l] > g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
			w[l]--
		}
	}
	return b.String()
}

// TestRunnerRevokedReleasesJobs: a revocation tells the rules stage which
// jobs leave with their partitions (Batch.Released, not Evicted), in the
// revocation's batch, or in a batch of its own with a done context when
// the sink could not take that one.
func TestRunnerRevokedReleasesJobs(t *testing.T) {
	for _, down := range []bool{false, true} {
		var mu sync.Mutex
		var released, evicted []string
		sink := pipeline.ConsumerFunc(func(ctx context.Context, b *pipeline.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			released = append(released, b.Released...)
			evicted = append(evicted, b.Evicted...)
			if down && len(b.Released) > 0 && ctx.Err() == nil {
				<-ctx.Done() // ClickHouse paused: the revocation's deadline passes
				return ctx.Err()
			}
			return nil
		})
		cfg := pipeline.DefaultRunnerConfig()
		dcfg := parsers.DefaultDecoderConfig()
		r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
			NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: &parsers.Lines{},
			Candidate: parsers.Candidate, Sink: sink, Logger: zerolog.Nop()})
		for i, l := range corpusLines(t, healthy) {
			if err := r.Message(context.Background(), pipeline.Message{Topic: "logs", Offset: int64(i), Key: []byte("j"),
				Value: fluentBit(t, l, "j", "j-worker-0", "n0"), Time: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.Revoked(ctx, []pipeline.Partition{{Topic: "logs"}})
		cancel()
		if down != (err != nil) {
			t.Errorf("down %v: Revoked = %v", down, err)
		}
		want := []string{pipeline.JobKey("gpu-east-1", "ml", "j")}
		mu.Lock()
		if !slices.Equal(released, want) && !(down && slices.Equal(released, append(want, want...))) {
			t.Errorf("down %v: released %q; want %q", down, released, want)
		}
		if len(evicted) != 0 {
			t.Errorf("down %v: evicted %q at a revocation; want none (the job goes on elsewhere)", down, evicted)
		}
		mu.Unlock()
	}
}

func (s *finalTables) testDump() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.tests {
		out = append(out, fmt.Sprintf("%d/%06d/%d %s run %s context %d collective %q nranks %d bytes %d",
			r.Source.Partition, r.Source.Offset, r.Source.Line, r.Kind, r.RunID, r.Context, r.Collective, r.NRanks, r.Bytes))
	}
	slices.Sort(out)
	return out
}

// TestNCCLTestResultsReplayKeepsHeader: a crash after any record, with the
// last commit lost or not, and a replay from the committed offsets leave
// nccl_test_results as a fault-free run does. Before, a commit could fall
// inside a table and the replay wrote its later rows without the header
// (lower context, another run_id, no collective) when the first process
// died before storing them.
func TestNCCLTestResultsReplayKeepsHeader(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "telemetry", "017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log"))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []pipeline.Message
	for i, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		msgs = append(msgs, pipeline.Message{Topic: "logs", Offset: int64(i), Key: []byte("canary"),
			Value: fluentBit(t, l, "canary", "canary-launcher", "n0"), Time: time.Date(2026, 11, 29, 12, 0, i, 0, time.UTC)})
	}
	run := func(tbl *finalTables, commits *recordingCommitter) *pipeline.Runner {
		return foldRunner(t, tbl, commits, pipeline.DefaultRunnerConfig().Telemetry.FoldRecords)
	}
	control := &finalTables{}
	feedAll(t, run(control, &recordingCommitter{}), msgs, func(int) bool { return false })
	want := control.testDump()
	if len(want) == 0 {
		t.Fatal("the control stored no nccl-tests rows")
	}
	for crash := 1; crash < len(msgs); crash++ {
		for _, lostCommit := range []bool{false, true} {
			tbl, commits := &finalTables{}, &recordingCommitter{}
			feedAll(t, run(tbl, commits), msgs[:crash], func(int) bool { return true })
			cs := commits.commits
			if lostCommit && len(cs) > 0 {
				cs = cs[:len(cs)-1]
			}
			var committed int64
			for _, c := range cs {
				committed = c[0].Next
			}
			// The rows the crashed process stored but whose commit was
			// lost are there; the others (after the crash) never were.
			r2 := run(tbl, commits)
			if err := r2.Assigned(context.Background(), []pipeline.Partition{{Topic: "logs", Committed: committed}}); err != nil {
				t.Fatal(err)
			}
			feedAll(t, r2, msgs[committed:], func(i int) bool { return i%5 == 4 })
			if d := diffLines(tbl.testDump(), want); d != "" {
				t.Fatalf("crash after %d records (commit lost %v, committed %d): nccl_test_results differs from the fault-free run:\n%s",
					crash, lostCommit, committed, d)
			}
		}
	}
}

// lastCommits returns each partition's last committed offset, without the
// last Commit call when lost (its batch was stored, its offsets never
// committed). A commit that goes back fails the test.
func lastCommits(t *testing.T, c *recordingCommitter, lost bool) map[int32]int64 {
	t.Helper()
	cs := c.commits
	if lost && len(cs) > 0 {
		cs = cs[:len(cs)-1]
	}
	committed := map[int32]int64{}
	for _, offs := range cs {
		for _, o := range offs {
			if o.Next < committed[o.Partition] {
				t.Fatalf("commit went back: %+v after %d", o, committed[o.Partition])
			}
			committed[o.Partition] = o.Next
		}
	}
	return committed
}

// resume assigns r partitions 0 and 1 of topic logs at committed and
// returns the records of msgs it is to read from there on.
func resume(t *testing.T, r *pipeline.Runner, msgs []pipeline.Message, committed map[int32]int64) []pipeline.Message {
	t.Helper()
	parts := []pipeline.Partition{{Topic: "logs", Partition: 0, Committed: committed[0]},
		{Topic: "logs", Partition: 1, Committed: committed[1]}}
	if err := r.Assigned(context.Background(), parts); err != nil {
		t.Fatal(err)
	}
	var rest []pipeline.Message
	for _, m := range msgs {
		if m.Offset >= committed[m.Partition] {
			rest = append(rest, m)
		}
	}
	return rest
}
