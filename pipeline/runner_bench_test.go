package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// BenchmarkRunnerMixed is the run loop's CPU per record without Kafka and
// ClickHouse: the load benchmark's stream (deploy/local/load.sh; 5 % NCCL
// lines among trainer progress lines, Fluent Bit records) through
// Runner.Message in the default configuration (telemetry on), batches
// handed to a sink that keeps nothing.
func BenchmarkRunnerMixed(b *testing.B) {
	var recs [][]byte
	var size int64
	err := loadtest.Records(1, 0, "train-llm-7b", 0.05, 20000, nil, func(rec []byte) error {
		recs = append(recs, append([]byte(nil), rec...))
		size += int64(len(rec))
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	var steps int
	sink := pipeline.ConsumerFunc(func(_ context.Context, bt *pipeline.Batch) error {
		steps += len(bt.Steps)
		return nil
	})
	dcfg := parsers.DefaultDecoderConfig()
	lines := parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
	r := pipeline.NewRunner(pipeline.DefaultRunnerConfig(), pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: lines,
		Sink: sink, Logger: zerolog.Nop(),
	})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	b.SetBytes(size / int64(len(recs)))
	i, off := 0, int64(0)
	cpu := cpuTime()
	for b.Loop() {
		if err := r.Message(ctx, pipeline.Message{Topic: "logs", Offset: off, Key: []byte("train-llm-7b"), Value: recs[i], Time: now}); err != nil {
			b.Fatal(err)
		}
		off++
		if i++; i == len(recs) {
			i = 0
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	if err := r.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if steps == 0 {
		b.Fatal("no training_steps rows")
	}
}

// cpuTime is the process's user and system CPU time. The benchmark reports
// it per record beside ns/op: on a machine shared with other work, wall
// time per operation overstates the cost, CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunLoop is the run loop through Run, as the Kafka source feeds
// it: the load benchmark's stream (8 jobs, 5 % NCCL lines among trainer
// progress lines, Fluent Bit records) on 8 partitions, in runs of 256
// records of one partition (Input.Messages) round-robin over them, in the
// default configuration but for parse_workers, batches handed to a sink
// that keeps nothing. rec/s is wall-clock records per second, cpu-ns/op
// the process's CPU per record (both cores, every goroutine).
func BenchmarkRunLoop(b *testing.B) {
	const parts, perJob, run = 8, 5000, 256
	recs := make([][][]byte, parts)
	for j := range parts {
		err := loadtest.Records(1, j, loadtest.JobName("bench", j), 0.05, perJob, nil, func(rec []byte) error {
			recs[j] = append(recs[j], append([]byte(nil), rec...))
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("parse_workers=%d", workers), func(b *testing.B) {
			var steps atomic.Int64
			sink := pipeline.ConsumerFunc(func(_ context.Context, bt *pipeline.Batch) error {
				steps.Add(int64(len(bt.Steps)))
				return nil
			})
			cfg := pipeline.DefaultRunnerConfig()
			cfg.ParseWorkers = workers
			dcfg := parsers.DefaultDecoderConfig()
			newLines := func() pipeline.Classifier {
				return parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
			}
			r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
				NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) },
				Classifier: newLines(), NewClassifier: newLines,
				Sink: sink, Logger: zerolog.Nop(),
			})
			now := time.Now()
			// The runs are built before the clock starts: the source's
			// work is not the loop's.
			var inputs []pipeline.Input
			next := make([]int64, parts)
			keys := make([][]byte, parts)
			for p := range keys {
				keys[p] = []byte(loadtest.JobName("bench", p))
			}
			for n := 0; n < b.N; {
				for p := 0; p < parts && n < b.N; p++ {
					k := min(run, b.N-n)
					ms := make([]pipeline.Message, k)
					for i := range ms {
						off := next[p]
						ms[i] = pipeline.Message{Topic: "logs", Partition: int32(p), Offset: off,
							Key: keys[p], Value: recs[p][off%perJob], Time: now}
						next[p]++
					}
					inputs = append(inputs, pipeline.Input{Messages: ms})
					n += k
				}
			}
			in := make(chan pipeline.Input, 2)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu := time.Now(), cpuTime()
			go func() {
				for _, x := range inputs {
					in <- x
				}
				close(in)
			}()
			if err := r.Run(context.Background(), in); err != nil {
				b.Fatal(err)
			}
			wall := time.Since(start)
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(b.N)/wall.Seconds(), "rec/s")
			if b.N > 10000 && steps.Load() == 0 {
				b.Fatal("no training_steps rows")
			}
		})
	}
}
