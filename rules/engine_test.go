package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func mustParse(t *testing.T, src string) *RuleSet {
	t.Helper()
	rs, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	return rs
}

// fallbackJob is a two-node job on Socket (verdict socket_fallback) or, with
// ok, on IB.
func fallbackJob(name string, version uint64, ok bool) (pipeline.JobSummary, []pipeline.CommSummary) {
	net, class, verdict := "Socket", "tcp", pipeline.VerdictSocketFallback
	if ok {
		net, class, verdict = "IB", "rdma", pipeline.VerdictOK
	}
	sum := pipeline.JobSummary{Job: name, Namespace: "ml", Cluster: "c1", Network: ptr(net), NetworkClass: ptr(class),
		MultiNode: ptr(true), NNodes: ptr(2), NRanks: ptr(16), Verdict: verdict, Version: version, FirstSeen: t0, LastSeen: t0}
	comms := []pipeline.CommSummary{
		{Job: name, Namespace: "ml", Cluster: "c1", CommID: "0xintra", NetworkClass: pipeline.ClassNone, MultiNode: ptr(false), Verdict: pipeline.VerdictOK},
		{Job: name, Namespace: "ml", Cluster: "c1", CommID: "0xworld", Network: ptr(net), NetworkClass: class, MultiNode: ptr(true),
			NNodes: ptr(2), NRanks: ptr(16), Verdict: verdict, GDR: ptr(ok)},
	}
	return sum, comms
}

const stateRules = `groups:
  - name: g
    rules:
      - alert: Fallback
        expr: comm.network_class == "tcp" && comm.multi_node == true
        for: 2m
        keep_firing_for: 3m
        labels: {severity: critical, team: "{{ .namespace }}"}
        annotations:
          summary: "{{ .job }} comm {{ .comm_id }} on {{ .network }} across {{ .nnodes }} nodes"
          who: "{{ .labels.team }}"
`

func changes(as []pipeline.Alert) string {
	var parts []string
	for _, a := range as {
		parts = append(parts, fmt.Sprintf("%s/%s:%s", a.Rule, a.Job+a.Pool, a.State))
	}
	return strings.Join(parts, " ")
}

func eval(t *testing.T, e *Engine, at time.Duration, want string) []pipeline.Alert {
	t.Helper()
	got, err := e.Eval(t0.Add(at))
	if err != nil {
		t.Fatalf("Eval(+%s) error = %v", at, err)
	}
	if changes(got) != want {
		t.Fatalf("Eval(+%s) = %q; want %q", at, changes(got), want)
	}
	return got
}

