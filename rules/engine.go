package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/expr-lang/expr/vm"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Config configures the engine and the stage that schedules it.
type Config struct {
	// Interval is how often Stage.Run evaluates on its own, between the
	// evaluations that stored batches trigger: rules about absence and
	// time (`now`, `for`, keep_firing_for) progress on it. 30 s is half
	// of Prometheus' default evaluation interval, well inside the
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
	// CanaryPool is the node pool the job tests when it is a fabric
	// canary; "" for any other job.
	CanaryPool string
}

// canaryBaselineRuns is the window of pipeline.CanaryBaselines: 20 runs
// of an hourly canary are most of a day, so one bad hour does not move
// the median (deploy/kubernetes/canary/README.md).
const canaryBaselineRuns = 20

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
	baselines *pipeline.CanaryBaselines
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
		counts: map[countKey]int{}, baselines: pipeline.NewCanaryBaselines(canaryBaselineRuns)}
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

// Observe folds in one job's state: its summary, its communicators and the
// Kubernetes nodes its records came from (nil keeps the nodes known
// before). The engine copies what it keeps. Observing the same summary
// version again changes nothing.
func (e *Engine) Observe(sum pipeline.JobSummary, comms []pipeline.CommSummary, nodes []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observe(&sum, comms, nodes)
}

func (e *Engine) observe(sum *pipeline.JobSummary, comms []pipeline.CommSummary, nodes []string) {
	key := pipeline.JobKey(sum.Cluster, sum.Namespace, sum.Job)
	s := e.subjects[key]
	if s == nil {
		s = &subject{key: key, cluster: sum.Cluster, namespace: sum.Namespace, job: sum.Job}
		e.subjects[key] = s
	}
	if nodes != nil && !slices.Equal(nodes, s.nodes) {
		s.nodes = slices.Clone(nodes)
		s.dirty = true
	}
	if s.released && s.sum == nil && sum.Version < s.catchUp {
		return // restored (Restore): held until the replay reaches the version stored with its alerts
	}
	if s.released {
		s.released, s.releasedAt, s.dirty = false, time.Time{}, true
	}
	if s.catchUp > 0 {
		if sum.Version < s.catchUp {
			return // the replay has not caught up with what was evaluated
		}
		s.catchUp = 0
	}
	if s.sum != nil && s.sum.Version == sum.Version && s.sum.LastSeen.Equal(sum.LastSeen) &&
		s.sum.Verdict == sum.Verdict && len(s.comms) == len(comms) && !s.forgotten {
		return
	}
	cp := *sum
	s.sum = &cp
	s.comms = slices.Clone(comms)
	s.forgotten = false
	s.dirty = true
	e.foldCanary(s)
}

// ObserveBatch folds in everything a batch says: its activity samples, its
// job summaries with their communicators and nodes (as known before when
// the batch names none), its telemetry reports, and its evicted jobs
// (Forget). It is how the rules stage sees the stream: the runner has no
// other door to the engine. b is not kept.
func (e *Engine) ObserveBatch(b *pipeline.Batch) {
	for i := range b.Activity {
		a := &b.Activity[i]
		e.ObserveActivity(Activity{Cluster: a.Meta.Cluster, Namespace: a.Meta.Namespace, Job: a.Meta.Job,
			Node: a.Meta.Node, Pod: a.Meta.Pod, Time: a.Time})
	}
	if len(b.Jobs) > 0 {
		byJob := map[string][]pipeline.CommSummary{}
		for _, cs := range [][]pipeline.CommSummary{b.Comms, b.Unattributed} {
			for _, c := range cs {
				k := pipeline.JobKey(c.Cluster, c.Namespace, c.Job)
				byJob[k] = append(byJob[k], c)
			}
		}
		nodes := map[string][]string{}
		for _, n := range b.Nodes {
			nodes[n.Job] = n.Nodes
		}
		e.mu.Lock()
		for i := range b.Jobs {
			j := &b.Jobs[i]
			k := pipeline.JobKey(j.Cluster, j.Namespace, j.Job)
			e.observe(j, byJob[k], nodes[k])
		}
		e.mu.Unlock()
	}
	for _, t := range b.Telemetry {
		cluster, namespace, name := pipeline.SplitJobKey(t.Job)
		e.ObserveTelemetry(Telemetry{Cluster: cluster, Namespace: namespace, Job: name, Tests: t.Tests,
			Training: t.Training, Checkpoints: t.Checkpoints, CanaryPool: t.CanaryPool})
	}
	for _, k := range b.Evicted {
		e.Forget(k)
	}
	for _, k := range b.Released {
		e.Release(k)
	}
}

