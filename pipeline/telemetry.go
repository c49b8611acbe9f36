package pipeline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Job telemetry: what trainers and nccl-tests print about speed, parsed
// line by line (parsers.Telemetry fills a TelemetryLine), aggregated per job
// by a TelemetryAssembler into stored rows (TrainingStep, NCCLTestRun) and
// reports (TrainingReport, NCCLTestReport: the `training` and `nccl_tests`
// arrays of `ncclwatch scan --json`).
//
// Numbers a line does not give are NaN in TelemetryLine and in the stored
// rows (the ClickHouse sink writes NULL), and nil in the reports.

// TelemetryKind says what a telemetry line reported.
type TelemetryKind uint8

// The kinds of telemetry line.
const (
	TelemetryNone TelemetryKind = iota
	// TelemetryStep is one training progress line: a Megatron iteration,
	// a torchtitan step, a Hugging Face loss dict, a Lightning progress
	// bar update, a DeepSpeed throughput line, a Composer step header, a
	// NeMo 2 step, a JSON progress line.
	TelemetryStep
	// TelemetryAmend adds figures to the series' latest step: lines that
	// follow a step and belong to it (Megatron-DeepSpeed "Effective Tera
	// Flops per GPU", the DeepSpeed flops profiler's "iter latency",
	// Composer's "Train throughput/…" block lines).
	TelemetryAmend
	// TelemetrySummary is an end-of-training summary (Hugging Face
	// train_runtime / train_samples_per_second): figures, not a step.
	TelemetrySummary
	// TelemetryTestCommand is a command line that runs an nccl-tests
	// binary (Collective).
	TelemetryTestCommand
	// TelemetryTestStart is "# Collective test starting: all_reduce_perf".
	TelemetryTestStart
	// TelemetryTestVersion is "# nccl-tests version 2.18.2 …" (Version).
	TelemetryTestVersion
	// TelemetryTestParams is "# nThread 1 nGpus 1 minBytes 8 maxBytes …"
	// (MinBytes, MaxBytes).
	TelemetryTestParams
	// TelemetryTestDevice is "#  Rank  0 Group  0 Pid 123 on host device
	// 0 [0x0f] NVIDIA A100" (TestRank, Host, Dev, GPU).
	TelemetryTestDevice
	// TelemetryTestHeader is the table's column header (Format).
	TelemetryTestHeader
	// TelemetryTestRow is one row of the results table (Row).
	TelemetryTestRow
	// TelemetryTestAvg is "# Avg bus bandwidth    : 19.7866" (Avg).
	TelemetryTestAvg
	// TelemetryTestEnd is "# Collective test concluded: all_reduce_perf".
	TelemetryTestEnd
	// TelemetryNCCLComm is an NCCL communicator line (Host, NRanks): the
	// ranks and hosts of an nccl-tests run that prints no device list.
	TelemetryNCCLComm
	// TelemetryNCCLNetwork is NCCL's "Using network X" (Name): a change
	// of network starts a new segment of every training series of the job.
	TelemetryNCCLNetwork
	// TelemetryCheckpoint is a checkpoint save or load line (Checkpoint;
	// pipeline/checkpoint.go).
	TelemetryCheckpoint
)

var telemetryKindNames = [...]string{
	TelemetryNone: "none", TelemetryStep: "step", TelemetryAmend: "amend", TelemetrySummary: "summary",
	TelemetryTestCommand: "test_command", TelemetryTestStart: "test_start", TelemetryTestVersion: "test_version",
	TelemetryTestParams: "test_params", TelemetryTestDevice: "test_device", TelemetryTestHeader: "test_header",
	TelemetryTestRow: "test_row", TelemetryTestAvg: "test_avg", TelemetryTestEnd: "test_end",
	TelemetryNCCLComm: "nccl_comm", TelemetryNCCLNetwork: "nccl_network", TelemetryCheckpoint: "checkpoint",
}

// String returns the kind's name.
func (k TelemetryKind) String() string {
	if int(k) < len(telemetryKindNames) {
		return telemetryKindNames[k]
	}
	return "unknown"
}

// Trainer frameworks, as stored and reported.
const (
	FrameworkMegatron   = "megatron"   // Megatron-LM, Megatron-DeepSpeed
	FrameworkTorchtitan = "torchtitan" // torchtitan
	FrameworkHF         = "hf_trainer" // Hugging Face Trainer
	FrameworkLightning  = "lightning"  // PyTorch Lightning (and NeMo 1) progress bars
	FrameworkDeepSpeed  = "deepspeed"  // DeepSpeed throughput timer, flops profiler
	FrameworkNeMo       = "nemo"       // NeMo 2 step lines
	FrameworkComposer   = "composer"   // MosaicML Composer console logger
	FrameworkJSON       = "json"       // generic JSON progress lines
	FrameworkNanoGPT    = "nanogpt"    // nanoGPT "iter N: loss …, time …ms, mfu …%"
	FrameworkMaxText    = "maxtext"    // MaxText "completed step: N, seconds: …"
	FrameworkProgress   = "progress"   // generic progress lines (parsers/progress.go)
)

