package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Decoder turns one raw record into log lines; parsers.Decoder is the
// implementation.
type Decoder interface {
	Decode(data []byte, emit func(*Record)) error
	Flush(emit func(*Record))
}

// Message is one Kafka record as the runner sees it.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Time      time.Time
}

// Partition is one assigned partition.
type Partition struct {
	Topic     string
	Partition int32
}

// Committer commits Kafka offsets; the Kafka source implements it.
type Committer interface {
	Commit(ctx context.Context, offs []Offset) error
}

// EventLoader reads stored events back to rebuild the assembler after an
// assignment; the ClickHouse sink implements it.
type EventLoader interface {
	LoadEvents(ctx context.Context, topic string, partitions []int32, since time.Time, fn func(EventRow) error) error
}

// BatchConfig says when a batch is flushed: whichever limit comes first.
type BatchConfig struct {
	// MaxRows: ClickHouse wants few large inserts; 50 000 rows of about
	// 300 bytes are ~15 MB, one insert a second at 50k NCCL lines/s.
	MaxRows int `yaml:"max_rows"`
	// MaxBytes bounds the memory an open batch holds.
	MaxBytes int `yaml:"max_bytes"`
	// MaxWait bounds record-to-row latency when the stream is quiet.
	MaxWait time.Duration `yaml:"max_wait"`
}

// RunnerConfig configures the streaming service's core loop.
type RunnerConfig struct {
	Batch BatchConfig `yaml:"batch"`
	// IdleEvict: a job with no NCCL line for this long has settled; its
	// final summary is stored and its state dropped. 30 minutes covers the
	// slowest multi-node init seen in the corpus by a wide margin.
	IdleEvict time.Duration `yaml:"idle_evict"`
	// MaxRecordBytes caps one Kafka record; larger ones are dead letters.
	// Fluent Bit's default buffer chunk is far smaller.
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// MaxDeadLetterBytes caps the raw bytes kept per dead letter.
	MaxDeadLetterBytes int `yaml:"max_dead_letter_bytes"`
	// Cluster names the cluster when records do not.
	Cluster string `yaml:"cluster"`
	// JobLabels are the pod labels that name a job, in order.
	JobLabels []string `yaml:"job_labels"`
	// RetryBackoff and MaxBackoff pace retries of a batch the sink
	// rejected; the stream waits meanwhile (back-pressure, never loss).
	RetryBackoff time.Duration `yaml:"retry_backoff"`
	MaxBackoff   time.Duration `yaml:"max_backoff"`
	// ShutdownTimeout bounds the final flush and commit on SIGTERM.
	ShutdownTimeout time.Duration   `yaml:"shutdown_timeout"`
	Assembler       AssemblerConfig `yaml:"assembler"`
	// Telemetry bounds the training/nccl-tests state per job.
	Telemetry TelemetryAssemblerConfig `yaml:"telemetry"`
}

// DefaultRunnerConfig returns the defaults documented on each field.
func DefaultRunnerConfig() RunnerConfig {
	return RunnerConfig{
		Batch:              BatchConfig{MaxRows: 50000, MaxBytes: 16 << 20, MaxWait: time.Second},
		IdleEvict:          30 * time.Minute,
		MaxRecordBytes:     1 << 20,
		MaxDeadLetterBytes: 16 << 10,
		JobLabels:          DefaultJobLabels,
		RetryBackoff:       500 * time.Millisecond,
		MaxBackoff:         30 * time.Second,
		ShutdownTimeout:    20 * time.Second,
		Assembler:          DefaultAssemblerConfig(),
		Telemetry:          DefaultTelemetryAssemblerConfig(),
	}
}

