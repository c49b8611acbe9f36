package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// eachParseMode runs fn with the records parsed on the loop (workers 1)
// and by parse workers (2).
func eachParseMode(t *testing.T, fn func(t *testing.T, workers int)) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("parse_workers=%d", workers), func(t *testing.T) { fn(t, workers) })
	}
}

// parseModeConfig is the default configuration with workers parse workers.
func parseModeConfig(workers int) pipeline.RunnerConfig {
	cfg := pipeline.DefaultRunnerConfig()
	cfg.ParseWorkers = workers
	return cfg
}

// blockingSink fails every call until healed, each call after delay or
// when ctx ends (a server that does not answer).
type blockingSink struct {
	mu     sync.Mutex
	healed bool
	calls  int
	inner  *recordingSink
	delay  time.Duration
}

func (s *blockingSink) called() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *blockingSink) heal() {
	s.mu.Lock()
	s.healed = true
	s.mu.Unlock()
}

func (s *blockingSink) Consume(ctx context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	s.calls++
	healed := s.healed
	s.mu.Unlock()
	if healed {
		return s.inner.Consume(ctx, b)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(s.delay):
		return errors.New("clickhouse: i/o timeout")
	}
}

// TestRunLoopRevokeWhileSinkDown: a rebalance while the sink does not
// answer is honoured before the revocation's deadline; the open batch is
// dropped, nothing is committed, and the next assignment starts clean.
func TestRunLoopRevokeWhileSinkDown(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			sink := &blockingSink{inner: &recordingSink{}, delay: 30 * time.Second}
			h := newHarness(t, nil, nil)
			h.r = pipeline.NewRunner(parseModeConfig(workers), pipeline.RunnerDeps{NewAssembler: assemble.Factory,
				NewDecoder: h.decoder, Classifier: h.cls, NewClassifier: h.newCls, Candidate: h.cand, Sink: sink, Committer: h.commit, Metrics: h.m,
			})
			in := make(chan pipeline.Input, 8)
			done := make(chan error, 1)
			go func() { done <- h.r.Run(t.Context(), in) }()

			gen, endGen := context.WithCancel(t.Context())
			ask := func(kind pipeline.InputKind, ctx context.Context) error {
				reply := make(chan error, 1)
				in <- pipeline.Input{Kind: kind, Partitions: []pipeline.Partition{{Topic: "logs", Partition: 0, Committed: -1}}, Ctx: ctx, Done: reply}
				return <-reply
			}
			if err := ask(pipeline.InputAssigned, gen); err != nil {
				t.Fatal(err)
			}
			for _, l := range corpusLines(t, fallback) {
				in <- pipeline.Input{Message: pipeline.Message{Topic: "logs", Partition: 0, Offset: h.next(0), Key: []byte("j"),
					Value: fluentBit(t, l, "j", "p", "n"), Time: h.now}}
			}
			time.Sleep(3 * time.Second) // the timer flush is stuck in the sink
			if sink.called() == 0 {
				t.Fatal("the sink was never called")
			}
			// The rebalance: the generation ends, then the revocation with a
			// 10 s deadline.
			endGen()
			start := time.Now()
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := ask(pipeline.InputRevoked, rctx)
			if took := time.Since(start); took >= 10*time.Second {
				t.Errorf("revocation answered after %v; want before its 10 s deadline", took)
			}
			if err == nil {
				t.Error("Revoked = nil with the sink down; want the error of the dropped batch")
			}
			h.commit.mu.Lock()
			if len(h.commit.commits) != 0 {
				t.Errorf("committed %v with the sink down", h.commit.commits)
			}
			h.commit.mu.Unlock()
			if h.r.HoldsAssignment() {
				t.Error("still holds an assignment after the revocation")
			}
			// The next generation: records replayed from the last commit are
			// stored once the sink is back.
			sink.heal()
			gen2, endGen2 := context.WithCancel(t.Context())
			defer endGen2()
			if err := ask(pipeline.InputAssigned, gen2); err != nil {
				t.Fatal(err)
			}
			h.offset[0] = 0
			for _, l := range corpusLines(t, fallback) {
				in <- pipeline.Input{Message: pipeline.Message{Topic: "logs", Partition: 0, Offset: h.next(0), Key: []byte("j"),
					Value: fluentBit(t, l, "j", "p", "n"), Time: h.now}}
			}
			close(in)
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			if s, ok := sink.inner.latestJob("j"); !ok || s.Verdict != pipeline.VerdictSocketFallback {
				t.Errorf("after the replay the job is %+v; want socket_fallback", s)
			}
		})
	})
}

// TestRunLoopSinkHealth: a sink call that has not succeeded within
// SinkTimeout makes the runner not ready and the gauge 0, while the loop
// keeps retrying; the first stored batch makes it ready again.
func TestRunLoopSinkHealth(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			sink := &blockingSink{inner: &recordingSink{}, delay: 2 * time.Second}
			h := newHarness(t, nil, nil)
			cfg := parseModeConfig(workers)
			h.r = pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
				NewDecoder: h.decoder, Classifier: h.cls, NewClassifier: h.newCls, Candidate: h.cand, Sink: sink, Metrics: h.m,
			})
			in := make(chan pipeline.Input, 8)
			done := make(chan error, 1)
			go func() { done <- h.r.Run(t.Context(), in) }()
			in <- pipeline.Input{Message: pipeline.Message{Topic: "logs", Offset: 0, Value: fluentBit(t, "h:1:1 [0] NCCL INFO Using network IB", "j", "p", "n"), Time: h.now}}

			time.Sleep(cfg.Batch.MaxWait + cfg.SinkTimeout/2)
			synctest.Wait()
			if !h.r.Ready() {
				t.Errorf("not ready %v into the outage; want ready until sink_timeout %v", cfg.SinkTimeout/2, cfg.SinkTimeout)
			}
			time.Sleep(cfg.SinkTimeout)
			synctest.Wait()
			if h.r.Ready() {
				t.Error("ready after the sink failed for longer than sink_timeout")
			}
			if g := testutil.ToFloat64(h.m.SinkHealthy); g != 0 {
				t.Errorf("ncclwatch_sink_healthy = %v during the outage; want 0", g)
			}
			if err := h.r.LastSinkError(); err == nil || !strings.Contains(err.Error(), "i/o timeout") {
				t.Errorf("LastSinkError = %v; want the sink's error", err)
			}
			sink.heal()
			time.Sleep(cfg.MaxBackoff + 3*time.Second)
			synctest.Wait()
			if !h.r.Ready() || testutil.ToFloat64(h.m.SinkHealthy) != 1 {
				t.Errorf("after the sink healed: ready %v, gauge %v; want ready, 1", h.r.Ready(), testutil.ToFloat64(h.m.SinkHealthy))
			}
			stopLoop(t, in, done)
		})
	})
}