// NCCLTestResult is one half (out-of-place or in-place) of an nccl-tests
// row. Wrong is the #wrong (or, before 2.10, error) column; NaN where the
// test printed N/A or the column is absent.
type NCCLTestResult struct {
	TimeUS float64 // microseconds
	AlgBW  float64 // GB/s, as printed
	BusBW  float64 // GB/s, as printed
	Wrong  float64
}

// NCCLTestRow is one row of an nccl-tests results table. Type and Redop
// alias the parsed line.
type NCCLTestRow struct {
	Bytes int64
	Count int64
	Type  []byte
	Redop []byte // nil in the oldest layout, which has no redop column
	Root  int    // -1 where the layout has no root column (and for rootless collectives)
	OOP   NCCLTestResult
	IP    NCCLTestResult // all NaN when the row has only out-of-place columns
}

// TelemetryLine is one parsed telemetry line. Byte-slice fields alias the
// parsed line (or the parser's buffer) and are valid only until the
// parser's next call; float fields are NaN and integer fields -1 where the
// line does not give them.
type TelemetryLine struct {
	Kind      TelemetryKind
	Framework string // one of the Framework constants, for step, amend and summary lines
	Rank      int    // the launcher prefix's rank, or -1

	// Training figures: all that step, amend and summary lines carry
	// besides Kind, Framework and Rank (Parsed keeps those lines by these
	// fields alone).
	TrainingFigures

	// nccl-tests figures.
	Collective []byte // binary name, e.g. "all_reduce_perf"
	Version    []byte // nccl-tests version
	MinBytes   int64  // header minBytes
	MaxBytes   int64  // header maxBytes
	TestRank   int    // device line rank
	Dev        int    // device line CUDA device
	Host       []byte // device line host, NCCL line host
	GPU        []byte // device line GPU name
	Format     string // table layout, for header and row lines (see parsers)
	Row        NCCLTestRow
	Avg        float64 // GB/s
	NRanks     int     // NCCL comm line nranks
	Name       []byte  // NCCL network name

	// Checkpoint is a checkpoint line's save or load.
	Checkpoint CheckpointLine
}

// TrainingFigures are the figures of a training-progress line. Float
// fields are NaN and Step is -1 where the line does not give them.
type TrainingFigures struct {
	Step        int64   // step or iteration number
	StepTime    float64 // seconds, converted from the unit printed
	TokensPerS  float64 // as printed (torchtitan tps and Megatron tgs are per GPU)
	SamplesPerS float64
	ItPerS      float64 // progress-bar rate (Lightning); s/it is inverted
	TFLOPs      float64 // per GPU, as printed
	MFU         float64 // percent
	Loss        float64
	Runtime     float64 // seconds of training (summary lines)
}

// isTraining says whether lines of kind k are training-progress lines:
// they carry nothing but Kind, Framework, Rank and their TrainingFigures
// (what TelemetryAssembler.Add reads of them and a Parsed keeps).
func isTraining(k TelemetryKind) bool {
	return k == TelemetryStep || k == TelemetryAmend || k == TelemetrySummary
}

// Reset clears l for reuse.
func (l *TelemetryLine) Reset() { *l = blankTelemetryLine }

// blankTelemetryLine is a reset TelemetryLine: copying it is cheaper than
// building the literal on every line (Reset runs for every line the line
// parser reads with telemetry on).
var blankTelemetryLine = func() TelemetryLine {
	nan := math.NaN()
	l := TelemetryLine{Rank: -1, TrainingFigures: TrainingFigures{Step: -1, StepTime: nan, TokensPerS: nan,
		SamplesPerS: nan, ItPerS: nan, TFLOPs: nan, MFU: nan, Loss: nan, Runtime: nan}, MinBytes: -1, MaxBytes: -1, TestRank: -1, Dev: -1,
		Avg: nan, NRanks: -1,
		Row: NCCLTestRow{Bytes: -1, Count: -1, Root: -1,
			OOP: NCCLTestResult{nan, nan, nan, nan}, IP: NCCLTestResult{nan, nan, nan, nan}}}
	l.Checkpoint.Reset()
	return l
}()

// TrainingStep is one training-progress line of a job (Megatron-LM,
// torchtitan, Hugging Face, Lightning, DeepSpeed, NeMo, Composer, generic
// JSON), as stored in the training_steps table. Float fields are NaN where
// the line does not give them (stored as NULL).
type TrainingStep struct {
	Source    Source
	Time      time.Time
	Job       string
	Namespace string
	Cluster   string
	Pod       string
	Node      string
	Pool      string // node pool: pool label, else the inventory's pool of Node
	Model     string // model label
	Framework string
	Kind      string // "step", "amend" (figures for Step, printed on a later line) or "summary"
	Rank      int    // launcher rank of the row's first line, -1 when absent
	Step      int64  // -1 when the line gives none (an amend row carries its step's number)
	// Ranks is the number of lines the row stands for: every rank of a
	// job may print the same step, and the lines of one step and kind of
	// a series that fall into one fold window of a partition
	// (TelemetryAssemblerConfig.FoldRecords offsets) are stored as one
	// row (the first line's coordinates, pod, rank and figures) with
	// their count, so that storage grows with steps, not with ranks. The
	// same row is written again as its count grows. 0 reads as 1.
	Ranks int
	// Network is the NCCL network the job used when the line was seen
	// (the latest "Using network" of the job), "" before any.
	Network      string
	NetworkClass string
	StepTime     float64 // seconds
	TokensPerS   float64
	SamplesPerS  float64
	ItPerS       float64
	TFLOPs       float64
	MFU          float64 // percent
	Loss         float64
}

