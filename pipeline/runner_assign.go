package pipeline

import (
	"context"
	"fmt"
	"time"
)

// Assigned is called when the source got partitions: the assembler is
// rebuilt from the events stored below each partition's committed offset.
// Everything from that offset on is delivered again and processed as new;
// storage folds the rows written before (every table is keyed by source
// coordinates, or by summary key with a version that depends only on the
// events folded in). Nothing is skipped: a batch is several inserts and a
// crash can fall between them, so no one table says what was stored.
// ctx is the generation's: the rebuild stops retrying when it ends. Run
// derives the context of its size and timer flushes from it
// (genContext); a caller of Message gives the generation's context there.
func (r *Runner) Assigned(ctx context.Context, parts []Partition) error {
	r.abandon()
	r.reset()
	r.dropBatch()
	r.assigned.Store(false)
	if err := r.rebuildRetrying(ctx, parts); err != nil {
		return err
	}
	r.assigned.Store(true)
	return nil
}

// rebuildRetrying rebuilds until it succeeds, the generation ends or the
// error is permanent, with the sink's backoff (RetryBackoff doubling to
// MaxBackoff): the loader is the sink's server, and an outage of it at an
// assignment is waited out like one during a batch. Meanwhile /readyz is
// 503 (no assignment held; after SinkTimeout the sink is unhealthy too,
// with the error), each failure is counted in
// ncclwatch_state_rebuild_errors_total, and the first is logged at warn.
func (r *Runner) rebuildRetrying(ctx context.Context, parts []Partition) error {
	backoff := r.backoff()
	for attempt := 1; ; attempt++ {
		err := r.rebuild(ctx, parts)
		if err == nil {
			if attempt > 1 {
				r.health.ok()
				r.log.Info().Int("attempts", attempt).Msg("state rebuilt after failed attempts")
			}
			return nil
		}
		if mt := r.deps.Metrics; mt != nil {
			mt.RebuildErrors.Inc()
		}
		if IsPermanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("rebuild state: %w (last error: %v)", ctx.Err(), err)
		}
		if attempt == 1 {
			r.health.failing()
			r.log.Warn().Err(err).Dur("retry_in", backoff.Next()).Msg("state rebuild failed; retrying while the assignment waits")
		} else {
			r.log.Debug().Err(err).Int("attempt", attempt).Dur("retry_in", backoff.Next()).Msg("state rebuild failed; retrying")
		}
		r.health.failed(err)
		// What a failed attempt loaded is dropped: the next one starts
		// from nothing.
		r.reset()
		r.dropBatch()
		if !backoff.Wait(ctx) {
			return fmt.Errorf("rebuild state: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

func (r *Runner) rebuild(ctx context.Context, parts []Partition) error {
	if err := r.rebuildEvents(ctx, parts); err != nil {
		return err
	}
	// After the events: a restored nccl-tests run stays its job's
	// current one.
	return r.restoreFolds(ctx, parts)
}

// rebuildEvents feeds the stored events of the assigned partitions below
// their commits to the assembly stage (Assembly.rebuild).
func (r *Runner) rebuildEvents(ctx context.Context, parts []Partition) error {
	if r.deps.Loader == nil || len(parts) == 0 {
		return nil
	}
	start := time.Now()
	since := r.deps.Now().Add(-r.cfg.IdleEvict)
	n, err := r.stage.rebuild(ctx, r.deps.Loader, parts, since)
	if err != nil {
		return err
	}
	r.showJobs()
	if mt := r.deps.Metrics; mt != nil {
		mt.Rebuilds.Inc()
		mt.RebuiltEvents.Add(float64(n))
	}
	r.log.Info().Int("partitions", len(parts)).Int("events", n).Int("jobs", r.stage.asm.Len()).
		Dur("took", time.Since(start)).Msg("state rebuilt from stored events")
	return nil
}

// restoreFolds reopens the fold windows whose snapshot was stored with
// the committed offset of an assigned partition: a commit inside a window
// that passed open rows was made with one (Seal).
func (r *Runner) restoreFolds(ctx context.Context, parts []Partition) error {
	if r.deps.Folds == nil {
		return nil
	}
	for _, p := range parts {
		if p.Committed <= 0 {
			continue
		}
		state, ok, err := r.deps.Folds.LoadFold(ctx, p.Topic, p.Partition, p.Committed)
		if err != nil {
			return fmt.Errorf("rebuild fold window of %s/%d: %w", p.Topic, p.Partition, err)
		}
		if !ok {
			continue
		}
		if err := r.stage.tel.Restore(p.Topic, p.Partition, p.Committed, state); err != nil {
			// A snapshot this build cannot read: the window's later
			// lines open rows of their own, as before snapshots.
			r.log.Warn().Err(err).Msg("fold window not restored")
			if mt := r.deps.Metrics; mt != nil {
				mt.RebuildErrors.Inc()
			}
		}
	}
	return nil
}

// revokeMargin is kept from the revocation deadline for the answer to reach
// the source and the source to leave the generation.
const revokeMargin = 500 * time.Millisecond

// Revoked is called before partitions are taken away: the open batch is
// stored and committed while the generation is alive, if the sink accepts
// it before ctx's deadline; otherwise it is dropped (the records are
// delivered again to the next owner). The state is dropped either way.
func (r *Runner) Revoked(ctx context.Context, parts []Partition) error {
	r.stage.dirtyAll()
	// The jobs held leave with their partitions; they did not end (not
	// Evicted): the rules stage keeps their alerts as they are.
	released := r.stage.held()
	r.stage.batch.Released = append(r.stage.batch.Released[:0], released...)
	fctx, cancel := revokeCtx(ctx)
	defer cancel()
	err := r.flush(fctx)
	if err != nil {
		rows := r.stage.batch.Len()
		if r.held != nil {
			rows += r.held.b.Len()
		}
		r.log.Warn().Err(err).Int("rows", rows).Msg("revoked before the open batch was stored; dropped, the next owner replays it")
		if len(released) > 0 {
			// The stage must learn of the release all the same: a batch
			// with nothing to store, its context done.
			done, cancel := context.WithCancel(context.Background())
			cancel()
			_ = r.deps.Sink.Consume(done, &Batch{Released: released})
		}
	}
	r.abandon()
	r.reset()
	r.dropBatch()
	r.assigned.Store(false)
	return err
}
