package pipeline

import (
	"context"
	"errors"
	"time"
)

// assign is the loop's step for an assignment: the records of the
// generation before it are applied first (resumeLate, under Run's ctx),
// then the state is rebuilt (Assigned) and the answer sent.
func (r *Runner) assign(ctx context.Context, x Input) error {
	if err := r.resumeLate(ctx); err != nil {
		return err
	}
	err := r.Assigned(x.Ctx, x.Partitions)
	x.Done <- err
	if err != nil && x.Ctx.Err() == nil {
		return err
	}
	return nil
}

// revoke is the loop's step for a revocation: the records before it are
// applied and stored within its deadline (resumeLate), then the open
// batch (Revoked), and the answer sent.
func (r *Runner) revoke(x Input) error {
	// The last of resumeLate's stores may still fly when Revoked settles
	// it, so fctx ends after Revoked.
	fctx, cancel := revokeCtx(x.Ctx)
	defer cancel()
	if err := r.resumeLate(fctx); err != nil {
		return err
	}
	err := r.Revoked(x.Ctx, x.Partitions)
	x.Done <- err
	if err != nil && fatal(err) {
		return err
	}
	return nil
}

// take is the loop's step for records, under the loop's context
// (genContext). With parse workers, they are sent to them. While the loop
// is suspended (the generation ended with a full batch in hand) they are
// kept for the revocation.
func (r *Runner) take(ctx context.Context, x Input) error {
	if x.Messages == nil && r.pool == nil && !r.suspended {
		// One record on the loop: no run to make.
		if err := r.message(ctx, &x.Message, r.deps.Now()); err != nil && fatal(err) {
			return err
		}
		return nil
	}
	ms := x.Messages
	if ms == nil {
		ms = []Message{x.Message}
	}
	if r.suspended {
		r.late = append(r.late, ms)
		return nil
	}
	return r.feed(ctx, ms)
}

// feed processes a run of records: sent to the parse workers, or parsed
// and applied on the loop.
func (r *Runner) feed(ctx context.Context, ms []Message) error {
	if r.pool != nil {
		return r.dispatch(ctx, ms)
	}
	return r.messages(ctx, ms)
}

// messages processes records in order; a fatal error stops it, and a
// suspension (the generation ended with the batch full) keeps the rest
// for the revocation.
func (r *Runner) messages(ctx context.Context, ms []Message) error {
	now := r.deps.Now() // a run's records were fetched together: one clock read
	for i := range ms {
		if r.suspended {
			r.late = append(r.late, ms[i:])
			return nil
		}
		if err := r.message(ctx, &ms[i], now); err != nil && fatal(err) {
			return err
		}
		now = r.later(now)
	}
	return nil
}

// resumeLate ends a suspension: the records in hand of the ended
// generation (the parse workers' jobs, then the late runs, in input
// order) are applied, a full batch stored at once and each one after it,
// under ctx (the revocation's deadline; Run's own at an assignment or the
// end of the input). With nothing suspended it applies the workers' jobs
// out the same way. A fatal error stops it.
func (r *Runner) resumeLate(ctx context.Context) error {
	if !r.suspended && (r.pool == nil || len(r.pool.queue) == 0) {
		return nil
	}
	r.suspended = false
	late := r.late
	r.late = nil
	if r.full() {
		if err := r.flushNow(ctx); err != nil && fatal(err) {
			return err
		}
	}
	if err := r.applyAll(ctx); err != nil {
		return err
	}
	for _, ms := range late {
		if err := r.feed(ctx, ms); err != nil {
			return err
		}
	}
	return r.applyAll(ctx)
}

// revokeCtx is the context of a revocation's stores: its deadline less
// revokeMargin.
func revokeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-revokeMargin))
	}
	return ctx, func() {}
}

// watch sets the health gauges and logs an outage once it lasted
// SinkTimeout, and its end.
func (r *Runner) watch(ctx context.Context) {
	t := time.NewTicker(max(r.cfg.SinkTimeout/10, 10*time.Millisecond))
	defer t.Stop()
	down := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok := r.health.healthy(time.Now(), r.cfg.SinkTimeout)
		if ok == !down {
			continue
		}
		down = !ok
		if m := r.deps.Metrics; m != nil {
			v := 1.0
			if down {
				v = 0
			}
			m.SinkHealthy.Set(v)
			m.Ready.Set(v)
		}
		if down {
			ev := r.log.Warn().Dur("for", time.Since(r.health.since()))
			if err := r.LastSinkError(); err != nil {
				ev = ev.Err(err)
			} else {
				ev = ev.Str("error", "sink call still in progress")
			}
			ev.Msg("sink has not stored a batch within pipeline.sink_timeout; not ready, offsets stay uncommitted, retrying")
		} else {
			r.log.Info().Msg("sink stores batches again; ready")
		}
	}
}

