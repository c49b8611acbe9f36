package rules

import (
	"math"
	"slices"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// canaryBaselineRuns is the window of CanaryBaselines: 20 runs
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

// CanaryBaselines learns each node pool's canary bus bandwidth: the median
// of the last runs whose job verdict was ok, per pool and collective. It is
// the `canary.baseline_busbw` the busbw rule compares a run with
// (deploy/kubernetes/canary/rules.yaml). Memory is bounded by the pools
// and collectives seen times Window. It is not safe for concurrent use.
type CanaryBaselines struct {
	window int
	runs   map[[2]string][]float64 // oldest first
}

// NewCanaryBaselines keeps the last window ok runs per pool and collective
// (20 runs of an hourly canary are most of a day: one bad hour does not
// move the median).
func NewCanaryBaselines(window int) *CanaryBaselines {
	return &CanaryBaselines{window: max(window, 1), runs: map[[2]string][]float64{}}
}

// Observe records one canary run's bus bandwidth (GB/s) if its job's
// verdict was ok; a run that fell back must not pull the baseline down.
func (c *CanaryBaselines) Observe(pool, collective string, busbw float64, verdictOK bool) {
	if !verdictOK || math.IsNaN(busbw) || busbw <= 0 {
		return
	}
	k := [2]string{pool, collective}
	v := append(c.runs[k], busbw)
	if len(v) > c.window {
		v = slices.Delete(v, 0, len(v)-c.window)
	}
	c.runs[k] = v
}

// Baseline returns the median of the pool's recorded runs, false when there
// is none.
func (c *CanaryBaselines) Baseline(pool, collective string) (float64, bool) {
	v := c.runs[[2]string{pool, collective}]
	if len(v) == 0 {
		return 0, false
	}
	return pipeline.Median(v), true
}
