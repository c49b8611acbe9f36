package pipeline

import (
	"fmt"
	"math"
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
	// TelemetryCollective is an NCCL Inspector record (Coll;
	// pipeline/collective.go).
	TelemetryCollective
)

var telemetryKindNames = [...]string{
	TelemetryNone: "none", TelemetryStep: "step", TelemetryAmend: "amend", TelemetrySummary: "summary",
	TelemetryTestCommand: "test_command", TelemetryTestStart: "test_start", TelemetryTestVersion: "test_version",
	TelemetryTestParams: "test_params", TelemetryTestDevice: "test_device", TelemetryTestHeader: "test_header",
	TelemetryTestRow: "test_row", TelemetryTestAvg: "test_avg", TelemetryTestEnd: "test_end",
	TelemetryNCCLComm: "nccl_comm", TelemetryNCCLNetwork: "nccl_network", TelemetryCheckpoint: "checkpoint",
	TelemetryCollective: "collective",
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
	// Earlier are the checkpoint lines of the carriage-return updates
	// before the one the line is read by, in order (docs/checkpoints.md,
	// R9); nil for most lines. The assembler folds them before the line.
	Earlier []CheckpointLine

	// Coll is an NCCL Inspector record.
	Coll CollectiveRecord
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

// Reset clears l for reuse. Coll is cleared only after a collective
// line: it is the largest part of a line, and Reset runs for every line
// the line parser reads with telemetry on (more than once for a line no
// parser takes), so clearing it on every call cost more than all the rest.
// Whoever fills Coll sets Kind to TelemetryCollective or clears Coll
// again (parsers' inspectorLine), so Coll of any other kind stays blank.
// Fields are set one by one, not copied from a blank line: a copy would
// take Coll with it, and a Parsed keeps lines by value, so Coll cannot
// move behind a pointer.
func (l *TelemetryLine) Reset() {
	if l.Kind == TelemetryCollective {
		l.Coll = blankCollective
	}
	nan := math.NaN()
	l.Kind, l.Framework, l.Rank = TelemetryNone, "", -1
	l.TrainingFigures = blankFigures
	l.Collective, l.Version, l.Host, l.GPU, l.Name, l.Earlier = nil, nil, nil, nil, nil, nil
	l.MinBytes, l.MaxBytes, l.TestRank, l.Dev, l.NRanks = -1, -1, -1, -1, -1
	l.Format, l.Avg = "", nan
	l.Row = blankTestRow
	l.Checkpoint = blankCheckpoint
}

// The parts of a reset TelemetryLine: copying them is cheaper than
// building their literals on every line.
var (
	blankFigures = TrainingFigures{Step: -1, StepTime: math.NaN(), TokensPerS: math.NaN(),
		SamplesPerS: math.NaN(), ItPerS: math.NaN(), TFLOPs: math.NaN(), MFU: math.NaN(), Loss: math.NaN(),
		Runtime: math.NaN()}
	blankTestRow = func() NCCLTestRow {
		nan := math.NaN()
		return NCCLTestRow{Bytes: -1, Count: -1, Root: -1,
			OOP: NCCLTestResult{nan, nan, nan, nan}, IP: NCCLTestResult{nan, nan, nan, nan}}
	}()
	blankCheckpoint = func() (c CheckpointLine) { c.Reset(); return c }()
	blankCollective = func() (c CollectiveRecord) { c.Reset(); return c }()
	// blankTelemetryLine is a whole reset line.
	blankTelemetryLine = func() (l TelemetryLine) { l.Kind = TelemetryCollective; l.Reset(); return l }()
)

// TrainingStep is one training-progress line of a job (Megatron-LM,
// torchtitan, Hugging Face, Lightning, DeepSpeed, NeMo, Composer, generic
// JSON), as stored in the training_steps table. Float fields are NaN where
// the line does not give them (stored as NULL).
type TrainingStep struct {
	Source Source
	Time   time.Time
	// StepSeries holds the row's strings (Job, Namespace, …) and their
	// key, shared by the rows of its series: a row carries a pointer, not
	// eleven strings. Rows made by the pipeline always have one; it is
	// never changed once a row points to it.
	*StepSeries
	Rank int   // launcher rank of the row's first line, -1 when absent
	Step int64 // -1 when the line gives none (an amend row carries its step's number)
	// Ranks is the number of lines the row stands for: every rank of a
	// job may print the same step, and the lines of one step and kind of
	// a series that fall into one fold window of a partition
	// (TelemetryAssemblerConfig.FoldRecords offsets) are stored as one
	// row (the first line's coordinates, pod, rank and figures) with
	// their count, so that storage grows with steps, not with ranks. The
	// same row is written again as its count grows. 0 reads as 1.
	Ranks       int
	StepTime    float64 // seconds
	TokensPerS  float64
	SamplesPerS float64
	ItPerS      float64
	TFLOPs      float64
	MFU         float64 // percent
	Loss        float64
}

// StepSeries is what every row of a training series has in common: who
// printed it and in which phase of the job (SeriesKey).
type StepSeries struct {
	Job       string
	Namespace string
	Cluster   string
	Pod       string
	Node      string
	Pool      string // node pool: pool label, else the inventory's pool of Node
	Model     string // model label
	Framework string
	Kind      string // "step", "amend" (figures for Step, printed on a later line) or "summary"
	// Network is the NCCL network the job used when the line was seen
	// (the latest "Using network" of the job), "" before any.
	Network      string
	NetworkClass string
	// Series is the key of the strings above (SeriesKey): storage keeps
	// a row's figures under it, and the strings once per key. JSON lines
	// keep the strings and leave it out.
	Series uint64 `json:"-"`
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
