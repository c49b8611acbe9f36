package pipeline

import (
	"cmp"
	"slices"
	"time"

	"github.com/rs/zerolog"
)

// commitPolicy decides which offsets the run loop may commit and when. It
// owns the state of each partition of the generation (partState: how far
// it was read, its high water mark, its commit holds), the offsets the
// open batch covers (offsets), the first piece of each partition's
// partial line (pending), the commits that batches with deferred
// summaries owe (owed) and the count of partitions read as a backlog
// (behind), which sets the batch limits and the summary cadence.
//
// The loop tells it of every record (admit, settle) and asks it what a
// batch commits once stored (stage, owe, pay), what a closed fold window
// lets it commit between batches (released) and whether the stream is at
// rest; it tells it what was committed (landed). The holds of open fold
// windows are the TelemetryAssembler's, passed in; the policy never calls
// the sink or the Committer. Not safe for concurrent use.
type commitPolicy struct {
	idle time.Duration // RunnerConfig.FoldIdle
	log  zerolog.Logger

	parts   map[partKey]*partState
	offsets map[partKey]int64 // next offsets covered by the open batch
	pending map[partKey]int64 // offset of the first piece of a partition's partial line
	// owed are the commits of stored batches that deferred their
	// summaries, made by the next batch that does not (SummaryInterval).
	owed map[partKey]int64
	// behind counts the partitions read as a backlog (partState.
	// backlogged): the batch limits (BatchConfig.Backlog) and the summary
	// cadence (SummaryInterval) follow it.
	behind int
}

// reset forgets every partition: a new generation starts from nothing.
func (c *commitPolicy) reset() {
	c.parts = map[partKey]*partState{}
	c.offsets = map[partKey]int64{}
	c.pending = map[partKey]int64{}
	c.owed = map[partKey]int64{}
	c.behind = 0
}

// admit records that m was delivered at processing time now: the open
// batch covers it, and its partition's state follows it. flipped reports
// that the backlog began or ended (the batch limits in force changed).
func (c *commitPolicy) admit(m *Message, now time.Time) (k partKey, flipped bool) {
	k = partKey{m.Topic, m.Partition}
	c.offsets[k] = m.Offset + 1
	ps := c.parts[k]
	if ps == nil {
		ps = &partState{}
		c.parts[k] = ps
	}
	was, live := ps.backlogged(), ps.atEnd()
	ps.next, ps.seen, ps.made, ps.hwm = m.Offset+1, now, m.Time, m.HighWaterMark
	is := ps.backlogged()
	ps.caughtUp = ps.caughtUp || live
	ps.replay = !ps.caughtUp && (is || ps.replay)
	if is == was {
		return k, false
	}
	if is {
		c.behind++
	} else {
		c.behind--
	}
	return k, c.behind == 0 || c.behind == 1 && is
}

// settle records whether partition k has a partial line in progress after
// m: its first piece holds the partition's commit until the line ends.
func (c *commitPolicy) settle(m *Message, k partKey, pending bool) {
	if !pending {
		delete(c.pending, k)
		return
	}
	if _, held := c.pending[k]; !held {
		c.pending[k] = m.Offset
	}
}

// drop forgets the offsets of the open batch: it was handed off or
// dropped.
func (c *commitPolicy) drop() { clear(c.offsets) }

// covers reports whether the open batch covers records.
func (c *commitPolicy) covers() bool { return len(c.offsets) > 0 }

// last returns the coordinates of the last record delivered of partition
// k in the open batch (a partial line's flush is stamped with them).
func (c *commitPolicy) last(k partKey) Message {
	return Message{Topic: k.topic, Partition: k.part, Offset: c.offsets[k] - 1}
}

