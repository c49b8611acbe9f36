package pipeline

import "time"

// Alert is one state change of an alert rule for one job, as the rules
// engine reports it and the alerts table stores it.
type Alert struct {
	Rule        string
	Severity    string
	Job         string
	Namespace   string
	Cluster     string
	State       string // pending, firing or resolved
	Labels      map[string]string
	Annotations map[string]string
	ActiveAt    time.Time // when the condition started to hold
	FiredAt     time.Time // zero while pending
	ResolvedAt  time.Time // zero until resolved
	EvalTime    time.Time // the evaluation that produced this state
}
