package kafka

import (
	"math/bits"
	"sync"
	"sync/atomic"
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
}

// hold adds a holder.
func (a *arena) hold() { a.refs.Add(1) }

// drop removes a holder; the last one's drop gives the buffer back.
func (a *arena) drop() {
	switch n := a.refs.Add(-1); {
	case n == 0:
		putBuf(a.buf)
		a.buf = nil
		liveArenas.Add(-1)
	case n < 0:
		panic("kafka: arena released more often than held")
	}
}

// newArena returns an arena of buf with one holder, the caller.
func newArena(buf []byte) *arena {
	a := &arena{buf: buf}
	a.refs.Store(1)
	liveArenas.Add(1)
	return a
}

// liveArenas counts the arenas not given back yet (tests: that holds
// are given back).
var liveArenas atomic.Int64

// Pooled buffers come in size classes of powers of two from minPooled to
// maxPooled bytes; a batch larger than that gets a buffer of its own.
const (
	minPooledShift = 16 // 64 KiB
	maxPooledShift = 26 // 64 MiB
)

var bufPools [maxPooledShift - minPooledShift + 1]sync.Pool // of *[]byte

// pooledTakes counts the buffers takeBuf found in a pool (tests: that
// buffers are used again).
var pooledTakes atomic.Int64

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
// n's class, or a new one. Its bytes are not cleared: what it held before
// (poisoned in race-enabled builds) is there until overwritten.
func takeBuf(n int) []byte {
	c := bufClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if p, _ := bufPools[c].Get().(*[]byte); p != nil {
		pooledTakes.Add(1)
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
