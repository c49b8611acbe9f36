package pipeline

import "time"

// Alert states, in the order an alert goes through them. A rule's state
// for one subject (a job, or a node pool for fleet rules) goes inactive →
// pending → firing → resolved; a pending alert whose condition stops
// holding before its `for` elapsed goes back to inactive.
const (
	AlertPending  = "pending"
	AlertFiring   = "firing"
	AlertResolved = "resolved"
	AlertInactive = "inactive"
)

// Alert is one state change of an alert rule for one subject, as the rules
// engine reports it, the notifiers send it and the alerts table stores it.
// Its JSON form is an element of the `alerts` array of
// `ncclwatch scan --rules … --json`.
type Alert struct {
	Rule        string            `json:"alert"`
	Severity    string            `json:"severity"`
	Job         string            `json:"job,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Cluster     string            `json:"cluster,omitempty"`
	Pool        string            `json:"pool,omitempty"` // fleet rules: the node pool; Job is then empty
	State       string            `json:"state"`          // pending, firing, resolved or inactive
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	ActiveAt    time.Time         `json:"active_at,omitzero"`   // when the condition started to hold
	FiredAt     time.Time         `json:"fired_at,omitzero"`    // zero while pending
	ResolvedAt  time.Time         `json:"resolved_at,omitzero"` // zero until resolved
	EvalTime    time.Time         `json:"eval_time,omitzero"`   // the evaluation that produced this state
}

// StoredAlert is an alert state as a previous process stored it, with the
// version of its job's summary stored beside it (0 when none is): a
// restarted process restores the pending and firing ones and takes its
// job's summaries again only once they reach that version (the replay
// after the restart caught up with what was evaluated).
type StoredAlert struct {
	Alert
	SummaryVersion uint64
}