// The state machine: inactive → pending → firing (after for) → still firing
// while keep_firing_for runs → resolved → kept for Retention → gone, and a
// pending alert that stops holding goes back to inactive.
func TestRulesEngineStateMachine(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, err := NewEngine(DefaultConfig(), mustParse(t, stateRules), EngineDeps{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	sum, comms := fallbackJob("train", 10, false)
	e.Observe(sum, comms, nil)
	got := eval(t, e, 0, "Fallback/train:pending")
	a := got[0]
	if !a.ActiveAt.Equal(t0) || !a.FiredAt.IsZero() || a.Severity != "critical" {
		t.Errorf("pending alert = %+v", a)
	}
	wantLabels := "map[alertname:Fallback cluster:c1 job_name:train namespace:ml severity:critical team:ml]"
	if fmt.Sprint(a.Labels) != wantLabels {
		t.Errorf("labels = %v; want %v", a.Labels, wantLabels)
	}
	if s := a.Annotations["summary"]; s != "train comm 0xworld on Socket across 2 nodes" {
		t.Errorf("summary = %q: annotations must see the matched communicator", s)
	}
	if w := a.Annotations["who"]; w != "ml" {
		t.Errorf("who = %q: annotations see the labels", w)
	}
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "critical", "pending")); v != 1 {
		t.Errorf("ncclwatch_alerts{pending} = %v; want 1", v)
	}
	eval(t, e, time.Minute, "")
	got = eval(t, e, 2*time.Minute, "Fallback/train:firing")
	if s := got[0].Annotations["summary"]; s != "train comm 0xworld on Socket across 2 nodes" {
		t.Errorf("summary at firing = %q", s)
	}
	if !got[0].FiredAt.Equal(t0.Add(2*time.Minute)) || !got[0].ActiveAt.Equal(t0) {
		t.Errorf("firing alert times = active %v fired %v", got[0].ActiveAt, got[0].FiredAt)
	}
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "critical", "firing")); v != 1 {
		t.Errorf("ncclwatch_alerts{firing} = %v; want 1", v)
	}
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "critical", "pending")); v != 0 {
		t.Errorf("ncclwatch_alerts{pending} = %v; want 0", v)
	}
	// The job recovers: keep_firing_for holds the alert 3 more minutes.
	sum, comms = fallbackJob("train", 20, true)
	e.Observe(sum, comms, nil)
	eval(t, e, 3*time.Minute, "")
	eval(t, e, 5*time.Minute, "")
	got = eval(t, e, 6*time.Minute, "Fallback/train:resolved")
	if !got[0].ResolvedAt.Equal(t0.Add(6 * time.Minute)) {
		t.Errorf("resolved at %v", got[0].ResolvedAt)
	}
	if len(e.Active()) != 0 {
		t.Errorf("Active() = %v after resolve", e.Active())
	}
	// Retention: the resolved state stays 15 minutes, then goes.
	eval(t, e, 20*time.Minute, "")
	if n := len(e.states); n != 1 {
		t.Errorf("%d states before the retention ran out; want 1", n)
	}
	eval(t, e, 21*time.Minute, "")
	if n := len(e.states); n != 0 {
		t.Errorf("%d states after the retention; want 0", n)
	}
	// A new episode that stops before `for`: pending, then inactive.
	sum, comms = fallbackJob("train", 30, false)
	e.Observe(sum, comms, nil)
	eval(t, e, 30*time.Minute, "Fallback/train:pending")
	sum, comms = fallbackJob("train", 40, true)
	e.Observe(sum, comms, nil)
	eval(t, e, 31*time.Minute, "Fallback/train:inactive")
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "critical", "pending")); v != 0 {
		t.Errorf("ncclwatch_alerts{pending} = %v; want 0", v)
	}
}

// Observing the same summary again does not re-evaluate an untimed rule,
// and does not duplicate changes.
func TestRulesEngineObserveIdempotent(t *testing.T) {
	cfg := DefaultConfig()
	e, _ := NewEngine(cfg, mustParse(t, stateRules), EngineDeps{})
	sum, comms := fallbackJob("train", 10, false)
	for range 3 {
		e.Observe(sum, comms, nil)
		e.ObserveBatch(&pipeline.Batch{Jobs: []pipeline.JobSummary{sum}, Comms: comms})
	}
	eval(t, e, 0, "Fallback/train:pending")
	e.Observe(sum, comms, nil)
	eval(t, e, time.Second, "")
	if s := e.subjects[pipeline.JobKey("c1", "ml", "train")]; s.dirty {
		t.Errorf("subject still dirty after Eval")
	}
}