// Release says that the job's state left this process with its
// partitions (revoked at a rebalance; key as pipeline.JobKey): it did not
// end. Its alerts are neither resolved nor evaluated while it is away;
// when its summaries come back (the partitions reassigned here, the state
// rebuilt) evaluation goes on from where it was, once the replay reaches
// the summary version last evaluated. A job that does not come back is
// dropped after SubjectTTL without a resolution: its new owner evaluates
// it.
func (e *Engine) Release(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.subjects[key]
	if s == nil || s.released {
		return
	}
	s.released, s.releasedAt = true, time.Time{}
	if s.sum != nil && !s.forgotten {
		s.catchUp = max(s.catchUp, s.sum.Version)
	}
}

// Restore takes the alert states a previous process stored (the latest
// pending or firing state of each job alert: sinks.ClickHouse.LoadAlerts),
// so that an alert that still holds after a restart keeps its active and
// fired times instead of starting again. Call it before the first
// observation. A restored job is held like a released one (Release): its
// alerts are neither evaluated, resolved nor reported until its summaries
// come back (the replay after the restart) and reach the summary version
// stored with them (the state rebuilt at the assignment can be older than
// what was evaluated: taking it would resolve the alert and fire it again
// once the replay catches up), and a job that does not come
// back (another instance of the group owns it now, or it ended while no
// process ran) is dropped after SubjectTTL without a transition. Alerts of
// rules no longer loaded, pool alerts and other states are skipped. It
// returns how many states it restored.
func (e *Engine) Restore(alerts []pipeline.StoredAlert) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	byName := make(map[string]int, len(e.rules))
	for i, r := range e.rules {
		if r.Scope == ScopeJob {
			byName[r.Name] = i
		}
	}
	n := 0
	for _, a := range alerts {
		idx, ok := byName[a.Rule]
		if !ok || a.Pool != "" || a.Job == "" || (a.State != pipeline.AlertPending && a.State != pipeline.AlertFiring) {
			continue
		}
		k := stateKey{rule: idx, subject: pipeline.JobKey(a.Cluster, a.Namespace, a.Job)}
		if _, held := e.states[k]; held {
			continue
		}
		s := e.subjects[k.subject]
		if s == nil {
			s = &subject{key: k.subject, cluster: a.Cluster, namespace: a.Namespace, job: a.Job, released: true}
			e.subjects[k.subject] = s
		}
		s.catchUp = max(s.catchUp, a.SummaryVersion)
		st := &state{alert: cloneAlert(a.Alert), restored: true}
		e.states[k] = st
		e.count(e.rules[idx], "", a.State, st)
		n++
	}
	return n
}

// Forget says that the assembler evicted a job (key as pipeline.JobKey).
// Its alerts resolve at the next Eval, unless its pods still log (see
// Config.ActivityTTL).
func (e *Engine) Forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.subjects[key]; s != nil {
		s.forgotten = true
		s.dirty = true
	}
}

// ObserveActivity records that a job's pod logged.
func (e *Engine) ObserveActivity(a Activity) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.subjectOrNew(a.Cluster, a.Namespace, a.Job)
	if s == nil {
		return
	}
	act := &s.act
	if act.nodes == nil {
		act.nodes, act.pods = map[string]bool{}, map[string]bool{}
	}
	if a.Node != "" && len(act.nodes) < maxActivityNodes && !act.nodes[a.Node] {
		act.nodes[a.Node] = true
		s.dirty = true
	}
	if a.Pod != "" && len(act.pods) < maxActivityPods && !act.pods[a.Pod] {
		act.pods[a.Pod] = true
		s.dirty = true
	}
	if act.first.IsZero() || a.Time.Before(act.first) {
		act.first = a.Time
		s.dirty = true
	}
	if a.Time.After(act.last) {
		act.last = a.Time
		s.dirty = true
	}
}

