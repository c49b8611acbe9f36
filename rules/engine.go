package rules

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/expr-lang/expr/vm"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Config configures the engine and the stage that schedules it.
type Config struct {
	// Interval is the stage's schedule (Stage.Every): the run loop hands
	// the stage an empty batch when no batch reached it for this long,
	// and every batch is an evaluation, so rules about absence and time
	// (`now`, `for`, keep_firing_for) progress at least this often (plus
	// the loop's tick, a quarter of pipeline.batch.max_wait). 30 s is
	// half of Prometheus' default evaluation interval, well inside the
	// minutes that the absence rules wait.
	Interval time.Duration `yaml:"interval"`
	// Retention keeps a resolved alert's state after it resolved, so
	// that the same condition coming back within it is the same episode
	// resolved again rather than a storm of new ones; then the state is
	// dropped. 15 minutes is how long Prometheus keeps resolved alerts.
	Retention time.Duration `yaml:"retention"`
	// SubjectTTL: a job neither observed nor active for this long is
	// forgotten and its alerts resolve. It covers jobs whose eviction was
	// never reported (their partition moved to another process); 2 h is
	// four times the runner's idle eviction.
	SubjectTTL time.Duration `yaml:"subject_ttl"`
	// ActivityTTL: a job the assembler evicted (no NCCL line for a
	// while) whose pods logged within ActivityTTL still runs, so its
	// alerts stay with its last summary. 10 minutes is several Fluent
	// Bit flushes of even a quiet trainer.
	ActivityTTL time.Duration `yaml:"activity_ttl"`
	// MaxSubjects caps the jobs held only because their pods log (no
	// NCCL line yet); beyond it new ones are counted and dropped. Jobs
	// with summaries are bounded by the assembler. 20 000 is twice the
	// assembler's job cap.
	MaxSubjects int `yaml:"max_subjects"`
	// IgnoreFor makes a condition that holds fire at once, as
	// `scan --rules` wants: its input is complete, so there is nothing to
	// wait for.
	IgnoreFor bool `yaml:"-"`
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{Interval: 30 * time.Second, Retention: 15 * time.Minute, SubjectTTL: 2 * time.Hour,
		ActivityTTL: 10 * time.Minute, MaxSubjects: 20000}
}

// Validate checks the configuration once at start.
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, errors.New("rules.interval: must be > 0"))
	}
	if c.Retention < 0 {
		errs = append(errs, errors.New("rules.retention: must be >= 0"))
	}
	if c.SubjectTTL <= 0 {
		errs = append(errs, errors.New("rules.subject_ttl: must be > 0"))
	}
	if c.ActivityTTL <= 0 {
		errs = append(errs, errors.New("rules.activity_ttl: must be > 0"))
	}
	if c.MaxSubjects <= 0 {
		errs = append(errs, errors.New("rules.max_subjects: must be > 0"))
	}
	return errors.Join(errs...)
}

// Fleet is the node inventory as the engine uses it; *pipeline.Inventory
// provides Node, and All lists every node for the pool rules.
type Fleet interface {
	Node(name string) (pipeline.NodeFacts, bool)
	All() []pipeline.NodeFacts
}

// Nodes is a Fleet held in memory: node facts by node name.
type Nodes map[string]pipeline.NodeFacts

// Node returns a node's facts.
func (n Nodes) Node(name string) (pipeline.NodeFacts, bool) { f, ok := n[name]; return f, ok }

// All returns every node, sorted by name.
func (n Nodes) All() []pipeline.NodeFacts {
	out := make([]pipeline.NodeFacts, 0, len(n))
	for _, k := range slices.Sorted(maps.Keys(n)) {
		out = append(out, n[k])
	}
	return out
}

// Activity says that a pod of a job logged at Time, NCCL or not: the
// evidence the absence rules need ("pods are logging but no NCCL init").
type Activity struct {
	Cluster, Namespace, Job string
	Node, Pod               string
	Time                    time.Time
}

// Proof says that the RDMA path of a node pool worked at Time: a canary
// (nccl-tests over RDMA) or any other check. Pool may be empty when Node is
// set; the inventory then names the pool. Jobs that ran an ok RDMA
// communicator prove their nodes' pools by themselves.
type Proof struct {
	Pool string
	Node string
	Time time.Time
}

// EngineDeps are the engine's collaborators; all may be nil.
type EngineDeps struct {
	Fleet   Fleet
	Metrics *Metrics
}

