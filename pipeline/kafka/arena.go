package kafka

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The native fetch's records are slices of arenas — a fetch response's
// body (uncompressed batches) or a decompressed batch — that are used again
// once every run of records cut from them was released
// (pipeline.Input.Release): a new buffer per batch had the runtime clear
// every byte of it before the decompressor wrote it again (a visible share
// of the load benchmark's CPU profile), and made most of the heap's
// garbage.

// arena is one buffer that records' keys and values are slices of, and
// the count of holders: the partition reader while it decodes the
// response and cuts its batches into chunks, and each chunk queued with
// records of it.
type arena struct {
	buf  []byte
	refs atomic.Int32
	st   *fetchStats // counts it while it lives; nil: nobody
}

// hold adds a holder.
func (a *arena) hold() { a.refs.Add(1) }

// drop removes a holder; the last one's drop gives the buffer back.
func (a *arena) drop() {
	switch n := a.refs.Add(-1); {
	case n == 0:
		if a.st != nil {
			a.st.arenas.Add(-1)
			a.st.arenaBytes.Add(-int64(cap(a.buf)))
		}
		putBuf(a.buf)
		a.buf = nil
	case n < 0:
		panic("kafka: arena released more often than held")
	}
}

// newArena returns an arena of buf with one holder, the caller, counted
// in st (nil: not counted).
func (st *fetchStats) newArena(buf []byte) *arena {
	a := &arena{buf: buf, st: st}
	a.refs.Store(1)
	if st != nil {
		st.arenas.Add(1)
		st.arenaBytes.Add(int64(cap(buf)))
	}
	return a
}

// Pooled buffers come in size classes of powers of two from minPooled to
// maxPooled bytes; a batch larger than that gets a buffer of its own.
const (
	minPooledShift = 16 // 64 KiB
	maxPooledShift = 26 // 64 MiB
)

var bufPools [maxPooledShift - minPooledShift + 1]sync.Pool // of *[]byte

// bufClass returns the class of a buffer for n bytes, or -1 when n is
// over maxPooled.
func bufClass(n int) int {
	if n <= 1<<minPooledShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minPooledShift
	if c >= len(bufPools) {
		return -1
	}
	return c
}

// takeBuf returns an empty buffer with room for n bytes: a pooled one of
// n's class (counted in st, when not nil), or a new one. Its bytes are not
// cleared: what it held before (poisoned in race-enabled builds) is there
// until overwritten.
func (st *fetchStats) takeBuf(n int) []byte {
	c := bufClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if p, _ := bufPools[c].Get().(*[]byte); p != nil {
		if st != nil {
			st.reused.Add(1)
		}
		return (*p)[:0]
	}
	return make([]byte, 0, 1<<(c+minPooledShift))
}

// putBuf pools b when its capacity is exactly a class's (a buffer of its
// own, or one a decompressor grew to another size, is left to the garbage
// collector).
func putBuf(b []byte) {
	c := bufClass(cap(b))
	if c < 0 || cap(b) != 1<<(c+minPooledShift) {
		return
	}
	b = b[:cap(b)]
	if poisonReleased {
		for i := range b {
			b[i] = 0xA5
		}
	}
	bufPools[c].Put(&b)
}

// fetchStats are a Source's fetch counters (Source.Stats).
type fetchStats struct {
	nativeFetches atomic.Int64
	throttled     atomic.Int64
	throttleNanos atomic.Int64
	arenas        atomic.Int64
	arenaBytes    atomic.Int64
	reused        atomic.Int64
}

// Stats are a Source's fetch counters since NewSource.
type Stats struct {
	// NativeFetches counts the fetch responses the native decoder read
	// (Config.FetchDecoder "native"); 0 when kafka-go read them all.
	NativeFetches int64
	// ThrottledFetches counts the fetch responses whose broker asked for a
	// pause (a quota's throttle_time_ms) that the partition reader then
	// kept before its next fetch; ThrottleTime is those pauses' sum.
	ThrottledFetches int64
	ThrottleTime     time.Duration
	// Arenas is the number of buffers (fetch responses, decompressed
	// batches) that delivered records are slices of and that are not
	// released yet; ArenaBytes is their size.
	Arenas, ArenaBytes int64
	// ReusedBuffers counts the buffers taken from the pool instead of
	// allocated.
	ReusedBuffers int64
}

func (st *fetchStats) snapshot() Stats {
	return Stats{
		NativeFetches:    st.nativeFetches.Load(),
		ThrottledFetches: st.throttled.Load(),
		ThrottleTime:     time.Duration(st.throttleNanos.Load()),
		Arenas:           st.arenas.Load(),
		ArenaBytes:       st.arenaBytes.Load(),
		ReusedBuffers:    st.reused.Load(),
	}
}
