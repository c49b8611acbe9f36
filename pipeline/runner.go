package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Decoder turns one raw record into log lines; parsers.Decoder is the
// implementation. It keeps state between records (a CRI or Docker partial
// line waits for its end), so the runner holds one per partition.
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
	// HighWaterMark is the partition's high water mark when the record
	// was fetched (the offset the next produced record gets), 0 when the
	// source does not know it. A record at HighWaterMark-1 says the
	// partition has been read to its end (see RunnerConfig.FoldIdle).
	HighWaterMark int64
}

// Source returns the coordinates of the line-th line of m.
func (m *Message) Source(line int32) Source {
	return Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Line: line}
}

// Next returns the position to commit once m has been durably accepted.
func (m *Message) Next() Offset {
	return Offset{Topic: m.Topic, Partition: m.Partition, Next: m.Offset + 1}
}

// Partition is one assigned partition.
type Partition struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset, the first offset the
	// source delivers, or -1 when none was committed. Assigned rebuilds
	// state from the stored events below it: those records are not
	// delivered again, while everything from it on is.
	Committed int64
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
	// Backlog are the limits in force while a partition is more than
	// backlogRecords behind the high water mark its source reported (a
	// replay, a consumer catching up): its records wait for their
	// backlog anyway, so larger batches cost no latency that counts, and
	// each insert is a part of every table on the server (files, merges).
	// A live stream, read within a fetch or two of its end, and sources
	// that report no high water mark (files, stdin) keep the limits
	// above. The limits are the runner's, not a partition's: while one
	// partition is behind, the batches that carry the others' records
	// grow too (a partition whose fetches keep failing counts as behind
	// until the next rebalance; ncclwatch_batch_capacity_rows shows the
	// limit in force). Each limit is at least its live one (a larger max_rows
	// raises the backlog's too); MaxRows 0 turns backlog batches off.
	Backlog BacklogLimits `yaml:"backlog"`
}

// limits returns the limits in force: the live ones, or, when behind,
// the backlog's, each at least the live one.
func (c BatchConfig) limits(behind bool) (rows, bytes int, wait time.Duration) {
	rows, bytes, wait = c.MaxRows, c.MaxBytes, c.MaxWait
	if behind && c.Backlog.MaxRows > 0 {
		rows, bytes, wait = max(rows, c.Backlog.MaxRows), max(bytes, c.Backlog.MaxBytes), max(wait, c.Backlog.MaxWait)
	}
	return rows, bytes, wait
}

// BacklogLimits are BatchConfig's limits while the source is behind.
type BacklogLimits struct {
	// MaxRows 120 000: on the load benchmark (deploy/local/load.sh, 3 M
	// records, ~0.28 rows a record) 37-38 parts by inserts instead of
	// 71-74, the server's CPU while consuming 2.2-3.5 s instead of
	// 3.8-5.2 s, at 721-835 MB RSS instead of 402-476 (README,
	// Performance).
	MaxRows int `yaml:"max_rows"`
	// MaxBytes 32 MiB: twice the live cap, with MaxRows the memory of a
	// batch being read while the one before it is stored.
	MaxBytes int `yaml:"max_bytes"`
	// MaxWait 3 s: a backlog fills a batch long before; it only matters
	// for a slow one.
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
	// This loop is the only place a batch is retried.
	RetryBackoff time.Duration `yaml:"retry_backoff"`
	MaxBackoff   time.Duration `yaml:"max_backoff"`
	// SinkTimeout: a sink call that has not succeeded within it marks the
	// service not ready (/readyz 503, ncclwatch_sink_healthy 0) and logs a
	// warning, while the call goes on. A healthy batch insert takes well
	// under a second; 5 s is an outage, not a slow insert.
	SinkTimeout time.Duration `yaml:"sink_timeout"`
	// ShutdownTimeout bounds the final flush and commit on SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// FoldIdle: a partition read to its end (its last record was at the
	// high water mark) that got nothing new for this long has its open
	// training_steps fold window closed, so that its offsets are committed
	// to the end (Telemetry.FoldRecords holds them back otherwise). 1 s:
	// the ranks of a job print one step within milliseconds of one
	// another and their shippers flush every second, so a longer silence
	// at the partition's end ends the step (a copy later still is counted
	// once, in a row of its own); it is also the record-to-commit tail at
	// the end of a burst. A partition still being read never closes a
	// window early, however long it is. At the end of a partition's first
	// catch-up after its assignment (it was more than 10 000 records
	// behind), with nothing read waiting to be applied, the silence counts
	// from when its last record was made (its Kafka timestamp): when that
	// record is older than this, the window closes at once (partState.quiet).
	FoldIdle time.Duration `yaml:"fold_idle"`
	// ParseWorkers is how many goroutines of Run decode and parse records
	// (the prefilter, the envelope, the line parser) beside the loop,
	// which applies what they parsed in input order (assembly, telemetry
	// folding, batches, commits); each partition is parsed by one of them,
	// in offset order. 0 or 1 parse on the loop itself. The default is
	// 2, or 1 where GOMAXPROCS is 1: parsing is about two thirds of a
	// record's CPU (~2.4 of ~3.6 CPU-µs) and the loop keeps the rest, so
	// two workers parse about as fast as the loop applies; more only help
	// where the loop waits for them (at most GOMAXPROCS is useful).
	ParseWorkers int `yaml:"parse_workers"`
	// SummaryInterval: within Run, while a partition has a backlog (more
	// than backlogRecords behind its high water mark), a size or timer
	// flush carries the comm and job summaries of the jobs that changed
	// (and the rules see them) only when this long has passed since the
	// last flush that did, or when the stream is at rest (every partition read to its end and
	// quiet for FoldIdle); the flushes in between store events, telemetry
	// rows and dead letters, and the summaries of jobs that gained a
	// process or a communicator (so that a communicator row is stored
	// whenever it would be with 0, however short-lived). Their offsets
	// are committed with the next batch that carries every changed job's
	// summaries: a commit never covers a record whose summary is not
	// stored, so a crash replays it (the state rebuilt from stored events
	// lacks the launcher lines, and no process may own the partition
	// soon). Evictions, Flush, Drain, revocations and SIGTERM always carry
	// them. 0 (the default) stores them, and commits, with every flush:
	// on the load benchmark's stream 5 s saved no part (75-77 parts by
	// inserts either way: its jobs gain a communicator in nearly every
	// batch) and one latency phase's p99 rose to 4.7 s. A backfill of
	// few communicators (the summary tables are a few dozen rows a flush
	// but, with ClickHouse writing each part as dozens of files, much of
	// the server's work per flush) may set it.
	SummaryInterval time.Duration   `yaml:"summary_interval"`
	Assembler       AssemblerConfig `yaml:"assembler"`
	// Telemetry bounds the training/nccl-tests state per job.
	Telemetry TelemetryAssemblerConfig `yaml:"telemetry"`
}

