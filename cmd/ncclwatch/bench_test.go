package main

import (
	"bytes"
	"testing"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// benchStream generates 32 MB of a seeded mixed stream (5 % NCCL lines
// among trainer output): random steps and trainers per line, or
// (randomSteps false) one trainer whose ranks print every step, as
// `ncclwatch-load gen` writes it.
func benchStream(b *testing.B, format string, randomSteps bool) []byte {
	b.Helper()
	cfg := loadtest.DefaultGenConfig()
	cfg.RandomSteps = randomSteps
	cfg.Bytes = 32 << 20
	cfg.Format = format
	var buf bytes.Buffer
	if _, err := loadtest.Generate(&buf, cfg); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// benchScan scans the random-steps stream, the stream of the README's
// first benchmark figures, without telemetry.
func benchScan(b *testing.B, format string) { benchScanOf(b, benchStream(b, format, true), false) }

// benchScanOf scans in per iteration, with telemetry or without.
func benchScanOf(b *testing.B, in []byte, telemetry bool) {
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := newScanner(pipeline.Expectation{}, 64<<10, nil, telemetry)
		if err := s.read("bench", bytes.NewReader(in), int64(len(in))); err != nil {
			b.Fatal(err)
		}
		res := s.result()
		if res.Summary.Verdict != pipeline.VerdictOK {
			b.Fatalf("verdict %s", res.Summary.Verdict)
		}
		if telemetry && len(res.Training) == 0 {
			b.Fatal("telemetry on, but no training series")
		}
	}
}

// BenchmarkScanMixedRaw is the whole scan path on raw text.
func BenchmarkScanMixedRaw(b *testing.B) { benchScan(b, "raw") }

// BenchmarkScanMixedFluentBit is the whole scan path on Fluent Bit JSON.
func BenchmarkScanMixedFluentBit(b *testing.B) { benchScan(b, "fluentbit") }

// BenchmarkScanTelemetryRaw is the whole scan path with telemetry on (scan
// --telemetry on) on raw text of a Hugging Face trainer whose ranks print
// every step: the stream of README's "Where scan stands now", in memory.
func BenchmarkScanTelemetryRaw(b *testing.B) { benchScanOf(b, benchStream(b, "raw", false), true) }