// Validate checks the configuration once at start.
func (c RunnerConfig) Validate() error {
	var errs []error
	if c.Batch.MaxRows <= 0 {
		errs = append(errs, errors.New("pipeline.batch.max_rows: must be > 0"))
	}
	if c.Batch.MaxBytes <= 0 {
		errs = append(errs, errors.New("pipeline.batch.max_bytes: must be > 0"))
	}
	if c.Batch.MaxWait <= 0 {
		errs = append(errs, errors.New("pipeline.batch.max_wait: must be > 0"))
	}
	if c.IdleEvict <= 0 {
		errs = append(errs, errors.New("pipeline.idle_evict: must be > 0"))
	}
	if c.MaxRecordBytes <= 0 {
		errs = append(errs, errors.New("pipeline.max_record_bytes: must be > 0"))
	}
	if c.RetryBackoff <= 0 || c.MaxBackoff < c.RetryBackoff {
		errs = append(errs, errors.New("pipeline.retry_backoff: must be > 0 and <= max_backoff"))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("pipeline.shutdown_timeout: must be > 0"))
	}
	if err := c.Assembler.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Telemetry.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pipeline.telemetry: %w", err))
	}
	return errors.Join(errs...)
}

// RunnerDeps are the runner's collaborators. Sink is required; the others
// may be nil.
type RunnerDeps struct {
	Decoder    Decoder
	Classifier Classifier
	Candidate  func([]byte) bool // the prefilter; nil passes everything
	Sink       Consumer
	Committer  Committer
	Loader     EventLoader
	Inventory  *Inventory
	Metrics    *Metrics
	Logger     zerolog.Logger
	Tracer     trace.Tracer

	// NewAssembler builds the communicator/job assembler
	// (assemble.Factory); required. The runner calls it at start and when
	// it drops its state.
	NewAssembler func(AssemblerConfig) NCCLAssembler

	// OnFlush, if set, sees every stored job summary (the demo prints
	// them; the rules engine evaluates them).
	OnFlush func(jobs []JobSummary)
	// OnJob, if set, sees each job's summaries and the Kubernetes nodes
	// its records came from as a batch is built, before the sink stores
	// it (the rules engine observes them; the alerts they cause go into
	// the same batch).
	OnJob func(sum JobSummary, comms []CommSummary, nodes []string)
	// OnTelemetry, if set, sees the telemetry of each job whose NCCL or
	// telemetry lines changed since the last batch and that has any (the
	// key as JobKey, TelemetryAssembler.Report and Checkpoints, and the pool of a fabric
	// canary, "" for other jobs), after OnJob and before the sink stores
	// the batch. The slices are the callee's.
	OnTelemetry func(job string, tests []NCCLTestReport, training []TrainingReport, checkpoints []CheckpointReport, canaryPool string)
	// OnEvict, if set, is told the key (JobKey) of each job evicted after
	// its final summary was stored.
	OnEvict func(job string)
	// Telemetry, if set, parses training-progress and nccl-tests lines
	// (parsers.Telemetry); their rows go into Batch.Steps and
	// Batch.TestRuns. The Candidate prefilter must pass such lines too.
	Telemetry interface {
		Parse(line []byte, tl *TelemetryLine) bool
	}
	// OnActivity, if set, is told that a job's pod logged (NCCL or not):
	// the absence rules' evidence. Records without an NCCL candidate are
	// decoded for it at most once per Kafka key (the job) every
	// activitySample.
	OnActivity func(meta Meta, t time.Time)
	Now        func() time.Time
}

type partKey struct {
	topic string
	part  int32
}

// Runner is the streaming service's core: it decodes Kafka records,
// classifies them, assembles summaries, writes batches to the sink and
// commits offsets only after the sink accepted the rows that hold them.
// Message, Assigned and Revoked are called by the Kafka source's delivery
// goroutine; Run flushes on time. All of them serialise on one mutex, so a
// sink that blocks (ClickHouse down) blocks consumption too.
type Runner struct {
	cfg  RunnerConfig
	deps RunnerDeps
	log  zerolog.Logger

	mu       sync.Mutex
	asm      NCCLAssembler
	proc     *Processor
	batch    Batch
	dirty    map[string]bool
	telDirty map[string]bool      // jobs with telemetry lines since the last flush
	touched  map[string]time.Time // processing time a job last got an event
	offsets  map[partKey]int64    // next offsets covered by the open batch
	skip     map[partKey]int64    // offsets below were folded in from storage
	namer    JobNamer
	meta     Meta
	cur      *Message
	line     int32
	tel      *TelemetryAssembler
	tl       TelemetryLine
	last     time.Time // last flush
	draining bool
	sampled  map[string]time.Time // Kafka key → last activity sample
	// ready is read without mu: flush holds mu for as long as the sink
	// refuses a batch, and /readyz must answer 503 meanwhile, not hang.
	ready atomic.Bool
}