// subjectOrNew returns the job's subject, creating it unless the jobs held
// without a summary already number Config.MaxSubjects (then nil, counted
// as dropped). Called with e.mu held.
func (e *Engine) subjectOrNew(cluster, namespace, job string) *subject {
	key := pipeline.JobKey(cluster, namespace, job)
	if s := e.subjects[key]; s != nil {
		return s
	}
	if e.activityOnly() >= e.cfg.MaxSubjects {
		if e.m != nil {
			e.m.SubjectsDropped.Inc()
		}
		return nil
	}
	s := &subject{key: key, cluster: cluster, namespace: namespace, job: job}
	e.subjects[key] = s
	return s
}

func (e *Engine) activityOnly() int {
	n := 0
	for _, s := range e.subjects {
		if s.sum == nil {
			n++
		}
	}
	return n
}

// ObserveTelemetry folds in a job's telemetry: its nccl-tests runs and
// training series as last reported (they replace what was observed
// before) and, for a fabric canary, its pool. A job not seen before is
// held like a job known only from its activity (Config.MaxSubjects). The
// engine copies what it keeps.
func (e *Engine) ObserveTelemetry(t Telemetry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.subjectOrNew(t.Cluster, t.Namespace, t.Job)
	if s == nil || s.released || s.catchUp > 0 {
		return // a rebuilt job's telemetry waits for its summaries to catch up
	}
	if s.tel == nil {
		s.tel = &jobTelemetry{}
	}
	tel := s.tel
	if tel.canaryPool != t.CanaryPool {
		// A job tests one pool; should its label change, its runs count
		// for the new pool from now on.
		tel.canaryPool, tel.runs, tel.handled, tel.baseline = t.CanaryPool, nil, 0, nil
	}
	if t.CanaryPool != "" {
		tel.runs = slices.Clone(t.Tests)
		tel.handled = min(tel.handled, len(tel.runs))
	}
	tel.series = make([]SeriesView, len(t.Training))
	for i := range t.Training {
		tel.series[i] = seriesView(&t.Training[i])
	}
	tel.checkpoint = checkpointView(t.Checkpoints)
	e.foldCanary(s)
	s.dirty = true
}

// ObserveProof records that a pool's RDMA path worked.
func (e *Engine) ObserveProof(p Proof) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pool := p.Pool
	if pool == "" && e.fleet != nil {
		if f, ok := e.fleet.Node(p.Node); ok {
			pool = f.Pool
		}
	}
	if pool == "" {
		return
	}
	if p.Time.IsZero() {
		e.pendProof[pool] = true
		return
	}
	e.prove(pool, p.Time)
}

func (e *Engine) prove(pool string, t time.Time) {
	if t.After(e.proofs[pool]) {
		e.proofs[pool] = t
	}
}

// Active returns the pending and firing alerts, sorted by rule and subject.
func (e *Engine) Active() []pipeline.Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []pipeline.Alert
	for k, st := range e.states {
		if s := e.subjects[k.subject]; s != nil && s.released {
			continue // its new owner reports it
		}
		if st.alert.State == pipeline.AlertPending || st.alert.State == pipeline.AlertFiring {
			out = append(out, cloneAlert(st.alert))
		}
	}
	sortAlerts(out)
	return out
}

