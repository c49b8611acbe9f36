package pipeline

import (
	"math"
	"slices"
)

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
	s := sampler{vals: v}
	return s.median(), true
}