// TestRunLoopPermanentErrorStops: a permanent sink error ends Run with it.
func TestRunLoopPermanentErrorStops(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, nil, nil)
			sink := pipeline.ConsumerFunc(func(context.Context, *pipeline.Batch) error {
				return pipeline.Permanent(errors.New("clickhouse: Table ncclwatch.nccl_events doesn't exist"))
			})
			h.r = pipeline.NewRunner(parseModeConfig(workers), pipeline.RunnerDeps{NewAssembler: assemble.Factory,
				NewDecoder: h.decoder, Classifier: h.cls, NewClassifier: h.newCls, Candidate: h.cand, Sink: sink,
			})
			in := make(chan pipeline.Input, 1)
			in <- pipeline.Input{Message: pipeline.Message{Topic: "logs", Value: fluentBit(t, "h:1:1 [0] NCCL INFO Using network IB", "j", "p", "n"), Time: h.now}}
			err := h.r.Run(t.Context(), in)
			if !pipeline.IsPermanent(err) || !strings.Contains(err.Error(), "doesn't exist") {
				t.Errorf("Run = %v; want the permanent error", err)
			}
			select {
			case <-h.r.Stopped():
			default:
				t.Error("Stopped not closed after Run returned")
			}
		})
	})
}

// TestRunnerPartialLinesAcrossRecords: CRI "P" pieces of one line in
// separate records of a partition are joined, although records of another
// partition come in between; the commit stops at the first piece of a line
// still open, and a revocation drops the pieces.
func TestRunnerPartialLinesAcrossRecords(t *testing.T) {
	sink := &recordingSink{}
	h := newHarness(t, sink, nil)
	ts := "2025-11-29T12:00:00.000000000Z stdout "
	h.send(t, 0, "a", []byte(ts+"P h1:10:10 [0] NCCL INFO Using "))
	h.send(t, 1, "b", []byte(ts+"F h2:20:20 [0] NCCL INFO Using network Socket"))
	h.send(t, 0, "a", []byte(ts+"P network "))
	h.send(t, 1, "b", []byte(ts+"P h2:20:20 [0] NCCL INFO NET/IB : No "))
	h.send(t, 0, "a", []byte(ts+"F IB"))
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range sink.events {
		lines = append(lines, e.Line)
	}
	joined := "h1:10:10 [0] NCCL INFO Using network IB"
	if !strings.Contains(strings.Join(lines, "\n"), joined) {
		t.Errorf("stored lines %q; want %q joined from three records", lines, joined)
	}
	for _, e := range sink.events {
		if e.Line == joined && (e.Source.Partition != 0 || e.Source.Offset != 2) {
			t.Errorf("joined line stored at %+v; want partition 0 offset 2 (the record that completed it)", e.Source)
		}
	}
	commits := map[int32]int64{}
	for _, o := range h.commit.commits[len(h.commit.commits)-1] {
		commits[o.Partition] = o.Next
	}
	if commits[0] != 3 || commits[1] != 1 {
		t.Errorf("committed %v; want partition 0 at 3 and partition 1 at 1 (its open line began at offset 1)", commits)
	}
	if err := h.r.Revoked(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// A new owner replays partition 1 from offset 1: its line starts over.
	h.offset[1] = 1
	h.send(t, 1, "b", []byte(ts+"P h2:20:20 [0] NCCL INFO NET/IB : No "))
	h.send(t, 1, "b", []byte(ts+"F device found."))
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := sink.events[len(sink.events)-1]
	if last.Line != "h2:20:20 [0] NCCL INFO NET/IB : No device found." {
		t.Errorf("line after the revocation = %q; want it joined from the replayed pieces only", last.Line)
	}
}

// gateSink blocks every Consume until the test lets it go, and records the
// events' offsets of each batch when the call starts and when it ends.
type gateSink struct {
	entered chan []int64 // offsets at the start of each call
	release chan struct{}
	mu      sync.Mutex
	after   [][]int64 // offsets at the end of each call
}

func eventOffsets(b *pipeline.Batch) []int64 {
	var offs []int64
	for _, e := range b.Events {
		offs = append(offs, e.Source.Offset)
	}
	return offs
}

func (s *gateSink) Consume(ctx context.Context, b *pipeline.Batch) error {
	s.entered <- eventOffsets(b)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	s.after = append(s.after, eventOffsets(b))
	s.mu.Unlock()
	return nil
}

// notifyDecoder says on decoded which offset it has just decoded.
type notifyDecoder struct {
	pipeline.Decoder
	off     *int64
	decoded chan<- int64
}

func (d notifyDecoder) Decode(data []byte, emit func(*pipeline.Record)) error {
	err := d.Decoder.Decode(data, emit)
	d.decoded <- *d.off
	return err
}

// TestRunLoopDecodesWhileInsertBlocked: while the sink holds one batch,
// the loop reads and parses the next record (it would not without the
// overlap: the sink never returns until the test sees that record
// decoded); the in-flight batch is not touched meanwhile; offsets are
// committed only after the sink accepted the batch holding them, in order.
func TestRunLoopDecodesWhileInsertBlocked(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			sink := &gateSink{entered: make(chan []int64, 8), release: make(chan struct{})}
			h := newHarness(t, nil, nil)
			cfg := parseModeConfig(workers)
			cfg.Batch.MaxRows = 1 // every NCCL line flushes
			var cur int64
			decoded := make(chan int64, 8)
			h.r = pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
				NewDecoder: func() pipeline.Decoder { return notifyDecoder{h.decoder(), &cur, decoded} },
				Classifier: h.cls, NewClassifier: h.newCls, Candidate: h.cand, Sink: sink, Committer: h.commit, Metrics: h.m,
			})
			in := make(chan pipeline.Input) // unbuffered: a send returns only once the loop took it
			done := make(chan error, 1)
			go func() { done <- h.r.Run(t.Context(), in) }()
			send := func(off int64, line string) {
				cur = off // read by the decoder after the loop received the input
				in <- pipeline.Input{Message: pipeline.Message{Topic: "logs", Partition: 0, Offset: off, Key: []byte("j"),
					Value: fluentBit(t, line, "j", "p", "n"), Time: h.now}}
			}
			commits := func() [][]pipeline.Offset {
				h.commit.mu.Lock()
				defer h.commit.mu.Unlock()
				return slices.Clone(h.commit.commits)
			}

			send(0, "h:1:1 [0] NCCL INFO Using network IB")
			if got := <-decoded; got != 0 {
				t.Fatalf("decoded offset %d; want 0", got)
			}
			first := <-sink.entered // the size flush of offset 0 is in the sink, blocked
			if !slices.Equal(first, []int64{0}) {
				t.Fatalf("first batch holds events %v; want [0]", first)
			}
			// The loop still takes and parses records while the insert is
			// blocked.
			go send(1, "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>")
			select {
			case got := <-decoded:
				if got != 1 {
					t.Fatalf("decoded offset %d; want 1", got)
				}
			case <-time.After(time.Hour):
				t.Fatal("the record sent while the insert was blocked was not parsed before the insert returned")
			}
			synctest.Wait()
			if c := commits(); len(c) != 0 {
				t.Fatalf("committed %v before the sink accepted the batch", c)
			}
			sink.release <- struct{}{} // batch 0 is accepted
			second := <-sink.entered   // then batch 1 goes in
			if !slices.Equal(second, []int64{1}) {
				t.Errorf("second batch holds events %v; want [1]", second)
			}
			synctest.Wait()
			if c := commits(); len(c) != 1 || len(c[0]) != 1 || c[0][0].Next != 1 {
				t.Errorf("commits after the first batch = %v; want one at offset 1", c)
			}
			close(sink.release)
			close(in)
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			sink.mu.Lock()
			if !slices.Equal(sink.after[0], []int64{0}) {
				t.Errorf("the first batch held events %v when its insert returned; want [0] (untouched while in flight)", sink.after[0])
			}
			sink.mu.Unlock()
			var nexts []int64
			for _, c := range commits() {
				for _, o := range c {
					nexts = append(nexts, o.Next)
				}
			}
			if !slices.Equal(nexts, []int64{1, 2}) {
				t.Errorf("committed offsets %v in that order; want [1 2]", nexts)
			}
		})
	})
}

