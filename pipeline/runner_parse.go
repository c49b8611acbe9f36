package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sync"
)

// recordDecoder is the pure, per-partition half of the run loop's work on
// a record: the size check, the prefilter, the envelope decode (one Decoder
// per partition, so that a partial line joins within it) and the stamping
// of each decoded line (source coordinates, time, metadata with the job
// named). The loop's inline path owns one, and so does each parse worker;
// the records of one partition always go to the same one, in offset order.
// Not safe for concurrent use.
type recordDecoder struct {
	maxBytes   int
	cand       func([]byte) bool
	newDecoder func() Decoder
	namer      JobNamer
	cluster    string

	parts map[partKey]*partDecoder
	lastK partKey // the partition of the last record, and its decoder:
	last  *partDecoder
	// The stamped metadata of the decoder's Meta values (shared and
	// immutable, parsers.Decoder), per Kafka key: built once, then shared
	// and immutable too.
	metas map[*Meta]stampedMeta

	cur   *Message
	line  int32
	to    func(*Record) // where the stamped lines go
	emitf func(*Record) // d.emit, bound once
}

// partDecoder is one partition's envelope decoder.
type partDecoder struct {
	dec     Decoder
	partial bool // a partial line is in progress: the prefilter is not asked
}

// stampedMeta is a decoder's Meta with the job named for one Kafka key.
type stampedMeta struct {
	key  []byte
	meta *Meta
}

// maxStamped bounds the stamped metadata remembered; beyond it the memory
// starts over. The decoder caches as many Meta values per partition
// (parsers' maxMetaEntries).
const maxStamped = 4096

func newRecordDecoder(cfg RunnerConfig, deps RunnerDeps) *recordDecoder {
	d := &recordDecoder{maxBytes: cfg.MaxRecordBytes, cand: deps.Candidate, newDecoder: deps.NewDecoder,
		namer: JobNamer{Labels: cfg.JobLabels}, cluster: cfg.Cluster}
	d.emitf = d.emit
	d.reset()
	return d
}

// reset drops every partition's decoder and its partial line.
func (d *recordDecoder) reset() {
	d.parts = map[partKey]*partDecoder{}
	d.last = nil
	d.metas = map[*Meta]stampedMeta{}
}

// recordOutcome says what became of a record.
type recordOutcome uint8

const (
	// recordDecoded: decoded, its lines handed on.
	recordDecoded recordOutcome = iota
	// recordOversized: over pipeline.max_record_bytes, a dead letter.
	recordOversized
	// recordSkipped: not a prefilter candidate (and no partial line of
	// its partition in progress): never decoded.
	recordSkipped
	// recordEmpty: decoded without error, but none of its lines was an
	// NCCL message, a launcher host or a telemetry line (or it held only
	// the first pieces of a partial line): for the rules it is activity,
	// as a skipped record is (without a prefilter, with telemetry on,
	// this is what a skipped record becomes).
	recordEmpty
)

// record reads m, a record of partition k: unless it is oversized or
// skipped, its lines go to to, stamped. lines is the number of lines
// handed on, pending whether the partition has a partial line in progress
// after it, err the decoder's error (the record is a dead letter at line
// lines).
func (d *recordDecoder) record(m *Message, k partKey, to func(*Record)) (out recordOutcome, lines int32, pending bool, err error) {
	if len(m.Value) > d.maxBytes {
		return recordOversized, 0, false, nil
	}
	p := d.part(k)
	if !p.partial && !d.cand(m.Value) {
		return recordSkipped, 0, false, nil
	}
	d.cur, d.line, d.to = m, 0, to
	err = p.dec.Decode(m.Value, d.emitf)
	d.cur, d.to = nil, nil
	pp, ok := p.dec.(interface{ Pending() bool })
	p.partial = ok && pp.Pending()
	return recordDecoded, d.line, p.partial, err
}

// part returns partition k's decoder.
func (d *recordDecoder) part(k partKey) *partDecoder {
	if d.last != nil && d.lastK == k {
		return d.last
	}
	p := d.parts[k]
	if p == nil {
		p = &partDecoder{dec: d.newDecoder()}
		d.parts[k] = p
	}
	d.lastK, d.last = k, p
	return p
}

