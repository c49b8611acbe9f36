package pipeline

import "sync"

// The parse workers (Run with pipeline.parse_workers > 1): the loop hands
// runs of records to them, each partition to one worker, and applies what
// they parsed in the order the records came in. This file is the workers
// and their queue (parsePool), which know nothing of the loop; how the
// loop sends jobs and applies them between its admission, suspension and
// flushes is runner_parse.go.

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

func newParsePool(cfg RunnerConfig, deps RunnerDeps, n int) *parsePool {
	p := &parsePool{max: parseQueuePerWorker * n, m: deps.Metrics}
	for range n {
		ch := make(chan *parseJob, p.max)
		p.in = append(p.in, ch)
		w := &parseWorker{dec: newRecordDecoder(cfg, deps), parser: NewParser(deps.NewClassifier(), true)}
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