// TestRunLoopCommitsWhenFoldQuiet: a partition whose commit an open fold
// window held back is committed to its end at the first tick after it was
// quiet at its end for fold_idle, not a whole max_wait after the flush
// that held it (the record-to-commit tail at the end of a burst).
func TestRunLoopCommitsWhenFoldQuiet(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			cfg := parseModeConfig(workers)
			cfg.FoldIdle = time.Second
			in, done, commits := foldLoop(t, cfg)
			step := "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%"
			vals := [][]byte{fluentBit(t, "warming up", "j", "j-0", "n0"), fluentBit(t, step, "j", "j-0", "n0"),
				fluentBit(t, step, "j", "j-1", "n0"), fluentBit(t, "noise", "j", "j-0", "n0")}
			// Between two timed flushes: the next one holds the commit at the
			// step row's first line (the partition is not quiet yet).
			time.Sleep(7500 * time.Millisecond) // timed flushes at 4 s and 8 s
			var ms []pipeline.Message
			for i, v := range vals {
				ms = append(ms, pipeline.Message{Topic: "logs", Offset: int64(i), Value: v, Time: time.Now(), HighWaterMark: int64(len(vals))})
			}
			in <- pipeline.Input{Messages: ms}
			time.Sleep(3 * time.Second) // fold_idle passed; the next timed flush is later
			synctest.Wait()
			got := commits.lastNexts()
			if !slices.Contains(got, 1) {
				t.Errorf("commits %v: want one held at 1, the open row's first line", got)
			}
			if len(got) == 0 || got[len(got)-1] != int64(len(vals)) {
				t.Errorf("commits %v 3 s after the records (fold_idle 1 s, max_wait 4 s): want the last at %d, the partition's end", got, len(vals))
			}
			stopLoop(t, in, done)
		})
	})
}

// foldLoop runs a runner with the telemetry parser over cfg, its batch
// max_wait 4 s (a tick every second), in the current synctest bubble.
func foldLoop(t *testing.T, cfg pipeline.RunnerConfig) (chan pipeline.Input, chan error, *recordingCommitter) {
	t.Helper()
	in := make(chan pipeline.Input, 8)
	done, commits := foldLoopOn(t, cfg, in, &recordingSink{})
	return in, done, commits
}

// foldLoopOn is foldLoop reading in (which may hold inputs already) and
// storing into sink.
func foldLoopOn(t *testing.T, cfg pipeline.RunnerConfig, in chan pipeline.Input, sink pipeline.Consumer) (chan error, *recordingCommitter) {
	t.Helper()
	cfg.Batch.MaxWait = 4 * time.Second
	commits := &recordingCommitter{}
	dcfg := parsers.DefaultDecoderConfig()
	r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) },
		Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		NewClassifier: func() pipeline.Classifier {
			return parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
		},
		Candidate: parsers.Prefilter(true), Sink: sink, Committer: commits, Logger: zerolog.Nop()})
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context(), in) }()
	return done, commits
}

// titanStep is a torchtitan progress line of step 4.
const titanStep = "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%"

// agedMsg is a record of partition logs/0 of job j made age before it is
// read, fetched with high water mark hwm.
func agedMsg(t *testing.T, off, hwm int64, age time.Duration, line, pod string) pipeline.Message {
	return pipeline.Message{Topic: "logs", Offset: off, Value: fluentBit(t, line, "j", pod, "n0"),
		Time: time.Now().Add(-age), HighWaterMark: hwm}
}

// oldMsg is agedMsg made an hour before it is read.
func oldMsg(t *testing.T, off, hwm int64, line, pod string) pipeline.Message {
	return agedMsg(t, off, hwm, time.Hour, line, pod)
}

// oldRun is records made an hour before they are read, fetched with high
// water mark end: one at offset lead, then the partition's last four, a
// step row of two ranks' copies among them.
func oldRun(t *testing.T, lead, end int64) []pipeline.Message {
	return []pipeline.Message{oldMsg(t, lead, end, "epoch 0", "j-0"), oldMsg(t, end-4, end, "warming up", "j-0"),
		oldMsg(t, end-3, end, titanStep, "j-0"), oldMsg(t, end-2, end, titanStep, "j-1"), oldMsg(t, end-1, end, "noise", "j-0")}
}

// liveMsg is a record made as it is read, of a partition never read to
// its end (high water mark 1000: fold_idle never closes a window).
func liveMsg(t *testing.T, off int64, line, pod string) pipeline.Message {
	return agedMsg(t, off, 1000, 0, line, pod)
}

// stopLoop ends the input of a loop and checks it stopped cleanly.
func stopLoop(t *testing.T, in chan pipeline.Input, done chan error) {
	t.Helper()
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// lastCommit is the last offset committed, 0 when none.
func lastCommit(c *recordingCommitter) int64 {
	if got := c.lastNexts(); len(got) > 0 {
		return got[len(got)-1]
	}
	return 0
}

// TestRunLoopPastStampedBurstsWait: only a partition's first catch-up
// after its assignment is quiet by its records' timestamps. A later burst
// of records stamped long ago (a producer clock behind ours, a shipper
// delivering late), however far behind the high water mark it starts, is
// quiet only fold_idle after it was read: no flush at once, no step row
// ended early.
func TestRunLoopPastStampedBurstsWait(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			in, done, commits := foldLoop(t, parseModeConfig(workers))
			in <- pipeline.Input{Messages: oldRun(t, 0, 20004)}
			synctest.Wait()
			if got := lastCommit(commits); got != 20004 {
				t.Fatalf("last commit %d after the first catch-up; want 20004 at once", got)
			}
			time.Sleep(300 * time.Millisecond)
			in <- pipeline.Input{Messages: oldRun(t, 20004, 40004)}
			synctest.Wait()
			if got := lastCommit(commits); got != 20004 {
				t.Errorf("last commit %d right after a second burst stamped an hour ago; want 20004: its step row is open", got)
			}
			stopLoop(t, in, done)
		})
	})
}

