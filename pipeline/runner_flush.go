package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
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
	for _, j := range r.asm.Jobs() {
		r.dirty[j] = true
	}
	if err := r.flush(ctx); err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	return nil
}

// flushDecoders emits every partition's partial line as a complete line,
// partition after partition in order.
func (r *Runner) flushDecoders() {
	for _, k := range r.dec.partitions() {
		m := Message{Topic: k.topic, Partition: k.part, Offset: r.offsets[k] - 1}
		r.curNow = r.deps.Now()
		r.dec.flush(k, &m, r.linef)
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

// prepare completes the open batch: summaries and observations of the
// dirty jobs, the jobs to evict, the offsets it covers. It reports false
// when there is nothing to store. With timed (a size or timer flush of
// Run) the summaries wait for SummaryInterval while a partition has a
// backlog, unless a job is evicted, and so do the offsets (see deferred);
// a stream at rest has none.
func (r *Runner) prepare(timed bool) (evict []string, ok bool) {
	now := r.deps.Now()
	r.last = now
	for job, t := range r.touched {
		if now.Sub(t) >= r.cfg.IdleEvict {
			evict = append(evict, job)
			r.dirty[job] = true
		}
	}
	// The collective_perf rows changed since the last batch, once each,
	// before Hold may close their windows.
	r.tel.EmitCollectives(&r.batch)
	release := r.releasable(now, false)
	all := !timed || len(evict) > 0 || now.Sub(r.lastSummaries) >= r.cfg.SummaryInterval || !r.backlog()
	jobs := r.summaryJobs(all)
	if len(jobs) == 0 && r.batch.Len() == 0 && len(r.offsets) == 0 && len(r.batch.Activity) == 0 && !release &&
		!(all && len(r.owed) > 0) {
		r.stored()
		return nil, false
	}
	r.deferred, r.carried = !all, jobs
	if all {
		r.lastSummaries = now
	}
	// Summaries and observations are rebuilt on every attempt sequence: a
	// batch kept after a failed flush gets the latest state.
	r.summarize(jobs, evict)
	r.observeTelemetry(jobs)
	r.batch.Evicted = append(r.batch.Evicted[:0], evict...)
	slices.Sort(r.batch.Evicted)
	r.commitOffsets(now, release)
	if r.deferred {
		// Stored now, committed with the next batch that carries every
		// changed job's summary: a replay from an earlier commit brings
		// these records back to whoever owns the partition then.
		for _, o := range r.batch.Offsets {
			r.owed[partKey{o.Topic, o.Partition}] = o.Next
		}
		r.batch.Offsets = r.batch.Offsets[:0]
		if r.batch.Len() == 0 && len(r.batch.Activity) == 0 && len(r.batch.Telemetry) == 0 {
			r.dropBatch() // nothing to store or observe yet
			r.stored()
			return nil, false
		}
	} else if len(r.owed) > 0 {
		for _, o := range r.batch.Offsets {
			delete(r.owed, partKey{o.Topic, o.Partition})
		}
		for k, next := range r.owed {
			r.batch.Offsets = append(r.batch.Offsets, Offset{Topic: k.topic, Partition: k.part, Next: next})
		}
		clear(r.owed)
	}
	slices.SortFunc(r.batch.Offsets, compareOffset)
	return evict, true
}

// compareOffset orders offsets by topic and partition: the order of a
// commit.
func compareOffset(x, y Offset) int {
	return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition))
}

// summaryJobs returns the dirty jobs whose summaries the batch being
// prepared carries, sorted: with all every one, otherwise those that
// gained a process or a communicator since a batch last carried them (or
// that none did), so that a communicator reaches the stages in the batch it
// appeared in, as with every flush carrying summaries, even when it lives
// a few records only (a communicator's nRanks line before its commId's).
func (r *Runner) summaryJobs(all bool) []string {
	jobs := r.carried[:0]
	for j := range r.dirty {
		if n, ok := r.shown[j]; all || !ok || n != r.asm.Created(j) {
			jobs = append(jobs, j)
		}
	}
	slices.Sort(jobs)
	return jobs
}

// evict drops an idle job whose final summary was stored.
func (r *Runner) evict(j string) {
	r.asm.Evict(j)
	r.tel.Evict(j)
	delete(r.touched, j)
	delete(r.shown, j)
	delete(r.topology, j)
	r.foldedJob = ""
	if mt := r.deps.Metrics; mt != nil {
		mt.Evictions.Inc()
	}
}