// defaultParseWorkers is RunnerConfig.ParseWorkers' default where
// GOMAXPROCS allows it, maxParseWorkers the cap of the value: the loop
// applies what every worker parsed, so more workers than cores only add
// hand-offs.
const (
	defaultParseWorkers = 2
	maxParseWorkers     = 64
)

// DefaultRunnerConfig returns the defaults documented on each field.
func DefaultRunnerConfig() RunnerConfig {
	return RunnerConfig{
		Batch: BatchConfig{MaxRows: 50000, MaxBytes: 16 << 20, MaxWait: time.Second,
			Backlog: BacklogLimits{MaxRows: 120000, MaxBytes: 32 << 20, MaxWait: 3 * time.Second}},
		IdleEvict:          30 * time.Minute,
		MaxRecordBytes:     1 << 20,
		MaxDeadLetterBytes: 16 << 10,
		JobLabels:          DefaultJobLabels,
		RetryBackoff:       500 * time.Millisecond,
		// 5 s: once the sink is back the stream resumes within seconds;
		// one failed attempt every 5 s costs the server nothing.
		MaxBackoff:      5 * time.Second,
		SinkTimeout:     5 * time.Second,
		ShutdownTimeout: 20 * time.Second,
		FoldIdle:        time.Second,
		ParseWorkers:    min(defaultParseWorkers, runtime.GOMAXPROCS(0)),
		SummaryInterval: 0,
		Assembler:       DefaultAssemblerConfig(),
		Telemetry:       DefaultTelemetryAssemblerConfig(),
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
	if bl := c.Batch.Backlog; bl.MaxRows < 0 || bl.MaxBytes < 0 || bl.MaxWait < 0 {
		errs = append(errs, errors.New("pipeline.batch.backlog: max_rows, max_bytes and max_wait must be >= 0 (max_rows 0 turns backlog batches off)"))
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
	if c.SinkTimeout <= 0 {
		errs = append(errs, errors.New("pipeline.sink_timeout: must be > 0"))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("pipeline.shutdown_timeout: must be > 0"))
	}
	if c.FoldIdle <= 0 {
		errs = append(errs, errors.New("pipeline.fold_idle: must be > 0"))
	}
	if c.SummaryInterval < 0 || c.SummaryInterval >= c.IdleEvict {
		errs = append(errs, errors.New("pipeline.summary_interval: must be >= 0 and shorter than idle_evict (offset commits wait for it)"))
	}
	if c.ParseWorkers < 0 || c.ParseWorkers > maxParseWorkers {
		errs = append(errs, fmt.Errorf("pipeline.parse_workers: must be between 0 and %d", maxParseWorkers))
	}
	if err := c.Assembler.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Telemetry.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("pipeline.telemetry: %w", err))
	}
	return errors.Join(errs...)
}

// RunnerDeps are the runner's collaborators. Sink and NewDecoder are
// required; the others may be nil. There are no hooks: everything a later
// stage needs (summaries, nodes, telemetry reports, activity, evictions)
// travels in the Batch through Sink, the head of the stage chain.
type RunnerDeps struct {
	// NewDecoder makes one envelope decoder per partition, so that a
	// partial line (CRI "P", Docker's 16 KiB split) joins across the
	// records of its partition.
	NewDecoder func() Decoder
	// Classifier is the one line parser: NCCL lines, and with
	// parsers.NewLines training-progress and nccl-tests lines too, whose
	// rows go into Batch.Steps and Batch.TestRuns (the Candidate prefilter
	// must pass them: parsers.Prefilter(true)).
	Classifier Classifier
	// NewClassifier makes a line parser like Classifier for each parse
	// worker (RunnerConfig.ParseWorkers; a Classifier is not safe for
	// concurrent use). Without it Run parses on the loop.
	NewClassifier func() Classifier
	// Candidate is the prefilter; nil passes everything. With parse
	// workers it is called from several goroutines at once.
	Candidate func([]byte) bool
	Sink      Consumer
	Committer Committer
	Loader    EventLoader
	Inventory *Inventory
	Metrics   *Metrics
	Logger    zerolog.Logger
	Tracer    trace.Tracer

	// NewAssembler builds the communicator/job assembler
	// (assemble.Factory); required. The runner calls it at start and when
	// it drops its state.
	NewAssembler func(AssemblerConfig) NCCLAssembler

	// Observe fills the batch's observations for the rules stage:
	// Batch.Nodes, Batch.Telemetry (jobs whose lines changed and that have
	// any) and Batch.Activity (a sample of each job's records that were
	// skipped by the prefilter or gave nothing, at most one per Kafka key
	// every activitySample). Without it they are not computed.
	Observe bool
	Now     func() time.Time
}

// partKey is a partition of a topic: the run loop's and the telemetry
// folding's key.
type partKey struct {
	topic string
	part  int32
}