// partitions returns the partitions of the generation, sorted.
func (c *commitPolicy) partitions() []partKey {
	ks := make([]partKey, 0, len(c.parts))
	for k := range c.parts {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, comparePart)
	return ks
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

// atEnd reports whether the last record delivered was the partition's
// last when fetched.
func (p *partState) atEnd() bool { return p.hwm > 0 && p.next >= p.hwm }

// backlogged reports whether the source gave a high water mark more than
// backlogRecords past the last record delivered: the partition is read
// as a backlog (BatchConfig.Backlog, SummaryInterval). A source without
// one (files, stdin) never is.
func (p *partState) backlogged() bool { return p.hwm > 0 && p.hwm-p.next > backlogRecords }

// backlogRecords is how far behind its high water mark a partition must
// be for the batches to grow to BatchConfig.Backlog and the summaries to
// wait for SummaryInterval: a live stream, read
// as it comes (a fetch or two behind), stores them with every flush, so
// record-to-verdict and record-to-commit latency stay those of a flush;
// a backlog (a replay, a consumer catching up) saves the summary tables'
// parts. 10 000: several fetches of a busy partition.
const backlogRecords = 10000

// backlog reports whether a partition of the generation is behind its
// high water mark by more than backlogRecords.
func (c *commitPolicy) backlog() bool { return c.behind > 0 }

// releasable reports whether a partition whose commit was held back is
// quiet now (drained: nothing delivered waits to be applied): a flush
// commits it to its end. With fold only a hold by an open fold window
// counts (the tick's early flush): a partition held by a partial line
// alone stays held whatever the flush.
func (c *commitPolicy) releasable(now time.Time, fold, drained bool) bool {
	for _, ps := range c.parts {
		held := ps.held
		if fold {
			held = ps.foldHeld
		}
		if held && ps.quiet(now, c.idle, drained) {
			return true
		}
	}
	return false
}

// atRest reports whether every partition of the generation was read to
// its end and got nothing for FoldIdle: the end of a burst, when the tick
// flushes deferred summaries and commits without waiting for MaxWait.
func (c *commitPolicy) atRest(now time.Time, drained bool) bool {
	for _, ps := range c.parts {
		if !ps.quiet(now, c.idle, drained) {
			return false
		}
	}
	return len(c.parts) > 0
}

// released returns what may be committed between batches: what an open
// fold window held back at the last stored batch once that window has
// closed. The records of a window wait for its end (FoldRecords offsets,
// a fraction of a second of a busy partition), not for the end plus the
// next batch (MaxWait). Only what that batch stored is committed (its
// next offset or a partial line's first piece, partState.stored), never
// past a window still open (tel's Hold). A partition whose commit a
// deferred batch owes (owed) has nothing to release: that batch's stage
// cleared stored, and landed sets it only with a commit. The offsets
// returned count as committed.
func (c *commitPolicy) released(tel *TelemetryAssembler) []Offset {
	var offs []Offset
	for k, ps := range c.parts {
		if ps.stored <= ps.committed {
			continue
		}
		n := ps.stored
		if h, ok := tel.Hold(k.topic, k.part, ps.next); ok && h < n {
			n = h
		}
		if n <= ps.committed {
			continue
		}
		ps.committed = n
		offs = append(offs, Offset{Topic: k.topic, Partition: k.part, Next: n})
	}
	slices.SortFunc(offs, compareOffset)
	return offs
}

// stage sets the offsets b commits once stored: each partition's next
// offset, held back before a partial line's first piece and an open fold
// window's first line (unless the window is sealed: its snapshot goes
// into b.Sealed); with release also the partitions whose commit a window
// held. drained says nothing delivered waits to be applied.
func (c *commitPolicy) stage(b *Batch, tel *TelemetryAssembler, now time.Time, release, drained bool) {
	b.Offsets = b.Offsets[:0]
	for k, ps := range c.parts {
		if _, ok := c.offsets[k]; !ok && !(release && ps.held) {
			continue // nothing new to commit
		}
		next := ps.next
		// Not past the first piece of a partial line: a replay from the
		// commit must see the whole line again.
		n := next
		if h, ok := c.pending[k]; ok && h < n {
			n = h
		}
		// Not past the first line of an open training_steps row: a replay
		// from the commit must fold the same lines into it. A partition
		// read to its end and quiet commits past its open rows with their
		// snapshot instead (Seal): whoever reads on from the commit
		// restores them, so a step's later lines count in the same row
		// whatever the timing or the member.
		ps.foldHeld, ps.staged, ps.stored = false, 0, 0
		if h, ok := tel.Hold(k.topic, k.part, next); ok {
			quiet := ps.quiet(now, c.idle, drained)
			switch {
			case quiet && n == next:
				snap, ok, err := tel.Seal(k.topic, k.part, next)
				if err != nil {
					c.log.Error().Err(err).Msg("fold window not sealed; the commit waits for the window's end")
					n = min(n, h)
				} else if ok {
					b.Sealed = append(b.Sealed, snap)
				}
			case h < n:
				if !quiet {
					ps.foldHeld, ps.staged = true, n
				}
				n = h
			}
		}
		ps.held = n < next
		b.Offsets = append(b.Offsets, Offset{Topic: k.topic, Partition: k.part, Next: n})
	}
}

// owe moves b's offsets to owed: b defers its summaries, so it is stored
// now and committed with the next batch that carries every changed job's
// summary; a replay from an earlier commit brings these records back to
// whoever owns the partition then.
func (c *commitPolicy) owe(b *Batch) {
	for _, o := range b.Offsets {
		c.owed[partKey{o.Topic, o.Partition}] = o.Next
	}
	b.Offsets = b.Offsets[:0]
}

// owing reports whether a deferred batch's commit waits.
func (c *commitPolicy) owing() bool { return len(c.owed) > 0 }

// pay adds the commits owed to b, which carries every changed job's
// summary, where b does not commit the partition itself.
func (c *commitPolicy) pay(b *Batch) {
	if len(c.owed) == 0 {
		return
	}
	for _, o := range b.Offsets {
		delete(c.owed, partKey{o.Topic, o.Partition})
	}
	for k, next := range c.owed {
		b.Offsets = append(b.Offsets, Offset{Topic: k.topic, Partition: k.part, Next: next})
	}
	clear(c.owed)
}

// landed records that offs, a stored batch's, were committed.
func (c *commitPolicy) landed(offs []Offset) {
	for _, o := range offs {
		if ps := c.parts[partKey{o.Topic, o.Partition}]; ps != nil {
			ps.committed, ps.stored, ps.staged = o.Next, ps.staged, 0
		}
	}
}

// compareOffset orders offsets by topic and partition: the order of a
// commit.
func compareOffset(x, y Offset) int {
	return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition))
}
