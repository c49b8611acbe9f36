package main

import (
	"bytes"
	"testing"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// benchInput generates a seeded mixed stream (5 % NCCL lines among trainer
// output) once per format.
func benchInput(b *testing.B, format string) []byte {
	b.Helper()
	cfg := loadtest.DefaultGenConfig()
	cfg.RandomSteps = true // the stream of the README's benchmark figures
	cfg.Bytes = 32 << 20
	cfg.Format = format
	var buf bytes.Buffer
	if _, err := loadtest.Generate(&buf, cfg); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func benchScan(b *testing.B, format string) {
	in := benchInput(b, format)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := newScanner(pipeline.Expectation{}, 64<<10)
		if err := s.read("bench", bytes.NewReader(in), int64(len(in))); err != nil {
			b.Fatal(err)
		}
		if res := s.result(); res.Summary.Verdict != pipeline.VerdictOK {
			b.Fatalf("verdict %s", res.Summary.Verdict)
		}
	}
}

// BenchmarkScanMixedRaw is the whole scan path on raw text.
func BenchmarkScanMixedRaw(b *testing.B) { benchScan(b, "raw") }

// BenchmarkScanMixedFluentBit is the whole scan path on Fluent Bit JSON.
func BenchmarkScanMixedFluentBit(b *testing.B) { benchScan(b, "fluentbit") }