// NCCLTestRun is one nccl-tests result of a job, as stored in the
// nccl_test_results table: a table row (Kind "row") or the run's average
// (Kind "avg"), each with what was known of its run when it was seen.
type NCCLTestRun struct {
	Source    Source
	Time      time.Time
	Job       string
	Namespace string
	Cluster   string
	Pod       string
	Node      string
	Pool      string
	Canary    bool // the job carries the canary label
	// RunID identifies the run within the job: the source coordinates of
	// its first line ("topic/partition/offset/line").
	RunID string
	// Context says how much of the run's header was seen (bit 1: params or
	// table header, 2: device list, 4: collective name). Storage keeps the
	// row with the most context for a coordinate, so a replay that starts
	// in the middle of a table never hides the richer first insert.
	Context    uint8
	Kind       string // "row" or "avg"
	Collective string // "" when the log does not name it
	Version    string // nccl-tests version
	NRanks     int    // -1 when unknown
	Hosts      []string
	GPU        string
	Bytes      int64 // row: message size; avg: -1
	Count      int64
	Type       string
	Redop      string
	Root       int
	OOP        NCCLTestResult
	IP         NCCLTestResult
	AvgBusBW   float64 // avg rows
}

// NCCLTestReport is one nccl-tests run found in a log: an element of the
// `nccl_tests` array of `ncclwatch scan --json`. Bandwidths are GB/s as
// printed; fields are null where the log does not say.
type NCCLTestReport struct {
	Collective      *string  `json:"collective"`
	NRanks          *int     `json:"nranks"`
	Hosts           *int     `json:"hosts"`
	Rows            int      `json:"rows"`
	MinBytes        *int64   `json:"min_bytes"`
	MaxBytes        *int64   `json:"max_bytes"`
	AvgBusBW        *float64 `json:"avg_busbw"`
	MaxSizeBusBWOOP *float64 `json:"max_size_busbw_oop"`
	MaxSizeBusBWIP  *float64 `json:"max_size_busbw_ip"`
	HostNames       []string `json:"host_names"`
	GPU             *string  `json:"gpu"`
	Version         *string  `json:"nccl_tests_version"`
	HeaderMinBytes  *int64   `json:"header_min_bytes"`
	HeaderMaxBytes  *int64   `json:"header_max_bytes"`
	Format          *string  `json:"table_format"`
	Wrong           float64  `json:"wrong"` // sum of the #wrong columns (0 when none printed a number)
}

// TrainingReport is one training series found in a log (one per job and
// framework): an element of the `training` array of `ncclwatch scan
// --json`. Fields are null where the log does not say.
type TrainingReport struct {
	Framework        string   `json:"framework"`
	Steps            int      `json:"steps"`          // step lines (every rank's copy counts)
	DistinctSteps    int      `json:"distinct_steps"` // step numbers beyond every earlier one
	FirstStep        *int64   `json:"first_step"`
	LastStep         *int64   `json:"last_step"`
	FirstStepTime    *float64 `json:"first_step_time_s"`
	LastStepTime     *float64 `json:"last_step_time_s"`
	MedianStepTime   *float64 `json:"median_step_time_s"`
	TokensPerSLast   *float64 `json:"tokens_per_s_last"`
	SamplesPerSLast  *float64 `json:"samples_per_s_last"`
	MFULast          *float64 `json:"mfu_last"`
	TFLOPsLast       *float64 `json:"tflops_last"`
	ItPerSFirst      *float64 `json:"it_per_s_first"`
	ItPerSLast       *float64 `json:"it_per_s_last"`
	TrainRuntime     *float64 `json:"train_runtime_s"`
	Network          *string  `json:"network"`
	NetworkClass     *string  `json:"network_class"`
	PreviousNetwork  *string  `json:"previous_network"`
	PreviousMedian   *float64 `json:"previous_median_step_time_s"`
	SegmentMedian    *float64 `json:"segment_median_step_time_s"`
	SegmentSteps     int      `json:"segment_steps"`        // timed steps since the latest network change
	StepTimeRegress  *float64 `json:"step_time_regression"` // segment median / previous median
	NetworkChangedAt *int64   `json:"network_changed_at_step"`
}

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
	meta       rowMeta
}

