package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace/noop"
)

// Decoder turns one raw record into log lines; parsers.Decoder is the
// implementation. It keeps state between records (a CRI or Docker partial
// line waits for its end), so the runner holds one per partition.
type Decoder interface {
	Decode(data []byte, emit func(*Record)) error
	Flush(emit func(*Record))
}

// Message is one Kafka record as the runner sees it.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Time      time.Time
	// HighWaterMark is the partition's high water mark when the record
	// was fetched (the offset the next produced record gets), 0 when the
	// source does not know it. A record at HighWaterMark-1 says the
	// partition has been read to its end (see RunnerConfig.FoldIdle).
	HighWaterMark int64
}

// Source returns the coordinates of the line-th line of m.
func (m *Message) Source(line int32) Source {
	return Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Line: line}
}

// Next returns the position to commit once m has been durably accepted.
func (m *Message) Next() Offset {
	return Offset{Topic: m.Topic, Partition: m.Partition, Next: m.Offset + 1}
}

// Partition is one assigned partition.
type Partition struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset, the first offset the
	// source delivers, or -1 when none was committed. Assigned rebuilds
	// state from the stored events below it: those records are not
	// delivered again, while everything from it on is.
	Committed int64
}

// Committer commits Kafka offsets; the Kafka source implements it.
type Committer interface {
	Commit(ctx context.Context, offs []Offset) error
}

// EventLoader reads stored events back to rebuild the assembler after an
// assignment; the ClickHouse sink implements it.
type EventLoader interface {
	LoadEvents(ctx context.Context, topic string, partitions []int32, since time.Time, fn func(EventRow) error) error
}

// defaultParseWorkers is RunnerConfig.ParseWorkers' default where
// GOMAXPROCS allows it, maxParseWorkers the cap of the value: the loop
// applies what every worker parsed, so more workers than cores only add
// hand-offs.
const (
	defaultParseWorkers = 2
	maxParseWorkers     = 64
)

// partKey is a partition of a topic: the run loop's and the telemetry
// folding's key.
type partKey struct {
	topic string
	part  int32
}

// Runner is the streaming service's core: it decodes records, hands their
// lines to the assembly stage, hands the batches that stage builds to the
// sink chain and commits offsets only after the chain accepted the rows
// that hold them.
//
// Run is the one loop: one goroutine, one select over the source's inputs
// (records, assignments, revocations), the flush timer and the result of
// the batch in flight; it owns commit and revoke. A full batch is stored
// (and retried) by a goroutine of its own while the loop builds the next
// one: at most one in flight, its offsets committed by the loop once it
// was stored, before the next batch flies. With parse workers
// (RunnerConfig.ParseWorkers) the pure half of each record (prefilter,
// envelope decode, line parse) runs on goroutines Run owns, each
// partition on one of them in offset order, and the loop applies the
// results in input order (parse_pool.go, runner_parse.go).
//
// The Runner itself holds the delivery: batching, the flight and its
// retries, commits, assignments and revocations. Two parts it drives own
// the rest: stage (Assembly) holds everything assembled from the lines
// and builds each batch, and commits (commitPolicy) holds the partitions'
// state and says which offsets a batch may commit.
//
// Message, Flush, Assigned and Revoked are its steps; callers without a
// source (tests, tools) may call them directly instead of Run, from one
// goroutine. Nothing of a Runner is safe for concurrent use except Ready,
// LastSinkError, Jobs and Stopped.
type Runner struct {
	cfg  RunnerConfig
	deps RunnerDeps
	log  zerolog.Logger

	stage   Assembly       // the assemble and enrich stages, and the open batch
	commits commitPolicy   // what a stored batch may commit
	dec     *recordDecoder // the inline path's decoders, one per partition: partial lines join within it
	// resets counts reset calls: a parse job carries the count it was sent
	// under, and a worker drops its decoders when it changed.
	resets   uint64
	pool     *parsePool // Run's parse workers; nil: parsing is inline
	last     time.Time  // last flush
	draining bool

	// every is the sink's schedule (Scheduled), 0 when it has none; sent
	// is when Run last handed the sink a batch.
	every time.Duration
	sent  time.Time

	// Records in hand when the generation ended (Run only): a full batch
	// cannot be stored under the loop's context any more, so the loop
	// stops applying records there (suspended) and keeps the rest (late;
	// with parse workers also the jobs out, the head's applied part
	// marked) until the revocation, which applies them under its own
	// deadline (resumeLate), in batches of max_rows as before the end.
	suspended bool
	late      [][]Message

	// The batch being stored while the loop builds the next (Run only):
	// at most one in flight. Its Batch belongs to the insert goroutine
	// until the loop receives its result; held is a batch whose store was
	// cut short by its context, stored before the next one; spare is a
	// stored batch kept for its capacity.
	async  bool
	flying *flight
	held   *flight
	spare  *Batch
	// admittedRecs and admittedBytes are the records admit took since
	// count last added them to records and the metrics.
	admittedRecs, admittedBytes int
	// input is Run's input channel, nil outside Run (drained).
	input <-chan Input

	// Read by /readyz and the watchdog while the loop blocks in the sink.
	health   health
	jobs     atomic.Int64
	records  atomic.Int64
	assigned atomic.Bool   // an assignment is held
	stopped  chan struct{} // closed when Run returns
}