// Eval evaluates every rule at now and returns the state changes, sorted
// by rule and subject. The work is proportional to the jobs observed since
// the last Eval plus the alert states held (a job that did not change
// cannot start to match a rule that does not name `now`); rules that name
// `now`, and pool rules, are evaluated for every job and pool once per
// Config.Interval (a "full" evaluation), since only time changes them in
// between. Expressions that fail at run time leave their alert states as
// they were; the returned error lists them (the changes are valid either
// way).
func (e *Engine) Eval(now time.Time) ([]pipeline.Alert, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	ev := &evaluation{e: e, now: now}
	full := e.lastFull.IsZero() || now.Sub(e.lastFull) >= e.cfg.Interval || e.cfg.IgnoreFor
	if full {
		e.lastFull = now
	}
	e.sweep(ev)
	var dirty []*subject
	for _, s := range e.subjects {
		if s.dirty {
			e.rebuild(s, now)
			dirty = append(dirty, s)
		}
	}
	held := map[int][]*subject{}
	for k := range e.states {
		if s := e.subjects[k.subject]; s != nil && !s.dirty {
			held[k.rule] = append(held[k.rule], s)
		}
	}
	for i, r := range e.rules {
		if r.Scope != ScopeJob {
			continue
		}
		if r.timed && full {
			for _, s := range e.subjects {
				e.evalJob(ev, i, r, s)
			}
			continue
		}
		for _, s := range dirty {
			e.evalJob(ev, i, r, s)
		}
		for _, s := range held[i] {
			e.evalJob(ev, i, r, s)
		}
	}
	if full && e.hasPoolRules() {
		e.evalPools(ev)
	}
	for _, s := range dirty {
		s.dirty = false
	}
	if e.m != nil {
		e.m.Evaluations.Inc()
		e.m.EvalDuration.Observe(time.Since(start).Seconds())
		e.m.Subjects.Set(float64(len(e.subjects)))
		e.m.States.Set(float64(len(e.states)))
	}
	sortAlerts(ev.changes)
	return ev.changes, errors.Join(ev.errs...)
}

type evaluation struct {
	e       *Engine
	now     time.Time
	changes []pipeline.Alert
	errs    []error
}

// maxEvalErrors bounds the errors one Eval reports: one broken rule fails
// on every job the same way.
const maxEvalErrors = 10

func (ev *evaluation) fail(r *Rule, subject string, err error) {
	if ev.e.m != nil {
		ev.e.m.EvalFailures.WithLabelValues(r.Name).Inc()
	}
	if len(ev.errs) < maxEvalErrors {
		ev.errs = append(ev.errs, fmt.Errorf("%s:%d: rule %s on %s: %w", r.File, r.exprLine, r.Name, subject, err))
	}
}