// Runner is the streaming service's core: it decodes records, classifies
// them, assembles summaries, hands batches to the sink chain and commits
// offsets only after the chain accepted the rows that hold them.
//
// Run is the one loop: one goroutine, one select over the source's inputs
// (records, assignments, revocations), the flush timer and the result of
// the batch in flight; it owns commit and revoke. A full batch is stored
// (and retried) by a goroutine of its own while the loop builds the next
// one: at most one in flight, its offsets committed by the loop once it
// was stored, before the next batch flies. With parse workers
// (RunnerConfig.ParseWorkers) the pure half of each record (prefilter,
// envelope decode, line parse) runs on goroutines Run owns, each
// partition on one of them in offset order, and the loop applies the
// results in input order (runner_parse.go). Message, Flush, Assigned and Revoked are its steps;
// callers without a source (tests, tools) may call them directly instead
// of Run, from one goroutine. Nothing of a Runner is safe for concurrent
// use except Ready, LastSinkError, Jobs and Stopped.
type Runner struct {
	cfg  RunnerConfig
	deps RunnerDeps
	log  zerolog.Logger

	asm      NCCLAssembler
	proc     *Processor
	batch    Batch
	dirty    map[string]bool
	telDirty map[string]bool      // jobs with telemetry lines since the last flush
	touched  map[string]time.Time // processing time a job last got an event
	offsets  map[partKey]int64    // next offsets covered by the open batch
	dec      *recordDecoder       // the inline path's decoders, one per partition: partial lines join within it
	sampler  Decoder              // decodes the activity samples
	pending  map[partKey]int64    // offset of the first piece of a partition's partial line
	parts    map[partKey]*partState
	// behind counts the partitions read as a backlog (partState.
	// backlogged): the batch limits (BatchConfig.Backlog) and the summary
	// cadence (SummaryInterval) follow it.
	behind int
	namer  JobNamer
	curNow time.Time // processing time of the record at hand: one clock read per run of records, not per line
	// foldedJob's touched entry is foldedAt and its telDirty entry true
	// ("" when unknown): fold skips the two map writes for the next line of
	// the same job at the same curNow, most lines of a run of records
	// (two hashed map writes a training line were 2-3 % of run's CPU).
	// Whatever else deletes or sets those entries clears it.
	foldedJob string
	foldedAt  time.Time
	gave      bool // a line of the record at hand gave the processor something (Processor.gave)
	// lastSummaries is when a batch last carried every dirty job's
	// summaries; deferred says the batch being prepared does not, only
	// those of the jobs in carried (the others stay dirty for the next
	// one); owed are the commits of stored batches that deferred them,
	// made by the next batch that does not; shown is Created of each job
	// when a batch last carried its summaries. See
	// RunnerConfig.SummaryInterval.
	lastSummaries time.Time
	deferred      bool
	carried       []string
	owed          map[partKey]int64
	shown         map[string]int
	linef         func(*Record)
	foldf         func(*Record, *TelemetryLine)
	// resets counts reset calls: a parse job carries the count it was sent
	// under, and a worker drops its decoders when it changed.
	resets uint64
	pool   *parsePool // Run's parse workers; nil: parsing is inline
	// The job key (JobKey) of the last telemetry line's job, kept so that
	// the lines of one job build it once.
	keyMeta  [3]string
	key      string
	tel      *TelemetryAssembler
	tl       TelemetryLine
	last     time.Time // last flush
	draining bool
	sampled  map[string]time.Time // Kafka key → last activity sample
	gen      context.Context      // the current generation (Assigned's ctx); nil without one

	// Records in hand when the generation ended (Run only): a full batch
	// cannot be stored under the generation's context any more, so the
	// loop stops applying records there (suspended) and keeps the rest
	// (late; with parse workers also the jobs out, the head's applied
	// part marked) until the revocation, which applies them with its own
	// deadline (revoking), in batches of max_rows as before the end.
	suspended bool
	late      [][]Message
	revoking  context.Context

	// The batch being stored while the loop builds the next (Run only):
	// at most one in flight. Its Batch belongs to the insert goroutine
	// until the loop receives its result; held is a batch whose store was
	// cut short by its context, stored before the next one; spare is a
	// stored batch kept for its capacity.
	async  bool
	flying *flight
	held   *flight
	spare  *Batch
	// admittedRecs and admittedBytes are the records admit took since
	// count last added them to records and the metrics.
	admittedRecs, admittedBytes int
	// input is Run's input channel, nil outside Run (drained).
	input <-chan Input

	// Read by /readyz and the watchdog while the loop blocks in the sink.
	failingSince atomic.Int64 // unix nanos of the first attempt of a batch not stored yet; 0 when none
	lastErr      atomic.Pointer[error]
	jobs         atomic.Int64
	records      atomic.Int64
	assigned     atomic.Bool   // an assignment is held
	stopped      chan struct{} // closed when Run returns
}

// NewRunner returns a runner; cfg must be valid and deps.Sink and
// deps.NewDecoder set.
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
		dirty: map[string]bool{}, touched: map[string]time.Time{}, offsets: map[partKey]int64{},
		stopped: make(chan struct{}), dec: newRecordDecoder(cfg, deps)}
	r.linef, r.foldf = r.line, r.fold
	r.reset()
	r.last = deps.Now()
	if m := deps.Metrics; m != nil {
		m.Ready.Set(1)
		m.SinkHealthy.Set(1)
	}
	return r
}

// reset drops all assembled state and the partial lines of every
// partition.
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
	r.foldedJob = ""
	r.deferred, r.carried = false, nil
	r.owed = map[partKey]int64{}
	r.shown = map[string]int{}
	r.dec.reset()
	r.sampler = nil
	r.resets++
	r.pending = map[partKey]int64{}
	r.parts = map[partKey]*partState{}
	r.behind = 0
	r.showLimits()
	r.jobs.Store(0)
}

// Ready reports whether the sink is keeping up (for /readyz): false while
// a batch has not been stored for SinkTimeout or longer. It does not wait
// for a sink call in progress.
func (r *Runner) Ready() bool { return r.healthy(time.Now()) }

func (r *Runner) healthy(now time.Time) bool {
	since := r.failingSince.Load()
	return since == 0 || now.Sub(time.Unix(0, since)) < r.cfg.SinkTimeout
}

// LastSinkError returns the last error of the sink chain, nil when the
// last batch was stored.
func (r *Runner) LastSinkError() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Jobs returns the number of jobs held (for tests and /metrics).
func (r *Runner) Jobs() int { return int(r.jobs.Load()) }

// Records returns the number of records processed.
func (r *Runner) Records() int64 { return r.records.Load() }

// HoldsAssignment reports whether the runner holds an assignment (for
// /readyz): from an Assigned that succeeded to the next Revoked.
func (r *Runner) HoldsAssignment() bool { return r.assigned.Load() }

// InputKind says what an Input carries.
type InputKind uint8

const (
	// InputMessage carries one record, or with Messages set a run of them.
	InputMessage InputKind = iota
	// InputAssigned says the source got Partitions; Ctx is done when the
	// generation ends. The loop rebuilds its state and answers on Done.
	InputAssigned
	// InputRevoked says Partitions are being taken away; Ctx expires when
	// the group stops waiting. The loop stores and commits what it can
	// before then, drops the rest (it is delivered again) and answers on
	// Done.
	InputRevoked
)

