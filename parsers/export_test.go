package parsers

import (
	"bytes"
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

// IndexFinder is the NCCL finder as it was before finderAnchors, one
// bytes.Index pass per finder token: BenchmarkFinderMixed's baseline.
type IndexFinder struct {
	block []byte
	next  [len(finderTokens)]int
}

// Reset starts a new block.
func (f *IndexFinder) Reset(block []byte) {
	f.block = block
	for i := range f.next {
		f.next[i] = -2
	}
}

// Next is Finder.Next.
func (f *IndexFinder) Next(from int) int {
	best := -1
	for i, tok := range finderTokens {
		n := f.next[i]
		if n == -1 {
			continue
		}
		if n < from {
			n = -1
			for at := from; at < len(f.block); at++ {
				j := bytes.Index(f.block[at:], tok)
				if j < 0 {
					break
				}
				if at += j; plausibleAt(i, f.block, at) {
					n = at
					break
				}
			}
			f.next[i] = n
			if n < 0 {
				continue
			}
		}
		if best < 0 || n < best {
			best = n
		}
	}
	return best
}
