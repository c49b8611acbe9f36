package pipeline

import (
	"context"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	ctx := context.Background()
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
		if !b.Wait(ctx) {
			t.Fatal("Wait = false with a live context")
		}
	}
	want := []time.Duration{1, 2, 4, 5, 5}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("pauses = %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != time.Millisecond {
		t.Fatalf("Next after Reset = %v, want 1ms", d)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	slow := Backoff{Min: time.Hour, Max: time.Hour}
	start := time.Now()
	if slow.Wait(cancelled) {
		t.Fatal("Wait = true with a cancelled context")
	}
	if time.Since(start) > time.Minute || slow.Next() != time.Hour {
		t.Fatalf("cancelled Wait slept or doubled: next %v", slow.Next())
	}
}