// Input is what a source sends the run loop, in order: an assignment, its
// records, its revocation.
type Input struct {
	Kind    InputKind
	Message Message
	// Messages, when not nil, are records handled in order instead of
	// Message: a source hands over what it fetched in one channel send.
	Messages []Message
	// Release, when not nil, is called by the loop once it no longer reads
	// Messages, their Key and Value bytes included: the source may then
	// reuse the buffer they are slices of. The loop copies what it keeps of a record
	// (events, dead letters, metadata), as it must anyway for the buffers
	// its parse workers reuse. A run the loop drops (a reset, a stop) or
	// keeps through a suspension is never released: the garbage collector
	// takes its buffer instead, so a missed call costs an allocation and
	// an early one is the only mistake (race-enabled builds of the Kafka
	// source poison released buffers to catch it).
	Release    func()
	Partitions []Partition
	Ctx        context.Context
	// Done, for assignments and revocations, gets the loop's answer; it
	// must have room for one value.
	Done chan<- error
}

// Stopped is closed when Run has returned; a source blocked on sending an
// Input or waiting for an answer gives up then.
func (r *Runner) Stopped() <-chan struct{} { return r.stopped }

// Run is the run loop: it takes inputs from in until in is closed (the
// source has stopped), flushing on size and on time, then stores and
// commits what is open within ShutdownTimeout. ctx bounds the sink calls
// of size and timer flushes; a source stops sending when ctx is done and
// closes in. Run returns the first fatal error: a permanent sink error or
// a failed rebuild. While it runs, a watchdog logs at warn when a batch
// has not been stored for SinkTimeout and sets ncclwatch_sink_healthy.
func (r *Runner) Run(ctx context.Context, in <-chan Input) error {
	defer close(r.stopped)
	r.async, r.input = true, in
	defer func() {
		r.async, r.input = false, nil
		r.abandon()
	}()
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		r.watch(wctx)
	}()
	defer func() {
		stopWatch()
		<-watched
	}()
	if n := r.cfg.ParseWorkers; n > 1 && r.deps.NewClassifier != nil {
		r.pool = newParsePool(r, n)
		defer func() {
			r.pool.stop()
			r.pool = nil
		}()
	}

	// The tick paces MaxWait (the backlog's too, at the tick's
	// granularity).
	tick := time.NewTicker(max(r.cfg.Batch.MaxWait/4, time.Millisecond))
	defer tick.Stop()
	for {
		inputs := in
		if r.pool.full() && !r.suspended {
			inputs = nil // the workers hold enough: back-pressure to the source
		}
		select {
		case x, ok := <-inputs:
			if !ok {
				if r.genEnded() {
					// No revocation came (the source stopped without
					// one): what is in hand is drained as the end of the
					// input.
					r.gen = nil
				}
				if err := r.resumeLate(ctx, ctx); err != nil {
					return err
				}
				if err := r.drainParsed(ctx); err != nil {
					return err
				}
				return r.Drain()
			}
			if err := r.handle(ctx, x); err != nil {
				return err
			}
		case <-r.headDone():
			if err := r.applyHead(ctx); err != nil {
				return err
			}
		case err := <-r.flightDone():
			if err := r.land(err); err != nil && fatal(err) {
				return err
			}
		case <-tick.C:
			if r.flying != nil {
				continue
			}
			// On time, or at once when a partition whose commit an open
			// fold window holds has turned quiet at its end: its commit
			// waits for nothing else (record-to-commit latency at the end
			// of a burst is FoldIdle plus a tick, not FoldIdle plus MaxWait).
			// Likewise when the stream came to rest with summaries, and
			// so commits, deferred (SummaryInterval).
			if now := r.deps.Now(); now.Sub(r.last) < r.maxWait() && !r.releasable(now, true) && !r.owing(now) {
				r.release(ctx)
				continue
			}
			if err := r.flushNow(ctx); err != nil && fatal(err) {
				return err
			}
			continue
		}
		// The records just read or applied, or the batch that just
		// landed, may have brought the stream to rest.
		if err := r.atRestNow(ctx); err != nil {
			return err
		}
	}
}

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

// flushCtx is the context of a size or timer flush: it ends with ctx or
// with the generation, so that a rebalance during a sink outage stops the
// retries and the revocation is honoured at once.
func (r *Runner) flushCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.gen == nil {
		return ctx, func() {}
	}
	fctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.gen, cancel)
	return fctx, func() {
		stop()
		cancel()
	}
}

// flushNow is a size or timer flush. Within Run the batch is stored by a
// goroutine of its own while the loop goes on with the next one; the
// previous batch must have landed first (at most one in flight: a sink
// slower than the stream holds the loop here, back-pressure).
func (r *Runner) flushNow(ctx context.Context) error {
	if r.revoking != nil {
		// The records of an ended generation, applied at its revocation:
		// stored within the revocation's deadline, not the generation's.
		return r.start(r.revoking, false, true)
	}
	if r.genEnded() {
		// Every store would be cut short at once (and a held batch sent
		// again only to fail): the revocation stores what is open.
		return context.Cause(r.gen)
	}
	if !r.async {
		fctx, cancel := r.flushCtx(ctx)
		defer cancel()
		return r.flush(fctx)
	}
	return r.start(ctx, true, true)
}

// genEnded reports whether the generation the loop holds has ended (its
// revocation is on its way).
func (r *Runner) genEnded() bool { return r.gen != nil && r.gen.Err() != nil }

// start lands the batch in flight (or stores the held one), then sends the
// open batch off without waiting for it; with gen both also end with the
// generation (see flushCtx); timed says it is a size or timer flush
// (summaries may wait, see prepare).
func (r *Runner) start(ctx context.Context, gen, timed bool) error {
	if err := ctx.Err(); err != nil {
		return err // a held batch is not sent again to fail at once
	}
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if gen {
		sctx, cancel = r.flushCtx(ctx)
	}
	defer cancel()
	if err := r.settle(sctx); err != nil {
		return err
	}
	evict, ok := r.prepare(timed)
	if !ok {
		return nil
	}
	r.launch(ctx, gen, r.handOff(), evict)
	return nil
}

// flight is a batch handed to the sink chain by a goroutine of the
// runner's; the loop gets its result on done (exactly one value) in land
// or settle.
type flight struct {
	b      *Batch
	evict  []string // jobs evicted once b is stored
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
}

