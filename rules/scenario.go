package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// A scenario file tests rules the way `promtool test rules` does: inputs
// at given times, the alerts expected at given times. rules/README.md
// describes the format; testdata/rules/ holds examples.
type scenarioFile struct {
	RuleFiles          []string             `yaml:"rule_files"`
	EvaluationInterval string               `yaml:"evaluation_interval"`
	Start              string               `yaml:"start"`
	Inventory          []pipeline.NodeFacts `yaml:"inventory"`
	Tests              []scenarioTest       `yaml:"tests"`
}

type scenarioTest struct {
	Name   string           `yaml:"name"`
	Input  []scenarioInput  `yaml:"input"`
	Expect []scenarioExpect `yaml:"expect"`
}

type scenarioInput struct {
	At        string   `yaml:"at"`
	Job       string   `yaml:"job"`
	Namespace string   `yaml:"namespace"`
	Cluster   string   `yaml:"cluster"`
	Nodes     []string `yaml:"nodes"`
	// Labels are the job's pod labels (ncclwatch.io/canary,
	// ncclwatch.io/pool: a fabric canary), for log and report inputs.
	Labels map[string]string `yaml:"labels"`
	// One of:
	Log      string             `yaml:"log"`   // a log file, relative to the scenario file
	Lines    string             `yaml:"lines"` // log lines
	Summary  yaml.Node          `yaml:"summary"`
	Comms    yaml.Node          `yaml:"comms"`
	Tests    yaml.Node          `yaml:"nccl_tests"` // telemetry reports, as in scan --json
	Training yaml.Node          `yaml:"training"`
	Activity []scenarioActivity `yaml:"activity"`
	Proof    *scenarioProof     `yaml:"proof"`
	Forget   bool               `yaml:"forget"`
}

type scenarioActivity struct {
	Node string `yaml:"node"`
	Pod  string `yaml:"pod"`
}

type scenarioProof struct {
	Pool string `yaml:"pool"`
	Node string `yaml:"node"`
}

type scenarioExpect struct {
	At     string          `yaml:"at"`
	Alert  string          `yaml:"alert"`
	State  string          `yaml:"state"` // firing (default) or pending
	Alerts []expectedAlert `yaml:"alerts"`
}

type expectedAlert struct {
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// ScenarioDeps turn log inputs into summaries: the decoder and line parser
// of the real pipeline (parsers.NewDecoder, parsers.Lines). Scenarios
// without log inputs need neither. Telemetry says the line parser also
// reads telemetry (parsers.NewLines): their training-progress and
// nccl-tests lines then feed the `canary` and `series` views through a
// pipeline.TelemetryAssembler, as `run` does.
type ScenarioDeps struct {
	NewDecoder func() pipeline.Decoder
	Classifier pipeline.Classifier
	Telemetry  bool
}

// ScenarioResult is the outcome of one scenario file.
type ScenarioResult struct {
	File     string
	Tests    int
	Failures []string // one per failed expectation, naming the test and time
	Err      error    // the file could not be read or its rules loaded
}

// OK reports whether every test passed.
func (r ScenarioResult) OK() bool { return r.Err == nil && len(r.Failures) == 0 }

// RunScenarios runs scenario files.
func RunScenarios(paths []string, deps ScenarioDeps) []ScenarioResult {
	out := make([]ScenarioResult, len(paths))
	for i, p := range paths {
		out[i] = runScenarioFile(p, deps)
	}
	return out
}

// defaultScenarioStart is the time `at: 0m` stands for.
var defaultScenarioStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func runScenarioFile(path string, deps ScenarioDeps) ScenarioResult {
	res := ScenarioResult{File: path}
	b, err := os.ReadFile(path)
	if err != nil {
		res.Err = err
		return res
	}
	var sf scenarioFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&sf); err != nil {
		res.Err = fmt.Errorf("%s: %w", path, err)
		return res
	}
	dir := filepath.Dir(path)
	files := make([]string, len(sf.RuleFiles))
	for i, f := range sf.RuleFiles {
		if f == BuiltinName || filepath.IsAbs(f) {
			files[i] = f
		} else {
			files[i] = filepath.Join(dir, f)
		}
	}
	if len(files) == 0 {
		res.Err = fmt.Errorf("%s: rule_files: must name at least one file (or builtin)", path)
		return res
	}
	rs, err := Load(files...)
	if err != nil {
		res.Err = err
		return res
	}
	interval := time.Minute
	if sf.EvaluationInterval != "" {
		if interval, err = ParseDuration(sf.EvaluationInterval); err != nil || interval <= 0 {
			res.Err = fmt.Errorf("%s: evaluation_interval: must be a duration > 0", path)
			return res
		}
	}
	start := defaultScenarioStart
	if sf.Start != "" {
		if start, err = time.Parse(time.RFC3339, sf.Start); err != nil {
			res.Err = fmt.Errorf("%s: start: %w", path, err)
			return res
		}
	}
	var fleet Nodes
	var inv *pipeline.Inventory
	if len(sf.Inventory) > 0 {
		fleet = Nodes{}
		for _, n := range sf.Inventory {
			fleet[n.Node] = n
		}
		if inv, err = scenarioInventory(sf.Inventory); err != nil {
			res.Err = fmt.Errorf("%s: inventory: %w", path, err)
			return res
		}
	}
	for _, t := range sf.Tests {
		res.Tests++
		sc := &scenario{file: path, dir: dir, test: t.Name, rs: rs, interval: interval, start: start,
			fleet: fleet, inv: inv, deps: deps}
		res.Failures = append(res.Failures, sc.run(t)...)
	}
	return res
}

