package pipeline_test

import (
	"context"
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
		Candidate: parsers.Prefilter(true), Sink: sink, Logger: zerolog.Nop(),
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