// A forgotten (evicted) job's alerts resolve at the next Eval, unless its
// pods still log; a job nobody reports on goes after SubjectTTL.
func TestRulesEngineForget(t *testing.T) {
	rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: Fallback
        expr: comm.network_class == "tcp"
`)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{Metrics: m})
	for _, j := range []string{"a", "b", "c"} {
		sum, comms := fallbackJob(j, 1, false)
		e.Observe(sum, comms, nil)
	}
	eval(t, e, 0, "Fallback/a:firing Fallback/b:firing Fallback/c:firing")
	if n := testutil.CollectAndCount(m.JobNetworkClass); n != 3 {
		t.Errorf("%d ncclwatch_job_network_class series; want 3", n)
	}
	// a: evicted, quiet. b: evicted, but its pods still log. c: nobody
	// says anything for SubjectTTL.
	e.ObserveActivity(Activity{Cluster: "c1", Namespace: "ml", Job: "b", Node: "n1", Pod: "b-0", Time: t0.Add(29 * time.Minute)})
	e.Forget(pipeline.JobKey("c1", "ml", "a"))
	e.Forget(pipeline.JobKey("c1", "ml", "b"))
	eval(t, e, 30*time.Minute, "Fallback/a:resolved")
	eval(t, e, 45*time.Minute, "Fallback/b:resolved")
	eval(t, e, 119*time.Minute, "")
	eval(t, e, 2*time.Hour, "Fallback/c:resolved")
	if len(e.subjects) != 0 || len(e.states) != 0 {
		t.Errorf("%d subjects, %d states left; want none", len(e.subjects), len(e.states))
	}
	if n := testutil.CollectAndCount(m.JobNetworkClass); n != 0 {
		t.Errorf("%d ncclwatch_job_network_class series after the jobs went; want 0", n)
	}
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "warning", "firing")); v != 0 {
		t.Errorf("ncclwatch_alerts{firing} = %v; want 0", v)
	}
}

func TestRulesEngineMaxSubjects(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSubjects = 2
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, _ := NewEngine(cfg, &RuleSet{}, EngineDeps{Metrics: m})
	for i := range 5 {
		e.ObserveActivity(Activity{Job: fmt.Sprint("j", i), Node: "n", Time: t0})
	}
	if len(e.subjects) != 2 {
		t.Errorf("%d subjects; want the cap, 2", len(e.subjects))
	}
	if v := testutil.ToFloat64(m.SubjectsDropped); v != 3 {
		t.Errorf("dropped = %v; want 3", v)
	}
	// Jobs with summaries are bounded by the assembler, not refused.
	sum, comms := fallbackJob("x", 1, true)
	e.Observe(sum, comms, nil)
	if len(e.subjects) != 3 {
		t.Errorf("%d subjects; want 3", len(e.subjects))
	}
	// Activity-only jobs that stop logging go after SubjectTTL.
	if _, err := e.Eval(t0.Add(cfg.SubjectTTL)); err != nil {
		t.Fatal(err)
	}
	if len(e.subjects) != 1 {
		t.Errorf("%d subjects after their activity went stale; want 1", len(e.subjects))
	}
}

// A rule that fails at run time (nnodes is null) reports the error and
// leaves the state as it was; other rules go on.
func TestRulesEngineRuntimeError(t *testing.T) {
	rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: Careless
        expr: job.nnodes > 1
      - alert: Careful
        expr: (job.nnodes ?? 0) > 1 || known(job.gdr)
`)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{Metrics: m})
	sum, comms := fallbackJob("j", 1, false)
	e.Observe(sum, comms, nil)
	eval(t, e, 0, "Careful/j:firing Careless/j:firing")
	sum.NNodes, sum.Version = nil, 2
	e.Observe(sum, comms, nil)
	got, err := e.Eval(t0.Add(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "test.yaml:5: rule Careless on c1/ml/j: invalid operation: <nil> > int") {
		t.Errorf("Eval error = %v", err)
	}
	if changes(got) != "Careful/j:resolved" {
		t.Errorf("changes = %q; want Careful resolved and Careless unchanged", changes(got))
	}
	if v := testutil.ToFloat64(m.EvalFailures.WithLabelValues("Careless")); v != 1 {
		t.Errorf("failures = %v; want 1", v)
	}
	if a := e.Active(); len(a) != 1 || a[0].Rule != "Careless" {
		t.Errorf("Active() = %v; want Careless still firing", changes(a))
	}
}

