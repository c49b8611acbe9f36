package pipeline

import (
	"errors"
	"math"
	"slices"
	"time"
)

// TelemetryAssemblerConfig configures a TelemetryAssembler.
type TelemetryAssemblerConfig struct {
	// MaxJobs bounds the jobs held; beyond it the least recently updated
	// tenth is dropped. 10 000 jobs of a few KiB each is tens of MiB, far
	// more jobs than a cluster runs at once.
	MaxJobs int `yaml:"max_jobs"`
	// MaxRunsPerJob bounds the nccl-tests runs reported per job; the
	// oldest are dropped first. A canary runs one or two; `-d all -o all`
	// sweeps print a few dozen.
	MaxRunsPerJob int `yaml:"max_runs_per_job"`
	// MaxHostsPerRun bounds the host names kept per run (and of NCCL lines
	// per job). 1024 covers the largest published runs (64 nodes ×
	// 8 GPUs print 64 names).
	MaxHostsPerRun int `yaml:"max_hosts_per_run"`
	// MedianSamples bounds the step times kept per series for the median:
	// beyond it every second sample is dropped and the sampling stride
	// doubles, so the median stays close on any length of run. 4096
	// floats are 32 KiB.
	MedianSamples int `yaml:"median_samples"`
	// PoolLabels are the pod labels that name the node pool, in order;
	// the inventory's pool of the pod's node comes after them.
	PoolLabels []string `yaml:"pool_labels"`
	// ModelLabels are the pod labels that name the model trained.
	ModelLabels []string `yaml:"model_labels"`
	// CanaryLabel marks a fabric canary's pods (value "true").
	CanaryLabel string `yaml:"canary_label"`
	// FoldRecords is the width, in offsets of one Kafka partition, of the
	// windows within which copies of one step's progress line are folded
	// into one training_steps row (see Add). Windows start at multiples of
	// it, so a row depends only on the records of its window, never on
	// batch boundaries or crash points; offsets are not committed past the
	// first line of a row whose window is still open, so a restart replays
	// at most this many records of a partition (once the window closes,
	// what a stored batch held back is committed at the next tick of the
	// run loop, Runner.release). It also bounds how long
	// an nccl-tests run that is still open holds the commit at its first
	// line (see Hold). 1024: the ranks of a job print a step within a few
	// hundred records of one another even in a partition shared by many
	// pods (a window boundary between them splits the step into two rows,
	// one time in a few), and replaying 1024 records costs milliseconds.
	FoldRecords int64 `yaml:"fold_records"`
	// LargeMessageBytes is the least message size whose NCCL Inspector
	// records count as large: their median bus bandwidth is what the
	// bandwidth rule compares with the pool's nccl-tests baseline (taken
	// at the largest size of the canary's sweep). 64 MiB: bus bandwidth
	// over IB and RoCE is near its plateau from there (smaller messages
	// are latency-bound), and FSDP and Megatron buckets reach it.
	LargeMessageBytes int64 `yaml:"large_message_bytes"`
}

// Labels of the fabric canary and of training pods (deploy/kubernetes/
// canary/README.md).
const (
	LabelCanary = "ncclwatch.io/canary"
	LabelPool   = "ncclwatch.io/pool"
	LabelModel  = "ncclwatch.io/model"
)

// DefaultTelemetryAssemblerConfig returns the defaults documented on each
// field.
func DefaultTelemetryAssemblerConfig() TelemetryAssemblerConfig {
	return TelemetryAssemblerConfig{
		MaxJobs:        10000,
		MaxRunsPerJob:  64,
		MaxHostsPerRun: 1024,
		MedianSamples:  4096,
		PoolLabels:     []string{LabelPool},
		ModelLabels:    []string{LabelModel},
		CanaryLabel:    LabelCanary,
		FoldRecords:    1024,

		LargeMessageBytes: 64 << 20,
	}
}

// Validate reports every invalid field, named by its configuration path.
func (c TelemetryAssemblerConfig) Validate() error {
	var errs []error
	if c.MaxJobs <= 0 {
		errs = append(errs, errors.New("telemetry.max_jobs: must be > 0"))
	}
	if c.MaxRunsPerJob <= 0 {
		errs = append(errs, errors.New("telemetry.max_runs_per_job: must be > 0"))
	}
	if c.MaxHostsPerRun <= 0 {
		errs = append(errs, errors.New("telemetry.max_hosts_per_run: must be > 0"))
	}
	if c.MedianSamples < 2 {
		errs = append(errs, errors.New("telemetry.median_samples: must be >= 2"))
	}
	if c.FoldRecords <= 0 {
		errs = append(errs, errors.New("telemetry.fold_records: must be > 0"))
	}
	if c.LargeMessageBytes <= 0 {
		errs = append(errs, errors.New("telemetry.large_message_bytes: must be > 0"))
	}
	return errors.Join(errs...)
}