// sweep drops jobs that are gone: forgotten by the assembler and no
// longer logging, or stale.
func (e *Engine) sweep(ev *evaluation) {
	var gone []string
	for k, s := range e.subjects {
		if s.released {
			if s.releasedAt.IsZero() {
				s.releasedAt = ev.now
			}
			if ev.now.Sub(s.releasedAt) >= e.cfg.SubjectTTL {
				e.drop(k)
			}
			continue
		}
		recentAct := !s.act.last.IsZero() && ev.now.Sub(s.act.last) < e.cfg.ActivityTTL
		staleAct := s.act.last.IsZero() || ev.now.Sub(s.act.last) >= e.cfg.SubjectTTL
		switch {
		case s.forgotten && !recentAct:
			gone = append(gone, k)
		case !s.touched.IsZero() && ev.now.Sub(s.touched) >= e.cfg.SubjectTTL && staleAct:
			gone = append(gone, k)
		case s.sum == nil && staleAct && !s.act.last.IsZero():
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return
	}
	goneSet := make(map[string]bool, len(gone))
	for _, k := range gone {
		goneSet[k] = true
		if e.m != nil {
			e.m.deleteJob(&e.subjects[k].metricLabels)
		}
		delete(e.subjects, k)
	}
	for sk, st := range e.states {
		if !goneSet[sk.subject] {
			continue
		}
		switch st.alert.State {
		case pipeline.AlertFiring:
			e.transition(ev, e.rules[sk.rule], st, pipeline.AlertResolved)
		case pipeline.AlertPending:
			e.transition(ev, e.rules[sk.rule], st, pipeline.AlertInactive)
		}
		delete(e.states, sk)
	}
}

// drop deletes a released subject and its alert states without a
// transition: its new owner evaluates it.
func (e *Engine) drop(key string) {
	if e.m != nil {
		e.m.deleteJob(&e.subjects[key].metricLabels)
	}
	delete(e.subjects, key)
	for sk, st := range e.states {
		if sk.subject != key {
			continue
		}
		e.count(e.rules[sk.rule], st.alert.State, pipeline.AlertInactive, st)
		delete(e.states, sk)
	}
}

// rebuild recomputes a changed job's expression environment.
func (e *Engine) rebuild(s *subject, now time.Time) {
	s.touched = now
	env := JobEnv{Zones: []string{}, Racks: []string{}, Comms: []CommView{}, Nodes: []NodeView{}}
	if s.sum != nil {
		env.Job = jobView(s.sum, s.comms)
		env.Comms = make([]CommView, len(s.comms))
		for i := range s.comms {
			env.Comms[i] = commView(&s.comms[i])
		}
		expect := pipeline.Expectation{}
		if len(s.comms) > 0 {
			expect = s.comms[0].Expect
		}
		env.Expect = expectView(expect)
	} else {
		env.Job = JobView{Name: s.job, Namespace: s.namespace, Cluster: s.cluster,
			NCCLVersions: []string{}, Networks: []string{}, Intra: []string{}, Reasons: []string{}}
		env.Expect = expectView(pipeline.Expectation{})
	}
	for _, n := range s.nodes {
		var f pipeline.NodeFacts
		ok := false
		if e.fleet != nil {
			f, ok = e.fleet.Node(n)
		}
		env.Nodes = append(env.Nodes, nodeView(n, f, ok))
	}
	env.Pool = poolOf("", env.Nodes)
	env.Zones = distinct(env.Nodes, func(n NodeView) string { return n.Zone })
	env.Racks = distinct(env.Nodes, func(n NodeView) string { return n.Rack })
	if a := s.act; !a.last.IsZero() {
		env.Activity = ActivityView{Seen: true, Nodes: len(a.nodes), Pods: len(a.pods), FirstSeen: a.first, LastSeen: a.last}
	}
	if s.tel != nil {
		env.Checkpoint = s.tel.checkpoint
	}
	if s.tel != nil && s.tel.canaryPool != "" {
		env.Canary = e.canary(s)
	}
	s.env = env
	// A fabric canary whose job settled ok on RDMA proves the pool it
	// names (its label, not the inventory: the canary says where it was
	// sent).
	if s.tel != nil && s.tel.canaryPool != "" && s.sum != nil && s.sum.Verdict == pipeline.VerdictOK &&
		s.sum.NetworkClass != nil && *s.sum.NetworkClass == pipeline.ClassRDMA {
		t := s.sum.LastSeen
		if t.IsZero() || t.After(now) {
			t = now
		}
		e.prove(s.tel.canaryPool, t)
	}
	// A job that ran an ok RDMA communicator proves its nodes' pools.
	if s.sum != nil && e.fleet != nil {
		proved := false
		for i := range s.comms {
			if s.comms[i].NetworkClass == pipeline.ClassRDMA && s.comms[i].Verdict == pipeline.VerdictOK {
				proved = true
			}
		}
		if proved {
			t := s.sum.LastSeen
			if t.IsZero() || t.After(now) {
				t = now
			}
			for _, n := range env.Nodes {
				if n.Known && n.Pool != "" {
					e.prove(n.Pool, t)
				}
			}
		}
	}
	if e.m != nil && !s.forgotten {
		e.m.setJob(s, &s.metricLabels)
	}
}

// foldCanary folds a canary's finished runs not yet counted into its
// pool's baseline, in order, each compared with the baseline before it
// (the view keeps the latest run's). Only once the job has a summary, since
// only runs whose job verdict is ok count (a run that fell back must not
// pull the baseline down); it runs as runs and summaries are observed, so
// that the order of the runs is the order they were reported in.
func (e *Engine) foldCanary(s *subject) {
	tel := s.tel
	if tel == nil || tel.canaryPool == "" || s.sum == nil {
		return
	}
	ok := s.sum.Verdict == pipeline.VerdictOK
	for n := tel.finished(); tel.handled < n; tel.handled++ {
		r := &tel.runs[tel.handled]
		tel.baseline = nil
		if b, found := e.baselines.Baseline(tel.canaryPool, collective(r)); found {
			tel.baseline = &b
		}
		if r.MaxSizeBusBWOOP != nil {
			e.baselines.Observe(tel.canaryPool, collective(r), *r.MaxSizeBusBWOOP, ok)
		}
	}
}

// finished counts a canary's finished runs: a run is finished when its
// "# Avg bus bandwidth" line was printed or a later run began, since the
// busbw at the largest size of a table still being printed is not yet the
// run's.
func (t *jobTelemetry) finished() int {
	n := len(t.runs)
	if n > 0 && t.runs[n-1].AvgBusBW == nil {
		n--
	}
	return n
}

func collective(r *pipeline.NCCLTestReport) string {
	if r.Collective == nil {
		return ""
	}
	return *r.Collective
}

// canary returns a canary job's view: its latest finished run against the
// pool's baseline before it.
func (e *Engine) canary(s *subject) CanaryView {
	tel := s.tel
	n := tel.finished()
	if n == 0 {
		return canaryView(tel.canaryPool, nil, nil)
	}
	latest := &tel.runs[n-1]
	baseline := tel.baseline
	if tel.handled < n {
		// Not counted yet (no summary): the pool's baseline as it is.
		baseline = nil
		if b, found := e.baselines.Baseline(tel.canaryPool, collective(latest)); found {
			baseline = &b
		}
	}
	return canaryView(tel.canaryPool, latest, baseline)
}

// evalJob evaluates one job rule for one job and advances its state.
func (e *Engine) evalJob(ev *evaluation, idx int, r *Rule, s *subject) {
	if s.released {
		return // frozen while its partitions are elsewhere (Release)
	}
	k := stateKey{idx, s.key}
	st := e.states[k]
	var data map[string]any
	s.env.Now = ev.now
	if s.env.Job.Seen && !s.env.Job.FirstSeen.IsZero() {
		s.env.Job.Age = ev.now.Sub(s.env.Job.FirstSeen)
	}
	cond, comm, ser, err := e.matchJob(r, &s.env, s.series())
	if err != nil {
		ev.fail(r, s.key, err)
		return
	}
	if cond {
		data = jobData(&s.env, comm, ser)
	}
	e.step(ev, idx, r, k, st, cond, func() (pipeline.Alert, map[string]any) {
		if data == nil {
			data = jobData(&s.env, nil, nil)
		}
		return pipeline.Alert{Rule: r.Name, Severity: r.Severity(), Job: s.job, Namespace: s.namespace,
			Cluster: s.cluster}, data
	})
}

func (s *subject) series() []SeriesView {
	if s.tel == nil {
		return nil
	}
	return s.tel.series
}

// matchJob runs a job rule: once, or once per communicator for a rule that
// names comm, once per training series for a rule that names series (per
// pair for one that names both); the first match wins.
func (e *Engine) matchJob(r *Rule, env *JobEnv, series []SeriesView) (bool, *CommView, *SeriesView, error) {
	if !r.perComm && !r.perSeries {
		ok, err := e.run(r, *env)
		return ok, nil, nil, err
	}
	defer func() { env.Comm, env.Series = CommView{}, SeriesView{} }()
	comms, sers := 1, 1
	if r.perComm {
		comms = len(env.Comms)
	}
	if r.perSeries {
		sers = len(series)
	}
	for i := range comms {
		for j := range sers {
			if r.perComm {
				env.Comm = env.Comms[i]
			}
			if r.perSeries {
				env.Series = series[j]
			}
			ok, err := e.run(r, *env)
			if err != nil {
				return false, nil, nil, err
			}
			if !ok {
				continue
			}
			var c *CommView
			var sv *SeriesView
			if r.perComm {
				cp := env.Comms[i]
				c = &cp
			}
			if r.perSeries {
				cp := series[j]
				sv = &cp
			}
			return true, c, sv, nil
		}
	}
	return false, nil, nil, nil
}

func (e *Engine) run(r *Rule, env any) (bool, error) {
	out, err := e.vm.Run(r.program, env)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("expression returned %T, not bool", out)
	}
	return b, nil
}