// TestRunLoopEndOfBacklogWaitsForQueuedInput: the end of a catch-up is
// not quiet while records read after it wait in the loop's input: the
// other rank's copy of the step, written after the fetch that reached the
// end, still folds into the step's row.
func TestRunLoopEndOfBacklogWaitsForQueuedInput(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			in := make(chan pipeline.Input, 8)
			in <- pipeline.Input{Messages: []pipeline.Message{oldMsg(t, 0, 20004, "epoch 0", "j-0"),
				oldMsg(t, 20000, 20004, "warming up", "j-0"), oldMsg(t, 20001, 20004, titanStep, "j-0"),
				oldMsg(t, 20002, 20004, "noise", "j-0"), oldMsg(t, 20003, 20004, "noise", "j-0")}}
			in <- pipeline.Input{Messages: []pipeline.Message{oldMsg(t, 20004, 20005, titanStep, "j-1")}}
			sink := &recordingSink{}
			done, _ := foldLoopOn(t, parseModeConfig(workers), in, sink)
			time.Sleep(10 * time.Second)
			stopLoop(t, in, done)
			ranks := map[int64]int{}
			sink.mu.Lock()
			for _, st := range sink.steps {
				ranks[st.Source.Offset] = st.Ranks
			}
			sink.mu.Unlock()
			if want := map[int64]int{20001: 2}; !maps.Equal(ranks, want) {
				t.Errorf("training_steps rows (offset: ranks) %v; want %v", ranks, want)
			}
		})
	})
}

// TestRunLoopEndOfBacklogAfterFlight: a catch-up that ends while a batch
// is being stored is stored and committed as soon as that batch lands,
// not a max_wait after it was sent.
func TestRunLoopEndOfBacklogAfterFlight(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			in := make(chan pipeline.Input, 8)
			done, commits := foldLoopOn(t, parseModeConfig(workers), in, &slowSink{inner: &recordingSink{}, d: 2 * time.Second})
			start := time.Now()
			time.Sleep(500 * time.Millisecond)
			in <- pipeline.Input{Messages: []pipeline.Message{oldMsg(t, 0, 20004, "epoch 0", "j-0")}}
			time.Sleep(4 * time.Second) // the timed flush at 4 s is being stored until 6 s
			in <- pipeline.Input{Messages: []pipeline.Message{oldMsg(t, 20000, 20004, "warming up", "j-0"),
				oldMsg(t, 20001, 20004, titanStep, "j-0"), oldMsg(t, 20002, 20004, titanStep, "j-1"),
				oldMsg(t, 20003, 20004, "noise", "j-0")}}
			time.Sleep(4 * time.Second) // 8.5 s: the rest is sent at 6 s and lands at 8 s
			synctest.Wait()
			if got := lastCommit(commits); got != 20004 {
				t.Errorf("last commit %d %v after the start; want 20004, stored right after the batch in flight", got, time.Since(start))
			}
			stopLoop(t, in, done)
		})
	})
}

// slowSink stores into inner after d.
type slowSink struct {
	inner *recordingSink
	d     time.Duration
}

func (s *slowSink) Consume(ctx context.Context, b *pipeline.Batch) error {
	time.Sleep(s.d)
	return s.inner.Consume(ctx, b)
}

// lastNexts is the next offset of each commit's last partition, in order.
func (c *recordingCommitter) lastNexts() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var got []int64
	for _, o := range c.commits {
		got = append(got, o[len(o)-1].Next)
	}
	return got
}

// foldFirst is a live partition's offsets 0–4 with a step row opened at
// offset 1 (two ranks' copies) in fold window [0, 10) (fold_records 10).
func foldFirst(t *testing.T) []pipeline.Message {
	return []pipeline.Message{liveMsg(t, 0, "warming up", "j-0"), liveMsg(t, 1, titanStep, "j-0"),
		liveMsg(t, 2, titanStep, "j-1"), liveMsg(t, 3, "noise", "j-0"), liveMsg(t, 4, "noise", "j-0")}
}

// foldClose is the same partition's offsets 5–11: 10 and 11 end window
// [0, 10).
func foldClose(t *testing.T) []pipeline.Message {
	var ms []pipeline.Message
	for off := int64(5); off < 12; off++ {
		ms = append(ms, liveMsg(t, off, "noise", "j-0"))
	}
	return ms
}

// TestRunLoopReleasesClosedFoldWindow: records whose commit an open fold
// window held back at a stored batch are committed at the first tick after
// the window closed (the partition read past its end), not with the next
// batch a whole max_wait later: record-to-commit latency of a busy
// partition is a batch plus a window, not a batch plus a window plus a
// batch. What the next batch has not stored yet stays uncommitted.
func TestRunLoopReleasesClosedFoldWindow(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			cfg := parseModeConfig(workers)
			cfg.Telemetry.FoldRecords = 10
			in, done, commits := foldLoop(t, cfg)
			time.Sleep(500 * time.Millisecond)
			in <- pipeline.Input{Messages: foldFirst(t)}
			time.Sleep(4 * time.Second) // the timed flush at 4 s stored offsets 0–4, committed to 1
			synctest.Wait()
			if got := commits.lastNexts(); !slices.Equal(got, []int64{1}) {
				t.Fatalf("commits %v after the first batch; want [1], held at the open row's first line", got)
			}
			in <- pipeline.Input{Messages: foldClose(t)}
			time.Sleep(1100 * time.Millisecond) // a tick, well before the next timed flush at 8 s
			synctest.Wait()
			if got := commits.lastNexts(); !slices.Equal(got, []int64{1, 5}) {
				t.Errorf("commits %v a tick after the window closed; want [1 5]: released to what the first batch stored, no further", got)
			}
			time.Sleep(3 * time.Second) // the timed flush at 8 s
			synctest.Wait()
			if got := commits.lastNexts(); !slices.Equal(got, []int64{1, 5, 12}) {
				t.Errorf("commits %v after the second batch; want [1 5 12]", got)
			}
			stopLoop(t, in, done)
		})
	})
}