// TelemetryAssembler aggregates parsed telemetry lines per job: it turns
// them into stored rows and keeps, per job, the state the reports need —
// training series (one per framework) and nccl-tests runs. Memory is
// bounded by the config. It is not safe for concurrent use.
type TelemetryAssembler struct {
	cfg   TelemetryAssemblerConfig
	inv   *Inventory
	jobs  map[string]*telJob
	clock uint64 // Add count: recency for eviction without reading the time
	folds map[partKey]*partFold
	// open are the nccl-tests runs begun in each partition that may still
	// get rows: offsets are not committed past their first line (Hold).
	open map[partKey][]*testRun

	// The last line's job and partition fold, and its row metadata: the
	// lines of a partition mostly come from one job, so Add looks its
	// maps up only when they change. lastJob and lastFold are nil when
	// the entry they cached was deleted.
	lastJobKey string
	lastJob    *telJob
	lastPart   partKey
	lastFold   *partFold
	// meta is the row metadata of metaOf (nil: of a line without
	// metadata) while the inventory's generation is metaGen; metaSet
	// says it was built. Meta values are shared and immutable, and the
	// lines of a partition mostly come from a few pods, so the label and
	// inventory lookups run when the pod changes, not per line.
	meta    rowMeta
	metaOf  *Meta
	metaGen uint64
	metaSet bool
	// retired holds (in Collectives) the changed collective_perf rows of
	// windows that ended where no batch was at hand (Hold, Restore):
	// EmitCollectives writes them out.
	retired Batch
}

// NewTelemetryAssembler returns an assembler; cfg must be valid. inv, when
// not nil, names the pool of a pod's node when no pool label does.
func NewTelemetryAssembler(cfg TelemetryAssemblerConfig, inv *Inventory) *TelemetryAssembler {
	return &TelemetryAssembler{cfg: cfg, inv: inv, jobs: map[string]*telJob{}, folds: map[partKey]*partFold{},
		open: map[partKey][]*testRun{}}
}

type telJob struct {
	touched   uint64
	canary    bool   // a line came from a pod with the canary label
	pool      string // the pool of the latest line that named one
	series    []*series
	runs      []*testRun // oldest first; the last may be open
	dropped   int        // runs dropped by MaxRunsPerJob
	ncclHosts []string
	// ncclHostSet holds ncclHosts once they are more than hostScan.
	ncclHostSet map[string]struct{}
	ncclRanks   int
	network     string
	ckpts       []*ckptSeries // checkpoint series, pipeline/checkpoint.go
	colls       []*collStat   // Inspector records' summaries, pipeline/collective.go
	rowSeries   seriesCache   // series of its training_steps rows (StepSeries)
	// netClass is NetworkClass(netClassOf), kept for the rows of the
	// job's network (networkClass).
	netClass, netClassOf string
}

// Len returns the number of jobs held.
func (a *TelemetryAssembler) Len() int { return len(a.jobs) }

// Evict drops a job's state (the runner calls it with the NCCL
// assembler's evictions).
func (a *TelemetryAssembler) Evict(job string) {
	delete(a.jobs, job)
	a.lastJob = nil
}

