package pipeline

import "context"

// The run loop's side of the parse workers (parse_pool.go): which jobs it
// sends, and how it applies what they parsed, in input order, record by
// record between its admission, suspension and flushes.

// dispatch sends records to the parse workers: each run of consecutive
// records of one worker's partitions is one job. When as many jobs are
// out as may be, the oldest is applied first; a suspension meanwhile
// keeps the records not sent for the revocation.
func (r *Runner) dispatch(ctx context.Context, ms []Message) error {
	p := r.pool
	for len(ms) > 0 {
		w := p.worker(partKey{ms[0].Topic, ms[0].Partition})
		n := 1
		for n < len(ms) && p.worker(partKey{ms[n].Topic, ms[n].Partition}) == w {
			n++
		}
		for p.full() && !r.suspended {
			if err := r.applyNext(ctx); err != nil {
				return err
			}
		}
		if r.suspended {
			r.late = append(r.late, ms)
			return nil
		}
		j := p.job(r.resets)
		j.msgs = ms[:n:n]
		p.send(w, j)
		ms = ms[n:]
	}
	return nil
}

// applyNext waits for the oldest job out and applies it.
func (r *Runner) applyNext(ctx context.Context) error {
	if j := r.pool.queue[0]; !j.ready {
		<-j.done
	}
	return r.applyHead(ctx)
}

// headDone is the head job's channel for the loop's select: nil when no
// job is out, or while the loop is suspended (resumeLate applies it).
func (r *Runner) headDone() <-chan struct{} {
	if r.suspended {
		return nil
	}
	return r.pool.headDone()
}

// applyHead applies the oldest job out, whose worker is through with it
// (its done value received); a suspension leaves it at the head, the
// records applied marked.
func (r *Runner) applyHead(ctx context.Context) error {
	j := r.pool.queue[0]
	j.ready = true
	err := r.apply(ctx, j)
	if j.next < len(j.recs) && !j.flush {
		return err // suspended
	}
	r.pool.pop()
	r.pool.release(j)
	return err
}

// applyAll applies every job out, in order, until a suspension.
func (r *Runner) applyAll(ctx context.Context) error {
	for r.pool != nil && len(r.pool.queue) > 0 && !r.suspended {
		if err := r.applyNext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// apply does for the records of a parsed job what message does after
// decoding them, record after record: the bookkeeping, their lines'
// NCCL events and telemetry, the dead letters and activity samples, the
// flush of a full batch. A fatal flush error stops it.
func (r *Runner) apply(ctx context.Context, j *parseJob) error {
	if j.flush {
		r.stage.now = r.deps.Now()
		r.stage.apply(&j.out, 0, int(j.recs[0].end))
		return nil
	}
	from := 0
	if j.next > 0 {
		from = int(j.recs[j.next-1].end)
	}
	now := r.deps.Now() // the run's records were fetched together: one clock read
	defer r.count()
	for ; j.next < len(j.recs); j.next++ {
		if r.suspended {
			return nil // the rest at the revocation
		}
		pr := &j.recs[j.next]
		m := &j.msgs[j.next]
		k, err := r.admit(m, now)
		if err != nil {
			from = int(pr.end)
			continue // draining: the record is not taken, as in message
		}
		r.stage.apply(&j.out, from, int(pr.end))
		from = int(pr.end)
		r.settleRecord(m, k, pr.outcome, pr.lines, pr.pending, pr.err)
		if err := r.admitted(ctx); err != nil && fatal(err) {
			j.next++
			return err
		}
		now = r.later(now)
	}
	return nil
}

// drainParsed is the workers' part of Drain: every job out is applied,
// then each partition's partial line is ended (flushDecoders), partition
// after partition in order.
func (r *Runner) drainParsed(ctx context.Context) error {
	if r.pool == nil || r.draining {
		return nil
	}
	if err := r.applyAll(ctx); err != nil {
		return err
	}
	for _, k := range r.commits.partitions() {
		for r.pool.full() {
			if err := r.applyNext(ctx); err != nil {
				return err
			}
		}
		j := r.pool.job(r.resets)
		j.flush = true
		j.fmsg = r.commits.last(k)
		r.pool.send(r.pool.worker(k), j)
	}
	return r.applyAll(ctx)
}
