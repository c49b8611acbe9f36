package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Assembly is the assemble and enrich stages of the chain. The run loop
// feeds it records, parsed (apply) or as stamped lines (line), and asks it
// for the batch to store (prepare); scan and guard use it through
// NewFileAssembly (Apply, Line, Summary, SummaryBatch). It owns:
//   - the NCCL assembler (asm), the Processor that feeds it, and the
//     TelemetryAssembler (tel);
//   - the open batch (batch): event rows (tap), telemetry rows (fold),
//     dead letters, activity samples, and at a flush the summaries,
//     observations and evictions; the loop reads its size, fills in its
//     offsets (commitPolicy) and hands it off;
//   - what changed since the last batch: dirty (jobs with NCCL events or
//     otherwise due a summary), telDirty (jobs with telemetry lines),
//     touched (when each job last got a line, for idle eviction), and the
//     summary cadence (lastSummaries, deferred, carried, shown);
//   - topology, each job's last one (a pushed-out job's final summary
//     keeps it);
//   - the line path's caches (foldedJob, the job key), which spare repeated
//     map writes and key building for the lines of one job.
//
// Enrichment (the Enricher: the inventory's expectation and topology) is
// applied to each job as its summary is built. It knows nothing of
// offsets or commits (commitPolicy) nor of the sink (Runner). Not safe
// for concurrent use: one goroutine (the run loop's, scan's) calls it.
type Assembly struct {
	cfg  RunnerConfig
	deps RunnerDeps

	asm    NCCLAssembler
	proc   *Processor
	tel    *TelemetryAssembler
	enrich Enricher
	batch  Batch

	// now is the processing time of the record at hand: one clock read
	// per run of records, not per line.
	now      time.Time
	dirty    map[string]bool
	telDirty map[string]bool      // jobs with telemetry lines since the last flush
	touched  map[string]time.Time // processing time a job last got an event
	// foldedJob's touched entry is foldedAt and its telDirty entry true
	// ("" when unknown): fold skips the two map writes for the next line of
	// the same job at the same now, most lines of a run of records.
	// Whatever else deletes or sets those entries clears it.
	foldedJob string
	foldedAt  time.Time
	gave      bool // a line of the record at hand gave the processor something (Processor.gave)
	// lastSummaries is when a batch last carried every dirty job's
	// summaries; deferred says the batch being prepared does not, only
	// those of the jobs in carried (the others stay dirty for the next
	// one); shown is Created of each job when a batch last carried its
	// summaries. See RunnerConfig.SummaryInterval.
	lastSummaries time.Time
	deferred      bool
	carried       []string
	shown         map[string]int
	// topology is each job's last Topology (Inventory.Topology), for the
	// final summary of a job the assembler pushed out, whose nodes it no
	// longer knows.
	topology map[string]*Topology
	linef    func(*Record) // a.line and a.fold, bound once
	foldf    func(*Record, *TelemetryLine)
	// The job key (JobKey) of the last telemetry line's job, kept so that
	// the lines of one job build it once.
	keyMeta [3]string
	key     string
	sampler Decoder              // decodes the activity samples
	sampled map[string]time.Time // Kafka key → last activity sample
	namer   JobNamer
	source  string // a file front end's input at hand (SetSource)
}

// NewFileAssembly returns the stage as a front end without a run loop
// uses it (scan, guard): every NCCL event goes to asm as job's, every
// telemetry line to tel (nil: telemetry off) as the input SetSource
// named last, and en enriches what Summary returns. Line reads lines
// with cls. It keeps no rows (no tap, no batch): such a front end
// reports summaries, not batches of rows. Only Apply, Line, SetSource,
// Summary, SummaryBatch and Stats serve it.
func NewFileAssembly(asm NCCLAssembler, cls Classifier, job string, tel *TelemetryAssembler, en Enricher) *Assembly {
	a := &Assembly{asm: asm, tel: tel, enrich: en}
	a.proc = NewProcessor(asm, cls, func(*Record) string { return job })
	if tel != nil {
		a.foldf = a.foldSource
	}
	return a
}

