package pipeline

import (
	"context"
	"time"
)

// atRestNow flushes at once when the records just applied brought the
// stream to rest (commitPolicy.atRest) with records, summaries or commits
// to store: the end of a backlog, whose partitions are quiet as soon as
// their last record is read (partState.quiet), is stored and committed
// now rather than at the next tick. A live stream is never at rest when a
// record was just read.
func (r *Runner) atRestNow(ctx context.Context) error {
	// At rest (one pass over the partitions), with something to store:
	// records, summaries or commits owed, or a fold hold.
	now := r.stage.now
	drained := r.drained()
	if r.flying != nil || !r.commits.atRest(now, drained) {
		return nil
	}
	if !r.commits.covers() && len(r.stage.dirty) == 0 && !r.commits.owing() && !r.commits.releasable(now, true, drained) {
		return nil
	}
	if err := r.flushNow(ctx); err != nil && fatal(err) {
		return err
	}
	return nil
}

// drained reports whether every record Run was given has been applied:
// none waits in its input channel or with the parse workers.
func (r *Runner) drained() bool {
	return len(r.input) == 0 && (r.pool == nil || len(r.pool.queue) == 0)
}

// release commits, between batches, what an open fold window held back
// at the last stored batch once that window has closed
// (commitPolicy.released). Nothing is committed once ctx, the loop's,
// has ended.
func (r *Runner) release(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if offs := r.commits.released(r.stage.tel); len(offs) > 0 {
		r.commit(ctx, offs)
	}
}

// owing reports whether the stream is at rest with summaries or commits
// deferred: a flush stores them now.
func (r *Runner) owing(now time.Time) bool {
	return (len(r.stage.dirty) > 0 || r.commits.owing()) && r.commits.atRest(now, r.drained())
}

// commit commits the offsets of a stored batch.
func (r *Runner) commit(ctx context.Context, offs []Offset) {
	if c := r.deps.Committer; c != nil && len(offs) > 0 {
		if err := c.Commit(ctx, offs); err != nil {
			// The rows are stored; whoever owns the partition next replays
			// from the last commit and storage folds the repeats.
			r.log.Warn().Err(err).Msg("offset commit failed after a stored batch; a replay will be idempotent")
			if mt := r.deps.Metrics; mt != nil {
				mt.CommitErrors.Inc()
			}
		} else if mt := r.deps.Metrics; mt != nil {
			mt.Commits.Inc()
		}
	}
}
