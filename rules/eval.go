package rules

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

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
	env := JobEnv{Job: s.jobView(), Zones: []string{}, Racks: []string{}, Comms: []CommView{}, Nodes: []NodeView{}}
	if s.sum != nil {
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
		env.Collective = e.collectiveView(s, jobPool(s.tel.pool, env.Pool))
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
