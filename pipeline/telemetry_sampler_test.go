package pipeline

import "testing"

// TestSamplerHoldsItsLimit: a sampler's values never take more room than
// its limit, and its median stays that of the stream (here 0..n-1).
func TestSamplerHoldsItsLimit(t *testing.T) {
	for _, limit := range []int{2, 3, 100, 4096} {
		var s sampler
		s.init(limit)
		n := 10*limit + 7
		for i := range n {
			s.add(float64(i))
			if cap(s.vals) > limit {
				t.Fatalf("limit %d: capacity %d after %d values", limit, cap(s.vals), i+1)
			}
		}
		if m, want := s.median(), float64(n-1)/2; limit >= 100 && (m < want*0.9 || m > want*1.1) {
			t.Errorf("limit %d: median %v of 0..%d; want about %v", limit, m, n-1, want)
		}
	}
}
