package pipeline

import (
	"context"
	"time"
	"unsafe"
)

// EventRow is one classified NCCL line as stored in the nccl_events table:
// who logged it, where it came from, and the line itself so that assembler
// state can be rebuilt from storage after a restart.
type EventRow struct {
	Source    Source
	Time      time.Time // envelope time; ingest time when the envelope had none
	Job       string
	Namespace string
	Cluster   string
	Pod       string
	Container string
	Node      string
	Host      string // NCCL hostname
	PID       string
	Dev       int // [cudaDev] of the line, -1 when absent
	Rank      int // rank the line or its launcher prefix gave, -1 when absent
	Kind      string
	Warn      bool
	Line      string // the line after envelope decoding, capped
}

// DeadLetter is a record that could not be processed: undecodable or
// oversized. It keeps its coordinates and (capped) raw bytes.
type DeadLetter struct {
	Source Source
	Time   time.Time
	Reason string
	Raw    []byte
}

// Offset is a Kafka position to commit once the batch holding it was
// accepted: the next offset to read in one partition.
type Offset struct {
	Topic     string
	Partition int32
	Next      int64
}

// Batch is the unit a sink accepts or rejects as a whole. Summaries carry a
// version (see CommSummary.Version) so that storage keeps the latest state
// per key however often a summary is written.
type Batch struct {
	Events []EventRow
	Comms  []CommSummary
	// Unnamed are the summaries of a live job's process groups that NCCL
	// did not name with a commId (CommSummary.Named): the processes no
	// communicator line claimed, and groups keyed by their size. The
	// rules stage sees them as communicators; sinks do not store them,
	// since a process may be unattributed, or grouped by size, only until
	// the line naming its communicator arrives, and whether a flush falls
	// in between would decide what is stored. They join Comms, and are
	// stored, when their job is evicted (no NCCL line for idle_evict) and
	// can no longer change. The job's summary carries their facts.
	Unnamed     []CommSummary
	Jobs        []JobSummary
	DeadLetters []DeadLetter
	Alerts      []Alert        // alert state changes (rules engine)
	Steps       []TrainingStep // training progress lines (telemetry)
	TestRuns    []NCCLTestRun  // nccl-tests results (telemetry)
	// Sealed are the snapshots of the fold windows whose commit this
	// batch lets pass their open rows (TelemetryAssembler.Seal): stored
	// with the batch, read back by the next reader of the partition.
	Sealed []FoldSnapshot
	// Checkpoints are checkpoint save and load events (telemetry); an
	// event may appear more than once as its lines arrive, the latest
	// copy last.
	Checkpoints []CheckpointEvent
	// Collectives are collective_perf rows (NCCL Inspector records
	// folded, pipeline/collective.go); a row may appear in several
	// batches as it grows, its latest copy last.
	Collectives []CollectivePerf
	Offsets     []Offset
	// Bytes is the memory the batch's rows hold, for batching by bytes:
	// each row's struct and what it alone points to (a line's text, not
	// the strings it shares with its record's metadata or its series).
	Bytes int
	// rowLimit is the rows limit in force while the batch fills (the
	// runner's BatchConfig.limits; 0 for none): appendRow grows a slice
	// of rows no further at once.
	rowLimit int

	// Observations for the rules stage, not rows (see RunnerDeps.Observe):
	// the nodes of each job in Jobs, the telemetry of jobs whose lines
	// changed, sampled activity of jobs' pods, the jobs (as JobKey)
	// evicted once this batch is stored (they ended: their alerts
	// resolve), and the jobs released (as JobKey) because their partitions
	// were revoked (they go on elsewhere: their alerts must not resolve).
	// A batch with Released and nothing else comes with a done context:
	// it is an observation, there is nothing to store.
	Nodes     []JobNodes
	Telemetry []JobTelemetry
	Activity  []Activity
	Evicted   []string
	Released  []string
}

// JobNodes are the Kubernetes nodes a job's records came from.
type JobNodes struct {
	Job   string // JobKey
	Nodes []string
}

// JobTelemetry is a job's telemetry report (TelemetryAssembler.Report) and,
// for a fabric canary, its pool.
type JobTelemetry struct {
	Job      string // JobKey
	Tests    []NCCLTestReport
	Training []TrainingReport
	// Checkpoints are the job's checkpoint series
	// (TelemetryAssembler.Checkpoints).
	Checkpoints []CheckpointReport
	// Collectives are the job's NCCL Inspector summaries
	// (TelemetryAssembler.Collectives).
	Collectives []CollectiveReport
	// Pool is the job's pool label (TelemetryAssembler.Pool).
	Pool       string
	CanaryPool string
}

// Activity says that a job's pod logged at Time (NCCL or not): the absence
// rules' evidence.
type Activity struct {
	Meta Meta
	Time time.Time
}

// addComms appends a job's named communicators to Comms, and its unnamed
// process groups to Unnamed, or to Comms too when final (the job leaves
// the assembler with this batch).
func (b *Batch) addComms(comms []CommSummary, final bool) {
	for i := range comms {
		if final || comms[i].Named() {
			b.Comms = append(b.Comms, comms[i])
		} else {
			b.Unnamed = append(b.Unnamed, comms[i])
		}
	}
}