// NewRunner returns a runner; cfg must be valid and deps.Sink set.
func NewRunner(cfg RunnerConfig, deps RunnerDeps) *Runner {
	if deps.Tracer == nil {
		deps.Tracer = noop.NewTracerProvider().Tracer("ncclwatch")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Candidate == nil {
		deps.Candidate = func([]byte) bool { return true }
	}
	r := &Runner{cfg: cfg, deps: deps, log: deps.Logger, namer: JobNamer{Labels: cfg.JobLabels},
		dirty: map[string]bool{}, touched: map[string]time.Time{}, offsets: map[partKey]int64{}, skip: map[partKey]int64{}}
	r.reset()
	r.last = deps.Now()
	// Ready until a batch fails: a runner that has stored nothing yet is not
	// failing, and /readyz must not wait for the first max_wait.
	r.ready.Store(true)
	if m := deps.Metrics; m != nil {
		m.BatchCapacity.Set(float64(cfg.Batch.MaxRows))
	}
	return r
}

// reset drops all assembled state.
func (r *Runner) reset() {
	r.asm = r.deps.NewAssembler(r.cfg.Assembler)
	r.proc = NewProcessor(r.asm, r.deps.Classifier, func(rec *Record) string {
		return JobKey(rec.Meta.Cluster, rec.Meta.Namespace, rec.Meta.Job)
	})
	r.proc.SetTap(r.tap)
	r.tel = NewTelemetryAssembler(r.cfg.Telemetry, r.deps.Inventory)
	r.dirty = map[string]bool{}
	r.telDirty = map[string]bool{}
	r.touched = map[string]time.Time{}
	r.skip = map[partKey]int64{}
}

// Ready reports whether the last batch was stored (for /readyz). It does
// not wait for a flush in progress.
func (r *Runner) Ready() bool { return r.ready.Load() }

// Jobs returns the number of jobs held (for tests and /metrics).
func (r *Runner) Jobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asm.Len()
}

// Message processes one Kafka record.
func (r *Runner) Message(ctx context.Context, m Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return errors.New("runner: draining")
	}
	if mt := r.deps.Metrics; mt != nil {
		mt.Records.Inc()
		mt.Bytes.Add(float64(len(m.Value)))
	}
	k := partKey{m.Topic, m.Partition}
	r.offsets[k] = m.Offset + 1
	switch {
	case m.Offset < r.skip[k]:
		// Stored before a restart or rebalance and folded in from storage.
		if mt := r.deps.Metrics; mt != nil {
			mt.SkippedReplays.Inc()
		}
	case len(m.Value) > r.cfg.MaxRecordBytes:
		r.deadLetter(&m, 0, "oversized", fmt.Sprintf("record of %d bytes exceeds pipeline.max_record_bytes %d", len(m.Value), r.cfg.MaxRecordBytes))
	case !r.deps.Candidate(m.Value):
		if r.deps.OnActivity != nil {
			r.activity(&m)
		}
	default:
		r.cur, r.line = &m, 0
		err := r.deps.Decoder.Decode(m.Value, r.emit)
		r.deps.Decoder.Flush(r.emit)
		r.cur = nil
		if err != nil {
			r.deadLetter(&m, r.line, DeadLetterReason(err), err.Error())
		}
	}
	r.batch.Bytes += 16 // coordinates
	if r.batch.Len() >= r.cfg.Batch.MaxRows || r.batch.Bytes >= r.cfg.Batch.MaxBytes {
		return r.flush(ctx)
	}
	return nil
}

// activitySample is how often one job's non-NCCL records are decoded to
// tell the rules its pods log: 10 s gives the absence rules (minutes) dozens
// of samples per pod while decoding a negligible share of the stream.
const activitySample = 10 * time.Second