// flightDone is the in-flight batch's result channel, nil when none flies.
func (r *Runner) flightDone() <-chan error {
	if r.flying == nil {
		return nil
	}
	return r.flying.done
}

// handOff moves the open batch out of the loop's hands: the returned Batch
// is the insert's alone, the loop goes on with an empty one (the spare's
// capacity) and no offsets.
func (r *Runner) handOff() *Batch {
	b := r.spare
	r.spare = nil
	if b == nil {
		b = new(Batch)
	}
	*b, r.batch = r.batch, *b
	r.dropBatch()
	return b
}

// launch stores b in a goroutine; with gen the store also ends with the
// generation (see flushCtx). The goroutine's owner is the loop: every
// flight is received by land or settle, or by abandon when Run returns.
func (r *Runner) launch(ctx context.Context, gen bool, b *Batch, evict []string) {
	f := &flight{b: b, evict: evict, done: make(chan error, 1)}
	if gen {
		fctx, stop := r.flushCtx(ctx)
		var cancel context.CancelFunc
		f.ctx, cancel = context.WithCancel(fctx)
		f.cancel = func() { cancel(); stop() }
	} else {
		f.ctx, f.cancel = context.WithCancel(ctx)
	}
	r.flying = f
	go func() { f.done <- r.store(f.ctx, b) }()
}

// land takes the in-flight batch's result: stored, its offsets are
// committed and its idle jobs evicted; cut short by its context, it is
// held for the next flush; a permanent error is returned as is.
func (r *Runner) land(err error) error {
	f := r.flying
	r.flying = nil
	defer f.cancel()
	if err != nil {
		if !IsPermanent(err) {
			r.held = f
		}
		return err
	}
	r.commit(f.ctx, f.b.Offsets)
	for _, o := range f.b.Offsets {
		if ps := r.parts[partKey{o.Topic, o.Partition}]; ps != nil {
			ps.committed, ps.stored, ps.staged = o.Next, ps.staged, 0
		}
	}
	now := r.deps.Now()
	for _, j := range f.evict {
		// A job that got lines while its final summary was being stored
		// stays (it is dirty again and goes into the next batch).
		if t, ok := r.touched[j]; ok && now.Sub(t) < r.cfg.IdleEvict {
			continue
		}
		r.evict(j)
	}
	r.jobs.Store(int64(r.asm.Len()))
	if mt := r.deps.Metrics; mt != nil {
		mt.JobsHeld.Set(float64(r.asm.Len()))
	}
	f.b.Reset()
	r.spare = f.b
	return nil
}

// settle waits until no batch is in flight or held: the in-flight one
// lands, a held one is stored again. When ctx ends first the in-flight
// store is abandoned (cancelled and waited for: the sink chain is never
// called by two goroutines at once) and held; settle returns its error.
func (r *Runner) settle(ctx context.Context) error {
	for r.flying != nil || r.held != nil {
		if r.flying == nil {
			h := r.held
			r.held = nil
			r.launch(ctx, false, h.b, h.evict)
		}
		var err error
		select {
		case err = <-r.flying.done:
		case <-ctx.Done():
			r.flying.cancel()
			err = <-r.flying.done
		}
		if err := r.land(err); err != nil {
			return err
		}
	}
	return nil
}

// abandon cancels and waits for the in-flight batch, and forgets it and a
// held one: their offsets stay uncommitted, their records are replayed.
func (r *Runner) abandon() {
	if f := r.flying; f != nil {
		f.cancel()
		<-f.done
		r.flying = nil
	}
	r.held = nil
}

// fatal reports whether a flush error stops the loop: a permanent one. A
// flush cut short by its context keeps the batch for the next flush (or
// drops it at the revocation).
func fatal(err error) bool { return IsPermanent(err) }

// handle is one step of the loop. With parse workers, records are sent
// to them. While the loop is suspended (the generation ended with a full
// batch in hand) records are kept for the revocation. An assignment or
// revocation first applies every record before it (resumeLate); a
// revocation stores them within its own deadline.
func (r *Runner) handle(ctx context.Context, x Input) error {
	switch x.Kind {
	case InputAssigned:
		if err := r.resumeLate(ctx, ctx); err != nil {
			return err
		}
		err := r.Assigned(x.Ctx, x.Partitions)
		x.Done <- err
		if err != nil && x.Ctx.Err() == nil {
			return err
		}
	case InputRevoked:
		// The last of resumeLate's stores may still fly when Revoked
		// settles it, so fctx ends after Revoked.
		fctx, cancel := revokeCtx(x.Ctx)
		defer cancel()
		if err := r.resumeLate(ctx, fctx); err != nil {
			return err
		}
		err := r.Revoked(x.Ctx, x.Partitions)
		x.Done <- err
		if err != nil && fatal(err) {
			return err
		}
	default:
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
			r.late = append(r.late, ms) // never released (Input.Release)
			return nil
		}
		return r.feed(ctx, ms, x.Release)
	}
	return nil
}

// feed processes a run of records: sent to the parse workers, or parsed
// and applied on the loop. release, if not nil, is the run's
// Input.Release.
func (r *Runner) feed(ctx context.Context, ms []Message, release func()) error {
	if r.pool != nil {
		return r.dispatch(ctx, ms, release)
	}
	return r.messages(ctx, ms, release)
}

// messages processes records in order; a fatal error stops it, and a
// suspension (the generation ended with the batch full) keeps the rest
// for the revocation. release is called once all of ms was processed.
func (r *Runner) messages(ctx context.Context, ms []Message, release func()) error {
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
	if release != nil {
		release()
	}
	return nil
}

