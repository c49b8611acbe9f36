package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// errGenEnded is the cause of a loop context (genContext) that ended:
// the generation it was derived for ended, or Run's context did (a source
// ends its generation then too). Only the loop's context carries it, so a
// flush tells the generation's end apart from a revocation's deadline or
// the end of Run's context outside a generation.
var errGenEnded = errors.New("generation ended")

// genContext returns the loop's context for generation gen: size and
// timer flushes, their stores and commits end with it, so that a
// rebalance during a sink outage stops the retries and the revocation is
// honoured at once. It ends, with errGenEnded as its cause, when gen or
// ctx does; stop ends it and releases its resources. It keeps ctx's
// values.
func genContext(ctx, gen context.Context) (loop context.Context, stop context.CancelFunc) {
	loop, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	end := func(from context.Context) func() {
		return func() { cancel(fmt.Errorf("%w: %w", errGenEnded, context.Cause(from))) }
	}
	stopGen, stopRun := context.AfterFunc(gen, end(gen)), context.AfterFunc(ctx, end(ctx))
	return loop, func() {
		stopGen()
		stopRun()
		cancel(context.Canceled)
	}
}

// genEnded reports whether ctx is a loop context whose generation has
// ended (its revocation is on its way).
func genEnded(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errGenEnded) }

// flushNow is a size or timer flush under ctx: the loop's context
// (genContext), a revocation's for the records applied at it, or the
// caller's outside Run. Within Run the batch is stored by a goroutine of
// its own while the loop goes on with the next one; the previous batch
// must have landed first (at most one in flight: a sink slower than the
// stream holds the loop here, back-pressure).
func (r *Runner) flushNow(ctx context.Context) error {
	if genEnded(ctx) {
		// Every store would be cut short at once (and a held batch sent
		// again only to fail): the revocation stores what is open.
		return context.Cause(ctx)
	}
	if !r.async {
		return r.flush(ctx)
	}
	return r.start(ctx, true)
}

// start lands the batch in flight (or stores the held one), then sends the
// open batch off without waiting for it, both under ctx; timed says it is
// a size or timer flush (summaries may wait, see prepare).
func (r *Runner) start(ctx context.Context, timed bool) error {
	if err := ctx.Err(); err != nil {
		return err // a held batch is not sent again to fail at once
	}
	if err := r.settle(ctx); err != nil {
		return err
	}
	evict, ok := r.prepare(timed)
	if !ok {
		if timed && r.scheduled(r.last) {
			// Nothing to store, and the sink's schedule is due: an empty
			// batch of its own, the open one (its deferred summaries)
			// untouched.
			r.launch(ctx, r.blank(), nil)
		}
		return nil
	}
	r.launch(ctx, r.handOff(), evict)
	return nil
}

// scheduled reports whether the sink's schedule (Scheduled) is due at now:
// Run has not handed it a batch for its Every.
func (r *Runner) scheduled(now time.Time) bool {
	return r.async && r.every > 0 && now.Sub(r.sent) >= r.every
}

// blank returns an empty batch (the spare's capacity).
func (r *Runner) blank() *Batch {
	b := r.spare
	r.spare = nil
	if b == nil {
		b = new(Batch)
	}
	return b
}

// flight is a batch handed to the sink chain by a goroutine of the
// runner's; the loop gets its result on done (exactly one value) in land
// or settle.
type flight struct {
	b      *Batch
	evict  []string           // jobs evicted once b is stored
	cancel context.CancelFunc // ends the store's context
	done   chan error
}

// flightDone is the in-flight batch's result channel, nil when none flies.
func (r *Runner) flightDone() <-chan error {
	if r.flying == nil {
		return nil
	}
	return r.flying.done
}

// handOff moves the open batch out of the loop's hands: the returned Batch
// is the insert's alone, the loop goes on with an empty one (the spare's
// capacity) and no offsets.
func (r *Runner) handOff() *Batch {
	b := r.blank()
	*b, r.stage.batch = r.stage.batch, *b
	r.dropBatch()
	return b
}

// launch stores b in a goroutine, under ctx. The goroutine's owner is
// the loop: every flight is received by land or settle, or by abandon
// when Run returns.
func (r *Runner) launch(ctx context.Context, b *Batch, evict []string) {
	sctx, cancel := context.WithCancel(ctx)
	f := &flight{b: b, evict: evict, cancel: cancel, done: make(chan error, 1)}
	r.flying, r.sent = f, r.deps.Now()
	go func() { f.done <- r.store(sctx, b) }()
}