// maxSampled bounds the keys remembered for sampling; beyond it the memory
// starts over (a burst of extra samples, never growth).
const maxSampled = 100000

// activity reports a sampled non-NCCL record of a job to OnActivity.
func (r *Runner) activity(m *Message) {
	now := r.deps.Now()
	if r.sampled == nil {
		r.sampled = map[string]time.Time{}
	}
	if t, ok := r.sampled[string(m.Key)]; ok && now.Sub(t) < activitySample {
		return
	}
	if len(r.sampled) >= maxSampled {
		clear(r.sampled)
	}
	r.sampled[string(m.Key)] = now
	report := func(rec *Record) {
		var meta Meta
		if rec.Meta != nil {
			meta = *rec.Meta
		}
		meta.Job = r.namer.Name(rec, m.Key)
		if meta.Cluster == "" {
			meta.Cluster = r.cfg.Cluster
		}
		t := rec.Time
		if t.IsZero() {
			t = m.Time
		}
		r.deps.OnActivity(meta, t)
	}
	_ = r.deps.Decoder.Decode(m.Value, report) // an undecodable record is not evidence
	r.deps.Decoder.Flush(func(*Record) {})
}

// ErrOversized is the error a Decoder returns (wrapped or as is) for a
// record or line over its size cap; parsers.ErrOversized is this value.
var ErrOversized = errors.New("oversized: exceeds the size cap")

func (r *Runner) emit(rec *Record) {
	m := r.cur
	rec.Source = Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Line: r.line}
	r.line++
	if rec.Time.IsZero() {
		rec.Time = m.Time
	}
	// The decoder shares one Meta among records of one container: copy it
	// before naming the job.
	if rec.Meta != nil {
		r.meta = *rec.Meta
	} else {
		r.meta = Meta{}
	}
	r.meta.Job = r.namer.Name(rec, m.Key)
	if r.meta.Cluster == "" {
		r.meta.Cluster = r.cfg.Cluster
	}
	rec.Meta = &r.meta
	r.proc.Record(rec)
	if p := r.deps.Telemetry; p != nil && p.Parse(rec.Text, &r.tl) {
		job := JobKey(r.meta.Cluster, r.meta.Namespace, r.meta.Job)
		r.tel.Add(job, &r.meta, &r.tl, rec.Time, rec.Source, &r.batch)
		// Telemetry-only jobs idle out like the others.
		r.touched[job] = r.deps.Now()
		r.telDirty[job] = true
	}
}

// tap turns every NCCL event into a stored row and marks its job dirty.
func (r *Runner) tap(job string, rec *Record, ev *Event) {
	if mt := r.deps.Metrics; mt != nil {
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
	r.batch.Events = append(r.batch.Events, row)
	r.batch.Bytes += len(row.Line) + len(row.Job) + len(row.Pod) + 64
	r.dirty[job] = true
	r.touched[job] = r.deps.Now()
}

func (r *Runner) deadLetter(m *Message, line int32, reason, msg string) {
	raw := m.Value
	if len(raw) > r.cfg.MaxDeadLetterBytes {
		raw = raw[:r.cfg.MaxDeadLetterBytes]
	}
	r.batch.DeadLetters = append(r.batch.DeadLetters, DeadLetter{
		Source: Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Line: line},
		Time:   m.Time, Reason: reason + ": " + msg, Raw: append([]byte(nil), raw...)})
	r.batch.Bytes += len(raw) + len(msg)
	if mt := r.deps.Metrics; mt != nil {
		mt.DeadLetters.WithLabelValues(reason).Inc()
		mt.ParseErrors.WithLabelValues(reason).Inc()
	}
}

// Run flushes on time until ctx is done. The final flush and commit on
// shutdown happen in Revoked, which the Kafka source calls while its
// generation is still alive (or in Drain for callers without one).
func (r *Runner) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.Batch.MaxWait / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			r.mu.Lock()
			var err error
			if r.deps.Now().Sub(r.last) >= r.cfg.Batch.MaxWait {
				err = r.flush(ctx)
			}
			r.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// Drain stops accepting records and flushes what is open, within