// Jobs returns the keys of the jobs held, sorted.
func (a *TelemetryAssembler) Jobs() []string {
	out := make([]string, 0, len(a.jobs))
	for k := range a.jobs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Add folds one parsed line of job into its state. meta (may be nil) is
// the envelope metadata of the line, t its event time and src its
// coordinates. When out is not nil the rows the line yields are appended
// to out.Steps or out.TestRuns and out.Bytes grows by their approximate
// size; pass nil to rebuild state or to build reports only. tl is not kept.
func (a *TelemetryAssembler) Add(job string, meta *Meta, tl *TelemetryLine, t time.Time, src Source, out *Batch) {
	if tl.Kind == TelemetryNone {
		return
	}
	j := a.job(job)
	// The row metadata of the line, once (label and inventory lookups).
	m := a.rowMeta(meta)
	if meta != nil {
		j.canary = j.canary || m.canary
		if m.pool != "" {
			j.pool = m.pool
		}
	}
	for k := range tl.Earlier {
		// R9: saves announced in earlier updates of a carriage-return
		// line, each an event under coordinates of its own.
		ev := j.checkpoint(*m, &tl.Earlier[k], tl.Rank, t, earlierSource(src, k))
		if ev != nil && out != nil {
			out.Checkpoints = append(out.Checkpoints, *ev)
			out.Bytes += 160 + len(ev.Job) + len(ev.Pod) + len(ev.Path)
		}
	}
	switch {
	case isTraining(tl.Kind):
		// The reports follow the job's series; an amend line with no step
		// to amend is not in them. Only Kind, Framework, Rank and the
		// TrainingFigures are read: all a Parsed keeps of such a line.
		if s := j.seriesOf(tl.Framework, tl.Kind != TelemetryAmend, a.cfg.MedianSamples); s != nil {
			s.add(tl)
		}
		if out != nil {
			a.foldStep(job, j, m, tl, t, src, out)
		}
	case tl.Kind == TelemetryNCCLComm:
		if tl.NRanks > j.ncclRanks {
			j.ncclRanks = tl.NRanks
		}
		if len(tl.Host) > 0 {
			j.addNCCLHost(tl.Host, a.cfg.MaxHostsPerRun)
		}
	case tl.Kind == TelemetryNCCLNetwork:
		j.setNetwork(string(tl.Name))
	case tl.Kind == TelemetryCollective:
		j.collective(&tl.Coll, a.cfg)
		if out != nil {
			a.foldCollective(job, m, &tl.Coll, t, src, out)
		}
	case tl.Kind == TelemetryCheckpoint:
		ev := j.checkpoint(*m, &tl.Checkpoint, tl.Rank, t, src)
		if ev != nil && out != nil {
			out.Checkpoints = append(out.Checkpoints, *ev)
			out.Bytes += 160 + len(ev.Job) + len(ev.Pod) + len(ev.Path)
		}
	default:
		before := j.current()
		j.test(tl, src, a.cfg)
		if cur := j.current(); out != nil && cur != before && cur != nil {
			pk := partKey{src.Topic, src.Partition}
			a.open[pk] = append(a.open[pk], cur)
		}
		if out != nil && (tl.Kind == TelemetryTestRow || tl.Kind == TelemetryTestAvg) {
			row := j.testRow(*m, tl, t, src)
			out.TestRuns = append(out.TestRuns, row)
			out.Bytes += 200 + len(row.Job) + len(row.Pod) + 16*len(row.Hosts)
		}
	}
}

// earlierSource returns the coordinates of the k-th earlier update of the
// line at src (TelemetryLine.Earlier): a negative Line, distinct for every
// line and update of a record, so that events begun there are rows of
// their own in storage (rows are keyed by their first line's coordinates).
func earlierSource(src Source, k int) Source {
	const per = 64 // updates per line, parsers' maxEarlierCheckpoints
	src.Line = -1 - (src.Line%(math.MaxInt32/per))*per - int32(k%per)
	return src
}

func (a *TelemetryAssembler) job(key string) *telJob {
	a.clock++
	if j := a.lastJob; j != nil && a.lastJobKey == key {
		j.touched = a.clock
		return j
	}
	j := a.jobs[key]
	if j == nil {
		if len(a.jobs) >= a.cfg.MaxJobs {
			a.evictOldest()
		}
		j = &telJob{}
		a.jobs[key] = j
	}
	j.touched = a.clock
	a.lastJobKey, a.lastJob = key, j
	return j
}

// evictOldest drops the least recently updated tenth of the jobs: one sort
// per MaxJobs/10 new jobs, never one per line.
func (a *TelemetryAssembler) evictOldest() {
	type kv struct {
		key string
		at  uint64
	}
	all := make([]kv, 0, len(a.jobs))
	for k, j := range a.jobs {
		all = append(all, kv{k, j.touched})
	}
	slices.SortFunc(all, func(x, y kv) int {
		switch {
		case x.at < y.at:
			return -1
		case x.at > y.at:
			return 1
		}
		return 0
	})
	n := max(1, len(all)/10)
	for _, e := range all[:n] {
		delete(a.jobs, e.key)
	}
	a.lastJob = nil
}

// rowMeta is who logged a line, as its stored row says.
type rowMeta struct {
	Meta
	pool, model string
	canary      bool
}

// rowMeta returns the row metadata of m, valid until the next call; the
// caller must not change it.
func (a *TelemetryAssembler) rowMeta(m *Meta) *rowMeta {
	r := &a.meta
	gen := a.inv.Gen()
	if a.metaSet && a.metaOf == m && a.metaGen == gen {
		return r
	}
	a.metaOf, a.metaGen, a.metaSet = m, gen, true
	if m == nil {
		*r = rowMeta{}
		return r
	}
	*r = rowMeta{Meta: *m}
	for _, l := range a.cfg.PoolLabels {
		if v := m.Labels[l]; v != "" {
			r.pool = v
			break
		}
	}
	if r.pool == "" && m.Node != "" {
		if f, ok := a.inv.Node(m.Node); ok {
			r.pool = f.Pool
		}
	}
	for _, l := range a.cfg.ModelLabels {
		if v := m.Labels[l]; v != "" {
			r.model = v
			break
		}
	}
	r.canary = a.cfg.CanaryLabel != "" && m.Labels[a.cfg.CanaryLabel] == "true"
	return r
}

// runHoldWindows is how many fold windows an open nccl-tests run holds
// its partition's commit at its first line: a run's table printed among
// other jobs' lines spans several windows, while a run that never prints
// its end (a crashed test) must not hold the commit for good.
const runHoldWindows = 64

// Hold returns the offset below which a partition's offsets may be
// committed, false when nothing holds them: the first line of its open
// fold window's rows (or, once the window was sealed, the offset it was
// sealed at: a replay from there restores the rows), and the first line
// of an nccl-tests run begun in the partition that may still get rows
// (not closed, begun fewer than runHoldWindows windows before next), so
// that a replay reads the run's header again. next is the partition's
// next offset: a window is complete (and dropped) once next is past its
// end.
func (a *TelemetryAssembler) Hold(topic string, part int32, next int64) (int64, bool) {
	pk := partKey{topic, part}
	hold, ok := int64(0), false
	if pf := a.folds[pk]; pf != nil {
		if next/a.cfg.FoldRecords != pf.window {
			a.retire(pf, nil)
			delete(a.folds, pk)
			a.lastFold = nil
		} else if pf.sealed >= 0 {
			hold, ok = pf.sealed, true
		} else if pf.first >= 0 {
			hold, ok = pf.first, true
		}
	}
	runs := a.open[pk][:0]
	for _, r := range a.open[pk] {
		if r.closed || !math.IsNaN(r.avg) || next-r.first >= runHoldWindows*a.cfg.FoldRecords {
			continue
		}
		runs = append(runs, r)
		if !ok || r.hold < hold {
			hold, ok = r.hold, true
		}
	}
	clear(a.open[pk][len(runs):])
	if len(runs) == 0 {
		delete(a.open, pk)
	} else {
		a.open[pk] = runs
	}
	return hold, ok
}

// Canary reports whether the job is a fabric canary (its pods carry the
// canary label) and the node pool it tests: what the rules engine needs to
// count the job's ok verdict as proof of the pool's RDMA path.
func (a *TelemetryAssembler) Canary(job string) (pool string, ok bool) {
	j := a.jobs[job]
	if j == nil || !j.canary {
		return "", false
	}
	return j.pool, true
}

// Pool returns the job's pool as its lines' pod labels (or its nodes'
// inventory pool) named it last, "" when none did.
func (a *TelemetryAssembler) Pool(job string) string {
	if j := a.jobs[job]; j != nil {
		return j.pool
	}
	return ""
}

// Report returns what the job's telemetry says: its nccl-tests runs, in
// order, and its training series, in order of first appearance. Both are
// empty (not nil) for a job without telemetry.
func (a *TelemetryAssembler) Report(job string) (tests []NCCLTestReport, training []TrainingReport) {
	tests, training = []NCCLTestReport{}, []TrainingReport{}
	j := a.jobs[job]
	if j == nil {
		return tests, training
	}
	for _, r := range j.runs {
		if r.rows == 0 && math.IsNaN(r.avg) {
			continue // a header with no results
		}
		tests = append(tests, j.testReport(r))
	}
	for _, s := range j.series {
		training = append(training, s.report(j.network))
	}
	return tests, training
}

func fptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func i64ptr(v int64) *int64 { return &v }

// strptr points to a copy of v: a report must not point into the
// assembler's state, which the run loop changes while a stored batch's
// insert reads it.
func strptr(v string) *string { return &v }