// TestRunLoopReleaseAfterRetriedBatch: while the batch that a fold window
// held back is still being retried, nothing is released, even though the
// window closed meanwhile; the release comes at the first tick after that
// batch was stored.
func TestRunLoopReleaseAfterRetriedBatch(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			cfg := parseModeConfig(workers)
			cfg.Telemetry.FoldRecords = 10
			in := make(chan pipeline.Input, 8)
			sink := &recordingSink{failures: 2} // retried after 0.5 s and 1 s: stored at 5.5 s
			done, commits := foldLoopOn(t, cfg, in, sink)
			time.Sleep(500 * time.Millisecond)
			in <- pipeline.Input{Messages: foldFirst(t)}
			time.Sleep(4 * time.Second) // 4.5 s: the timed flush at 4 s is being retried
			in <- pipeline.Input{Messages: foldClose(t)}
			time.Sleep(900 * time.Millisecond) // 5.4 s: two ticks since the window closed
			synctest.Wait()
			if got := commits.lastNexts(); len(got) != 0 {
				t.Errorf("commits %v while the first batch was still being retried; want none", got)
			}
			time.Sleep(1200 * time.Millisecond) // 6.6 s: stored at 5.5 s, a tick since
			synctest.Wait()
			if got := commits.lastNexts(); !slices.Equal(got, []int64{1, 5}) {
				t.Errorf("commits %v a tick after the retried batch was stored; want [1 5]", got)
			}
			stopLoop(t, in, done)
		})
	})
}

// TestRunLoopEndOfBacklogAtOnce: a partition read as a backlog whose last
// records were made long before they were read is quiet as soon as it is
// read to its end, and the loop stores and commits it then, without
// waiting for fold_idle or a tick (the end of a backlog is its time to
// lag 0). Records made just now wait: their open fold window holds the
// commit.
func TestRunLoopEndOfBacklogAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  time.Duration
		want int64 // the last commit at once, 0 for none
	}{{"old records", time.Hour, 20004}, {"fresh records", 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			eachParseMode(t, func(t *testing.T, workers int) {
				synctest.Test(t, func(t *testing.T) {
					in, done, commits := foldLoop(t, parseModeConfig(workers))
					msg := func(off int64, line, pod string) pipeline.Message { return agedMsg(t, off, 20004, tc.age, line, pod) }
					start := time.Now()
					in <- pipeline.Input{Messages: []pipeline.Message{msg(0, "epoch 0", "j-0"), msg(20000, "warming up", "j-0"),
						msg(20001, titanStep, "j-0"), msg(20002, titanStep, "j-1"), msg(20003, "noise", "j-0")}}
					synctest.Wait()
					var last int64
					if got := commits.lastNexts(); len(got) > 0 {
						last = got[len(got)-1]
					}
					if last != tc.want {
						t.Errorf("last commit %d %v after the backlog was read to its end; want %d", last, time.Since(start), tc.want)
					}
					stopLoop(t, in, done)
				})
			})
		})
	}
}

// revokeSink holds its first call until the call's context ends (an insert
// in progress when a rebalance ends the generation); every later call takes
// a millisecond and then stores the batch, unless its context ended
// meanwhile (as a ClickHouse insert fails then). It keeps, per stored
// batch, the offsets of its events and its communicators' keys.
type revokeSink struct {
	mu      sync.Mutex
	hold    bool
	started chan struct{} // closed when the held call began
	calls   int
	failed  int
	batches []string
}

func (s *revokeSink) Consume(ctx context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	s.calls++
	hold := s.hold
	s.hold = false
	s.mu.Unlock()
	if hold {
		close(s.started)
		<-ctx.Done()
	} else {
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		s.failed++
		return err
	}
	// The communicators the batch carries to the stages: stored (Comms)
	// or for the rules only (Unnamed).
	var comms []string
	for _, c := range slices.Concat(b.Comms, b.Unnamed) {
		comms = append(comms, c.CommID)
	}
	s.batches = append(s.batches, fmt.Sprintf("events %v comms %v offsets %v", eventOffsets(b), comms, b.Offsets))
	return nil
}

// TestRunLoopRebalanceKeepsBatches: records the loop holds when a rebalance
// ends the generation (a batch in flight, the next one full and waiting for
// it, more records queued behind) are applied at the revocation in batches
// of max_rows, with a size flush stored at each, as without the rebalance:
// not swallowed into one oversized batch at the revocation, and the sink not
// called once per record with a context that already ended. A communicator
// without a commId that exists only between two records further apart than
// max_rows (the nRanks line before the process's Init START line) is stored
// by a batch in between (TestIntegrationCluster lost such a row with parse
// workers: /it/gen-00-ib/nranks=16).
func TestRunLoopRebalanceKeepsBatches(t *testing.T) {
	const maxRows = 5
	var first, second []string
	for i := range 12 {
		first = append(first, fmt.Sprintf("f%d:1:1 [0] NCCL INFO Using network IB", i))
	}
	second = append(second, "h:1:1 [0] NCCL INFO comm 0xa1 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0")
	for i := range 2 * maxRows {
		second = append(second, fmt.Sprintf("s%d:1:1 [0] NCCL INFO Using network IB", i))
	}
	second = append(second, "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0xa1 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0xde4443395863ef4a - Init START")
	for i := range 3 {
		second = append(second, fmt.Sprintf("t%d:1:1 [0] NCCL INFO Using network IB", i))
	}
	// run feeds the two runs of records in one generation and revokes it;
	// with interrupt the first batch's insert is in flight until the
	// generation ends, which happens while the loop waits for it with the
	// second batch full and the second run of records queued.
	run := func(t *testing.T, workers int, interrupt bool) (*revokeSink, [][]pipeline.Offset) {
		var sink *revokeSink
		var commits [][]pipeline.Offset
		synctest.Test(t, func(t *testing.T) {
			sink = &revokeSink{hold: interrupt, started: make(chan struct{})}
			h := newHarness(t, nil, nil)
			cfg := parseModeConfig(workers)
			cfg.Batch.MaxRows, cfg.Batch.MaxWait = maxRows, time.Hour // size flushes only
			// Every batch carries the summaries of its jobs: what is pinned
			// here is where batches end, which decides the rows of a
			// keyless communicator that exists for a few records only.
			cfg.SummaryInterval = 0
			cfg.RetryBackoff, cfg.MaxBackoff = time.Millisecond, time.Millisecond
			h.r = pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory, NewDecoder: h.decoder,
				Classifier: h.cls, NewClassifier: h.newCls, Candidate: h.cand, Sink: sink, Committer: h.commit, Metrics: h.m,
				Now: func() time.Time { return h.now }})
			in := make(chan pipeline.Input, 2)
			done := make(chan error, 1)
			go func() { done <- h.r.Run(t.Context(), in) }()
			ask := func(kind pipeline.InputKind, ctx context.Context) {
				t.Helper()
				reply := make(chan error, 1)
				in <- pipeline.Input{Kind: kind, Partitions: []pipeline.Partition{{Topic: "logs", Partition: 0, Committed: -1}}, Ctx: ctx, Done: reply}
				if err := <-reply; err != nil {
					t.Fatalf("%v: %v", kind, err)
				}
			}
			msgs := func(lines []string) []pipeline.Message {
				var ms []pipeline.Message
				for _, l := range lines {
					ms = append(ms, pipeline.Message{Topic: "logs", Partition: 0, Offset: h.next(0), Key: []byte("j"),
						Value: fluentBit(t, l, "j", "p", "n"), Time: h.now})
				}
				return ms
			}
			gen, endGen := context.WithCancel(t.Context())
			defer endGen()
			ask(pipeline.InputAssigned, gen)
			in <- pipeline.Input{Messages: msgs(first)}
			if interrupt {
				<-sink.started
			}
			in <- pipeline.Input{Messages: msgs(second)}
			if !interrupt {
				time.Sleep(time.Second) // every batch stored in the generation
			}
			synctest.Wait()
			endGen()
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ask(pipeline.InputRevoked, rctx)
			close(in)
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			h.commit.mu.Lock()
			commits = h.commit.commits
			h.commit.mu.Unlock()
		})
		return sink, commits
	}
	eachParseMode(t, func(t *testing.T, workers int) {
		want, wantCommits := run(t, workers, false)
		all := strings.Join(want.batches, "\n")
		if !strings.Contains(all, "nranks=2") || want.failed != 0 || len(want.batches) < 5 {
			t.Fatalf("without the rebalance: %d failed calls, batches\n\t%s\nwant several, one with the keyless communicator nranks=2",
				want.failed, strings.Join(want.batches, "\n\t"))
		}
		got, gotCommits := run(t, workers, true)
		if got.failed != 1 {
			t.Errorf("%d sink calls failed (of %d); want 1, the insert the rebalance cut short", got.failed, got.calls)
		}
		if g, w := strings.Join(got.batches, "\n\t"), strings.Join(want.batches, "\n\t"); g != w {
			t.Errorf("stored batches with a rebalance while an insert was in flight:\n\t%s\nwant, as without it:\n\t%s", g, w)
		}
		if g, w := show(gotCommits), show(wantCommits); g != w {
			t.Errorf("commits %s; want %s", g, w)
		}
	})
}