// Telemetry is what a job's training-progress and nccl-tests lines say, as
// pipeline.TelemetryAssembler reports them (Report and Canary): the source
// of the `canary` and `series` views.
type Telemetry struct {
	Cluster, Namespace, Job string
	Tests                   []pipeline.NCCLTestReport
	Training                []pipeline.TrainingReport
	// Checkpoints are the job's checkpoint series (the `checkpoint` view).
	Checkpoints []pipeline.CheckpointReport
	// Collectives are the job's NCCL Inspector summaries (the
	// `collective` view).
	Collectives []pipeline.CollectiveReport
	// Pool is the job's pool label ("" when its pods carry none).
	Pool string
	// CanaryPool is the node pool the job tests when it is a fabric
	// canary; "" for any other job.
	CanaryPool string
}

// Engine evaluates rules over what it observed: per (rule, job) and
// (rule, pool) state going inactive → pending → firing → resolved, with
// `for` and keep_firing_for honoured. Time is an argument of Eval; nothing
// in the engine reads the clock. All methods are safe for concurrent use.
type Engine struct {
	cfg   Config
	rules []*Rule
	fleet Fleet
	m     *Metrics

	mu        sync.Mutex
	vm        vm.VM
	subjects  map[string]*subject
	states    map[stateKey]*state
	proofs    map[string]time.Time // last proof per pool
	pendProof map[string]bool      // pools proved by a summary without a time: proved at the next Eval
	watched   map[string]time.Time // when each pool was first evaluated
	counts    map[countKey]int     // pending/firing alerts, for the metric
	lastFull  time.Time            // the last evaluation of every job and pool
	baselines *CanaryBaselines
}

type subject struct {
	key                     string
	cluster, namespace, job string
	sum                     *pipeline.JobSummary
	comms                   []pipeline.CommSummary
	nodes                   []string
	act                     activity
	tel                     *jobTelemetry // nil: no telemetry observed
	touched                 time.Time     // eval time after the last observation
	forgotten               bool
	// released: the job's partitions were revoked (Release); its alert
	// states are frozen, neither evaluated nor resolved, until it is
	// observed again. releasedAt is the eval time that first saw it so.
	released   bool
	releasedAt time.Time
	// catchUp is the summary version held when the job was released:
	// until a summary reaches it, the summaries of the state rebuilt after
	// a reassignment (older: the events below the committed offset) and
	// their telemetry are not taken, so the alerts do not go back and
	// forth while the replay catches up.
	catchUp      uint64
	dirty        bool
	env          JobEnv
	metricLabels jobMetricLabels
}

// jobTelemetry is what the engine keeps of a job's telemetry.
type jobTelemetry struct {
	canaryPool string
	// runs are a canary's nccl-tests runs, as last reported (nil for
	// other jobs); handled counts the finished ones already folded into
	// the pool's baseline, baseline is the pool's baseline before the
	// latest finished run.
	runs     []pipeline.NCCLTestReport
	handled  int
	baseline *float64
	series   []SeriesView
	// checkpoint is the job's checkpoint view (rules/checkpoint.go).
	checkpoint CheckpointView
	// collectives and pool: the job's Inspector summaries and pool label
	// (rules/collective.go).
	collectives []pipeline.CollectiveReport
	pool        string
}

type activity struct {
	nodes, pods map[string]bool
	first, last time.Time
}

// Caps on one job's activity sets: the rules only ask "more than one".
const (
	maxActivityNodes = 256
	maxActivityPods  = 1024
)

type stateKey struct {
	rule    int
	subject string // job key, or "pool/" + pool name
}

type state struct {
	alert     pipeline.Alert
	keepSince time.Time // firing, condition false since (keep_firing_for)
	// restored: loaded from storage by Restore and not evaluated since; a
	// firing one is reported once more when it first holds again, with its
	// stored times, so that the notifiers (which start empty) send it.
	restored bool
}

type countKey struct{ rule, severity, state string }

// NewEngine returns an engine for rs; cfg must be valid.
func NewEngine(cfg Config, rs *RuleSet, deps EngineDeps) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rs == nil {
		rs = &RuleSet{}
	}
	e := &Engine{cfg: cfg, rules: rs.Rules, fleet: deps.Fleet, m: deps.Metrics,
		vm: vm.VM{MemoryBudget: maxExprMemory}, subjects: map[string]*subject{}, states: map[stateKey]*state{},
		proofs: map[string]time.Time{}, pendProof: map[string]bool{}, watched: map[string]time.Time{},
		counts: map[countKey]int{}, baselines: NewCanaryBaselines(canaryBaselineRuns)}
	if e.m != nil {
		e.m.SubjectsCapacity.Set(float64(cfg.MaxSubjects))
		for _, r := range e.rules {
			for _, st := range []string{pipeline.AlertPending, pipeline.AlertFiring} {
				e.m.Alerts.WithLabelValues(r.Name, r.Severity(), st).Set(0)
			}
		}
	}
	return e, nil
}

// Rules returns the engine's rules.
func (e *Engine) Rules() []*Rule { return e.rules }