// SetSource names the input whose records Apply gets next: a file front
// end reports nccl-tests runs and training series per input (they do not
// continue from one input into the next).
func (a *Assembly) SetSource(name string) { a.source = name }

// Apply applies everything pr holds (apply over all of it): the entry
// point of a front end whose parsing runs elsewhere (scan's search
// goroutines).
func (a *Assembly) Apply(pr *Parsed) {
	a.proc.Stats.Records += pr.records
	a.proc.Stats.Bytes += pr.bytes
	a.apply(pr, 0, pr.len())
}

// Line parses and applies one decoded line on the caller's goroutine
// (Processor.Record, then its telemetry): the entry point of a file front
// end that reads line by line (guard).
func (a *Assembly) Line(rec *Record) {
	a.proc.Record(rec)
	if tl, ok := a.proc.Telemetry(); ok && a.foldf != nil {
		a.foldf(rec, tl)
	}
}

// Stats returns what the stage's processor counted.
func (a *Assembly) Stats() ProcessorStats { return a.proc.Stats }

// Summary returns job's communicator and job summaries, enriched (the
// enrich stage: its expectation from the inventory first, its topology
// after); ok is false when the stage holds no state of job.
func (a *Assembly) Summary(job string) (comms []CommSummary, sum JobSummary, ok bool) {
	comms, sum, _, ok = a.summary(job)
	return comms, sum, ok
}

// SummaryBatch returns a batch holding job's enriched summaries (Summary)
// as the run loop's flush puts a job's final ones in it: the job in Jobs,
// every communicator in Comms, in the assembler's order. It is what a file
// front end, whose input is complete when it asks, hands its sink chain
// (the rules stage, its table or JSON sink). ok is false when the stage
// holds no state of job.
func (a *Assembly) SummaryBatch(job string) (b *Batch, ok bool) {
	comms, sum, ok := a.Summary(job)
	if !ok {
		return nil, false
	}
	b = &Batch{Jobs: []JobSummary{sum}}
	b.addComms(comms, true)
	return b, true
}

// summary is Summary; placed reports that the inventory set sum's
// topology.
func (a *Assembly) summary(job string) (comms []CommSummary, sum JobSummary, placed, ok bool) {
	e := a.enrich.Expect(a.asm, job)
	comms, sum, ok = a.asm.Summaries(job)
	if !ok {
		return nil, sum, false, false
	}
	return comms, sum, a.enrich.Place(a.asm, job, e, &sum), true
}

// foldSource is fold for a file front end: the line's telemetry is the
// input's at hand (SetSource), and no rows are kept.
func (a *Assembly) foldSource(rec *Record, tl *TelemetryLine) {
	a.tel.Add(a.source, rec.Meta, tl, rec.Time, Source{Topic: a.source}, nil)
}

// init sets a up; it must not be copied afterwards (linef and foldf are
// bound to it).
func (a *Assembly) init(cfg RunnerConfig, deps RunnerDeps) {
	a.cfg, a.deps = cfg, deps
	a.namer = JobNamer{Labels: cfg.JobLabels}
	a.enrich = Enricher{Inventory: deps.Inventory, Default: cfg.Assembler.Expect}
	a.linef, a.foldf = a.line, a.fold
}

// reset drops all assembled state and the open batch's summary cadence.
func (a *Assembly) reset() {
	a.asm = a.deps.NewAssembler(a.cfg.Assembler)
	a.proc = NewProcessor(a.asm, a.deps.Classifier, func(rec *Record) string {
		return JobKey(rec.Meta.Cluster, rec.Meta.Namespace, rec.Meta.Job)
	}, WithTap(a.tap))
	a.tel = NewTelemetryAssembler(a.cfg.Telemetry, a.deps.Inventory)
	a.dirty = map[string]bool{}
	a.telDirty = map[string]bool{}
	a.touched = map[string]time.Time{}
	a.foldedJob = ""
	a.deferred, a.carried = false, nil
	a.shown = map[string]int{}
	a.topology = map[string]*Topology{}
	a.sampler = nil
}