func (e *Engine) hasPoolRules() bool {
	for _, r := range e.rules {
		if r.Scope == ScopePool {
			return true
		}
	}
	return false
}

// evalPools evaluates the pool rules over the inventory's pools.
func (e *Engine) evalPools(ev *evaluation) {
	byPool := map[string][]NodeView{}
	if e.fleet != nil {
		for _, f := range e.fleet.All() {
			if f.Pool != "" {
				byPool[f.Pool] = append(byPool[f.Pool], nodeView(f.Node, f, true))
			}
		}
	}
	for p := range e.pendProof {
		e.proofs[p] = ev.now
	}
	clear(e.pendProof)
	// Pools that left the inventory are forgotten.
	for p := range e.watched {
		if _, ok := byPool[p]; !ok {
			delete(e.watched, p)
			delete(e.proofs, p)
			if e.m != nil {
				e.m.PoolLastProof.DeleteLabelValues(p)
			}
		}
	}
	for p := range e.proofs {
		if _, ok := byPool[p]; !ok {
			delete(e.proofs, p)
		}
	}
	names := slices.Sorted(maps.Keys(byPool))
	for _, name := range names {
		if _, ok := e.watched[name]; !ok {
			e.watched[name] = ev.now
		}
		env := PoolEnv{Pool: poolOf(name, byPool[name]), Nodes: byPool[name], Now: ev.now}
		last := e.proofs[name]
		env.Pool.LastProof, env.Pool.Proved = last, !last.IsZero()
		since := e.watched[name]
		if last.After(since) {
			since = last
		}
		env.Pool.UnprovenFor = max(ev.now.Sub(since), 0)
		if e.m != nil && !last.IsZero() {
			e.m.PoolLastProof.WithLabelValues(name).Set(float64(last.UnixMilli()) / 1000)
		}
		for idx, r := range e.rules {
			if r.Scope != ScopePool {
				continue
			}
			k := stateKey{idx, "pool/" + name}
			cond, err := e.run(r, env)
			if err != nil {
				ev.fail(r, k.subject, err)
				continue
			}
			e.step(ev, idx, r, k, e.states[k], cond, func() (pipeline.Alert, map[string]any) {
				return pipeline.Alert{Rule: r.Name, Severity: r.Severity(), Pool: name}, poolData(&env)
			})
		}
	}
	// States of pools that are gone resolve.
	for sk, st := range e.states {
		r := e.rules[sk.rule]
		if r.Scope != ScopePool {
			continue
		}
		if _, ok := byPool[st.alert.Pool]; ok {
			continue
		}
		switch st.alert.State {
		case pipeline.AlertFiring:
			e.transition(ev, r, st, pipeline.AlertResolved)
		case pipeline.AlertPending:
			e.transition(ev, r, st, pipeline.AlertInactive)
		}
		delete(e.states, sk)
	}
}

