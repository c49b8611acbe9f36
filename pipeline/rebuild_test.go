package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// flakyLoader fails its first failures loads, as ClickHouse does while it
// is paused (an i/o timeout), then serves the stored events.
type flakyLoader struct {
	*recordingSink
	failures atomic.Int32
	err      error
}

func (l *flakyLoader) LoadEvents(ctx context.Context, topic string, parts []int32, since time.Time, fn func(pipeline.EventRow) error) error {
	if l.failures.Add(-1) >= 0 {
		return l.err
	}
	return l.recordingSink.LoadEvents(ctx, topic, parts, since, fn)
}

// TestRunnerRebuildRetried: a rebuild that fails while ClickHouse is
// paused is retried with backoff (counted, the sink marked failing) until
// it succeeds, and the state is then what one successful rebuild gives;
// a permanent error is returned at once, and the generation's end stops
// the retries with its context error. Before, the first failure was
// returned and the run loop (and the process) exited.
func TestRunnerRebuildRetried(t *testing.T) {
	stored := &recordingSink{}
	var committed int64
	{
		h := newHarness(t, stored, nil)
		h.sendFile(t, 0, "llm-ib", healthy)
		if err := h.r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		committed = h.offset[0]
	}
	newRunner := func(l *flakyLoader) (*pipeline.Runner, *pipeline.Metrics) {
		cfg := pipeline.DefaultRunnerConfig()
		cfg.RetryBackoff, cfg.MaxBackoff, cfg.SinkTimeout = time.Millisecond, 4*time.Millisecond, time.Millisecond
		m := pipeline.NewMetrics(prometheus.NewRegistry())
		dcfg := parsers.DefaultDecoderConfig()
		return pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
			NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: &parsers.Lines{},
			Candidate: parsers.Candidate, Sink: &recordingSink{}, Loader: l, Metrics: m, Logger: zerolog.Nop()}), m
	}
	parts := []pipeline.Partition{{Topic: "logs", Partition: 0, Committed: committed}}
	timeout := errors.New("clickhouse load events: read tcp 127.0.0.1:9000: i/o timeout")

	l := &flakyLoader{recordingSink: stored, err: timeout}
	l.failures.Store(5)
	r, m := newRunner(l)
	if err := r.Assigned(context.Background(), parts); err != nil {
		t.Fatalf("Assigned with 5 failed loads = %v; want it retried to success", err)
	}
	if got := testutil.ToFloat64(m.RebuildErrors); got != 5 {
		t.Errorf("rebuild errors = %v; want 5", got)
	}
	if !r.HoldsAssignment() || r.Jobs() != 1 || !r.Ready() || r.LastSinkError() != nil {
		t.Errorf("after the retried rebuild: assignment %v, jobs %d, ready %v, last error %v; want true, 1, true, nil",
			r.HoldsAssignment(), r.Jobs(), r.Ready(), r.LastSinkError())
	}
	if got := testutil.ToFloat64(m.RebuiltEvents); got != float64(len(stored.events)) {
		t.Errorf("rebuilt events = %v; want %d (one rebuild's worth, not the failed attempts')", got, len(stored.events))
	}

	// The generation ends while the load keeps failing.
	l = &flakyLoader{recordingSink: stored, err: timeout}
	l.failures.Store(1 << 30)
	r, _ = newRunner(l)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := r.Assigned(ctx, parts)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Assigned while the generation ends = %v; want its context error", err)
	}
	if r.Ready() || r.LastSinkError() == nil {
		t.Errorf("while the rebuild fails: ready %v, last error %v; want not ready, the load error", r.Ready(), r.LastSinkError())
	}

	// A permanent error is not retried.
	l = &flakyLoader{recordingSink: stored, err: pipeline.Permanent(errors.New("clickhouse: Database ncclwatch doesn't exist"))}
	l.failures.Store(1 << 30)
	r, m = newRunner(l)
	if err := r.Assigned(context.Background(), parts); !pipeline.IsPermanent(err) {
		t.Errorf("Assigned with a permanent load error = %v; want it returned", err)
	}
	if got := testutil.ToFloat64(m.RebuildErrors); got != 1 {
		t.Errorf("rebuild errors after a permanent one = %v; want 1 (no retry)", got)
	}
}
