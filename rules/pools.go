package rules

import (
	"maps"
	"slices"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

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