// partFold is one partition's open fold window: the rows of step lines
// whose offsets fall in [window*FoldRecords, (window+1)*FoldRecords).
type partFold struct {
	window int64
	rows   map[foldKey]*openRow
	first  int64               // the lowest offset of a row's first line; rows is empty when -1
	last   map[seriesKey]int64 // step of the window's latest step line of each series
	// The series of the window's last step line and its step, not yet in
	// last: the lines of a partition mostly continue one series, so the
	// map is written only when the series changes.
	cur     seriesKey
	curStep int64
	curSet  bool
	// hit is the row of rows the last step line went to, under hitKey (nil:
	// none): the ranks of a job print one step line after another.
	hitKey foldKey
	hit    *openRow
	// slab holds the window's open rows, in blocks that stay put (the map
	// points into them) and are reused by the next window, as rows and
	// last are: a row and two maps made per window and per new row were
	// ~0.1 of the loop's ~1 CPU-s per 3 M load-benchmark records.
	slab [][]openRow
	used int // rows of slab handed out in this window
}

// openRowBlock is the size of a partFold.slab block.
const openRowBlock = 64

// reset starts window w, keeping the maps' and the slab's memory: the
// previous window's rows are dropped.
func (pf *partFold) reset(w int64) {
	rows, last, slab := pf.rows, pf.last, pf.slab
	if rows == nil {
		rows, last = map[foldKey]*openRow{}, map[seriesKey]int64{}
	}
	clear(rows)
	clear(last)
	*pf = partFold{window: w, rows: rows, first: -1, last: last, slab: slab}
}

// newRow returns an unused open row of the window's slab.
func (pf *partFold) newRow() *openRow {
	b, i := pf.used/openRowBlock, pf.used%openRowBlock
	if b == len(pf.slab) {
		pf.slab = append(pf.slab, make([]openRow, openRowBlock))
	}
	pf.used++
	return &pf.slab[b][i]
}

// row returns the open row of key, or nil.
func (pf *partFold) row(key foldKey) *openRow {
	if pf.hit != nil && pf.hitKey == key {
		return pf.hit
	}
	o := pf.rows[key]
	if o != nil {
		pf.hitKey, pf.hit = key, o
	}
	return o
}

// setRow opens the row of key.
func (pf *partFold) setRow(key foldKey, o *openRow) {
	pf.rows[key] = o
	pf.hitKey, pf.hit = key, o
}

// lastStep returns the step of series' latest step line in the window.
func (pf *partFold) lastStep(series seriesKey) (int64, bool) {
	if pf.curSet && pf.cur == series {
		return pf.curStep, true
	}
	s, ok := pf.last[series]
	return s, ok
}

// setLast records step as the latest step line of series.
func (pf *partFold) setLast(series seriesKey, step int64) {
	if pf.curSet && pf.cur != series {
		pf.last[pf.cur] = pf.curStep
	}
	pf.cur, pf.curStep, pf.curSet = series, step, true
}

// seriesKey is a job's series of one framework: a struct, not a joined
// string, so that a step line's lookup builds no string.
type seriesKey struct{ job, framework string }

type foldKey struct {
	job, framework string
	kind           TelemetryKind
	step           int64
}

// openRow is a row of the open window; idx is where it was last appended
// to a batch (checked against the row's coordinates: the batch may have
// been flushed since).
type openRow struct {
	row TrainingStep
	idx int
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
	ncclRanks int
	network   string
	ckpts     []*ckptSeries // checkpoint series, pipeline/checkpoint.go
}

// series is one framework's training progress in a job.
type series struct {
	framework  string
	steps      int
	distinct   int
	maxStep    int64
	firstStep  int64
	lastStep   int64
	firstTime  float64
	lastTime   float64
	tokens     float64
	samples    float64
	mfu        float64
	tflops     float64
	itFirst    float64
	itLast     float64
	runtime    float64
	all        sampler // every step time
	seg        sampler // step times since the latest network change
	segSteps   int
	network    string // network when the segment began
	prevNet    string
	prevMedian float64
	changedAt  int64
}

// testRun is one nccl-tests run of a job.
type testRun struct {
	id         string
	first      int64 // offset of its first line
	collective string
	version    string
	gpu        string
	format     string
	hdrMin     int64
	hdrMax     int64
	ranks      int // highest device-line rank + 1
	hosts      []string
	header     bool // params or table header seen
	devices    bool
	rows       int
	minBytes   int64
	maxBytes   int64
	maxOOP     float64
	maxIP      float64
	wrong      float64
	avg        float64
	closed     bool
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
			j.ncclHosts = addHost(j.ncclHosts, tl.Host, a.cfg.MaxHostsPerRun)
		}
	case tl.Kind == TelemetryNCCLNetwork:
		j.setNetwork(string(tl.Name))
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