// flush hands partition k's partial line on as a complete line, with m's
// coordinates; it does nothing for a partition without one.
func (d *recordDecoder) flush(k partKey, m *Message, to func(*Record)) {
	p := d.parts[k]
	if p == nil {
		return
	}
	d.cur, d.line, d.to = m, 0, to
	p.dec.Flush(d.emitf)
	d.cur, d.to = nil, nil
	p.partial = false
}

// partitions returns the partitions that have a decoder, sorted.
func (d *recordDecoder) partitions() []partKey {
	ks := make([]partKey, 0, len(d.parts))
	for k := range d.parts {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, comparePart)
	return ks
}

func comparePart(x, y partKey) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.part, y.part))
}

// emit stamps a decoded line with the record's coordinates, its time (the
// record's when the envelope gave none) and the metadata with the job
// named, and hands it on.
func (d *recordDecoder) emit(rec *Record) {
	m := d.cur
	rec.Source = m.Source(d.line)
	d.line++
	if rec.Time.IsZero() {
		rec.Time = m.Time
	}
	rec.Meta = d.stamp(rec, m.Key)
	d.to(rec)
}

// stamp returns rec's metadata with the job named (JobNamer: labels, then
// the record's job, then the Kafka key) and the cluster defaulted. The
// decoder shares one Meta among the records of a container, so the
// stamped copy is shared too, per key; nobody changes it.
func (d *recordDecoder) stamp(rec *Record, key []byte) *Meta {
	src := rec.Meta
	if s, ok := d.metas[src]; ok && bytes.Equal(s.key, key) {
		return s.meta
	}
	m := &Meta{}
	if src != nil {
		*m = *src
	}
	m.Job = d.namer.Name(rec, key)
	if m.Cluster == "" {
		m.Cluster = d.cluster
	}
	if len(d.metas) >= maxStamped {
		clear(d.metas)
	}
	d.metas[src] = stampedMeta{key: bytes.Clone(key), meta: m}
	return m
}

// The parse workers (Run with pipeline.parse_workers > 1): the loop hands
// runs of records to them, each partition to one worker, and applies what
// they parsed in the order the records came in.

// parseJob is records of partitions of one worker, in input order, and
// what the worker made of them; or, with flush set, the end of one
// partition's partial line (Drain).
type parseJob struct {
	gen   uint64    // the loop's reset count when it was sent: a new one drops the worker's decoders first
	msgs  []Message // the records
	flush bool
	fmsg  Message        // the flushed partition's coordinates, with flush
	recs  []parsedRecord // one per record (one for a flush)
	out   Parsed
	done  chan struct{} // one value when the worker is through with the job
	ready bool          // done's value was received
	next  int           // records applied so far (a suspension stops apply between two)
}

// parsedRecord is what a worker made of one record of a job.
type parsedRecord struct {
	end     int32 // job.out's messages up to and including this record's
	lines   int32
	outcome recordOutcome
	pending bool
	err     error
}

// parseWorker is one parse goroutine's state: its partitions' decoders
// and a line parser of its own.
type parseWorker struct {
	dec    *recordDecoder
	parser *Parser
	gen    uint64
	job    *parseJob
	tof    func(*Record) // w.to, bound once
}

// run parses the jobs of jobs until it is closed.
func (w *parseWorker) run(jobs <-chan *parseJob) {
	for j := range jobs {
		w.parse(j)
		j.done <- struct{}{}
	}
}

func (w *parseWorker) parse(j *parseJob) {
	if j.gen != w.gen {
		w.dec.reset()
		w.gen = j.gen
	}
	j.out.Reset()
	j.recs = j.recs[:0]
	w.job = j
	defer func() { w.job = nil }()
	if j.flush {
		w.dec.flush(partKey{j.fmsg.Topic, j.fmsg.Partition}, &j.fmsg, w.tof)
		j.recs = append(j.recs, parsedRecord{end: int32(j.out.len())})
		return
	}
	for i := range j.msgs {
		m := &j.msgs[i]
		before := j.out.len()
		out, lines, pending, err := w.dec.record(m, partKey{m.Topic, m.Partition}, w.tof)
		if out == recordDecoded && err == nil && j.out.len() == before {
			out = recordEmpty
		}
		j.recs = append(j.recs, parsedRecord{end: int32(j.out.len()), lines: lines, outcome: out, pending: pending, err: err})
	}
}