// apply is the stage's one entry point: it applies the lines a Parser
// read into pr, from its message from to to, in input order: their NCCL
// events go to the assembler (and the tap), their telemetry to fold.
func (a *Assembly) apply(pr *Parsed, from, to int) { a.proc.applyRange(pr, from, to, a.foldf) }

// line parses a decoded, stamped line on the caller's goroutine and
// applies it: the run loop's inline path. Processor.Record parses with a
// Parser and applies what it kept as apply does; the line's telemetry,
// read in the same call, goes to fold from the Parser as it is (most
// lines of trainer output are telemetry, and copying each into a Parsed
// and out again costs the inline path a visible share of its CPU).
func (a *Assembly) line(rec *Record) {
	a.proc.Record(rec)
	a.gave = a.gave || a.proc.gave
	if tl, ok := a.proc.Telemetry(); ok {
		a.fold(rec, tl)
	}
}

// fold hands a line's telemetry to the telemetry assembler.
func (a *Assembly) fold(rec *Record, tl *TelemetryLine) {
	m := rec.Meta
	if k := [3]string{m.Cluster, m.Namespace, m.Job}; k != a.keyMeta || a.key == "" {
		a.keyMeta, a.key = k, JobKey(k[0], k[1], k[2])
	}
	job := a.key
	a.tel.Add(job, m, tl, rec.Time, rec.Source, &a.batch)
	// Telemetry-only jobs idle out like the others.
	if job != a.foldedJob || a.now != a.foldedAt {
		a.touched[job] = a.now
		a.telDirty[job] = true
		a.foldedJob, a.foldedAt = job, a.now
	}
}

// tap turns every NCCL event into a stored row and marks its job dirty.
func (a *Assembly) tap(job string, rec *Record, ev *Event) {
	if mt := a.deps.Metrics; mt != nil {
		mt.NCCLLines.Inc()
	}
	m := rec.Meta
	rank := ev.Rank
	if rank < 0 {
		rank = ev.LauncherRank
	}
	row := EventRow{Source: rec.Source, Time: rec.Time, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Container: m.Container, Node: m.Node, Host: string(ev.Host), PID: string(ev.PID), Dev: ev.Dev,
		Rank: rank, Kind: ev.Kind.String(), Warn: ev.IsWarn(), Line: string(rec.Text)}
	a.batch.Events = appendRow(a.batch.Events, row, a.batch.rowLimit)
	a.batch.Bytes += eventRowBytes + len(row.Line) + len(row.Host) + len(row.PID)
	a.dirty[job] = true
	a.touched[job] = a.now
}

// ErrOversized is the error a Decoder returns (wrapped or as is) for a
// record or line over its size cap; parsers.ErrOversized is this value.
var ErrOversized = errors.New("oversized: exceeds the size cap")

// deadLetter adds m, unreadable from its line-th line on, to the batch's
// dead letters.
func (a *Assembly) deadLetter(m *Message, line int32, reason, msg string) {
	raw := m.Value
	if len(raw) > a.cfg.MaxDeadLetterBytes {
		raw = raw[:a.cfg.MaxDeadLetterBytes]
	}
	a.batch.DeadLetters = append(a.batch.DeadLetters, DeadLetter{
		Source: m.Source(line),
		Time:   m.Time, Reason: reason + ": " + msg, Raw: append([]byte(nil), raw...)})
	a.batch.Bytes += len(raw) + len(msg)
	if mt := a.deps.Metrics; mt != nil {
		mt.DeadLetters.WithLabelValues(reason).Inc()
		mt.ParseErrors.WithLabelValues(reason).Inc()
	}
}