// NewRunner returns a runner; cfg must be valid and deps.Sink and
// deps.NewDecoder set.
func NewRunner(cfg RunnerConfig, deps RunnerDeps) *Runner {
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider().Tracer("ncclwatch")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Candidate == nil {
		deps.Candidate = func([]byte) bool { return true }
	}
	r := &Runner{cfg: cfg, deps: deps, log: deps.Logger,
		commits: commitPolicy{idle: cfg.FoldIdle, log: deps.Logger},
		stopped: make(chan struct{}), dec: newRecordDecoder(cfg, deps)}
	r.stage.init(cfg, deps)
	if s, ok := deps.Sink.(Scheduled); ok {
		r.every = s.Every()
	}
	r.reset()
	r.last = deps.Now()
	if m := deps.Metrics; m != nil {
		m.Ready.Set(1)
		m.SinkHealthy.Set(1)
	}
	return r
}

// reset drops all assembled state, the partitions' state and the partial
// lines of every partition.
func (r *Runner) reset() {
	r.stage.reset()
	r.commits.reset()
	r.dec.reset()
	r.resets++
	r.showLimits()
	r.jobs.Store(0)
}

// health is the sink's health as /readyz and the watchdog read it while
// the loop blocks in the sink: since when a batch (or a rebuild) has
// been failing, and the last error. Safe for concurrent use.
type health struct {
	failingSince atomic.Int64 // unix nanos of the first attempt of a batch not stored yet; 0 when none
	lastErr      atomic.Pointer[error]
}

// healthy reports whether nothing has been failing for timeout at now.
func (h *health) healthy(now time.Time, timeout time.Duration) bool {
	since := h.failingSince.Load()
	return since == 0 || now.Sub(time.Unix(0, since)) < timeout
}

// failing marks the start of an attempt that has not succeeded yet,
// unless one is marked already.
func (h *health) failing() { h.failingSince.CompareAndSwap(0, time.Now().UnixNano()) }

// failed records err, the last attempt's.
func (h *health) failed(err error) { h.lastErr.Store(&err) }

// ok marks the sink healthy.
func (h *health) ok() {
	h.failingSince.Store(0)
	h.lastErr.Store(nil)
}