// to parses a stamped line into the job's Parsed.
func (w *parseWorker) to(rec *Record) { w.parser.Parse(rec, &w.job.out) }

// parseQueuePerWorker is how many jobs per worker may wait between the
// loop and the workers: two keep a worker busy while the loop applies the
// job before its next one (a job is one fetched run, up to a few hundred
// records); more only hold records longer.
const parseQueuePerWorker = 2

// parsePool is the parse workers and the jobs sent to them, owned by Run:
// its goroutines end in stop, before Run returns.
type parsePool struct {
	in    []chan *parseJob // per worker; room for every job that may be out
	queue []*parseJob      // sent, in input order: applied from the head
	free  []*parseJob      // applied, kept for their buffers
	max   int              // jobs out at most
	wg    sync.WaitGroup
	m     *Metrics

	lastK partKey // the last record's partition and its worker
	lastW int
	have  bool
}

func newParsePool(r *Runner, n int) *parsePool {
	p := &parsePool{max: parseQueuePerWorker * n, m: r.deps.Metrics}
	for range n {
		ch := make(chan *parseJob, p.max)
		p.in = append(p.in, ch)
		w := &parseWorker{dec: newRecordDecoder(r.cfg, r.deps), parser: NewParser(r.deps.NewClassifier(), true)}
		w.tof = w.to
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w.run(ch)
		}()
	}
	if p.m != nil {
		p.m.ParseQueueCap.Set(float64(p.max))
	}
	return p
}

// stop ends the workers once they finished the job in hand; the jobs not
// applied are dropped.
func (p *parsePool) stop() {
	for _, ch := range p.in {
		close(ch)
	}
	p.wg.Wait()
	if p.m != nil {
		p.m.ParseQueue.Set(0)
	}
}

// worker returns the worker of partition k: always the same one, so that
// a partition's records are decoded in order with its decoder's state.
func (p *parsePool) worker(k partKey) int {
	if p.have && p.lastK == k {
		return p.lastW
	}
	h := uint32(2166136261)
	for i := 0; i < len(k.topic); i++ {
		h = (h ^ uint32(k.topic[i])) * 16777619
	}
	p.lastK, p.lastW, p.have = k, int((h+uint32(k.part))%uint32(len(p.in))), true
	return p.lastW
}

// full reports whether no more jobs may be sent before the head is
// applied; false without a pool.
func (p *parsePool) full() bool { return p != nil && len(p.queue) >= p.max }

// send hands j to worker w.
func (p *parsePool) send(w int, j *parseJob) {
	p.queue = append(p.queue, j)
	p.in[w] <- j
	if p.m != nil {
		p.m.ParseQueue.Set(float64(len(p.queue)))
	}
}

// job returns an empty job.
func (p *parsePool) job(gen uint64) *parseJob {
	var j *parseJob
	if n := len(p.free); n > 0 {
		j = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		j = &parseJob{done: make(chan struct{}, 1)}
	}
	j.gen = gen
	return j
}

// headDone is the head job's channel, nil when no job is out (or there
// is no pool).
func (p *parsePool) headDone() <-chan struct{} {
	if p == nil || len(p.queue) == 0 {
		return nil
	}
	return p.queue[0].done
}

// pop removes the head job, whose done value was received.
func (p *parsePool) pop() *parseJob {
	j := p.queue[0]
	copy(p.queue, p.queue[1:])
	p.queue[len(p.queue)-1] = nil
	p.queue = p.queue[:len(p.queue)-1]
	if p.m != nil {
		p.m.ParseQueue.Set(float64(len(p.queue)))
	}
	return j
}

// release keeps an applied job for its buffers.
func (p *parsePool) release(j *parseJob) {
	j.msgs, j.flush, j.ready, j.next = nil, false, false, 0
	clear(j.recs) // the errors
	p.free = append(p.free, j)
}

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