// rowMeta returns the row metadata of m, valid until the next call.
func (a *TelemetryAssembler) rowMeta(m *Meta) *rowMeta {
	r := &a.meta
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

// seriesOf returns the job's series of framework fw, creating it when
// create is set.
func (j *telJob) seriesOf(fw string, create bool, samples int) *series {
	for _, s := range j.series {
		if s.framework == fw {
			if !create && s.steps == 0 {
				return nil
			}
			return s
		}
	}
	if !create {
		return nil
	}
	nan := math.NaN()
	s := &series{framework: fw, maxStep: math.MinInt64, firstStep: -1, lastStep: -1, firstTime: nan, lastTime: nan,
		tokens: nan, samples: nan, mfu: nan, tflops: nan, itFirst: nan, itLast: nan, runtime: nan, prevMedian: nan,
		changedAt: -1, network: j.network}
	s.all.init(samples)
	s.seg.init(samples)
	j.series = append(j.series, s)
	return s
}

func (s *series) add(tl *TelemetryLine) {
	if tl.Kind == TelemetryStep {
		s.steps++
		if tl.Step >= 0 {
			if s.firstStep < 0 {
				s.firstStep = tl.Step
			}
			s.lastStep = tl.Step
			if tl.Step > s.maxStep {
				s.maxStep = tl.Step
				s.distinct++
			}
		}
	}
	if !math.IsNaN(tl.StepTime) {
		if math.IsNaN(s.firstTime) {
			s.firstTime = tl.StepTime
		}
		s.lastTime = tl.StepTime
		s.all.add(tl.StepTime)
		s.seg.add(tl.StepTime)
		s.segSteps++
	}
	setLast(&s.tokens, tl.TokensPerS)
	setLast(&s.samples, tl.SamplesPerS)
	setLast(&s.mfu, tl.MFU)
	setLast(&s.tflops, tl.TFLOPs)
	setLast(&s.runtime, tl.Runtime)
	if !math.IsNaN(tl.ItPerS) {
		if math.IsNaN(s.itFirst) {
			s.itFirst = tl.ItPerS
		}
		s.itLast = tl.ItPerS
	}
}

func setLast(dst *float64, v float64) {
	if !math.IsNaN(v) {
		*dst = v
	}
}

// setNetwork records the job's NCCL network; a change closes the current
// segment of every series, keeping its median for the regression rule.
func (j *telJob) setNetwork(name string) {
	if name == "" || name == j.network {
		return
	}
	j.network = name
	for _, s := range j.series {
		if s.network == "" {
			s.network = name // the first network seen: no change
			continue
		}
		if s.network == name {
			continue
		}
		if m := s.seg.median(); !math.IsNaN(m) {
			s.prevMedian = m
		}
		s.prevNet, s.network = s.network, name
		s.changedAt = s.lastStep
		s.seg.reset()
		s.segSteps = 0
	}
}

// foldStep turns a step, amend or summary line into a training_steps row,
// or counts it in the open row of its window with the same job, series,
// kind and step number. Rows depend only on the records of their
// partition's window (the FoldRecords offsets around the line): the
// window of an offset is fixed, a row's coordinates are those of its
// window's first matching line, and an amend line takes the step of the
// latest step line of its series earlier in the window (step -1 when
// there is none). A row whose count changed is appended to out again (or
// updated in place while out still holds it); storage keeps the last
// written, the most complete. The job's NCCL network at the row's first
// line is the one part that comes from outside the partition.
func (a *TelemetryAssembler) foldStep(job string, j *telJob, m *rowMeta, tl *TelemetryLine, t time.Time, src Source, out *Batch) {
	pk := partKey{src.Topic, src.Partition}
	w := src.Offset / a.cfg.FoldRecords
	pf := a.lastFold
	if pf == nil || a.lastPart != pk {
		pf = a.folds[pk]
	}
	if pf == nil || pf.window != w {
		if pf == nil {
			pf = &partFold{}
			a.folds[pk] = pf
		}
		pf.reset(w)
	}
	a.lastPart, a.lastFold = pk, pf
	series := seriesKey{job, tl.Framework}
	step := tl.Step
	switch tl.Kind {
	case TelemetryAmend:
		step = -1
		if s, ok := pf.lastStep(series); ok {
			step = s
		}
	case TelemetryStep:
		if step >= 0 {
			pf.setLast(series, step)
		}
	}
	key := foldKey{job: job, framework: tl.Framework, kind: tl.Kind, step: step}
	if step >= 0 {
		if o := pf.row(key); o != nil {
			o.row.Ranks++
			if o.idx < len(out.Steps) && out.Steps[o.idx].Source == o.row.Source {
				out.Steps[o.idx].Ranks = o.row.Ranks
				return
			}
			o.idx = len(out.Steps)
			out.Steps = appendRow(out.Steps, o.row)
			out.Bytes += 160 + len(o.row.Job) + len(o.row.Pod)
			return
		}
	}
	var row TrainingStep
	r := &row
	if step >= 0 {
		// Lines without a step number are rows of their own: complete at
		// once, nothing to hold.
		o := pf.newRow()
		o.idx = len(out.Steps)
		r = &o.row
		pf.setRow(key, o)
		if pf.first < 0 || src.Offset < pf.first {
			pf.first = src.Offset
		}
	}
	j.stepRow(r, m, tl, step, t, src) // rows carry their own line's pod and node
	out.Steps = appendRow(out.Steps, *r)
	out.Bytes += 160 + len(r.Job) + len(r.Pod)
}

// Hold returns the offset below which a partition's offsets may be
// committed, false when nothing holds them: the first line of its open
// fold window's rows, and the first line of an nccl-tests run begun in
// the partition that may still get rows (not closed, begun fewer than
// FoldRecords offsets before next), so that a replay reads the run's
// header again. next is the partition's next offset: a window is complete
// (and dropped) once next is past its end.
func (a *TelemetryAssembler) Hold(topic string, part int32, next int64) (int64, bool) {
	pk := partKey{topic, part}
	hold, ok := int64(0), false
	if pf := a.folds[pk]; pf != nil {
		if next/a.cfg.FoldRecords != pf.window {
			delete(a.folds, pk)
			a.lastFold = nil
		} else if pf.first >= 0 {
			hold, ok = pf.first, true
		}
	}
	runs := a.open[pk][:0]
	for _, r := range a.open[pk] {
		if r.closed || !math.IsNaN(r.avg) || next-r.first >= a.cfg.FoldRecords {
			continue
		}
		runs = append(runs, r)
		if !ok || r.first < hold {
			hold, ok = r.first, true
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

// CloseFolds ends a partition's open window early: its rows are complete
// as they are, and the lines that follow start new rows; its open
// nccl-tests runs no longer hold its offsets. The runner calls
// it only when it has read everything the partition holds and nothing new
// came for a while, the one point where folding depends on timing.
func (a *TelemetryAssembler) CloseFolds(topic string, part int32) {
	delete(a.folds, partKey{topic, part})
	delete(a.open, partKey{topic, part})
	a.lastFold = nil
}

// stepRow fills r with the training_steps row of a step line (its own
// line's pod and node, the job's network of the moment).
func (j *telJob) stepRow(r *TrainingStep, m *rowMeta, tl *TelemetryLine, step int64, t time.Time, src Source) {
	*r = TrainingStep{Source: src, Time: t, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Node: m.Node, Pool: m.pool, Model: m.model, Framework: tl.Framework,
		Kind: tl.Kind.String(), Rank: tl.Rank, Step: step, Ranks: 1, Network: j.network,
		StepTime: tl.StepTime, TokensPerS: tl.TokensPerS, SamplesPerS: tl.SamplesPerS, ItPerS: tl.ItPerS,
		TFLOPs: tl.TFLOPs, MFU: tl.MFU, Loss: tl.Loss}
	if j.network != "" {
		r.NetworkClass = NetworkClass(j.network)
	}
}

// test folds an nccl-tests line into the job's runs. A run begins at its
// command line, "Collective test starting", params line, device list or
// table header, and at any of them (or a row) after the previous run had
// its rows or average; it ends at "# Avg bus bandwidth" or "Collective
// test concluded".
func (j *telJob) test(tl *TelemetryLine, src Source, cfg TelemetryAssemblerConfig) {
	cur := j.current()
	busy := cur != nil && (cur.rows > 0 || cur.closed || !math.IsNaN(cur.avg))
	switch tl.Kind {
	case TelemetryTestCommand, TelemetryTestStart:
		if cur == nil || busy || cur.collective != "" && cur.collective != string(tl.Collective) && cur.header {
			cur = j.newRun(src, cfg)
		}
		cur.collective = string(tl.Collective)
	case TelemetryTestVersion:
		if cur == nil || busy {
			cur = j.newRun(src, cfg)
		}
		cur.version = string(tl.Version)
	case TelemetryTestParams:
		if cur == nil || busy || cur.hdrMin >= 0 {
			cur = j.newRun(src, cfg)
		}
		cur.hdrMin, cur.hdrMax, cur.header = tl.MinBytes, tl.MaxBytes, true
	case TelemetryTestDevice:
		if cur == nil || busy {
			cur = j.newRun(src, cfg)
		}
		cur.devices = true
		if tl.TestRank+1 > cur.ranks {
			cur.ranks = tl.TestRank + 1
		}
		if len(tl.Host) > 0 {
			cur.hosts = addHost(cur.hosts, tl.Host, cfg.MaxHostsPerRun)
		}
		if cur.gpu == "" {
			cur.gpu = string(tl.GPU)
		}
	case TelemetryTestHeader:
		if cur == nil || busy || cur.format != "" {
			cur = j.newRun(src, cfg)
		}
		cur.format, cur.header = tl.Format, true
	case TelemetryTestRow:
		if cur == nil || cur.closed || !math.IsNaN(cur.avg) {
			cur = j.newRun(src, cfg)
		}
		if cur.format == "" {
			cur.format = tl.Format
		}
		r := &tl.Row
		cur.rows++
		if cur.rows == 1 || r.Bytes < cur.minBytes {
			cur.minBytes = r.Bytes
		}
		// The largest size wins; of equal sizes (several types or ops in
		// one table) the first printed.
		if cur.rows == 1 || r.Bytes > cur.maxBytes {
			cur.maxBytes, cur.maxOOP, cur.maxIP = r.Bytes, r.OOP.BusBW, r.IP.BusBW
		}
		for _, w := range [2]float64{r.OOP.Wrong, r.IP.Wrong} {
			if !math.IsNaN(w) {
				cur.wrong += w
			}
		}
	case TelemetryTestAvg:
		if cur == nil || cur.closed || !math.IsNaN(cur.avg) {
			cur = j.newRun(src, cfg)
		}
		cur.avg, cur.closed = tl.Avg, true
	case TelemetryTestEnd:
		if cur != nil {
			cur.closed = true
		}
	}
}

func (j *telJob) current() *testRun {
	if len(j.runs) == 0 {
		return nil
	}
	return j.runs[len(j.runs)-1]
}

func (j *telJob) newRun(src Source, cfg TelemetryAssemblerConfig) *testRun {
	if cur := j.current(); cur != nil {
		cur.closed = true
	}
	if len(j.runs) >= cfg.MaxRunsPerJob {
		j.runs = slices.Delete(j.runs, 0, 1)
		j.dropped++
	}
	r := &testRun{id: coords(src), first: src.Offset, hdrMin: -1, hdrMax: -1, minBytes: -1, maxBytes: -1,
		maxOOP: math.NaN(), maxIP: math.NaN(), avg: math.NaN()}
	j.runs = append(j.runs, r)
	return r
}

func coords(s Source) string {
	b := make([]byte, 0, len(s.Topic)+32)
	b = append(b, s.Topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(s.Partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, s.Offset, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(s.Line), 10)
	return string(b)
}

// runRanks returns a run's rank count and hosts: from its device list, or
// else from the job's NCCL communicator lines (nccl-tests built without MPI
// prints no device list in some versions; the comm lines still tell).
func (j *telJob) runRanks(r *testRun) (int, []string) {
	if r.devices {
		return r.ranks, r.hosts
	}
	n := -1
	if j.ncclRanks > 0 {
		n = j.ncclRanks
	}
	return n, j.ncclHosts
}

func (j *telJob) testRow(m rowMeta, tl *TelemetryLine, t time.Time, src Source) NCCLTestRun {
	r := j.current()
	nranks, hosts := j.runRanks(r)
	var ctx uint8
	if r.header {
		ctx |= 1
	}
	if r.devices {
		ctx |= 2
	}
	if r.collective != "" {
		ctx |= 4
	}
	out := NCCLTestRun{Source: src, Time: t, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Node: m.Node, Pool: m.pool, Canary: m.canary, RunID: r.id, Context: ctx,
		Collective: r.collective, Version: r.version, NRanks: nranks, Hosts: slices.Clone(hosts), GPU: r.gpu,
		Bytes: -1, Count: -1, Root: -1, OOP: tl.Row.OOP, IP: tl.Row.IP, AvgBusBW: math.NaN()}
	if tl.Kind == TelemetryTestRow {
		out.Kind = "row"
		out.Bytes, out.Count, out.Type, out.Redop, out.Root = tl.Row.Bytes, tl.Row.Count, string(tl.Row.Type), string(tl.Row.Redop), tl.Row.Root
	} else {
		out.Kind = "avg"
		out.AvgBusBW = tl.Avg
	}
	return out
}

func addHost(hosts []string, h []byte, limit int) []string {
	for _, x := range hosts {
		if x == string(h) {
			return hosts
		}
	}
	if len(hosts) >= limit {
		return hosts
	}
	return append(hosts, string(h))
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

func (j *telJob) testReport(r *testRun) NCCLTestReport {
	nranks, hosts := j.runRanks(r)
	rep := NCCLTestReport{Rows: r.rows, AvgBusBW: fptr(r.avg), HostNames: slices.Clone(hosts), Wrong: r.wrong}
	if rep.HostNames == nil {
		rep.HostNames = []string{}
	}
	if r.collective != "" {
		rep.Collective = strptr(r.collective)
	}
	if nranks > 0 {
		rep.NRanks = &nranks
	}
	if len(hosts) > 0 {
		n := len(hosts)
		rep.Hosts = &n
	}
	if r.rows > 0 {
		rep.MinBytes, rep.MaxBytes = i64ptr(r.minBytes), i64ptr(r.maxBytes)
		rep.MaxSizeBusBWOOP, rep.MaxSizeBusBWIP = fptr(r.maxOOP), fptr(r.maxIP)
	}
	if r.gpu != "" {
		rep.GPU = strptr(r.gpu)
	}
	if r.version != "" {
		rep.Version = strptr(r.version)
	}
	if r.hdrMin >= 0 {
		rep.HeaderMinBytes, rep.HeaderMaxBytes = i64ptr(r.hdrMin), i64ptr(r.hdrMax)
	}
	if r.format != "" {
		rep.Format = strptr(r.format)
	}
	return rep
}

func (s *series) report(network string) TrainingReport {
	r := TrainingReport{Framework: s.framework, Steps: s.steps, DistinctSteps: s.distinct,
		FirstStepTime: fptr(s.firstTime), LastStepTime: fptr(s.lastTime), MedianStepTime: fptr(s.all.median()),
		TokensPerSLast: fptr(s.tokens), SamplesPerSLast: fptr(s.samples), MFULast: fptr(s.mfu),
		TFLOPsLast: fptr(s.tflops), ItPerSFirst: fptr(s.itFirst), ItPerSLast: fptr(s.itLast),
		TrainRuntime: fptr(s.runtime)}
	if s.firstStep >= 0 {
		r.FirstStep, r.LastStep = i64ptr(s.firstStep), i64ptr(s.lastStep)
	}
	if network != "" {
		c := NetworkClass(network)
		r.Network, r.NetworkClass = &network, &c
	}
	if s.prevNet != "" {
		p := s.prevNet
		r.PreviousNetwork = &p
		r.PreviousMedian = fptr(s.prevMedian)
		r.SegmentMedian = fptr(s.seg.median())
		r.SegmentSteps = s.segSteps
		if s.changedAt >= 0 {
			r.NetworkChangedAt = i64ptr(s.changedAt)
		}
		if r.PreviousMedian != nil && r.SegmentMedian != nil && *r.PreviousMedian > 0 {
			r.StepTimeRegress = fptr(*r.SegmentMedian / *r.PreviousMedian)
		}
	}
	return r
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

// sampler keeps a bounded, evenly spaced sample of a stream of values:
// every stride-th value, halving the sample and doubling the stride when
// it is full. Its median stays close to the stream's on any length.
type sampler struct {
	vals   []float64
	limit  int
	stride int
	skip   int
}

func (s *sampler) init(limit int) { s.limit, s.stride = limit, 1 }

func (s *sampler) reset() { s.vals, s.stride, s.skip = s.vals[:0], 1, 0 }

func (s *sampler) add(v float64) {
	if s.skip > 0 {
		s.skip--
		return
	}
	s.skip = s.stride - 1
	if len(s.vals) >= s.limit {
		n := 0
		for i := 0; i < len(s.vals); i += 2 {
			s.vals[n] = s.vals[i]
			n++
		}
		s.vals = s.vals[:n]
		s.stride *= 2
		s.skip = s.stride - 1
	}
	s.vals = append(s.vals, v)
}

// median returns the median of the sample, the mean of the two middle
// values of an even count (ClickHouse's medianExact returns the upper one
// instead), NaN when empty.
func (s *sampler) median() float64 {
	n := len(s.vals)
	if n == 0 {
		return math.NaN()
	}
	v := slices.Clone(s.vals)
	slices.Sort(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// String describes a report for test failures.
func (r NCCLTestReport) String() string {
	return fmt.Sprintf("{collective %s nranks %s hosts %s rows %d bytes %s..%s avg %s maxOOP %s}",
		ps(r.Collective), pi(r.NRanks), pi(r.Hosts), r.Rows, pi64(r.MinBytes), pi64(r.MaxBytes), pf(r.AvgBusBW), pf(r.MaxSizeBusBWOOP))
}

func ps(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

func pi(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

func pi64(p *int64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatInt(*p, 10)
}

func pf(p *float64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

// CanaryBaselines learns each node pool's canary bus bandwidth: the median
// of the last runs whose job verdict was ok, per pool and collective. It is
// the `canary.baseline_busbw` the busbw rule compares a run with
// (deploy/kubernetes/canary/rules.yaml). Memory is bounded by the pools
// and collectives seen times Window. It is not safe for concurrent use.
type CanaryBaselines struct {
	window int
	runs   map[[2]string][]float64 // oldest first
}

// NewCanaryBaselines keeps the last window ok runs per pool and collective
// (20 runs of an hourly canary are most of a day: one bad hour does not
// move the median).
func NewCanaryBaselines(window int) *CanaryBaselines {
	return &CanaryBaselines{window: max(window, 1), runs: map[[2]string][]float64{}}
}

// Observe records one canary run's bus bandwidth (GB/s) if its job's
// verdict was ok; a run that fell back must not pull the baseline down.
func (c *CanaryBaselines) Observe(pool, collective string, busbw float64, verdictOK bool) {
	if !verdictOK || math.IsNaN(busbw) || busbw <= 0 {
		return
	}
	k := [2]string{pool, collective}
	v := append(c.runs[k], busbw)
	if len(v) > c.window {
		v = slices.Delete(v, 0, len(v)-c.window)
	}
	c.runs[k] = v
}

// Baseline returns the median of the pool's recorded runs, false when there
// is none.
func (c *CanaryBaselines) Baseline(pool, collective string) (float64, bool) {
	v := c.runs[[2]string{pool, collective}]
	if len(v) == 0 {
		return 0, false
	}
	s := sampler{vals: v}
	return s.median(), true
}