// ShutdownTimeout.
func (r *Runner) Drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return nil
	}
	r.draining = true
	// Every held job gets its final summary.
	for _, j := range r.asm.Jobs() {
		r.dirty[j] = true
	}
	if err := r.flush(ctx); err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	return nil
}

// Flush stores and commits the open batch now.
func (r *Runner) Flush(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flush(ctx)
}

// flush stores the open batch with its dirty jobs' summaries, retrying until
// the sink accepts it (or ctx ends), then commits the offsets it covers and
// evicts idle jobs. Called with r.mu held.
func (r *Runner) flush(ctx context.Context) error {
	now := r.deps.Now()
	r.last = now
	var evict []string
	for job, t := range r.touched {
		if now.Sub(t) >= r.cfg.IdleEvict {
			evict = append(evict, job)
			r.dirty[job] = true
		}
	}
	if len(r.dirty) == 0 && r.batch.Len() == 0 && len(r.offsets) == 0 {
		r.ready.Store(true)
		return nil
	}
	jobs := make([]string, 0, len(r.dirty))
	for j := range r.dirty {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	for _, j := range jobs {
		if inv := r.deps.Inventory; inv != nil {
			e := inv.Expect(r.asm.Nodes(j), r.cfg.Assembler.Expect)
			r.asm.SetExpectation(j, &e)
		}
		comms, sum, ok := r.asm.Summaries(j)
		if !ok {
			continue
		}
		r.batch.Comms = append(r.batch.Comms, comms...)
		r.batch.Jobs = append(r.batch.Jobs, sum)
		if fn := r.deps.OnJob; fn != nil {
			fn(sum, comms, r.asm.Nodes(j))
		}
	}
	if fn := r.deps.OnTelemetry; fn != nil {
		for j := range r.dirty {
			r.telDirty[j] = true
		}
		for _, j := range slices.Sorted(maps.Keys(r.telDirty)) {
			tests, training := r.tel.Report(j)
			ckpts := r.tel.Checkpoints(j)
			pool, canary := r.tel.Canary(j)
			if len(tests) > 0 || len(training) > 0 || len(ckpts) > 0 || canary {
				fn(j, tests, training, ckpts, pool)
			}
		}
	}
	r.batch.Offsets = r.batch.Offsets[:0]
	for k, next := range r.offsets {
		r.batch.Offsets = append(r.batch.Offsets, Offset{Topic: k.topic, Partition: k.part, Next: next})
	}
	sort.Slice(r.batch.Offsets, func(a, b int) bool {
		x, y := r.batch.Offsets[a], r.batch.Offsets[b]
		return x.Topic < y.Topic || x.Topic == y.Topic && x.Partition < y.Partition
	})

	ctx, span := r.deps.Tracer.Start(ctx, "ncclwatch.batch")
	span.SetAttributes(attribute.Int("events", len(r.batch.Events)), attribute.Int("jobs", len(r.batch.Jobs)),
		attribute.Int("dead_letters", len(r.batch.DeadLetters)))
	defer span.End()
	backoff := r.cfg.RetryBackoff
	for {
		err := r.deps.Sink.Consume(ctx, &r.batch)
		if err == nil {
			break
		}
		r.ready.Store(false)
		span.RecordError(err)
		if mt := r.deps.Metrics; mt != nil {
			mt.InsertErrors.Inc()
			mt.Ready.Set(0)
		}
		if IsPermanent(err) {
			return fmt.Errorf("store batch (permanent, fix the sink before restarting): %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("store batch: %w", ctx.Err())
		}
		r.log.Warn().Err(err).Dur("retry_in", backoff).Int("rows", r.batch.Len()).Msg("sink rejected batch; offsets stay uncommitted, retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("store batch: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.cfg.MaxBackoff)
	}
	r.ready.Store(true)
	if mt := r.deps.Metrics; mt != nil {
		mt.Ready.Set(1)
		mt.BatchRows.Observe(float64(r.batch.Len()))
	}
	if c := r.deps.Committer; c != nil && len(r.batch.Offsets) > 0 {
		if err := c.Commit(ctx, r.batch.Offsets); err != nil {
			// The rows are stored; whoever owns the partition next replays
			// from the last commit and storage deduplicates.
			r.log.Warn().Err(err).Msg("offset commit failed after a stored batch; a replay will be idempotent")
			if mt := r.deps.Metrics; mt != nil {
				mt.CommitErrors.Inc()
			}
		} else if mt := r.deps.Metrics; mt != nil {
			mt.Commits.Inc()
		}
	}
	if fn := r.deps.OnFlush; fn != nil && len(r.batch.Jobs) > 0 {
		fn(append([]JobSummary(nil), r.batch.Jobs...))
	}
	for _, j := range evict {
		r.asm.Evict(j)
		r.tel.Evict(j)
		if fn := r.deps.OnEvict; fn != nil {
			fn(j)
		}
		delete(r.touched, j)
		if mt := r.deps.Metrics; mt != nil {
			mt.Evictions.Inc()
		}
	}
	r.batch.Reset()
	clear(r.dirty)
	clear(r.telDirty)
	clear(r.offsets)
	if mt := r.deps.Metrics; mt != nil {
		mt.JobsHeld.Set(float64(r.asm.Len()))
		mt.BatchPending.Set(0)
	}
	return nil
}

// Assigned is called when the source got partitions: the assembler is
// rebuilt from the events stored for them, and Kafka records already stored
// are skipped when they are delivered again.
func (r *Runner) Assigned(ctx context.Context, parts []Partition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reset()
	if r.deps.Loader == nil || len(parts) == 0 {
		return nil
	}
	byTopic := map[string][]int32{}
	for _, p := range parts {
		byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
	}
	since := r.deps.Now().Add(-r.cfg.IdleEvict)
	var ev Event
	n := 0
	for topic, ps := range byTopic {
		err := r.deps.Loader.LoadEvents(ctx, topic, ps, since, func(row EventRow) error {
			k := partKey{row.Source.Topic, row.Source.Partition}
			if row.Source.Offset+1 > r.skip[k] {
				r.skip[k] = row.Source.Offset + 1
			}
			if p := r.deps.Telemetry; p != nil && p.Parse([]byte(row.Line), &r.tl) {
				// Restores the job's network and NCCL ranks for its test
				// runs; rows are not written again.
				r.tel.Add(JobKey(row.Cluster, row.Namespace, row.Job), &Meta{Job: row.Job, Namespace: row.Namespace,
					Cluster: row.Cluster, Pod: row.Pod, Node: row.Node}, &r.tl, row.Time, row.Source, nil)
			}
			if !r.deps.Classifier.Classify([]byte(row.Line), &ev) {
				return nil
			}
			meta := Meta{Job: row.Job, Namespace: row.Namespace, Cluster: row.Cluster, Pod: row.Pod, Container: row.Container, Node: row.Node}
			job := JobKey(row.Cluster, row.Namespace, row.Job)
			r.asm.Add(job, &meta, &ev, row.Time)
			r.touched[job] = r.deps.Now()
			// A process that died between a batch's events insert and its
			// summaries insert left events whose records are now skipped:
			// only a rebuilt job's own summary can bring storage level.
			// Versions are deterministic, so a rewrite of a stored
			// summary changes nothing.
			r.dirty[job] = true
			n++
			return nil
		})
		if err != nil {
			return fmt.Errorf("rebuild state for %s %v: %w", topic, ps, err)
		}
	}
	if mt := r.deps.Metrics; mt != nil {
		mt.Rebuilds.Inc()
		mt.RebuiltEvents.Add(float64(n))
		mt.JobsHeld.Set(float64(r.asm.Len()))
	}
	r.log.Info().Int("partitions", len(parts)).Int("events", n).Int("jobs", r.asm.Len()).Msg("state rebuilt from stored events")
	return nil
}

// Revoked is called before partitions are taken away: the open batch is
// stored and committed while the generation is alive, and the state is
// dropped (the next assignment rebuilds it).
func (r *Runner) Revoked(ctx context.Context, parts []Partition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.asm.Jobs() {
		r.dirty[j] = true
	}
	err := r.flush(ctx)
	r.reset()
	return err
}