// Expressions cannot run away: the memory budget stops a huge range.
func TestRulesEngineBoundedCost(t *testing.T) {
	rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: Huge
        expr: len(0..100000000) > 0
`)
	e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{})
	sum, comms := fallbackJob("j", 1, false)
	e.Observe(sum, comms, nil)
	start := time.Now()
	_, err := e.Eval(t0)
	if err == nil || !strings.Contains(err.Error(), "memory budget exceeded") {
		t.Errorf("Eval = %v; want memory budget exceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Eval took %v", d)
	}
}

// The per-job gauges follow the summaries.
func TestRulesEngineJobMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, _ := NewEngine(DefaultConfig(), &RuleSet{}, EngineDeps{Metrics: m})
	sum, comms := fallbackJob("j", 1, false)
	sum.GDR = ptr(false)
	e.Observe(sum, comms, nil)
	e.Eval(t0)
	sum, comms = fallbackJob("j", 2, true)
	sum.GDR = ptr(true)
	e.Observe(sum, comms, nil)
	e.Eval(t0.Add(time.Second))
	want := `
# HELP ncclwatch_job_gdr 1 when a job's NCCL uses GPUDirect RDMA, 0 when it runs RDMA without it; absent without evidence.
# TYPE ncclwatch_job_gdr gauge
ncclwatch_job_gdr{cluster="c1",job_name="j",namespace="ml"} 1
# HELP ncclwatch_job_network_class 1 for the network class a job's NCCL uses: rdma, tcp, tcpx, mixed, none or unknown.
# TYPE ncclwatch_job_network_class gauge
ncclwatch_job_network_class{class="rdma",cluster="c1",job_name="j",namespace="ml"} 1
# HELP ncclwatch_job_verdict 1 for a job's verdict: ok, unknown, no_evidence, degraded, gdr_off or socket_fallback.
# TYPE ncclwatch_job_verdict gauge
ncclwatch_job_verdict{cluster="c1",job_name="j",namespace="ml",verdict="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ncclwatch_job_gdr", "ncclwatch_job_network_class", "ncclwatch_job_verdict"); err != nil {
		t.Error(err)
	}
}

// Pool rules see the inventory's pools; proofs come from ok RDMA jobs on
// the pool's nodes and from canaries.
func TestRulesEnginePools(t *testing.T) {
	rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: Unproven
        scope: pool
        expr: pool.rdma_capable && pool.unproven_for > duration("6h")
        annotations: {summary: "{{ .pool }} {{ .unproven_for | humanizeDuration }} {{ .nodes }}"}
`)
	fleet := Nodes{
		"g1": {Node: "g1", Pool: "ib", RDMACapable: ptr(true), HCAs: 8},
		"g2": {Node: "g2", Pool: "ib", RDMACapable: ptr(true), HCAs: 8},
		"c1": {Node: "c1", Pool: "cpu", RDMACapable: ptr(false)},
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{Fleet: fleet, Metrics: m})
	eval(t, e, 0, "")
	got := eval(t, e, 7*time.Hour, "Unproven/ib:firing")
	if s := got[0].Annotations["summary"]; s != "ib 7h 2" {
		t.Errorf("summary = %q", s)
	}
	if got[0].Labels["pool"] != "ib" || got[0].Job != "" {
		t.Errorf("pool alert = %+v", got[0])
	}
	// An ok RDMA job on g1 proves the pool.
	sum, comms := fallbackJob("j", 1, true)
	sum.LastSeen = t0.Add(7*time.Hour + 30*time.Minute)
	e.Observe(sum, comms, []string{"g1", "g2"})
	eval(t, e, 8*time.Hour, "Unproven/ib:resolved")
	if v := testutil.ToFloat64(m.PoolLastProof.WithLabelValues("ib")); v != float64(sum.LastSeen.Unix()) {
		t.Errorf("last proof = %v; want %v", v, sum.LastSeen.Unix())
	}
	eval(t, e, 14*time.Hour, "Unproven/ib:firing")
	e.ObserveProof(Proof{Node: "g2", Time: t0.Add(14*time.Hour + time.Minute)})
	eval(t, e, 15*time.Hour, "Unproven/ib:resolved")
	// The pool leaves the inventory: its state goes.
	eval(t, e, 22*time.Hour, "Unproven/ib:firing")
	delete(fleet, "g1")
	delete(fleet, "g2")
	eval(t, e, 23*time.Hour, "Unproven/ib:resolved")
}

// Between full evaluations an unchanged job is not evaluated at all; rules
// that name now are evaluated for every job once per Interval.
func TestRulesEngineWorkBound(t *testing.T) {
	rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: Timed
        expr: job.nnodes > 1 && now > job.first_seen
`)
	e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{})
	for i := range 100 {
		sum, comms := fallbackJob(fmt.Sprint("j", i), 1, false)
		sum.NNodes = nil // every evaluation fails: the errors count the evaluations
		e.Observe(sum, comms, nil)
	}
	count := func(at time.Duration) int {
		_, err := e.Eval(t0.Add(at))
		if err == nil {
			return 0
		}
		return strings.Count(err.Error(), "rule Timed")
	}
	if n := count(0); n != maxEvalErrors {
		t.Errorf("first Eval reported %d failures; want the cap %d", n, maxEvalErrors)
	}
	if n := count(time.Second); n != 0 {
		t.Errorf("Eval 1s later evaluated %d jobs; want none (nothing changed)", n)
	}
	sum, comms := fallbackJob("j7", 2, false)
	sum.NNodes = nil
	e.Observe(sum, comms, nil)
	if n := count(2 * time.Second); n != 1 {
		t.Errorf("Eval after one job changed evaluated %d; want 1", n)
	}
	if n := count(30 * time.Second); n != maxEvalErrors {
		t.Errorf("full Eval after Interval evaluated %d (capped); want %d", n, maxEvalErrors)
	}
}