// settle does what is left of a record after its lines were applied:
// the dead letters, the activity sample of a record that was not decoded
// or gave nothing.
func (a *Assembly) settle(m *Message, out recordOutcome, lines int32, err error) {
	switch out {
	case recordOversized:
		a.deadLetter(m, 0, "oversized", fmt.Sprintf("record of %d bytes exceeds pipeline.max_record_bytes %d", len(m.Value), a.cfg.MaxRecordBytes))
	case recordSkipped:
		if a.deps.Observe {
			a.activity(m)
		}
	default:
		if out == recordEmpty && a.deps.Observe {
			a.activity(m)
		}
		if err != nil {
			a.deadLetter(m, lines, DeadLetterReason(err), err.Error())
		}
	}
}

// activitySample is how often one job's non-NCCL records are decoded to
// tell the rules its pods log: 10 s gives the absence rules (minutes) dozens
// of samples per pod while decoding a negligible share of the stream.
const activitySample = 10 * time.Second

// maxSampled bounds the keys remembered for sampling; beyond it the memory
// starts over (a burst of extra samples, never growth).
const maxSampled = 100000

// activity adds a sampled non-NCCL record of a job to Batch.Activity. It
// decodes with a decoder of its own: a sample must not disturb a partial
// line of the partition.
func (a *Assembly) activity(m *Message) {
	now := a.now
	if a.sampled == nil {
		a.sampled = map[string]time.Time{}
	}
	if t, ok := a.sampled[string(m.Key)]; ok && now.Sub(t) < activitySample {
		return
	}
	if len(a.sampled) >= maxSampled {
		clear(a.sampled)
	}
	a.sampled[string(m.Key)] = now
	report := func(rec *Record) {
		var meta Meta
		if rec.Meta != nil {
			meta = *rec.Meta
		}
		meta.Job = a.namer.Name(rec, m.Key)
		if meta.Cluster == "" {
			meta.Cluster = a.cfg.Cluster
		}
		t := rec.Time
		if t.IsZero() {
			t = m.Time
		}
		a.batch.Activity = append(a.batch.Activity, Activity{Meta: meta, Time: t})
	}
	if a.sampler == nil {
		a.sampler = a.deps.NewDecoder()
	}
	_ = a.sampler.Decode(m.Value, report) // an undecodable record is not evidence
	a.sampler.Flush(report)
}

// empty reports whether the open batch holds nothing to store or observe.
func (a *Assembly) empty() bool {
	return a.batch.Len() == 0 && len(a.batch.Activity) == 0 && len(a.batch.Telemetry) == 0
}

// prepare puts what changed into the open batch at now: the
// collective_perf rows changed since the last batch, the jobs idle for
// IdleEvict (to be evicted once it is stored, with their final summaries),
// and the summaries of the dirty jobs — all of them when the summary
// cadence is due (timed false: Flush, Drain, a revocation; an eviction;
// SummaryInterval passed; no backlog), otherwise only those that gained a
// process or a communicator (deferred). It reports false when the batch
// would hold nothing (with nothing else to store: covered false, the
// commits ask nothing), leaving it untouched but for the collectives.
// owed says deferred batches' commits wait to be paid by one that carries
// every summary.
func (a *Assembly) prepare(now time.Time, timed, backlog, covered, owed bool) (evict []string, ok bool) {
	for job, t := range a.touched {
		if now.Sub(t) >= a.cfg.IdleEvict {
			evict = append(evict, job)
			a.dirty[job] = true
		}
	}
	// The collective_perf rows changed since the last batch, once each,
	// before Hold may close their windows.
	a.tel.EmitCollectives(&a.batch)
	all := !timed || len(evict) > 0 || now.Sub(a.lastSummaries) >= a.cfg.SummaryInterval || !backlog
	jobs := a.summaryJobs(all)
	if len(jobs) == 0 && a.batch.Len() == 0 && !covered && len(a.batch.Activity) == 0 && !(all && owed) {
		return nil, false
	}
	a.deferred, a.carried = !all, jobs
	if all {
		a.lastSummaries = now
	}
	// Summaries and observations are rebuilt on every attempt sequence: a
	// batch kept after a failed flush gets the latest state.
	a.summarize(jobs, evict)
	a.observeTelemetry(jobs)
	a.batch.Evicted = append(a.batch.Evicted[:0], evict...)
	slices.Sort(a.batch.Evicted)
	return evict, true
}

