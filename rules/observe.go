package rules

import (
	"slices"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

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
		for _, cs := range [][]pipeline.CommSummary{b.Comms, b.Unnamed} {
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
			Training: t.Training, Checkpoints: t.Checkpoints, Collectives: t.Collectives, Pool: t.Pool,
			CanaryPool: t.CanaryPool})
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
	tel.collectives, tel.pool = slices.Clone(t.Collectives), t.Pool
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