// resumeLate ends a suspension: the records in hand of the ended
// generation (the parse workers' jobs, then the late runs, in input
// order) are applied, a full batch stored at once and each one after it,
// with fctx (the revocation's deadline). With nothing suspended it
// applies the workers' jobs out the same way. A fatal error stops it.
func (r *Runner) resumeLate(ctx, fctx context.Context) error {
	if !r.suspended && (r.pool == nil || len(r.pool.queue) == 0) {
		return nil
	}
	r.suspended, r.revoking = false, fctx
	defer func() { r.revoking = nil }()
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
		if err := r.feed(ctx, ms, nil); err != nil {
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
		ok := r.healthy(time.Now())
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
			ev := r.log.Warn().Dur("for", time.Since(time.Unix(0, r.failingSince.Load())))
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

// Message processes one record.
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
	r.gave = false
	out, lines, pending, derr := r.dec.record(m, k, r.linef)
	if out == recordDecoded && derr == nil && !r.gave {
		out = recordEmpty
	}
	r.settleRecord(m, k, out, lines, pending, derr)
	return r.admitted(ctx)
}

// count adds the records admitted since the last call to the counters
// (once per run of records: per record, the two metrics were 0.12 of the
// loop's ~1 CPU-s per 3 M load-benchmark records).
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
// the counters, the offsets the open batch covers, the partition's state,
// the processing time (now: read once per run of records; read per record,
// the clock took 0.23 of the loop's 1.44 CPU-s per 3 M load-benchmark
// records).
func (r *Runner) admit(m *Message, now time.Time) (partKey, error) {
	if r.draining {
		return partKey{}, errors.New("runner: draining")
	}
	r.admittedRecs++
	r.admittedBytes += len(m.Value)
	k := partKey{m.Topic, m.Partition}
	r.offsets[k] = m.Offset + 1
	ps := r.parts[k]
	if ps == nil {
		ps = &partState{}
		r.parts[k] = ps
	}
	r.curNow = now
	was, live := ps.backlogged(), ps.atEnd()
	ps.next, ps.seen, ps.made, ps.hwm = m.Offset+1, now, m.Time, m.HighWaterMark
	is := ps.backlogged()
	ps.caughtUp = ps.caughtUp || live
	ps.replay = !ps.caughtUp && (is || ps.replay)
	if is != was {
		if is {
			r.behind++
		} else {
			r.behind--
		}
		if r.behind == 0 || r.behind == 1 && is {
			r.showLimits()
		}
	}
	return k, nil
}

// settleRecord does what is left of a record after its lines were
// applied: the dead letters, the activity sample of a record that was not
// decoded or gave nothing, the partition's partial line.
func (r *Runner) settleRecord(m *Message, k partKey, out recordOutcome, lines int32, pending bool, err error) {
	switch out {
	case recordOversized:
		r.deadLetter(m, 0, "oversized", fmt.Sprintf("record of %d bytes exceeds pipeline.max_record_bytes %d", len(m.Value), r.cfg.MaxRecordBytes))
	case recordSkipped:
		if r.deps.Observe {
			r.activity(m)
		}
	default:
		if out == recordEmpty && r.deps.Observe {
			r.activity(m)
		}
		if pending {
			if _, held := r.pending[k]; !held {
				r.pending[k] = m.Offset
			}
		} else {
			delete(r.pending, k)
		}
		if err != nil {
			r.deadLetter(m, lines, DeadLetterReason(err), err.Error())
		}
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
// a full batch is flushed. Within Run, a full batch that cannot be stored
// because the generation ended suspends the loop's records until the
// revocation (resumeLate): the batch keeps max_rows, and the stores are
// not tried once per record to fail.
func (r *Runner) admitted(ctx context.Context) error {
	r.batch.Bytes += 16 // coordinates
	if !r.full() {
		return nil
	}
	err := r.flushNow(ctx)
	if r.async && r.revoking == nil && r.genEnded() && r.full() {
		r.suspended = true
		return nil
	}
	return err
}

// full reports whether the open batch is due for a size flush.
func (r *Runner) full() bool {
	rows, bytes, _ := r.cfg.Batch.limits(r.backlog())
	return r.batch.Len() >= rows || r.batch.Bytes >= bytes
}

// maxWait is the flush interval in force (BatchConfig.Backlog).
func (r *Runner) maxWait() time.Duration {
	_, _, wait := r.cfg.Batch.limits(r.backlog())
	return wait
}

// showLimits sets ncclwatch_batch_capacity_rows to the rows limit in
// force; admit calls it when the backlog begins or ends.
func (r *Runner) showLimits() {
	if m := r.deps.Metrics; m != nil {
		rows, _, _ := r.cfg.Batch.limits(r.backlog())
		m.BatchCapacity.Set(float64(rows))
	}
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
func (r *Runner) release(ctx context.Context) {
	if r.genEnded() {
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
func (r *Runner) activity(m *Message) {
	now := r.curNow
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
		r.batch.Activity = append(r.batch.Activity, Activity{Meta: meta, Time: t})
	}
	if r.sampler == nil {
		r.sampler = r.deps.NewDecoder()
	}
	_ = r.sampler.Decode(m.Value, report) // an undecodable record is not evidence
	r.sampler.Flush(report)
}

// ErrOversized is the error a Decoder returns (wrapped or as is) for a
// record or line over its size cap; parsers.ErrOversized is this value.
var ErrOversized = errors.New("oversized: exceeds the size cap")

// line applies a decoded, stamped line on the inline path: its NCCL
// events and its telemetry.
func (r *Runner) line(rec *Record) {
	r.proc.Record(rec)
	r.gave = r.gave || r.proc.gave
	if tl, ok := r.proc.Telemetry(); ok {
		r.fold(rec, tl)
	}
}

// fold hands a line's telemetry to the telemetry assembler.
func (r *Runner) fold(rec *Record, tl *TelemetryLine) {
	m := rec.Meta
	if k := [3]string{m.Cluster, m.Namespace, m.Job}; k != r.keyMeta || r.key == "" {
		r.keyMeta, r.key = k, JobKey(k[0], k[1], k[2])
	}
	job := r.key
	r.tel.Add(job, m, tl, rec.Time, rec.Source, &r.batch)
	// Telemetry-only jobs idle out like the others.
	if job != r.foldedJob || r.curNow != r.foldedAt {
		r.touched[job] = r.curNow
		r.telDirty[job] = true
		r.foldedJob, r.foldedAt = job, r.curNow
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
	r.batch.Events = appendRow(r.batch.Events, row)
	r.batch.Bytes += len(row.Line) + len(row.Job) + len(row.Pod) + 64
	r.dirty[job] = true
	r.touched[job] = r.curNow
}

func (r *Runner) deadLetter(m *Message, line int32, reason, msg string) {
	raw := m.Value
	if len(raw) > r.cfg.MaxDeadLetterBytes {
		raw = raw[:r.cfg.MaxDeadLetterBytes]
	}
	r.batch.DeadLetters = append(r.batch.DeadLetters, DeadLetter{
		Source: m.Source(line),
		Time:   m.Time, Reason: reason + ": " + msg, Raw: append([]byte(nil), raw...)})
	r.batch.Bytes += len(raw) + len(msg)
	if mt := r.deps.Metrics; mt != nil {
		mt.DeadLetters.WithLabelValues(reason).Inc()
		mt.ParseErrors.WithLabelValues(reason).Inc()
	}
}

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
	if err := r.start(ctx, false, false); err != nil {
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
	r.batch.Comms, r.batch.Jobs, r.batch.Nodes, r.batch.Telemetry = r.batch.Comms[:0], r.batch.Jobs[:0], r.batch.Nodes[:0], r.batch.Telemetry[:0]
	for _, j := range jobs {
		if inv := r.deps.Inventory; inv != nil {
			e := inv.Expect(r.asm.Nodes(j), r.cfg.Assembler.Expect)
			r.asm.SetExpectation(j, &e)
		}
		comms, sum, ok := r.asm.Summaries(j)
		if !ok {
			continue
		}
		r.shown[j] = r.asm.Created(j)
		r.batch.Comms = append(r.batch.Comms, comms...)
		r.batch.Jobs = append(r.batch.Jobs, sum)
		if r.deps.Observe {
			r.batch.Nodes = append(r.batch.Nodes, JobNodes{Job: j, Nodes: r.asm.Nodes(j)})
		}
	}
	// The jobs pushed out for new ones (assembler.max_jobs): their final
	// summaries, or the lines since their last summary would never be
	// summarized while the commit covers them.
	comms, sums := r.asm.Pushed()
	r.batch.Comms = append(r.batch.Comms, comms...)
	r.batch.Jobs = append(r.batch.Jobs, sums...)
	if r.deps.Observe {
		for _, j := range jobs {
			r.telDirty[j] = true
		}
		for _, j := range slices.Sorted(maps.Keys(r.telDirty)) {
			tests, training := r.tel.Report(j)
			ckpts := r.tel.Checkpoints(j)
			pool, canary := r.tel.Canary(j)
			if len(tests) > 0 || len(training) > 0 || len(ckpts) > 0 || canary {
				r.batch.Telemetry = append(r.batch.Telemetry, JobTelemetry{Job: j, Tests: tests, Training: training,
					Checkpoints: ckpts, CanaryPool: pool})
			}
		}
	}
	r.batch.Evicted = append(r.batch.Evicted[:0], evict...)
	slices.Sort(r.batch.Evicted)
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
		// from the commit must fold the same lines into it.
		ps.foldHeld, ps.staged, ps.stored = false, 0, 0
		if h, ok := r.tel.Hold(k.topic, k.part, next); ok {
			if r.quiet(ps, now) {
				r.tel.CloseFolds(k.topic, k.part)
			} else if h < c {
				c, ps.foldHeld, ps.staged = h, true, c
			}
		}
		ps.held = c < next
		r.batch.Offsets = append(r.batch.Offsets, Offset{Topic: k.topic, Partition: k.part, Next: c})
	}
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
// that none did), so that a communicator row is stored in the batch it
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

// evict drops an idle job whose final summary was stored.
func (r *Runner) evict(j string) {
	r.asm.Evict(j)
	r.tel.Evict(j)
	delete(r.touched, j)
	delete(r.shown, j)
	r.foldedJob = ""
	if mt := r.deps.Metrics; mt != nil {
		mt.Evictions.Inc()
	}
}

// store hands b to the sink chain until it is accepted: the one retry
// loop of the service. It returns ctx's error when ctx ends first, and a
// permanent error at once. It runs in a flight's goroutine and touches
// nothing of the runner but b, the atomics and the metrics.
func (r *Runner) store(ctx context.Context, b *Batch) error {
	ctx, span := r.deps.Tracer.Start(ctx, "ncclwatch.batch")
	span.SetAttributes(attribute.Int("events", len(b.Events)), attribute.Int("jobs", len(b.Jobs)),
		attribute.Int("dead_letters", len(b.DeadLetters)))
	defer span.End()
	if r.failingSince.Load() == 0 {
		r.failingSince.Store(time.Now().UnixNano())
	}
	backoff := r.cfg.RetryBackoff
	for {
		err := r.deps.Sink.Consume(ctx, b)
		if err == nil {
			r.stored()
			if mt := r.deps.Metrics; mt != nil {
				mt.BatchRows.Observe(float64(b.Len()))
			}
			return nil
		}
		r.lastErr.Store(&err)
		span.RecordError(err)
		if mt := r.deps.Metrics; mt != nil {
			mt.InsertErrors.Inc()
		}
		if IsPermanent(err) {
			return fmt.Errorf("store batch: %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("store batch: %w (last error: %v)", ctx.Err(), err)
		}
		r.log.Debug().Err(err).Dur("retry_in", backoff).Int("rows", b.Len()).Msg("sink rejected batch; retrying")
		if !r.pause(ctx, &backoff) {
			return fmt.Errorf("store batch: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// pause waits out one retry backoff and doubles it (up to MaxBackoff); it
// reports false when ctx ended first.
func (r *Runner) pause(ctx context.Context, backoff *time.Duration) bool {
	timer := time.NewTimer(*backoff)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	}
	*backoff = min(2**backoff, r.cfg.MaxBackoff)
	return true
}

// stored marks the sink healthy.
func (r *Runner) stored() {
	r.failingSince.Store(0)
	r.lastErr.Store(nil)
}

// dropBatch empties the open batch and the offsets it covers; the jobs
// whose summaries a deferred batch did not carry stay dirty.
func (r *Runner) dropBatch() {
	r.batch.Reset()
	if r.deferred {
		for _, j := range r.carried {
			delete(r.dirty, j)
		}
	} else {
		clear(r.dirty)
	}
	r.deferred, r.carried = false, r.carried[:0]
	clear(r.telDirty)
	r.foldedJob = ""
	clear(r.offsets)
	r.jobs.Store(int64(r.asm.Len()))
	if mt := r.deps.Metrics; mt != nil {
		mt.JobsHeld.Set(float64(r.asm.Len()))
		mt.BatchPending.Set(0)
	}
}

// Assigned is called when the source got partitions: the assembler is
// rebuilt from the events stored below each partition's committed offset.
// Everything from that offset on is delivered again and processed as new;
// storage folds the rows written before (every table is keyed by source
// coordinates, or by summary key with a version that depends only on the
// events folded in). Nothing is skipped: a batch is several inserts and a
// crash can fall between them, so no one table says what was stored.
// ctx is the generation's: size and timer flushes stop retrying when it
// ends.
func (r *Runner) Assigned(ctx context.Context, parts []Partition) error {
	r.abandon()
	r.reset()
	r.dropBatch()
	r.gen = ctx
	r.assigned.Store(false)
	if err := r.rebuildRetrying(ctx, parts); err != nil {
		return err
	}
	r.assigned.Store(true)
	return nil
}

// rebuildRetrying rebuilds until it succeeds, the generation ends or the
// error is permanent, with the sink's backoff (RetryBackoff doubling to
// MaxBackoff): the loader is the sink's server, and an outage of it at an
// assignment is waited out like one during a batch. Meanwhile /readyz is
// 503 (no assignment held; after SinkTimeout the sink is unhealthy too,
// with the error), each failure is counted in
// ncclwatch_state_rebuild_errors_total, and the first is logged at warn.
func (r *Runner) rebuildRetrying(ctx context.Context, parts []Partition) error {
	backoff := r.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := r.rebuild(ctx, parts)
		if err == nil {
			if attempt > 1 {
				r.stored()
				r.log.Info().Int("attempts", attempt).Msg("state rebuilt after failed attempts")
			}
			return nil
		}
		if mt := r.deps.Metrics; mt != nil {
			mt.RebuildErrors.Inc()
		}
		if IsPermanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("rebuild state: %w (last error: %v)", ctx.Err(), err)
		}
		if attempt == 1 {
			r.failingSince.CompareAndSwap(0, time.Now().UnixNano())
			r.log.Warn().Err(err).Dur("retry_in", backoff).Msg("state rebuild failed; retrying while the assignment waits")
		} else {
			r.log.Debug().Err(err).Int("attempt", attempt).Dur("retry_in", backoff).Msg("state rebuild failed; retrying")
		}
		r.lastErr.Store(&err)
		// What a failed attempt loaded is dropped: the next one starts
		// from nothing.
		r.reset()
		r.dropBatch()
		if !r.pause(ctx, &backoff) {
			return fmt.Errorf("rebuild state: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

func (r *Runner) rebuild(ctx context.Context, parts []Partition) error {
	if r.deps.Loader == nil || len(parts) == 0 {
		return nil
	}
	byTopic := map[string][]int32{}
	below := map[partKey]int64{}
	for _, p := range parts {
		if p.Committed <= 0 {
			continue // nothing committed: every stored event is delivered again
		}
		byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
		below[partKey{p.Topic, p.Partition}] = p.Committed
	}
	since := r.deps.Now().Add(-r.cfg.IdleEvict)
	r.foldedJob = "" // touched entries are set below
	var ev Event
	n := 0
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		ps := byTopic[topic]
		err := r.deps.Loader.LoadEvents(ctx, topic, ps, since, func(row EventRow) error {
			if row.Source.Offset >= below[partKey{row.Source.Topic, row.Source.Partition}] {
				return nil // delivered again: folded in as it arrives
			}
			nccl, tel := r.deps.Classifier.Line([]byte(row.Line), &ev, &r.tl)
			if tel {
				// Restores the job's network and NCCL ranks for its test
				// runs; rows are not written again.
				r.tel.Add(JobKey(row.Cluster, row.Namespace, row.Job), &Meta{Job: row.Job, Namespace: row.Namespace,
					Cluster: row.Cluster, Pod: row.Pod, Node: row.Node}, &r.tl, row.Time, row.Source, nil)
			}
			if !nccl {
				return nil
			}
			meta := Meta{Job: row.Job, Namespace: row.Namespace, Cluster: row.Cluster, Pod: row.Pod, Container: row.Container, Node: row.Node}
			job := JobKey(row.Cluster, row.Namespace, row.Job)
			r.asm.Add(job, &meta, &ev, row.Time)
			r.touched[job] = r.deps.Now()
			// The next batch carries the rebuilt job's summary: the same
			// version and content as stored, so storage does not change,
			// while the rules stage of this process learns of the job.
			r.dirty[job] = true
			n++
			return nil
		})
		if err != nil {
			return fmt.Errorf("rebuild state for %s %v: %w", topic, ps, err)
		}
	}
	r.jobs.Store(int64(r.asm.Len()))
	if mt := r.deps.Metrics; mt != nil {
		mt.Rebuilds.Inc()
		mt.RebuiltEvents.Add(float64(n))
		mt.JobsHeld.Set(float64(r.asm.Len()))
	}
	r.log.Info().Int("partitions", len(parts)).Int("events", n).Int("jobs", r.asm.Len()).Msg("state rebuilt from stored events")
	return nil
}

// heldJobs returns the jobs of which the runner holds state (NCCL or
// telemetry), sorted.
func (r *Runner) heldJobs() []string {
	set := map[string]bool{}
	for _, j := range r.asm.Jobs() {
		set[j] = true
	}
	for _, j := range r.tel.Jobs() {
		set[j] = true
	}
	for j := range r.touched {
		set[j] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// revokeMargin is kept from the revocation deadline for the answer to reach
// the source and the source to leave the generation.
const revokeMargin = 500 * time.Millisecond

// Revoked is called before partitions are taken away: the open batch is
// stored and committed while the generation is alive, if the sink accepts
// it before ctx's deadline; otherwise it is dropped (the records are
// delivered again to the next owner). The state is dropped either way.
func (r *Runner) Revoked(ctx context.Context, parts []Partition) error {
	for _, j := range r.asm.Jobs() {
		r.dirty[j] = true
	}
	// The jobs held leave with their partitions; they did not end (not
	// Evicted): the rules stage keeps their alerts as they are.
	released := r.heldJobs()
	r.batch.Released = append(r.batch.Released[:0], released...)
	fctx, cancel := revokeCtx(ctx)
	defer cancel()
	err := r.flush(fctx)
	if err != nil {
		rows := r.batch.Len()
		if r.held != nil {
			rows += r.held.b.Len()
		}
		r.log.Warn().Err(err).Int("rows", rows).Msg("revoked before the open batch was stored; dropped, the next owner replays it")
		if len(released) > 0 {
			// The stage must learn of the release all the same: a batch
			// with nothing to store, its context done.
			done, cancel := context.WithCancel(context.Background())
			cancel()
			_ = r.deps.Sink.Consume(done, &Batch{Released: released})
		}
	}
	r.abandon()
	r.reset()
	r.dropBatch()
	r.gen = nil
	r.assigned.Store(false)
	return err
}