// step advances one (rule, subject) state with the condition's value.
// newAlert gives the alert's subject fields and template data when the
// state starts or fires.
func (e *Engine) step(ev *evaluation, idx int, r *Rule, k stateKey, st *state, cond bool,
	newAlert func() (pipeline.Alert, map[string]any)) {
	now := ev.now
	if st != nil && st.restored {
		defer func() { st.restored = false }()
	}
	switch {
	case cond && (st == nil || st.alert.State == pipeline.AlertResolved):
		a, data := newAlert()
		a.Labels = e.labels(r, &a, data)
		data["labels"] = a.Labels
		a.Annotations = render(r.annotTmpl, data)
		a.ActiveAt, a.State = now, pipeline.AlertPending
		st = &state{alert: a}
		e.states[k] = st
		if r.For == 0 || e.cfg.IgnoreFor {
			e.transition(ev, r, st, pipeline.AlertFiring)
		} else {
			e.transition(ev, r, st, pipeline.AlertPending)
		}
	case cond && st.alert.State == pipeline.AlertPending:
		if now.Sub(st.alert.ActiveAt) >= r.For {
			_, data := newAlert()
			data["labels"] = st.alert.Labels
			st.alert.Annotations = render(r.annotTmpl, data)
			e.transition(ev, r, st, pipeline.AlertFiring)
		}
	case cond && st.alert.State == pipeline.AlertFiring:
		st.keepSince = time.Time{}
		if st.restored {
			st.alert.EvalTime = now
			ev.changes = append(ev.changes, cloneAlert(st.alert))
		}
	case !cond && st != nil && st.alert.State == pipeline.AlertPending:
		e.transition(ev, r, st, pipeline.AlertInactive)
		delete(e.states, k)
	case !cond && st != nil && st.alert.State == pipeline.AlertFiring:
		if r.KeepFiringFor > 0 {
			if st.keepSince.IsZero() {
				st.keepSince = now
			}
			if now.Sub(st.keepSince) < r.KeepFiringFor {
				return
			}
		}
		e.transition(ev, r, st, pipeline.AlertResolved)
	case !cond && st != nil && st.alert.State == pipeline.AlertResolved:
		if now.Sub(st.alert.ResolvedAt) >= e.cfg.Retention {
			delete(e.states, k)
		}
	}
}