// scenarioInventory loads the inline inventory through the pipeline's own
// loader, so that a scenario's expectations come from the code `run` uses.
func scenarioInventory(nodes []pipeline.NodeFacts) (*pipeline.Inventory, error) {
	b, err := yaml.Marshal(nodes)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "ncclwatch-scenario-inventory-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return pipeline.LoadInventory(f.Name())
}

type scenario struct {
	file, dir, test string
	rs              *RuleSet
	interval        time.Duration
	start           time.Time
	fleet           Nodes
	inv             *pipeline.Inventory
	deps            ScenarioDeps

	eng   *Engine
	asm   *assemble.Assembler
	proc  *pipeline.Processor
	dec   pipeline.Decoder
	meta  map[string]*pipeline.Meta
	nodes map[string][]string
	ver   uint64
	tel   *pipeline.TelemetryAssembler
	tl    pipeline.TelemetryLine
	line  int32 // source coordinates of telemetry lines: one count per test
}

func (sc *scenario) fail(format string, args ...any) string {
	return fmt.Sprintf("%s: test %q: %s", sc.file, sc.test, fmt.Sprintf(format, args...))
}

func (sc *scenario) run(t scenarioTest) []string {
	var deps EngineDeps
	if sc.fleet != nil {
		deps.Fleet = sc.fleet
	}
	var err error
	if sc.eng, err = NewEngine(DefaultConfig(), sc.rs, deps); err != nil {
		return []string{sc.fail("%v", err)}
	}
	sc.meta, sc.nodes = map[string]*pipeline.Meta{}, map[string][]string{}
	type timed[T any] struct {
		at time.Duration
		v  T
	}
	var inputs []timed[scenarioInput]
	var expects []timed[scenarioExpect]
	var last time.Duration
	for i, in := range t.Input {
		at, err := ParseDuration(orZero(in.At))
		if err != nil {
			return []string{sc.fail("input %d: at: %v", i+1, err)}
		}
		inputs = append(inputs, timed[scenarioInput]{at, in})
		last = max(last, at)
	}
	for i, ex := range t.Expect {
		at, err := ParseDuration(orZero(ex.At))
		if err != nil {
			return []string{sc.fail("expect %d: at: %v", i+1, err)}
		}
		if sc.rs.Rule(ex.Alert) == nil {
			return []string{sc.fail("expect %d: no rule named %q in %s", i+1, ex.Alert, strings.Join(sc.rs.Files, ", "))}
		}
		expects = append(expects, timed[scenarioExpect]{at, ex})
		last = max(last, at)
	}
	// Evaluate every interval and at every input and expectation time.
	times := map[time.Duration]bool{}
	for d := time.Duration(0); d <= last; d += sc.interval {
		times[d] = true
	}
	for _, in := range inputs {
		times[in.at] = true
	}
	for _, ex := range expects {
		times[ex.at] = true
	}
	var failures []string
	for _, d := range slices.Sorted(maps.Keys(times)) {
		now := sc.start.Add(d)
		for i, in := range inputs {
			if in.at == d {
				if err := sc.apply(in.v, now); err != nil {
					return append(failures, sc.fail("input %d at %s: %v", i+1, d, err))
				}
			}
		}
		if _, err := sc.eng.Eval(now); err != nil {
			failures = append(failures, sc.fail("at %s: %v", d, err))
		}
		active := sc.eng.Active()
		for _, ex := range expects {
			if ex.at == d {
				failures = append(failures, sc.check(ex.v, d, active)...)
			}
		}
	}
	return failures
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// apply feeds one input to the engine at now.
func (sc *scenario) apply(in scenarioInput, now time.Time) error {
	job := in.Job
	if job == "" {
		job = "scenario"
	}
	key := pipeline.JobKey(in.Cluster, in.Namespace, job)
	if in.Nodes != nil {
		sc.nodes[key] = in.Nodes
	}
	n := 0
	if in.Log != "" || in.Lines != "" {
		n++
		text := []byte(in.Lines)
		if in.Log != "" {
			p := in.Log
			if !filepath.IsAbs(p) {
				p = filepath.Join(sc.dir, p)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			text = b
		}
		if err := sc.feed(key, job, in, text, now); err != nil {
			return err
		}
	}
	if in.Summary.Kind != 0 || in.Comms.Kind != 0 {
		n++
		var sum pipeline.JobSummary
		var comms []pipeline.CommSummary
		if err := viaJSON(&in.Summary, &sum); err != nil {
			return fmt.Errorf("summary: %w", err)
		}
		if err := viaJSON(&in.Comms, &comms); err != nil {
			return fmt.Errorf("comms: %w", err)
		}
		sum.Job, sum.Namespace, sum.Cluster = job, in.Namespace, in.Cluster
		if sum.Verdict == "" {
			sum.Verdict = pipeline.VerdictOK
		}
		for i := range comms {
			comms[i].Job, comms[i].Namespace, comms[i].Cluster = job, in.Namespace, in.Cluster
			if sc.inv != nil && sc.nodes[key] != nil {
				comms[i].Expect = sc.inv.Expect(sc.nodes[key], comms[i].Expect)
			}
		}
		if sum.Topology == nil && sc.inv != nil {
			// A summary written without a topology gets the inputs'
			// nodes' one, as Assembly.summarize (the enrich stage) gives
			// it.
			sc.inv.Topology(sc.nodes[key], sc.inv.Expect(sc.nodes[key], pipeline.Expectation{}), &sum)
		}
		if sum.LastSeen.IsZero() {
			sum.LastSeen = now
		}
		if sum.FirstSeen.IsZero() {
			sum.FirstSeen = now
		}
		sc.ver++
		sum.Version = sc.ver
		sc.eng.Observe(sum, comms, sc.nodeList(key))
	}
	if in.Tests.Kind != 0 || in.Training.Kind != 0 {
		n++
		t := Telemetry{Cluster: in.Cluster, Namespace: in.Namespace, Job: job,
			Tests: []pipeline.NCCLTestReport{}, Training: []pipeline.TrainingReport{}}
		if err := viaJSON(&in.Tests, &t.Tests); err != nil {
			return fmt.Errorf("nccl_tests: %w", err)
		}
		if err := viaJSON(&in.Training, &t.Training); err != nil {
			return fmt.Errorf("training: %w", err)
		}
		t.CanaryPool = sc.canaryPool(key, in.Labels)
		sc.eng.ObserveTelemetry(t)
	}
	if len(in.Activity) > 0 {
		n++
		for _, a := range in.Activity {
			sc.eng.ObserveActivity(Activity{Cluster: in.Cluster, Namespace: in.Namespace, Job: job, Node: a.Node, Pod: a.Pod, Time: now})
		}
	}
	if in.Proof != nil {
		n++
		sc.eng.ObserveProof(Proof{Pool: in.Proof.Pool, Node: in.Proof.Node, Time: now})
	}
	if in.Forget {
		n++
		sc.eng.Forget(key)
	}
	if n == 0 && in.Nodes == nil {
		return errors.New("input has none of log, lines, summary, nccl_tests, training, activity, proof, forget, nodes")
	}
	if n == 0 {
		// Nodes alone: the job's nodes changed.
		if _, _, ok := sc.assembler().Summaries(key); ok {
			return sc.observeAssembled(key)
		}
	}
	return nil
}

// canaryPool is the pool a report input's job tests when its labels mark
// it a canary: the pool label, else the inventory's pool of its first node
// (what pipeline.TelemetryAssembler.Canary says of a job's lines).
func (sc *scenario) canaryPool(key string, labels map[string]string) string {
	if labels[pipeline.LabelCanary] != "true" {
		return ""
	}
	if p := labels[pipeline.LabelPool]; p != "" {
		return p
	}
	if nodes := sc.nodes[key]; len(nodes) > 0 && sc.inv != nil {
		if f, ok := sc.inv.Node(nodes[0]); ok {
			return f.Pool
		}
	}
	return ""
}

func (sc *scenario) nodeList(key string) []string {
	if n, ok := sc.nodes[key]; ok {
		return n
	}
	return []string{}
}

func (sc *scenario) assembler() *assemble.Assembler {
	if sc.asm == nil {
		sc.asm = assemble.New(pipeline.DefaultAssemblerConfig())
	}
	return sc.asm
}

// feed runs log text through the pipeline's decoder, classifier and
// assembler, as `scan` does, and observes the job's summaries.
func (sc *scenario) feed(key, job string, in scenarioInput, text []byte, now time.Time) error {
	if sc.deps.NewDecoder == nil || sc.deps.Classifier == nil {
		return errors.New("log inputs need the pipeline's decoder: run the scenario with `ncclwatch rules test`")
	}
	if !sc.deps.Telemetry && slices.ContainsFunc(sc.rs.Rules, func(r *Rule) bool { return r.telemetry }) {
		// Without the parser the views stay empty and the rules quiet: a
		// test would fail (or pass) for the wrong reason.
		return errors.New("log inputs of rules that name canary or series need the telemetry parser (ScenarioDeps.Telemetry with parsers.NewLines)")
	}
	asm := sc.assembler()
	if sc.proc == nil {
		sc.proc = pipeline.NewProcessor(asm, sc.deps.Classifier, func(r *pipeline.Record) string {
			return pipeline.JobKey(r.Meta.Cluster, r.Meta.Namespace, r.Meta.Job)
		})
		sc.dec = sc.deps.NewDecoder()
	}
	if sc.deps.Telemetry && sc.tel == nil {
		sc.tel = pipeline.NewTelemetryAssembler(pipeline.DefaultTelemetryAssemblerConfig(), sc.inv)
	}
	meta := sc.meta[key]
	if meta == nil {
		meta = &pipeline.Meta{Job: job, Namespace: in.Namespace, Cluster: in.Cluster}
		sc.meta[key] = meta
	}
	if in.Labels != nil {
		meta.Labels = in.Labels
	}
	emit := func(r *pipeline.Record) {
		if r.Time.IsZero() {
			r.Time = now
		}
		m := *meta
		if nodes := sc.nodes[key]; len(nodes) > 0 {
			m.Node = nodes[0]
		}
		r.Meta = &m
		sc.proc.Record(r)
		if tl, ok := sc.proc.Telemetry(); ok && sc.tel != nil {
			sc.line++
			sc.tel.Add(key, &m, tl, r.Time, pipeline.Source{Topic: sc.file, Line: sc.line}, nil)
		}
	}
	for line := range bytes.SplitSeq(text, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		_ = sc.dec.Decode(line, emit) // a bad line is data, as in scan
		sc.dec.Flush(emit)
	}
	if err := sc.observeAssembled(key); err != nil {
		return err
	}
	// After the summary, as Engine.ObserveBatch reads a batch's jobs before
	// its telemetry.
	if sc.tel != nil {
		tests, training := sc.tel.Report(key)
		ckpts := sc.tel.Checkpoints(key)
		colls := sc.tel.Collectives(key)
		pool, _ := sc.tel.Canary(key)
		if len(tests) > 0 || len(training) > 0 || len(ckpts) > 0 || len(colls) > 0 || pool != "" {
			cluster, namespace, name := pipeline.SplitJobKey(key)
			sc.eng.ObserveTelemetry(Telemetry{Cluster: cluster, Namespace: namespace, Job: name, Tests: tests,
				Training: training, Checkpoints: ckpts, Collectives: colls, Pool: sc.tel.Pool(key), CanaryPool: pool})
		}
	}
	return nil
}

func (sc *scenario) observeAssembled(key string) error {
	asm := sc.assembler()
	var e pipeline.Expectation
	if sc.inv != nil && sc.nodes[key] != nil {
		e = sc.inv.Expect(sc.nodes[key], pipeline.Expectation{})
		asm.SetExpectation(key, &e)
	}
	comms, sum, ok := asm.Summaries(key)
	if !ok {
		return nil // no NCCL line: nothing to observe
	}
	// As Assembly.summarize (the enrich stage): the topology of the
	// job's nodes (all of the input's, where the records carry the
	// first).
	sc.inv.Topology(sc.nodes[key], e, &sum)
	sc.eng.Observe(sum, comms, sc.nodeList(key))
	return nil
}

// viaJSON decodes a YAML node into v through JSON, so that summaries are
// written with the field names of `scan --json`.
func viaJSON(n *yaml.Node, v any) error {
	if n == nil || n.Kind == 0 {
		return nil
	}
	var generic any
	if err := n.Decode(&generic); err != nil {
		return err
	}
	b, err := json.Marshal(generic)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// check compares the alerts of one rule in one state with the expected.
func (sc *scenario) check(ex scenarioExpect, at time.Duration, active []pipeline.Alert) []string {
	state := ex.State
	if state == "" {
		state = pipeline.AlertFiring
	}
	var got []pipeline.Alert
	for _, a := range active {
		if a.Rule == ex.Alert && a.State == state {
			got = append(got, a)
		}
	}
	show := func(as []pipeline.Alert) string {
		if len(as) == 0 {
			return "none"
		}
		var parts []string
		for _, a := range as {
			parts = append(parts, fmt.Sprintf("%v %v", a.Labels, a.Annotations))
		}
		return strings.Join(parts, "; ")
	}
	if len(got) != len(ex.Alerts) {
		return []string{sc.fail("at %s: %s: %d %s alerts; want %d\n    got: %s", at, ex.Alert, len(got), state,
			len(ex.Alerts), show(got))}
	}
	used := make([]bool, len(got))
	var out []string
	for i, want := range ex.Alerts {
		found := false
		for j := range got {
			if !used[j] && matches(got[j], want) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			out = append(out, sc.fail("at %s: %s: expected alert %d (labels %v, annotations %v) not among\n    got: %s",
				at, ex.Alert, i+1, want.Labels, want.Annotations, show(got)))
		}
	}
	return out
}

// matches: every expected label and annotation is present with its value.
func matches(a pipeline.Alert, want expectedAlert) bool {
	for k, v := range want.Labels {
		if a.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if strings.TrimSpace(a.Annotations[k]) != strings.TrimSpace(v) {
			return false
		}
	}
	return true
}
