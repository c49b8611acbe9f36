package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"time"
)

// heapProfileEvery is how often the live heap is read for
// NCCLWATCH_HEAPPROFILE: the runtime updates it once per collection, which
// comes far more often than this under load.
const heapProfileEvery = 100 * time.Millisecond

// underHeapProfile runs fn while, when the environment variable env names a
// file, a goroutine keeps in it the heap profile of the largest live heap
// seen (after a collection): what a bound on memory has to hold, where a
// profile at exit shows what is left.
func underHeapProfile(env string, fn func() int) int {
	file := os.Getenv(env)
	if file == "" {
		return fn()
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		var peak uint64
		var buf bytes.Buffer
		tick := time.NewTicker(heapProfileEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			metrics.Read(sample)
			live := sample[0].Value.Uint64()
			if live <= peak+peak/64 {
				continue
			}
			peak = live
			buf.Reset()
			if err := pprof.Lookup("heap").WriteTo(&buf, 0); err == nil {
				err = os.WriteFile(file, buf.Bytes(), 0o644)
				if err != nil {
					fmt.Fprintf(os.Stderr, "ncclwatch: %s: %v\n", env, err)
					return
				}
			}
		}
	}()
	code := fn()
	close(done)
	<-stopped
	return code
}