// The canary and series views: a rule naming series matches per training
// series and its annotations see the matched one; a canary's ok RDMA
// summary proves the pool its label names; only ok runs make a pool's
// baseline, and a run is compared with the runs before it.
func TestEngineTelemetryViews(t *testing.T) {
	rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: Regress
        expr: series.network_changed && (series.step_time_regression ?? 0) > 1.3
        annotations: {summary: "{{ .series_framework }} on {{ .series_network }} after {{ .series_previous_network }}"}
      - alert: Canary
        expr: canary.is && canary.rows > 0
        annotations: {summary: '{{ .canary_pool }} {{ .canary_busbw }} {{ .canary_baseline_busbw | default "none" }}'}
      - alert: Unproven
        scope: pool
        expr: "!pool.proved"
`)
	fleet := Nodes{"n1": {Node: "n1", Pool: "p1", RDMACapable: ptr(true)}}
	eng, err := NewEngine(DefaultConfig(), rs, EngineDeps{Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	eval := func(at time.Time) map[string]pipeline.Alert {
		t.Helper()
		if _, err := eng.Eval(at); err != nil {
			t.Fatal(err)
		}
		got := map[string]pipeline.Alert{}
		for _, a := range eng.Active() {
			got[a.Rule+"/"+a.Job+a.Pool] = a
		}
		return got
	}
	eng.ObserveTelemetry(Telemetry{Namespace: "ml", Job: "train", Training: []pipeline.TrainingReport{
		{Framework: "hf_trainer", Steps: 10, Network: ptr("IB")},
		{Framework: "megatron", Steps: 40, Network: ptr("Socket"), PreviousNetwork: ptr("IB"), SegmentSteps: 20,
			StepTimeRegress: ptr(1.5)},
	}})
	run := func(busbw float64) []pipeline.NCCLTestReport {
		return []pipeline.NCCLTestReport{{Collective: ptr("all_reduce_perf"), Rows: 4, MaxBytes: ptr(int64(8 << 30)),
			MaxSizeBusBWOOP: ptr(busbw), AvgBusBW: ptr(busbw * 0.9)}}
	}
	canary := func(job string, busbw float64, ok bool) {
		sum, comms := fallbackJob(job, 1, ok)
		eng.Observe(sum, comms, nil)
		eng.ObserveTelemetry(Telemetry{Namespace: "ml", Cluster: "c1", Job: job, Tests: run(busbw), CanaryPool: "p1"})
	}
	got := eval(t0)
	if a, ok := got["Regress/train"]; !ok || a.Annotations["summary"] != "megatron on Socket after IB" {
		t.Errorf("Regress = %+v; want the megatron series", a)
	}
	if _, ok := got["Unproven/p1"]; !ok {
		t.Errorf("pool p1 proved before any canary: %v", got)
	}
	canary("c-fallback", 50, false) // proves nothing, no baseline
	got = eval(t0.Add(time.Minute))
	if _, ok := got["Unproven/p1"]; !ok {
		t.Errorf("a canary that fell back proved the pool")
	}
	canary("c-1", 200, true)
	canary("c-2", 100, true)
	got = eval(t0.Add(2 * time.Minute))
	if _, ok := got["Unproven/p1"]; ok {
		t.Errorf("ok canaries on RDMA did not prove the pool")
	}
	for job, want := range map[string]string{"c-fallback": "p1 50 none", "c-1": "p1 200 none", "c-2": "p1 100 200"} {
		if a := got["Canary/"+job]; a.Annotations["summary"] != want {
			t.Errorf("Canary %s summary = %q; want %q", job, a.Annotations["summary"], want)
		}
	}
	// A job that is no canary has an empty view.
	eng.ObserveTelemetry(Telemetry{Namespace: "ml", Job: "tests", Tests: run(10)})
	if _, ok := eval(t0.Add(3 * time.Minute))["Canary/tests"]; ok {
		t.Error("a job without the canary label has a canary view")
	}
}

const releaseRules = `groups:
  - name: g
    rules:
      - alert: Fallback
        expr: comm.network_class == "tcp" && comm.multi_node == true
        labels: {severity: critical}
`

// A job whose partitions were revoked (Batch.Released) did not end: its
// firing alert is not resolved while it is away, not when the state
// rebuilt after the reassignment is older than what was evaluated (the
// replay catching up), and not when it never comes back (its new owner
// evaluates it). Before Release, the rebuilt older summary (no Socket
// communicator yet) resolved the alert, and a job that moved to another
// member was resolved by the sweep after subject_ttl: both extra
// `resolved` rows the chaos test found.
func TestEngineReleasedJobNotResolved(t *testing.T) {
	e, err := NewEngine(Config{Interval: time.Minute, Retention: time.Hour, SubjectTTL: time.Hour,
		ActivityTTL: 10 * time.Minute, MaxSubjects: 10}, mustParse(t, releaseRules), EngineDeps{})
	if err != nil {
		t.Fatal(err)
	}
	late, lateComms := fallbackJob("a", 40, false)
	e.Observe(late, lateComms, nil)
	other, otherComms := fallbackJob("b", 40, false)
	e.Observe(other, otherComms, nil)
	eval(t, e, 0, "Fallback/a:firing Fallback/b:firing")

	// The revocation's batch: final summaries, then both released.
	e.ObserveBatch(&pipeline.Batch{Jobs: []pipeline.JobSummary{late, other}, Comms: append(lateComms, otherComms...),
		Released: []string{pipeline.JobKey("c1", "ml", "a"), pipeline.JobKey("c1", "ml", "b")}})
	eval(t, e, time.Minute, "")
	if n := len(e.Active()); n != 0 {
		t.Errorf("Active() = %d alerts of released jobs; want none (their new owner reports them)", n)
	}

	// a comes back: the rebuilt state is what was committed, before the
	// Socket communicator (the intra-node one only).
	early, earlyComms := fallbackJob("a", 12, true)
	e.ObserveBatch(&pipeline.Batch{Jobs: []pipeline.JobSummary{early}, Comms: earlyComms[:1]})
	eval(t, e, 2*time.Minute, "")
	// The replay catches up: same state as before the revocation.
	e.Observe(late, lateComms, nil)
	eval(t, e, 3*time.Minute, "")
	if got := changes(e.Active()); got != "Fallback/a:firing" {
		t.Errorf("Active() after a came back = %q; want Fallback/a:firing", got)
	}
	// And it goes on: a later state that really heals resolves it.
	healed, healedComms := fallbackJob("a", 50, true)
	e.Observe(healed, healedComms, nil)
	eval(t, e, 4*time.Minute, "Fallback/a:resolved")

	// b never comes back: dropped after subject_ttl without a resolution.
	eval(t, e, 2*time.Hour, "")
	eval(t, e, 3*time.Hour, "")
	if _, ok := e.subjects[pipeline.JobKey("c1", "ml", "b")]; ok {
		t.Error("released job b still held after subject_ttl")
	}
}

// After a restart the stored pending and firing states are restored
// (Restore): an alert that still holds keeps its times and is reported once
// more (the notifiers start empty), a pending one fires `for` after its
// first activation, not after the restart; nothing is evaluated before the
// replay reaches the summary version stored with the alerts (the rebuilt
// older state would resolve them); a restored job that heals resolves; one
// that never comes back is dropped after subject_ttl without a transition.
func TestEngineRestore(t *testing.T) {
	cfg := Config{Interval: time.Minute, Retention: time.Hour, SubjectTTL: time.Hour, ActivityTTL: 10 * time.Minute,
		MaxSubjects: 10}
	before, err := NewEngine(cfg, mustParse(t, stateRules), EngineDeps{})
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"firing", "pending", "heals", "gone"} {
		sum, comms := fallbackJob(job, 40, false)
		before.Observe(sum, comms, nil)
	}
	eval(t, before, 0, "Fallback/firing:pending Fallback/gone:pending Fallback/heals:pending Fallback/pending:pending")
	eval(t, before, 2*time.Minute, "Fallback/firing:firing Fallback/gone:firing Fallback/heals:firing Fallback/pending:firing")
	var stored []pipeline.StoredAlert
	for _, a := range before.Active() {
		if a.Job == "pending" { // as if it was pending when the process died
			a.State, a.FiredAt = pipeline.AlertPending, time.Time{}
		}
		stored = append(stored, pipeline.StoredAlert{Alert: a, SummaryVersion: 40})
	}
	stored = append(stored, pipeline.StoredAlert{Alert: pipeline.Alert{Rule: "Removed", Job: "firing", Namespace: "ml",
		Cluster: "c1", State: pipeline.AlertFiring}}) // a rule no longer loaded

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e, err := NewEngine(cfg, mustParse(t, stateRules), EngineDeps{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.Restore(stored); n != 4 {
		t.Fatalf("Restore = %d; want 4 (the rule no longer loaded skipped)", n)
	}
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "critical", "firing")); v != 3 {
		t.Errorf("ncclwatch_alerts{firing} after Restore = %v; want 3", v)
	}
	if n := len(e.Active()); n != 0 {
		t.Errorf("Active() = %d before the jobs came back; want none", n)
	}
	// The rebuilt state is older than what was evaluated (and healthy):
	// not taken.
	for _, job := range []string{"firing", "pending", "heals"} {
		sum, comms := fallbackJob(job, 12, true)
		e.Observe(sum, comms, nil)
	}
	eval(t, e, 3*time.Minute, "")
	// The replay catches up: the firing alert is reported again with its
	// times; the pending one fires `for` after it became active (t0).
	for _, job := range []string{"firing", "pending", "heals"} {
		sum, comms := fallbackJob(job, 40, false)
		e.Observe(sum, comms, nil)
	}
	got := eval(t, e, 4*time.Minute, "Fallback/firing:firing Fallback/heals:firing Fallback/pending:firing")
	for _, a := range got {
		wantFired := t0.Add(2 * time.Minute)
		if a.Job == "pending" {
			wantFired = t0.Add(4 * time.Minute)
		}
		if !a.ActiveAt.Equal(t0) || !a.FiredAt.Equal(wantFired) || !a.EvalTime.Equal(t0.Add(4*time.Minute)) {
			t.Errorf("%s: active %v fired %v eval %v; want active %v fired %v", a.Job, a.ActiveAt, a.FiredAt, a.EvalTime,
				t0, wantFired)
		}
		if a.Annotations["summary"] == "" || a.Labels["team"] != "ml" {
			t.Errorf("%s: restored labels/annotations lost: %v %v", a.Job, a.Labels, a.Annotations)
		}
	}
	eval(t, e, 5*time.Minute, "") // reported once
	// heals: a later state resolves it (after keep_firing_for).
	sum, comms := fallbackJob("heals", 50, true)
	e.Observe(sum, comms, nil)
	eval(t, e, 6*time.Minute, "")
	eval(t, e, 9*time.Minute, "Fallback/heals:resolved")
	// gone never comes back: dropped after subject_ttl, no transition
	// (the others still log).
	for _, job := range []string{"firing", "pending"} {
		sum, comms := fallbackJob(job, 41, false)
		e.Observe(sum, comms, nil)
	}
	eval(t, e, 50*time.Minute, "")
	eval(t, e, 70*time.Minute, "")
	if _, ok := e.subjects[pipeline.JobKey("c1", "ml", "gone")]; ok {
		t.Error("restored job gone still held after subject_ttl")
	}
	if got := changes(e.Active()); got != "Fallback/firing:firing Fallback/pending:firing" {
		t.Errorf("Active() = %q", got)
	}
	if v := testutil.ToFloat64(m.Alerts.WithLabelValues("Fallback", "critical", "firing")); v != 2 {
		t.Errorf("ncclwatch_alerts{firing} = %v; want 2", v)
	}
}
