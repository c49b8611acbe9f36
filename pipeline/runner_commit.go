package pipeline

import (
	"context"
	"slices"
	"time"
)

// atRestNow flushes at once when the records just applied brought the
// stream to rest (atRest) with records, summaries or commits to store:
// the end of a backlog, whose partitions are quiet as soon as their last
// record is read (partState.quiet), is stored and committed now rather
// than at the next tick. A live stream is never at rest when a record was
// just read.
func (r *Runner) atRestNow(ctx context.Context) error {
	// At rest (one pass over the partitions), with something to store:
	// records, summaries or commits owed (owing), or a fold hold.
	now := r.curNow
	if r.flying != nil || !r.atRest(now) {
		return nil
	}
	if len(r.offsets) == 0 && len(r.dirty) == 0 && len(r.owed) == 0 && !r.releasable(now, true) {
		return nil
	}
	if err := r.flushNow(ctx); err != nil && fatal(err) {
		return err
	}
	return nil
}

// partState is what the loop knows of a partition of the generation.
type partState struct {
	next int64     // offset after the last record delivered
	seen time.Time // when it was delivered
	// made is the last record's own time (Message.Time: its Kafka
	// timestamp), zero when the source gave none.
	made time.Time
	// replay: since it was assigned, the partition has been read as a
	// backlog (backlogged) and has not yet had a record after reaching
	// its end (caughtUp): its first catch-up.
	replay, caughtUp bool
	hwm              int64 // its high water mark when fetched; 0 when the source gave none
	held             bool  // the last commit stopped short of next
	// foldHeld: the last stored batch's commit stopped at the first line
	// of an open training_steps fold window (not at a partial line). It
	// stays set when release commits past that line later, so that a
	// partition gone quiet still has its last records flushed at fold_idle
	// (releasable), not a max_wait after its last batch.
	foldHeld bool
	// staged is where the commit of the batch being stored would have
	// stopped but for an open fold window (its next offset, or a partial
	// line's first piece); once that batch is stored it becomes stored.
	staged int64
	// stored: the records below it are stored, and an open fold window
	// held their commit at committed; release commits them as soon as the
	// window closes, without waiting for the next batch.
	stored, committed int64
}

// quiet reports whether the partition was read to its end and got
// nothing for idle. At the end of its first catch-up (replay), with
// nothing read but not yet applied (drained), nothing was written to it
// between its last record and the fetch that reached the end, nor was
// anything fetched since, so the silence began when that record was
// made, not when it was read: a consumer that catches up on old records
// finds the partition quiet at once instead of idle later. Otherwise it
// counts from when its last record was read: timestamps a producer's
// clock or buffering put in the past must not end a live partition's
// steps early, nor may a record made long ago while the next ones wait
// in the loop's input; so does a record stamped later than it was read.
func (p *partState) quiet(now time.Time, idle time.Duration, drained bool) bool {
	since := p.seen
	if p.replay && drained && !p.made.IsZero() && p.made.Before(since) {
		since = p.made
	}
	return p.atEnd() && now.Sub(since) >= idle
}

// quiet is partState.quiet of ps with the runner's fold_idle and input.
func (r *Runner) quiet(ps *partState, now time.Time) bool {
	return ps.quiet(now, r.cfg.FoldIdle, r.drained())
}

// drained reports whether every record Run was given has been applied:
// none waits in its input channel or with the parse workers.
func (r *Runner) drained() bool {
	return len(r.input) == 0 && (r.pool == nil || len(r.pool.queue) == 0)
}

// atEnd reports whether the last record delivered was the partition's
// last when fetched.
func (p *partState) atEnd() bool { return p.hwm > 0 && p.next >= p.hwm }

// backlogged reports whether the source gave a high water mark more than
// backlogRecords past the last record delivered: the partition is read
// as a backlog (BatchConfig.Backlog, SummaryInterval). A source without
// one (files, stdin) never is.
func (p *partState) backlogged() bool { return p.hwm > 0 && p.hwm-p.next > backlogRecords }

// releasable reports whether a partition whose commit was held back is
// quiet now: a flush commits it to its end. With fold only a hold by an
// open fold window counts (the tick's early flush): a partition held by a
// partial line alone stays held whatever the flush.
func (r *Runner) releasable(now time.Time, fold bool) bool {
	for _, ps := range r.parts {
		held := ps.held
		if fold {
			held = ps.foldHeld
		}
		if held && r.quiet(ps, now) {
			return true
		}
	}
	return false
}

// release commits, between batches, what an open fold window held back
// at the last stored batch once that window has closed: the records of a
// window wait for its end (FoldRecords offsets, a fraction of a second
// of a busy partition), not for the end plus the next batch (MaxWait).
// Only what that batch stored is committed (its next offset or a partial
// line's first piece, partState.stored), never past a window still open
// (Telemetry Hold). A partition whose commit a deferred batch owes (owed:
// its summaries wait for SummaryInterval) has nothing to release: that
// batch's prepare cleared stored, and land sets it only with a commit.
// Nothing is committed once ctx, the loop's, has ended.
func (r *Runner) release(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	var offs []Offset
	for k, ps := range r.parts {
		if ps.stored <= ps.committed {
			continue
		}
		c := ps.stored
		if h, ok := r.tel.Hold(k.topic, k.part, ps.next); ok && h < c {
			c = h
		}
		if c <= ps.committed {
			continue
		}
		ps.committed = c
		offs = append(offs, Offset{Topic: k.topic, Partition: k.part, Next: c})
	}
	if len(offs) == 0 {
		return
	}
	slices.SortFunc(offs, compareOffset)
	r.commit(ctx, offs)
}

// atRest reports whether every partition of the generation was read to
// its end and got nothing for FoldIdle: the end of a burst, when the tick
// flushes deferred summaries and commits (owing) without waiting for
// MaxWait.
func (r *Runner) atRest(now time.Time) bool {
	for _, ps := range r.parts {
		if !r.quiet(ps, now) {
			return false
		}
	}
	return len(r.parts) > 0
}

// backlogRecords is how far behind its high water mark a partition must
// be for the batches to grow to BatchConfig.Backlog and the summaries to
// wait for SummaryInterval: a live stream, read
// as it comes (a fetch or two behind), stores them with every flush, so
// record-to-verdict and record-to-commit latency stay those of a flush;
// a backlog (a replay, a consumer catching up) saves the summary tables'
// parts. 10 000: several fetches of a busy partition.
const backlogRecords = 10000

// backlog reports whether a partition of the generation is behind its
// high water mark by more than backlogRecords (Runner.behind, kept by
// admit).
func (r *Runner) backlog() bool { return r.behind > 0 }

// owing reports whether the stream is at rest with summaries or commits
// deferred: a flush stores them now.
func (r *Runner) owing(now time.Time) bool {
	return (len(r.dirty) > 0 || len(r.owed) > 0) && r.atRest(now)
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