// summaryJobs returns the dirty jobs whose summaries the batch being
// prepared carries, sorted: with all every one, otherwise those that
// gained a process or a communicator since a batch last carried them (or
// that none did), so that a communicator reaches the stages in the batch it
// appeared in, as with every flush carrying summaries, even when it lives
// a few records only (a communicator's nRanks line before its commId's).
func (a *Assembly) summaryJobs(all bool) []string {
	jobs := a.carried[:0]
	for j := range a.dirty {
		if n, ok := a.shown[j]; all || !ok || n != a.asm.Created(j) {
			jobs = append(jobs, j)
		}
	}
	slices.Sort(jobs)
	return jobs
}

// summarize puts the summaries of jobs into the open batch, each job
// enriched first (the enrich stage: its expectation from the inventory,
// then its topology), and the final summaries of the jobs the assembler
// pushed out; with Observe also each job's nodes.
func (a *Assembly) summarize(jobs, evict []string) {
	b := &a.batch
	b.Comms, b.Unnamed, b.Jobs = b.Comms[:0], b.Unnamed[:0], b.Jobs[:0]
	b.Nodes, b.Telemetry = b.Nodes[:0], b.Telemetry[:0]
	for _, j := range jobs {
		comms, sum, placed, ok := a.summary(j)
		if !ok {
			continue
		}
		if placed {
			a.topology[j] = sum.Topology
		}
		a.shown[j] = a.asm.Created(j)
		b.addComms(comms, slices.Contains(evict, j))
		b.Jobs = append(b.Jobs, sum)
		if a.deps.Observe {
			b.Nodes = append(b.Nodes, JobNodes{Job: j, Nodes: a.asm.Nodes(j)})
		}
	}
	// The jobs pushed out for new ones (assembler.max_jobs): their final
	// summaries, or the lines since their last summary would never be
	// summarized while the commit covers them.
	comms, sums := a.asm.Pushed()
	b.addComms(comms, true)
	for i := range sums {
		// A pushed job's nodes went with its state: its final summary
		// keeps the topology of its last one.
		k := JobKey(sums[i].Cluster, sums[i].Namespace, sums[i].Job)
		sums[i].Topology = a.topology[k]
		sums[i].Topology.Explain(&sums[i])
		delete(a.topology, k)
	}
	b.Jobs = append(b.Jobs, sums...)
}

// observeTelemetry puts, with Observe, the telemetry reports of jobs and
// of the jobs with telemetry lines since the last flush into the open
// batch, for the rules.
func (a *Assembly) observeTelemetry(jobs []string) {
	if !a.deps.Observe {
		return
	}
	for _, j := range jobs {
		a.telDirty[j] = true
	}
	for _, j := range slices.Sorted(maps.Keys(a.telDirty)) {
		tests, training := a.tel.Report(j)
		ckpts := a.tel.Checkpoints(j)
		colls := a.tel.Collectives(j)
		pool, canary := a.tel.Canary(j)
		if len(tests) > 0 || len(training) > 0 || len(ckpts) > 0 || len(colls) > 0 || canary {
			a.batch.Telemetry = append(a.batch.Telemetry, JobTelemetry{Job: j, Tests: tests, Training: training,
				Checkpoints: ckpts, Collectives: colls, Pool: a.tel.Pool(j), CanaryPool: pool})
		}
	}
}

// drop empties the open batch; the jobs whose summaries a deferred batch
// did not carry stay dirty.
func (a *Assembly) drop() {
	a.batch.Reset()
	if a.deferred {
		for _, j := range a.carried {
			delete(a.dirty, j)
		}
	} else {
		clear(a.dirty)
	}
	a.deferred, a.carried = false, a.carried[:0]
	clear(a.telDirty)
	a.foldedJob = ""
}