// summaryCalls records, per sink call, when it came and how many events
// and job summaries it carried.
type summaryCalls struct {
	mu    sync.Mutex
	start time.Time
	calls []string // "t=2s events=1 jobs=0"
}

func (s *summaryCalls) Consume(_ context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("t=%s events=%d jobs=%d", time.Since(s.start).Round(time.Second), len(b.Events), len(b.Jobs)))
	return nil
}

// TestRunLoopSummariesEveryInterval: within Run the timer flushes store
// every event at once, and the changed jobs' summaries only once
// pipeline.summary_interval has passed since a flush carried them; the
// final flush carries them whatever the interval.
func TestRunLoopSummariesEveryInterval(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			cfg := parseModeConfig(workers)
			cfg.SummaryInterval = 5 * time.Second
			sink := &summaryCalls{start: time.Now()}
			in, done := cadenceRunner(t, workers, cfg.SummaryInterval, sink, nil)
			for i := range 8 {
				// One NCCL line every 1.5 s, so that every timed flush has
				// an event to store, on a partition with a backlog (never
				// at rest: summaries would not wait then).
				cadenceSend(t, in, int64(i), cadenceLine, backlogHWM)
				time.Sleep(1500 * time.Millisecond)
			}
			cadenceStop(t, in, done)
			sink.mu.Lock()
			defer sink.mu.Unlock()
			var withJobs, events int
			last := ""
			for i, c := range sink.calls {
				var at time.Duration
				var ev, jobs int
				var ts string
				if _, err := fmt.Sscanf(c, "t=%s events=%d jobs=%d", &ts, &ev, &jobs); err != nil {
					t.Fatalf("%q: %v", c, err)
				}
				at, _ = time.ParseDuration(ts)
				events += ev
				if jobs > 0 {
					withJobs++
					if last != "" && i < len(sink.calls)-1 { // the final flush is exempt
						prev, _ := time.ParseDuration(last)
						if at-prev < cfg.SummaryInterval {
							t.Errorf("summaries at %s and %s, less than %s apart (calls %v)", last, ts, cfg.SummaryInterval, sink.calls)
						}
					}
					last = ts
				}
			}
			if events != 8 {
				t.Errorf("stored %d events; want 8 (calls %v)", events, sink.calls)
			}
			// 12 s of records: the first timed flush, one 5 s later, one
			// 10 s later at most, and the final one (Drain).
			if withJobs < 3 || withJobs > 4 || len(sink.calls) < 8 {
				t.Errorf("%d of %d calls carried summaries; want 3 or 4 of at least 8 (calls %v)", withJobs, len(sink.calls), sink.calls)
			}
			if c := sink.calls[len(sink.calls)-1]; !strings.HasSuffix(c, "jobs=1") {
				t.Errorf("the final flush %q carries no summary (calls %v)", c, sink.calls)
			}
		})
	})
}

// summaryLedger is a sink and a committer in one, for a stream whose
// every record holds one NCCL line of one job: at each commit it checks
// that the stored job summaries count every line below the committed
// offset, so that a process killed right after the commit (nothing
// replays those records, and the state a next owner rebuilds from stored
// events lacks the lines that are not NCCL events) leaves every summary
// complete.
type summaryLedger struct {
	mu       sync.Mutex
	lines    int64 // the highest nccl_lines of a stored job summary
	calls    int
	withJobs int
	comms    map[string]bool // comm_id of every stored comm summary
	next     int64           // the last committed offset
	commits  int
	errs     []string
}

func (l *summaryLedger) Consume(_ context.Context, b *pipeline.Batch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if len(b.Jobs) > 0 {
		l.withJobs++
	}
	for _, j := range b.Jobs {
		l.lines = max(l.lines, j.NCCLLines)
	}
	if l.comms == nil {
		l.comms = map[string]bool{}
	}
	for _, c := range slices.Concat(b.Comms, b.Unnamed) {
		l.comms[c.CommID] = true
	}
	return nil
}

func (l *summaryLedger) Commit(_ context.Context, offs []pipeline.Offset) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range offs {
		l.commits++
		l.next = o.Next
		if o.Next > l.lines {
			l.errs = append(l.errs, fmt.Sprintf("committed up to offset %d with the stored summary counting %d lines", o.Next, l.lines))
		}
	}
	return nil
}

// cadenceRunner runs a Runner (max_wait 1 s) with summary_interval
// interval on sink and commit (nil: none).
func cadenceRunner(t *testing.T, workers int, interval time.Duration, sink pipeline.Consumer, commit pipeline.Committer) (chan<- pipeline.Input, <-chan error) {
	cfg := parseModeConfig(workers)
	cfg.Batch.MaxWait = time.Second
	// The cadence tests' partitions have a backlog: without backlog
	// batches their timed flushes come every max_wait, which they count.
	cfg.Batch.Backlog.MaxRows = 0
	cfg.SummaryInterval = interval
	dcfg := parsers.DefaultDecoderConfig()
	r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder:    func() pipeline.Decoder { return parsers.NewDecoder(dcfg) },
		Classifier:    parsers.NewLines(nil),
		NewClassifier: func() pipeline.Classifier { return parsers.NewLines(nil) },
		Candidate:     parsers.Prefilter(false), Sink: sink, Committer: commit, Logger: zerolog.Nop()})
	in := make(chan pipeline.Input, 8)
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context(), in) }()
	return in, done
}

