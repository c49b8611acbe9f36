package rules

import (
	"math"
	"testing"
)

func TestCanaryBaselines(t *testing.T) {
	c := NewCanaryBaselines(3)
	if _, ok := c.Baseline("p", "all_reduce_perf"); ok {
		t.Errorf("baseline before any run")
	}
	for _, r := range []struct {
		bus float64
		ok  bool
	}{{300, true}, {355, true}, {40, false}, {356, true}, {354, true}, {math.NaN(), true}} {
		c.Observe("p", "all_reduce_perf", r.bus, r.ok)
	}
	if b, ok := c.Baseline("p", "all_reduce_perf"); !ok || b != 355 {
		t.Errorf("Baseline = %v, %v; want 355 (median of the last 3 ok runs)", b, ok)
	}
}