// summarize puts the summaries of jobs into the open batch, each job
// enriched first (the enrich stage: its expectation from the inventory,
// then its topology), and the final summaries of the jobs the assembler
// pushed out; with Observe also each job's nodes.
func (r *Runner) summarize(jobs, evict []string) {
	r.batch.Comms, r.batch.Unnamed, r.batch.Jobs = r.batch.Comms[:0], r.batch.Unnamed[:0], r.batch.Jobs[:0]
	r.batch.Nodes, r.batch.Telemetry = r.batch.Nodes[:0], r.batch.Telemetry[:0]
	for _, j := range jobs {
		e := r.enrich.Expect(r.asm, j)
		comms, sum, ok := r.asm.Summaries(j)
		if !ok {
			continue
		}
		if r.enrich.Place(r.asm, j, e, &sum) {
			r.topology[j] = sum.Topology
		}
		r.shown[j] = r.asm.Created(j)
		r.batch.addComms(comms, slices.Contains(evict, j))
		r.batch.Jobs = append(r.batch.Jobs, sum)
		if r.deps.Observe {
			r.batch.Nodes = append(r.batch.Nodes, JobNodes{Job: j, Nodes: r.asm.Nodes(j)})
		}
	}
	// The jobs pushed out for new ones (assembler.max_jobs): their final
	// summaries, or the lines since their last summary would never be
	// summarized while the commit covers them.
	comms, sums := r.asm.Pushed()
	r.batch.addComms(comms, true)
	for i := range sums {
		// A pushed job's nodes went with its state: its final summary
		// keeps the topology of its last one.
		k := JobKey(sums[i].Cluster, sums[i].Namespace, sums[i].Job)
		sums[i].Topology = r.topology[k]
		sums[i].Topology.Explain(&sums[i])
		delete(r.topology, k)
	}
	r.batch.Jobs = append(r.batch.Jobs, sums...)
}

// observeTelemetry puts, with Observe, the telemetry reports of jobs and
// of the jobs with telemetry lines since the last flush into the open
// batch, for the rules.
func (r *Runner) observeTelemetry(jobs []string) {
	if !r.deps.Observe {
		return
	}
	for _, j := range jobs {
		r.telDirty[j] = true
	}
	for _, j := range slices.Sorted(maps.Keys(r.telDirty)) {
		tests, training := r.tel.Report(j)
		ckpts := r.tel.Checkpoints(j)
		colls := r.tel.Collectives(j)
		pool, canary := r.tel.Canary(j)
		if len(tests) > 0 || len(training) > 0 || len(ckpts) > 0 || len(colls) > 0 || canary {
			r.batch.Telemetry = append(r.batch.Telemetry, JobTelemetry{Job: j, Tests: tests, Training: training,
				Checkpoints: ckpts, Collectives: colls, Pool: r.tel.Pool(j), CanaryPool: pool})
		}
	}
}

// commitOffsets sets the offsets the open batch commits once stored: each
// partition's next offset, held back before a partial line's first piece
// and an open fold window's first line (unless the window is sealed);
// with release also the partitions whose commit a window held.
func (r *Runner) commitOffsets(now time.Time, release bool) {
	r.batch.Offsets = r.batch.Offsets[:0]
	for k, ps := range r.parts {
		if _, ok := r.offsets[k]; !ok && !(release && ps.held) {
			continue // nothing new to commit
		}
		next := ps.next
		// Not past the first piece of a partial line: a replay from the
		// commit must see the whole line again.
		c := next
		if h, ok := r.pending[k]; ok && h < c {
			c = h
		}
		// Not past the first line of an open training_steps row: a replay
		// from the commit must fold the same lines into it. A partition
		// read to its end and quiet commits past its open rows with their
		// snapshot instead (Seal): whoever reads on from the commit
		// restores them, so a step's later lines count in the same row
		// whatever the timing or the member.
		ps.foldHeld, ps.staged, ps.stored = false, 0, 0
		if h, ok := r.tel.Hold(k.topic, k.part, next); ok {
			quiet := r.quiet(ps, now)
			switch {
			case quiet && c == next:
				snap, ok, err := r.tel.Seal(k.topic, k.part, next)
				if err != nil {
					r.log.Error().Err(err).Msg("fold window not sealed; the commit waits for the window's end")
					c = min(c, h)
				} else if ok {
					r.batch.Sealed = append(r.batch.Sealed, snap)
				}
			case h < c:
				if !quiet {
					ps.foldHeld, ps.staged = true, c
				}
				c = h
			}
		}
		ps.held = c < next
		r.batch.Offsets = append(r.batch.Offsets, Offset{Topic: k.topic, Partition: k.part, Next: c})
	}
}