// transition moves an alert to a new state and records the change.
func (e *Engine) transition(ev *evaluation, r *Rule, st *state, to string) {
	e.count(r, st.alert.State, to, st)
	st.alert.State = to
	st.alert.EvalTime = ev.now
	switch to {
	case pipeline.AlertFiring:
		st.alert.FiredAt = ev.now
		st.keepSince = time.Time{}
	case pipeline.AlertResolved, pipeline.AlertInactive:
		st.alert.ResolvedAt = ev.now
	}
	ev.changes = append(ev.changes, cloneAlert(st.alert))
}

// count keeps the pending/firing gauge in step with transitions.
func (e *Engine) count(r *Rule, from, to string, st *state) {
	counted := func(s string) bool { return s == pipeline.AlertPending || s == pipeline.AlertFiring }
	sev := r.Severity()
	if st.alert.EvalTime.IsZero() {
		from = "" // a new state was never counted
	}
	if counted(from) {
		k := countKey{r.Name, sev, from}
		e.counts[k]--
		if e.m != nil {
			e.m.Alerts.WithLabelValues(r.Name, sev, from).Set(float64(e.counts[k]))
		}
	}
	if counted(to) {
		k := countKey{r.Name, sev, to}
		e.counts[k]++
		if e.m != nil {
			e.m.Alerts.WithLabelValues(r.Name, sev, to).Set(float64(e.counts[k]))
		}
	}
}

// labels are the rule's labels (templated) plus alertname, severity and
// the subject's identity.
func (e *Engine) labels(r *Rule, a *pipeline.Alert, data map[string]any) map[string]string {
	l := render(r.labelTmpl, data)
	l["alertname"] = r.Name
	if l["severity"] == "" {
		l["severity"] = r.Severity()
	}
	for k, v := range map[string]string{"cluster": a.Cluster, "namespace": a.Namespace, "job_name": a.Job, "pool": a.Pool} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

func cloneAlert(a pipeline.Alert) pipeline.Alert {
	a.Labels = maps.Clone(a.Labels)
	a.Annotations = maps.Clone(a.Annotations)
	return a
}

func sortAlerts(as []pipeline.Alert) {
	sort.SliceStable(as, func(i, j int) bool {
		x, y := &as[i], &as[j]
		if x.Rule != y.Rule {
			return x.Rule < y.Rule
		}
		if kx, ky := subjectOf(x), subjectOf(y); kx != ky {
			return kx < ky
		}
		return x.EvalTime.Before(y.EvalTime)
	})
}

func subjectOf(a *pipeline.Alert) string {
	if a.Pool != "" {
		return "pool/" + a.Pool
	}
	return pipeline.JobKey(a.Cluster, a.Namespace, a.Job)
}
