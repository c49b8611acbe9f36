package pipeline

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

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
	// MaxRows 120 000: the server's CPU per insert is mostly creating a
	// part's files, so while behind ncclwatch writes fewer, larger parts
	// (docs/performance.md, "Backlog batches").
	MaxRows int `yaml:"max_rows"`
	// MaxBytes 32 MiB: twice the live cap. It bounds the memory of a
	// batch's rows (Batch.Bytes): two batches of it, one filling while
	// the one before it is stored, are the batch part of the memory bound
	// (docs/configuration.md, "Memory").
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
	// 2, or 1 where GOMAXPROCS is 1: parsing is most of a record's CPU
	// and the loop keeps the rest, so two workers parse about as fast as
	// the loop applies; more only help where the loop waits for them (at
	// most GOMAXPROCS is useful).
	ParseWorkers int `yaml:"parse_workers"`
	// SummaryInterval: within Run, while a partition has a backlog (more
	// than backlogRecords behind its high water mark), a size or timer
	// flush carries the comm and job summaries of the jobs that changed
	// (and the rules see them) only when this long has passed since the
	// last flush that did, or when the stream is at rest (every partition
	// read to its end and quiet for FoldIdle); the flushes in between
	// store events, telemetry rows and dead letters, and the summaries of
	// jobs that gained a process or a communicator (so that a
	// communicator row is stored whenever it would be with 0, however
	// short-lived). Their offsets are committed with the next batch that
	// carries every changed job's summaries: a commit never covers a
	// record whose summary is not stored, so a crash replays it (the
	// state rebuilt from stored events lacks the launcher lines, and no
	// process may own the partition soon). Evictions, Flush, Drain,
	// revocations and SIGTERM always carry them. 0 (the default) stores
	// them, and commits, with every flush: where jobs gain a communicator
	// in nearly every batch, as on the load benchmark, an interval saves
	// no part and only delays verdicts. A backfill of few communicators
	// (the summary tables are a few dozen rows a flush but, with
	// ClickHouse writing each part as dozens of files, much of the
	// server's work per flush) may set it (docs/delivery.md).
	SummaryInterval time.Duration   `yaml:"summary_interval"`
	Assembler       AssemblerConfig `yaml:"assembler"`
	// Telemetry bounds the training/nccl-tests state per job.
	Telemetry TelemetryAssemblerConfig `yaml:"telemetry"`
}

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
	// Sink is the head of the sink chain; when it is Scheduled, Run also
	// hands it an empty batch on its schedule.
	Sink      Consumer
	Committer Committer
	Loader    EventLoader
	// Folds reads back the fold windows' snapshots (FoldSnapshot) at an
	// assignment; nil restores none.
	Folds     FoldLoader
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
