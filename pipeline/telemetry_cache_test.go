package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// dropCaches forgets what Add remembers of the last line (job, partition
// fold, open row): the next Add looks every map up.
func (a *TelemetryAssembler) dropCaches() {
	a.lastJob, a.lastFold = nil, nil
	for _, pf := range a.folds {
		pf.hit = nil
	}
}

// stepString prints a row with its series' strings (not the pointer).
func stepString(r *TrainingStep) string {
	row := *r
	row.StepSeries = nil
	return fmt.Sprintf("%+v %+v", row, *r.StepSeries)
}

// TestTelemetryFoldCachesSameAsMaps: the folding with its caches of the
// last line's job, partition fold and open row stores what the map
// lookups alone store, on a random interleaving of jobs, frameworks,
// partitions, kinds and steps, with batch flushes, commit holds, closed
// folds and evictions between lines (the events that drop cache entries).
func TestTelemetryFoldCachesSameAsMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := DefaultTelemetryAssemblerConfig()
	cfg.FoldRecords = 40 // windows end often
	cfg.MaxJobs = 3      // evictions
	cached, plain := NewTelemetryAssembler(cfg, nil), NewTelemetryAssembler(cfg, nil)
	var bc, bp Batch
	jobs := []string{"ns/a", "ns/b", "ns/c", "ns/d"}
	fws := []string{FrameworkDeepSpeed, FrameworkMegatron}
	kinds := []TelemetryKind{TelemetryStep, TelemetryStep, TelemetryStep, TelemetryAmend, TelemetrySummary}
	next := map[int32]int64{}
	job, rows := jobs[0], 0
	compare := func(at int) {
		t.Helper()
		if len(bc.Steps) != len(bp.Steps) {
			t.Fatalf("line %d: %d rows with the caches, %d without", at, len(bc.Steps), len(bp.Steps))
		}
		for i := range bc.Steps {
			if c, p := stepString(&bc.Steps[i]), stepString(&bp.Steps[i]); c != p {
				t.Fatalf("line %d, row %d: %s with the caches; %s without", at, i, c, p)
			}
		}
		rows += len(bc.Steps)
		bc, bp = Batch{}, Batch{}
	}
	for i := range 30000 {
		if rng.IntN(10) == 0 {
			job = jobs[rng.IntN(len(jobs))]
		}
		part := int32(rng.IntN(3))
		src := Source{Topic: "logs", Partition: part, Offset: next[part]}
		next[part]++
		step := int64(i/8 + rng.IntN(2))
		if rng.IntN(20) == 0 {
			step = -1
		}
		tl := stepLine(fws[rng.IntN(len(fws))], step, float64(rng.IntN(5)))
		tl.Kind, tl.Rank = kinds[rng.IntN(len(kinds))], rng.IntN(8)
		meta := &Meta{Job: job[3:], Namespace: "ns", Pod: fmt.Sprint("pod-", rng.IntN(4)), Node: "n"}
		tm := t0.Add(time.Duration(i) * time.Millisecond)
		cached.Add(job, meta, tl, tm, src, &bc)
		plain.dropCaches()
		plain.Add(job, meta, tl, tm, src, &bp)
		switch r := rng.IntN(200); {
		case r < 4:
			compare(i)
		case r < 8:
			n := next[part] + int64(rng.IntN(60))
			hc, okc := cached.Hold("logs", part, n)
			hp, okp := plain.Hold("logs", part, n)
			if hc != hp || okc != okp {
				t.Fatalf("line %d: Hold = %d %v with the caches; %d %v without", i, hc, okc, hp, okp)
			}
		case r < 9:
			sc, okc, errc := cached.Seal("logs", part, next[part])
			sp, okp, errp := plain.Seal("logs", part, next[part])
			if errc != nil || errp != nil || okc != okp || !bytes.Equal(sc.State, sp.State) {
				t.Fatalf("line %d: Seal = %v %v with the caches; %v %v without", i, okc, errc, okp, errp)
			}
		case r < 10:
			cached.Evict(job)
			plain.Evict(job)
		}
	}
	compare(-1)
	if rows < 1000 {
		t.Fatalf("%d rows compared; want many", rows)
	}
	for _, j := range jobs {
		_, c := cached.Report(j)
		_, p := plain.Report(j)
		cj, err1 := json.Marshal(c)
		pj, err2 := json.Marshal(p)
		if err1 != nil || err2 != nil || string(cj) != string(pj) {
			t.Fatalf("Report(%s) = %s (%v) with the caches; %s (%v) without", j, cj, err1, pj, err2)
		}
	}
}