// Len returns the number of rows in the batch.
func (b *Batch) Len() int {
	return len(b.Events) + len(b.Comms) + len(b.Jobs) + len(b.DeadLetters) + len(b.Alerts) + len(b.Steps) + len(b.TestRuns) + len(b.Checkpoints) +
		len(b.Sealed) + len(b.Collectives)
}

// Empty reports whether the batch carries nothing at all: no rows, no
// offsets, no observations (the run loop's scheduled batch, Scheduled).
func (b *Batch) Empty() bool {
	return b.Len() == 0 && len(b.Offsets) == 0 && len(b.Unnamed) == 0 && len(b.Nodes) == 0 && len(b.Telemetry) == 0 &&
		len(b.Activity) == 0 && len(b.Evicted) == 0 && len(b.Released) == 0
}

// Reset empties the batch, keeping its capacity.
func (b *Batch) Reset() {
	b.Events, b.Comms, b.Jobs, b.DeadLetters, b.Offsets = b.Events[:0], b.Comms[:0], b.Jobs[:0], b.DeadLetters[:0], b.Offsets[:0]
	b.Unnamed, b.Sealed, b.Collectives = b.Unnamed[:0], b.Sealed[:0], b.Collectives[:0]
	b.Alerts, b.Steps, b.TestRuns, b.Checkpoints = b.Alerts[:0], b.Steps[:0], b.TestRuns[:0], b.Checkpoints[:0]
	b.Nodes, b.Telemetry, b.Activity, b.Evicted, b.Released = b.Nodes[:0], b.Telemetry[:0], b.Activity[:0], b.Evicted[:0], b.Released[:0]
	b.Bytes = 0
}

// Consumer is a pipeline stage: enrichment, the rules tap and the sinks
// chain through it.
//
// Ownership: the callee must not keep or mutate the batch (or anything it
// points to) after Consume returns; it copies what it needs. Calls are not
// concurrent: the run loop calls Consume from one goroutine. Consume blocks
// until the batch is durably accepted (a sink) or passed on (a stage), and
// returns an error when it was not: the caller then keeps the batch's
// offsets uncommitted and may retry with a rebuilt batch. An error wrapped
// with Permanent will fail again on retry.
type Consumer interface {
	Consume(ctx context.Context, b *Batch) error
}

// Scheduled is a Consumer with work due on the clock as well as with
// every batch: the rules stage, whose absence rules and `for` clauses
// progress with time, evaluates whenever it consumes a batch. When the
// run loop's sink is Scheduled and no batch reached it for Every, Run
// hands it an empty batch (Batch.Empty) at its next tick, through the
// one store path (its retries, the one batch in flight): what that
// evaluation changed is stored by the loop like every other row, and
// commits nothing. Outside Run (callers of Message and Flush) nothing is
// scheduled.
type Scheduled interface {
	Consumer
	Every() time.Duration
}

// ConsumerFunc adapts a function to a Consumer.
type ConsumerFunc func(ctx context.Context, b *Batch) error

// Consume calls f(ctx, b).
func (f ConsumerFunc) Consume(ctx context.Context, b *Batch) error { return f(ctx, b) }

// permanent marks an error that retrying will not fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err to say that retrying will not help (a schema mismatch,
// a record no server will take). It is the one place retry versus
// dead-letter is decided.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	for err != nil {
		if _, ok := err.(permanent); ok {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// The memory of one row in a batch (Batch.Bytes), beside what it alone
// points to.
const (
	eventRowBytes = int(unsafe.Sizeof(EventRow{}))
	stepRowBytes  = int(unsafe.Sizeof(TrainingStep{}))
	// A collective_perf row carries two sparse histograms: a few dozen
	// buckets each.
	collRowBytes = int(unsafe.Sizeof(CollectivePerf{})) + 2*32*5
)

// appendRow appends v to rows, doubling a full slice's capacity up to
// limit rows (Batch.rowLimit; no ceiling when 0): append grows a large
// slice by a quarter at a time, so a batch's rows (Batch.Steps, up to
// pipeline.batch.backlog.max_rows) were copied ~5 times over into fresh
// memory as it filled (a visible cost in the load benchmark's profile);
// doubled, at most once. The ceiling keeps a doubling from making room
// for twice the rows the batch may hold: batches are reused, so that
// room would be held for good, in the open batch and the one being
// stored. Past the ceiling (a batch that goes over its limit before it
// is flushed) a slice grows by a quarter.
func appendRow[T any](rows []T, v T, limit int) []T {
	if n := len(rows); n == cap(rows) {
		more := max(n, 64)
		switch {
		case n >= limit && limit > 0:
			more = max(n/4, 64)
		case limit > 0:
			more = min(more, limit-n)
		}
		grown := make([]T, n, n+more)
		copy(grown, rows)
		rows = grown
	}
	return append(rows, v)
}