// evictStored drops the jobs of evict, whose final summaries were stored,
// unless one got lines while they were being stored (it is dirty again
// and goes into the next batch).
func (a *Assembly) evictStored(evict []string, now time.Time) {
	for _, j := range evict {
		if t, ok := a.touched[j]; ok && now.Sub(t) < a.cfg.IdleEvict {
			continue
		}
		a.asm.Evict(j)
		a.tel.Evict(j)
		delete(a.touched, j)
		delete(a.shown, j)
		delete(a.topology, j)
		a.foldedJob = ""
		if mt := a.deps.Metrics; mt != nil {
			mt.Evictions.Inc()
		}
	}
}

// dirtyAll marks every job held dirty: the next batch carries its final
// summary.
func (a *Assembly) dirtyAll() {
	for _, j := range a.asm.Jobs() {
		a.dirty[j] = true
	}
}

// held returns the jobs of which the stage holds state (NCCL or
// telemetry), sorted.
func (a *Assembly) held() []string {
	set := map[string]bool{}
	for _, j := range a.asm.Jobs() {
		set[j] = true
	}
	for _, j := range a.tel.Jobs() {
		set[j] = true
	}
	for j := range a.touched {
		set[j] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// rebuild feeds the events loader stored for parts, each below its
// committed offset, since since, to the assemblers, and returns how many
// were NCCL events. Stored rows enter through the line path of live
// records (Processor.Record), one message each: the tap stored every
// message of a glued line as a row of its own. No row is stored again.
func (a *Assembly) rebuild(ctx context.Context, loader EventLoader, parts []Partition, since time.Time) (int, error) {
	byTopic := map[string][]int32{}
	below := map[partKey]int64{}
	for _, p := range parts {
		if p.Committed <= 0 {
			continue // nothing committed: every stored event is delivered again
		}
		byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
		below[partKey{p.Topic, p.Partition}] = p.Committed
	}
	a.foldedJob = "" // touched entries are set below
	proc := NewProcessor(a.asm, oneMessage{a.deps.Classifier}, func(rec *Record) string {
		return JobKey(rec.Meta.Cluster, rec.Meta.Namespace, rec.Meta.Job)
	})
	n := 0
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		ps := byTopic[topic]
		err := loader.LoadEvents(ctx, topic, ps, since, func(row EventRow) error {
			if row.Source.Offset >= below[partKey{row.Source.Topic, row.Source.Partition}] {
				return nil // delivered again: folded in as it arrives
			}
			meta := Meta{Job: row.Job, Namespace: row.Namespace, Cluster: row.Cluster, Pod: row.Pod, Container: row.Container, Node: row.Node}
			rec := Record{Source: row.Source, Time: row.Time, Meta: &meta, Text: []byte(row.Line)}
			before := proc.Stats.NCCLLines
			proc.Record(&rec)
			job := JobKey(row.Cluster, row.Namespace, row.Job)
			if tl, ok := proc.Telemetry(); ok {
				// Restores the job's network and NCCL ranks for its test
				// runs; rows are not written again.
				a.tel.Add(job, &Meta{Job: row.Job, Namespace: row.Namespace, Cluster: row.Cluster, Pod: row.Pod,
					Node: row.Node}, tl, row.Time, row.Source, nil)
			}
			if proc.Stats.NCCLLines == before {
				return nil
			}
			a.touched[job] = a.deps.Now()
			// The next batch carries the rebuilt job's summary: the same
			// version and content as stored, so storage does not change,
			// while the rules stage of this process learns of the job.
			a.dirty[job] = true
			n++
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("rebuild state for %s %v: %w", topic, ps, err)
		}
	}
	return n, nil
}

// oneMessage is a Classifier that reads a line as one message: a stored
// row is one message already (it hides a MessageSplitter).
type oneMessage struct{ Classifier }
