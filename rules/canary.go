package rules

import (
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// canaryBaselineRuns is the window of pipeline.CanaryBaselines: 20 runs
// of an hourly canary are most of a day, so one bad hour does not move
// the median (deploy/kubernetes/canary/README.md).
const canaryBaselineRuns = 20

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