// backlogHWM is the high water mark of a partition with a backlog: far
// more records after the ones sent than the loop's backlog threshold.
const backlogHWM = 1 << 40

// TestRunLoopLiveStreamSummariesEveryFlush: a partition read as its
// records come (each at the high water mark when fetched), never quiet
// for fold_idle, has the changed jobs' summaries, and so its commits, in
// every timed flush whatever pipeline.summary_interval: the interval only
// spares the summary tables while a partition has a backlog, so a live
// stream's record-to-verdict latency stays that of a flush.
func TestRunLoopLiveStreamSummariesEveryFlush(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			sink := &summaryLedger{}
			in, done := cadenceRunner(t, workers, 10*time.Minute, sink, sink)
			// One record every 0.5 s for 8 s, each the last of its
			// partition: never quiet for fold_idle (1 s).
			for i := range 16 {
				cadenceSend(t, in, int64(i), cadenceLine, int64(i)+1)
				time.Sleep(500 * time.Millisecond)
			}
			synctest.Wait()
			sink.mu.Lock()
			if sink.calls < 6 || sink.withJobs != sink.calls || sink.next < 14 {
				t.Errorf("%d sink calls, %d with summaries, committed up to %d; want at least 6, every one with summaries, commits past 14",
					sink.calls, sink.withJobs, sink.next)
			}
			sink.mu.Unlock()
			cadenceStop(t, in, done)
			for _, e := range sink.errs {
				t.Error(e)
			}
		})
	})
}

// cadenceLine is an NCCL line of one process.
const cadenceLine = "node-0:100:100 [0] NCCL INFO Using network IB"

// cadenceSend sends a record of job j at offset off of partition logs/0,
// whose high water mark is hwm, holding line.
func cadenceSend(t *testing.T, in chan<- pipeline.Input, off int64, line string, hwm int64) {
	in <- pipeline.Input{Messages: []pipeline.Message{{Topic: "logs", Offset: off,
		Value: fluentBit(t, line, "j", "j-0", "n0"), Time: time.Now(), HighWaterMark: hwm}}}
}

// cadenceStop ends the input once the loop is idle and waits for Run.
func cadenceStop(t *testing.T, in chan<- pipeline.Input, done <-chan error) {
	synctest.Wait()
	close(in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunLoopCommitsOnlySummarizedRecords: with summaries deferred
// (pipeline.summary_interval), a commit never covers a record whose job
// summary is not stored: the batches in between store their events and
// wait for the next summaries to commit. af7be3c committed them at once,
// and TestIntegrationChaos lost job summaries when the last process was
// SIGKILLed after its last commit (the fault-free control too). Once the
// stream is at rest (read to its end, quiet for fold_idle) the summaries
// and the commit do not wait for the interval.
func TestRunLoopCommitsOnlySummarizedRecords(t *testing.T) {
	// backlog runs a loop with summary_interval interval and sends it n
	// records of a partition with a backlog, one every 1.5 s.
	backlog := func(t *testing.T, workers int, interval time.Duration, n int) (*summaryLedger, chan<- pipeline.Input, <-chan error) {
		sink := &summaryLedger{}
		in, done := cadenceRunner(t, workers, interval, sink, sink)
		for i := range n {
			cadenceSend(t, in, int64(i), cadenceLine, backlogHWM)
			time.Sleep(1500 * time.Millisecond)
		}
		return sink, in, done
	}
	stop := func(t *testing.T, in chan<- pipeline.Input, done <-chan error, sink *summaryLedger) {
		cadenceStop(t, in, done)
		for _, e := range sink.errs {
			t.Error(e)
		}
	}
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			sink, in, done := backlog(t, workers, 5*time.Second, 12) // 18 s
			synctest.Wait()
			sink.mu.Lock()
			if sink.commits < 2 || sink.withJobs*2 > sink.calls {
				t.Errorf("%d commits, %d of %d sink calls with summaries; want commits, and summaries in at most half the calls",
					sink.commits, sink.withJobs, sink.calls)
			}
			sink.mu.Unlock()
			stop(t, in, done, sink)
		})
		synctest.Test(t, func(t *testing.T) {
			// A summary interval longer than the test: only the first
			// timed flush (t=1 s) and the stream at rest carry summaries.
			sink, in, done := backlog(t, workers, 10*time.Minute, 4)
			// Read to its end, then quiet for fold_idle (1 s): committed
			// to the end with every line summarized, before any Drain.
			cadenceSend(t, in, 4, cadenceLine, 5)
			time.Sleep(2 * time.Second)
			synctest.Wait()
			sink.mu.Lock()
			if sink.next != 5 || sink.lines != 5 {
				t.Errorf("at rest: committed up to %d with %d lines summarized; want 5 and 5", sink.next, sink.lines)
			}
			sink.mu.Unlock()
			stop(t, in, done, sink)
		})
	})
}

// TestRunLoopSummaryCadenceKeepsCommRows: a communicator that exists for a
// few records only (a rank's nRanks line, before its Init START line names
// the commId) reaches the stages (Batch.Unnamed: the rules see it, the
// sinks do not store it) with the summary interval as with every flush
// carrying summaries: the flush that ends the batch it appeared in carries
// its job's summaries.
func TestRunLoopSummaryCadenceKeepsCommRows(t *testing.T) {
	lines := []string{"h:1:1 [0] NCCL INFO Using network IB", "h:1:1 [0] NCCL INFO Using network IB",
		"h:1:1 [0] NCCL INFO comm 0xa1 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"}
	for range 6 {
		lines = append(lines, "h:1:1 [0] NCCL INFO Using network IB")
	}
	lines = append(lines, "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0xa1 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0xde4443395863ef4a - Init START")
	for range 12 {
		lines = append(lines, "h:1:1 [0] NCCL INFO Using network IB")
	}
	run := func(t *testing.T, workers int, interval time.Duration) *summaryLedger {
		sink := &summaryLedger{}
		synctest.Test(t, func(t *testing.T) {
			in, done := cadenceRunner(t, workers, interval, sink, sink)
			for i, l := range lines {
				// One record every 0.6 s on a partition with a backlog: the
				// first timed flush (t=1 s) carries summaries, the next one
				// due no earlier than t=6 s; the communicator lives from
				// t=1.2 s to t=5.4 s.
				cadenceSend(t, in, int64(i), l, backlogHWM)
				time.Sleep(600 * time.Millisecond)
			}
			cadenceStop(t, in, done)
		})
		return sink
	}
	eachParseMode(t, func(t *testing.T, workers int) {
		every := run(t, workers, 0)
		if !every.comms["nranks=2"] {
			t.Fatalf("with every flush carrying summaries: comm rows %v; want one of the keyless nranks=2", slices.Sorted(maps.Keys(every.comms)))
		}
		cadence := run(t, workers, 5*time.Second)
		if g, w := slices.Sorted(maps.Keys(cadence.comms)), slices.Sorted(maps.Keys(every.comms)); !slices.Equal(g, w) {
			t.Errorf("comm rows with summary_interval 5s %v; want those of every flush carrying summaries, %v", g, w)
		}
		if cadence.withJobs >= every.withJobs {
			t.Errorf("%d sink calls with summaries at 5s, %d at 0; want fewer", cadence.withJobs, every.withJobs)
		}
		for _, e := range append(every.errs, cadence.errs...) {
			t.Error(e)
		}
	})
}