// land takes the in-flight batch's result: stored, its offsets are
// committed under ctx (the context of whoever receives the result) and
// its idle jobs evicted; cut short by its context, it is held for the
// next flush; a permanent error is returned as is.
func (r *Runner) land(ctx context.Context, err error) error {
	f := r.flying
	r.flying = nil
	defer f.cancel()
	if err != nil {
		if !IsPermanent(err) {
			r.held = f
		}
		return err
	}
	r.commit(ctx, f.b.Offsets)
	r.commits.landed(f.b.Offsets)
	r.stage.evictStored(f.evict, r.deps.Now())
	r.showJobs()
	f.b.Reset()
	r.spare = f.b
	return nil
}

// settle waits until no batch is in flight or held: the in-flight one
// lands, a held one is stored again. When ctx ends first the in-flight
// store is abandoned (cancelled and waited for: the sink chain is never
// called by two goroutines at once) and held; settle returns its error.
func (r *Runner) settle(ctx context.Context) error {
	for r.flying != nil || r.held != nil {
		if r.flying == nil {
			h := r.held
			r.held = nil
			r.launch(ctx, h.b, h.evict)
		}
		var err error
		select {
		case err = <-r.flying.done:
		case <-ctx.Done():
			r.flying.cancel()
			err = <-r.flying.done
		}
		if err := r.land(ctx, err); err != nil {
			return err
		}
	}
	return nil
}

// abandon cancels and waits for the in-flight batch, and forgets it and a
// held one: their offsets stay uncommitted, their records are replayed.
func (r *Runner) abandon() {
	if f := r.flying; f != nil {
		f.cancel()
		<-f.done
		r.flying = nil
	}
	r.held = nil
}

// fatal reports whether a flush error stops the loop: a permanent one. A
// flush cut short by its context keeps the batch for the next flush (or
// drops it at the revocation).
func fatal(err error) bool { return IsPermanent(err) }

// store hands b to the sink chain until it is accepted: the one retry
// loop of the service. It returns ctx's error when ctx ends first, and a
// permanent error at once. It runs in a flight's goroutine and touches
// nothing of the runner but b, the atomics and the metrics.
func (r *Runner) store(ctx context.Context, b *Batch) error {
	ctx, span := r.deps.Tracer.Start(ctx, "ncclwatch.batch")
	span.SetAttributes(attribute.Int("events", len(b.Events)), attribute.Int("jobs", len(b.Jobs)),
		attribute.Int("dead_letters", len(b.DeadLetters)))
	defer span.End()
	r.health.failing()
	backoff := r.backoff()
	for {
		err := r.deps.Sink.Consume(ctx, b)
		if err == nil {
			r.health.ok()
			if mt := r.deps.Metrics; mt != nil {
				mt.BatchRows.Observe(float64(b.Len()))
			}
			return nil
		}
		r.health.failed(err)
		span.RecordError(err)
		if mt := r.deps.Metrics; mt != nil {
			mt.InsertErrors.Inc()
		}
		if IsPermanent(err) {
			return fmt.Errorf("store batch: %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("store batch: %w (last error: %v)", ctx.Err(), err)
		}
		r.log.Debug().Err(err).Dur("retry_in", backoff.Next()).Int("rows", b.Len()).Msg("sink rejected batch; retrying")
		if !backoff.Wait(ctx) {
			return fmt.Errorf("store batch: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// backoff paces the retries of one batch or one rebuild: RetryBackoff,
// doubling up to MaxBackoff.
func (r *Runner) backoff() Backoff { return Backoff{Min: r.cfg.RetryBackoff, Max: r.cfg.MaxBackoff} }

// dropBatch empties the open batch (Assembly.drop) and forgets the
// offsets it covers.
func (r *Runner) dropBatch() {
	r.stage.drop()
	r.commits.drop()
	r.showJobs()
	if mt := r.deps.Metrics; mt != nil {
		mt.BatchPending.Set(0)
	}
}

// showJobs publishes the number of jobs held.
func (r *Runner) showJobs() {
	n := r.stage.asm.Len()
	r.jobs.Store(int64(n))
	if mt := r.deps.Metrics; mt != nil {
		mt.JobsHeld.Set(float64(n))
	}
}
