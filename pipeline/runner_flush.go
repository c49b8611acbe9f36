package pipeline

import (
	"context"
	"fmt"
	"slices"
)

// Drain stops accepting records, ends the partial lines in progress and
// stores what is open, within ShutdownTimeout. It is the end of Run for a
// source without generations (files); after a Kafka source's revocation
// there is nothing left to store.
func (r *Runner) Drain() error {
	if r.draining {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	r.draining = true
	r.flushDecoders()
	// Every held job gets its final summary.
	r.stage.dirtyAll()
	if err := r.flush(ctx); err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	return nil
}

// flushDecoders emits every partition's partial line as a complete line,
// partition after partition in order.
func (r *Runner) flushDecoders() {
	for _, k := range r.dec.partitions() {
		m := r.commits.last(k)
		r.stage.now = r.deps.Now()
		r.dec.flush(k, &m, r.stage.linef)
	}
}

// Flush stores and commits the open batch now.
func (r *Runner) Flush(ctx context.Context) error { return r.flush(ctx) }

// flush builds the open batch's summaries and observations, hands it to the
// sink chain, retrying until the chain accepts it (or ctx ends, or the error
// is permanent), then commits the offsets it covers and evicts idle jobs.
// When it returns an error the batch is held whole for the next flush.
func (r *Runner) flush(ctx context.Context) error {
	if err := r.start(ctx, false); err != nil {
		return err
	}
	return r.settle(ctx)
}

// prepare completes the open batch: the assembly stage's summaries and
// observations of the dirty jobs and the jobs to evict, then the offsets
// it commits (the commit policy's). It reports false when there is
// nothing to store. With timed (a size or timer flush of Run) the
// summaries wait for SummaryInterval while a partition has a backlog,
// unless a job is evicted, and so do the offsets: a deferred batch is
// stored now and its commit owed to the next one that carries every
// summary; a stream at rest has none.
func (r *Runner) prepare(timed bool) (evict []string, ok bool) {
	now := r.deps.Now()
	r.last = now
	drained := r.drained()
	release := r.commits.releasable(now, false, drained)
	evict, ok = r.stage.prepare(now, timed, r.commits.backlog(), r.commits.covers() || release, r.commits.owing())
	if !ok {
		r.health.ok()
		return nil, false
	}
	b := &r.stage.batch
	r.commits.stage(b, r.stage.tel, now, release, drained)
	if r.stage.deferred {
		r.commits.owe(b)
		if r.stage.empty() {
			r.dropBatch() // nothing to store or observe yet
			r.health.ok()
			return nil, false
		}
	} else {
		r.commits.pay(b)
	}
	slices.SortFunc(b.Offsets, compareOffset)
	return evict, true
}