// TestSummaryIntervalConfig: pipeline.summary_interval defaults to 0 (every
// flush), accepts 5 s, and is checked with its field path.
func TestSummaryIntervalConfig(t *testing.T) {
	cfg := pipeline.DefaultRunnerConfig()
	if cfg.SummaryInterval != 0 {
		t.Errorf("default summary_interval = %v; want 0", cfg.SummaryInterval)
	}
	cfg.SummaryInterval = 5 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Errorf("summary_interval 5s: Validate() = %v; want nil", err)
	}
	for _, d := range []time.Duration{-time.Second, cfg.IdleEvict} {
		cfg.SummaryInterval = d
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pipeline.summary_interval: must be >= 0 and shorter than idle_evict") {
			t.Errorf("summary_interval %v: Validate() = %v; want the field's error", d, err)
		}
	}
}

// eventCalls records the events of each sink call.
type eventCalls struct {
	mu     sync.Mutex
	events []int
}

func (s *eventCalls) Consume(_ context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, len(b.Events))
	return nil
}

func (s *eventCalls) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.events)
}

// TestRunLoopBacklogBatches: while a partition is more than the backlog
// threshold behind its high water mark, batches flush at
// pipeline.batch.backlog's limits; read at its end, at the live ones; a
// source without a high water mark keeps the live ones.
func TestRunLoopBacklogBatches(t *testing.T) {
	eachParseMode(t, func(t *testing.T, workers int) {
		synctest.Test(t, func(t *testing.T) {
			cfg := parseModeConfig(workers)
			cfg.Batch.MaxRows, cfg.Batch.MaxWait = 2, time.Second
			cfg.Batch.Backlog = pipeline.BacklogLimits{MaxRows: 6, MaxBytes: cfg.Batch.MaxBytes, MaxWait: 4 * time.Second}
			sink := &eventCalls{}
			dcfg := parsers.DefaultDecoderConfig()
			r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
				NewDecoder:    func() pipeline.Decoder { return parsers.NewDecoder(dcfg) },
				Classifier:    parsers.NewLines(nil),
				NewClassifier: func() pipeline.Classifier { return parsers.NewLines(nil) },
				Candidate:     parsers.Prefilter(false), Sink: sink, Logger: zerolog.Nop()})
			in := make(chan pipeline.Input, 8)
			done := make(chan error, 1)
			go func() { done <- r.Run(t.Context(), in) }()
			// Each record is one NCCL line: one event row.
			off := int64(0)
			send := func(n int, hwm func(off int64) int64) {
				for range n {
					cadenceSend(t, in, off, cadenceLine, hwm(off))
					off++
					synctest.Wait()
				}
			}
			backlog := func(int64) int64 { return backlogHWM }
			live := func(off int64) int64 { return off + 1 }
			none := func(int64) int64 { return 0 }
			send(12, backlog)
			// A timed flush after the live max_wait stores nothing behind.
			time.Sleep(2 * time.Second)
			synctest.Wait()
			behind := sink.String()
			send(4, live)
			time.Sleep(5 * time.Second) // the live max_wait flushes the rest
			synctest.Wait()
			send(4, none)
			cadenceStop(t, in, done)
			got := sink.String()
			// Behind, every batch holds more than the live max_rows (6
			// events: the summaries are added at the flush); then at most
			// that many. Without backlog batches: [2 2 2 2 2 2 2 2 2 2 0].
			if behind == "[]" {
				t.Fatalf("no batch stored behind; want batches of the backlog's max_rows (calls %s)", got)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			var total int
			nb := strings.Count(behind, " ") + 1
			for i, n := range sink.events {
				total += n
				if i < nb && n <= cfg.Batch.MaxRows {
					t.Errorf("batch %d behind holds %d events; want more than the live max_rows %d (calls %v)", i, n, cfg.Batch.MaxRows, sink.events)
				}
				if i >= nb && n > cfg.Batch.MaxRows {
					t.Errorf("batch %d at the end or without a high water mark holds %d events; want at most the live max_rows %d (calls %v)", i, n, cfg.Batch.MaxRows, sink.events)
				}
			}
			if total != 20 {
				t.Errorf("stored %d events; want 20 (calls %v)", total, sink.events)
			}
		})
	})
}

// scheduledSink counts the batches it gets, empty or not, with a
// schedule (pipeline.Scheduled).
type scheduledSink struct {
	mu    sync.Mutex
	every time.Duration
	empty []time.Time // when each empty batch came
	full  int
}

func (s *scheduledSink) Every() time.Duration { return s.every }

func (s *scheduledSink) Consume(_ context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Empty() {
		s.empty = append(s.empty, time.Now())
	} else {
		s.full++
	}
	return nil
}

func (s *scheduledSink) counts() (empty []time.Time, full int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.empty), s.full
}

// TestRunLoopSchedule: a Scheduled sink gets an empty batch from the loop
// when no batch reached it for its Every, at the loop's next tick, and
// none while batches come more often.
func TestRunLoopSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		sink := &scheduledSink{every: 30 * time.Second}
		in := make(chan pipeline.Input, 8)
		done, _ := foldLoopOn(t, pipeline.DefaultRunnerConfig(), in, sink) // a tick every second
		time.Sleep(95 * time.Second)
		synctest.Wait()
		empty, full := sink.counts()
		var at []time.Duration
		for _, e := range empty {
			at = append(at, e.Sub(start))
		}
		if fmt.Sprint(at) != "[1s 31s 1m1s 1m31s]" || full != 0 {
			t.Errorf("idle: empty batches at %v, %d others; want at the first tick, then every 30 s, and no other", at, full)
		}
		// A record every 10 s: each flush reaches the sink within the
		// schedule, so no empty batch.
		for i := range 12 {
			in <- pipeline.Input{Message: liveMsg(t, int64(i), "epoch 0", "j-0")}
			time.Sleep(10 * time.Second)
		}
		synctest.Wait()
		if e, full := sink.counts(); len(e) != len(empty) || full == 0 {
			t.Errorf("with records every 10 s: %d more empty batches, %d others; want none, and the records' batches",
				len(e)-len(empty), full)
		}
		stopLoop(t, in, done)
	})
}