// Message processes one record; a size flush runs under ctx (for a
// source with generations, the generation's: its end stops the flush's
// retries).
func (r *Runner) Message(ctx context.Context, m Message) error {
	return r.message(ctx, &m, r.deps.Now())
}

// message processes one record at processing time now.
func (r *Runner) message(ctx context.Context, m *Message, now time.Time) error {
	k, err := r.admit(m, now)
	r.count()
	if err != nil {
		return err
	}
	r.stage.gave = false
	out, lines, pending, derr := r.dec.record(m, k, r.stage.linef)
	if out == recordDecoded && derr == nil && !r.stage.gave {
		out = recordEmpty
	}
	r.settleRecord(m, k, out, lines, pending, derr)
	return r.admitted(ctx)
}

// count adds the records admitted since the last call to the counters
// (once per run of records: per record, the two metrics' atomic adds were
// a visible share of the loop's CPU on the load benchmark).
func (r *Runner) count() {
	if r.admittedRecs == 0 {
		return
	}
	r.records.Add(int64(r.admittedRecs))
	if mt := r.deps.Metrics; mt != nil {
		mt.Records.Add(float64(r.admittedRecs))
		mt.Bytes.Add(float64(r.admittedBytes))
	}
	r.admittedRecs, r.admittedBytes = 0, 0
}

// admit does the bookkeeping of a record before its lines are applied:
// the counters, the commit policy's partition state (the offsets the open
// batch covers), the processing time (now: read once per run of records,
// as reading the clock per record was a large share of the loop's CPU on
// the load benchmark).
func (r *Runner) admit(m *Message, now time.Time) (partKey, error) {
	if r.draining {
		return partKey{}, errors.New("runner: draining")
	}
	r.admittedRecs++
	r.admittedBytes += len(m.Value)
	r.stage.now = now
	k, flipped := r.commits.admit(m, now)
	if flipped {
		r.showLimits()
	}
	return k, nil
}

// settleRecord does what is left of a record after its lines were
// applied: the dead letters and the activity sample (Assembly.settle),
// the partition's partial line (commitPolicy.settle).
func (r *Runner) settleRecord(m *Message, k partKey, out recordOutcome, lines int32, pending bool, err error) {
	r.stage.settle(m, out, lines, err)
	if out != recordOversized && out != recordSkipped {
		r.commits.settle(m, k, pending)
	}
}

// later returns now, or the clock reading of a flush made since (the
// flush read it after waiting for the batch in flight, which can take
// seconds): a run's later records must not look older than they are, or a
// partition could look quiet for fold_idle at the next tick.
func (r *Runner) later(now time.Time) time.Time {
	if r.last.After(now) {
		return r.last
	}
	return now
}

// admitted ends a record: its coordinates count in the batch's bytes, and
// a full batch is flushed under ctx. Within Run, a full batch that cannot
// be stored because the generation of ctx (the loop's) ended suspends the
// loop's records until the revocation (resumeLate): the batch keeps
// max_rows, and the stores are not tried once per record to fail.
func (r *Runner) admitted(ctx context.Context) error {
	r.stage.batch.Bytes += 16 // coordinates
	if !r.full() {
		return nil
	}
	err := r.flushNow(ctx)
	if r.async && genEnded(ctx) && r.full() {
		r.suspended = true
		return nil
	}
	return err
}

// full reports whether the open batch is due for a size flush.
// It also gives the open batch the rows limit in force (Batch.rowLimit).
func (r *Runner) full() bool {
	rows, bytes, _ := r.cfg.Batch.limits(r.commits.backlog())
	b := &r.stage.batch
	b.rowLimit = rows
	return b.Len() >= rows || b.Bytes >= bytes
}

// maxWait is the flush interval in force (BatchConfig.Backlog).
func (r *Runner) maxWait() time.Duration {
	_, _, wait := r.cfg.Batch.limits(r.commits.backlog())
	return wait
}

// showLimits sets ncclwatch_batch_capacity_rows to the rows limit in
// force; admit calls it when the backlog begins or ends.
func (r *Runner) showLimits() {
	if m := r.deps.Metrics; m != nil {
		rows, _, _ := r.cfg.Batch.limits(r.commits.backlog())
		m.BatchCapacity.Set(float64(rows))
	}
}