// err returns the last error, nil after ok.
func (h *health) err() error {
	if p := h.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// since returns when the failing began.
func (h *health) since() time.Time { return time.Unix(0, h.failingSince.Load()) }

// Ready reports whether the sink is keeping up (for /readyz): false while
// a batch has not been stored for SinkTimeout or longer. It does not wait
// for a sink call in progress.
func (r *Runner) Ready() bool { return r.health.healthy(time.Now(), r.cfg.SinkTimeout) }

// LastSinkError returns the last error of the sink chain, nil when the
// last batch was stored.
func (r *Runner) LastSinkError() error { return r.health.err() }

// Jobs returns the number of jobs held (for tests and /metrics).
func (r *Runner) Jobs() int { return int(r.jobs.Load()) }

// Records returns the number of records processed.
func (r *Runner) Records() int64 { return r.records.Load() }

// HoldsAssignment reports whether the runner holds an assignment (for
// /readyz): from an Assigned that succeeded to the next Revoked.
func (r *Runner) HoldsAssignment() bool { return r.assigned.Load() }

// InputKind says what an Input carries.
type InputKind uint8

const (
	// InputMessage carries one record, or with Messages set a run of them.
	InputMessage InputKind = iota
	// InputAssigned says the source got Partitions; Ctx is done when the
	// generation ends. The loop rebuilds its state and answers on Done.
	InputAssigned
	// InputRevoked says Partitions are being taken away; Ctx expires when
	// the group stops waiting. The loop stores and commits what it can
	// before then, drops the rest (it is delivered again) and answers on
	// Done.
	InputRevoked
)

// Input is what a source sends the run loop, in order: an assignment, its
// records, its revocation.
type Input struct {
	Kind    InputKind
	Message Message
	// Messages, when not nil, are records handled in order instead of
	// Message: a source hands over what it fetched in one channel send.
	// The slice and the records' Key and Value bytes become the loop's:
	// the source must not reuse them.
	Messages   []Message
	Partitions []Partition
	Ctx        context.Context
	// Done, for assignments and revocations, gets the loop's answer; it
	// must have room for one value.
	Done chan<- error
}

// Stopped is closed when Run has returned; a source blocked on sending an
// Input or waiting for an answer gives up then.
func (r *Runner) Stopped() <-chan struct{} { return r.stopped }

// Run is the run loop: it takes inputs from in until in is closed (the
// source has stopped), flushing on size and on time, then stores and
// commits what is open within ShutdownTimeout. ctx bounds the sink calls
// of size and timer flushes; a source stops sending when ctx is done and
// closes in. Run returns the first fatal error: a permanent sink error or
// a failed rebuild. While it runs, a watchdog logs at warn when a batch
// has not been stored for SinkTimeout and sets ncclwatch_sink_healthy.
func (r *Runner) Run(ctx context.Context, in <-chan Input) error {
	defer close(r.stopped)
	r.async, r.input = true, in
	defer func() {
		r.async, r.input = false, nil
		r.abandon()
	}()
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		r.watch(wctx)
	}()
	defer func() {
		stopWatch()
		<-watched
	}()
	if n := r.cfg.ParseWorkers; n > 1 && r.deps.NewClassifier != nil {
		r.pool = newParsePool(r.cfg, r.deps, n)
		defer func() {
			r.pool.stop()
			r.pool = nil
		}()
	}

	// loop is the context of the size and timer flushes, their stores and
	// commits: ctx, and while a generation is held until it ends
	// (genContext); endGen lets it go.
	loop, endGen := ctx, context.CancelFunc(func() {})
	defer func() { endGen() }()
	// The tick paces MaxWait (the backlog's too, at the tick's
	// granularity).
	tick := time.NewTicker(max(r.cfg.Batch.MaxWait/4, time.Millisecond))
	defer tick.Stop()
	for {
		inputs := in
		if r.pool.full() && !r.suspended {
			inputs = nil // the workers hold enough: back-pressure to the source
		}
		select {
		case x, ok := <-inputs:
			if !ok {
				if genEnded(loop) {
					// No revocation came (the source stopped without
					// one): what is in hand is drained as the end of the
					// input.
					loop = ctx
				}
				if err := r.resumeLate(ctx); err != nil {
					return err
				}
				if err := r.drainParsed(loop); err != nil {
					return err
				}
				return r.Drain()
			}
			var err error
			switch x.Kind {
			case InputAssigned:
				err = r.assign(ctx, x)
				endGen()
				loop, endGen = genContext(ctx, x.Ctx)
			case InputRevoked:
				err = r.revoke(x)
				endGen()
				loop, endGen = ctx, func() {}
			default:
				err = r.take(loop, x)
			}
			if err != nil {
				return err
			}
		case <-r.headDone():
			if err := r.applyHead(loop); err != nil {
				return err
			}
		case err := <-r.flightDone():
			if err := r.land(loop, err); err != nil && fatal(err) {
				return err
			}
		case <-tick.C:
			if r.flying != nil {
				continue
			}
			// On time, or at once when a partition whose commit an open
			// fold window holds has turned quiet at its end: its commit
			// waits for nothing else (record-to-commit latency at the end
			// of a burst is FoldIdle plus a tick, not FoldIdle plus MaxWait).
			// Likewise when the stream came to rest with summaries, and
			// so commits, deferred (SummaryInterval).
			// And when the sink's schedule is due (scheduled).
			if now := r.deps.Now(); now.Sub(r.last) < r.maxWait() && !r.commits.releasable(now, true, r.drained()) &&
				!r.owing(now) && !r.scheduled(now) {
				r.release(loop)
				continue
			}
			if err := r.flushNow(loop); err != nil && fatal(err) {
				return err
			}
			continue
		}
		// The records just read or applied, or the batch that just
		// landed, may have brought the stream to rest.
		if err := r.atRestNow(loop); err != nil {
			return err
		}
	}
}
