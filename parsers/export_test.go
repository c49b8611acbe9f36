package parsers

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime is the process's user and system CPU time. The benchmarks report
// it per operation beside ns/op (ReportCPU): on a machine shared with other
// work, wall time per operation overstates the cost, CPU time does not.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs fn b.N times and reports its CPU time per operation.
func loopCPU(b *testing.B, fn func()) {
	b.ReportAllocs()
	cpu := CPUTime()
	for b.Loop() {
		fn()
	}
	b.ReportMetric(float64(CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// HoldsProgressMarker and ProgressMarkers let the external tests check the
// generic reader's gate against the markers it stands for.
var (
	HoldsProgressMarker = holdsProgressMarker
	ProgressMarkers     = progressMarkers[:]
)
