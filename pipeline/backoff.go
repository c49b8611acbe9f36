package pipeline

import (
	"context"
	"time"
)

// Backoff paces the retries of one operation: the first Wait sleeps Min,
// each next one twice the one before, at most Max. The zero value of the
// pause state is ready to use; set Min and Max (Max >= Min > 0).
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// Next returns the pause the next Wait sleeps.
func (b *Backoff) Next() time.Duration {
	if b.next <= 0 {
		return b.Min
	}
	return b.next
}

// Wait sleeps the next pause, then doubles it (up to Max); it reports
// false, without doubling, when ctx ends first.
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.Next()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*d, b.Max)
	return true
}

// Reset makes the next Wait sleep Min again: the operation succeeded.
func (b *Backoff) Reset() { b.next = 0 }
