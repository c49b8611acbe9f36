package sinks

import (
	"context"
	"fmt"
	"math"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// loadBatch is a batch shaped like the load benchmark's (deploy/local/
// load.sh): about 40 k rows a second of a 3 M-record stream, 32 000
// training steps and 7 500 NCCL events over 64 jobs and 8 partitions.
func loadBatch(t0 time.Time) *pipeline.Batch {
	const jobs, parts = 64, 8
	b := &pipeline.Batch{}
	for i := range 32000 {
		j := i % jobs
		job := fmt.Sprintf("load-j%04d", j)
		st := pipeline.TrainingStep{
			Source: pipeline.Source{Topic: "ncclwatch-load-0123abcd", Partition: int32(i % parts), Offset: int64(i), Line: 0},
			Time:   t0.Add(time.Duration(i) * time.Millisecond), Job: job, Namespace: "ml-team", Cluster: "load",
			Pod: job + "-worker-3", Node: "gpu-node-017", Pool: "h100", Model: "llama-70b", Framework: "megatron",
			Kind: "step", Rank: i % 32, Step: int64(i / jobs), Ranks: 4, Network: "IB", NetworkClass: "rdma",
			StepTime: 1.25, TokensPerS: 51234.5, SamplesPerS: math.NaN(), ItPerS: math.NaN(), TFLOPs: 412.3, MFU: 41.7, Loss: 2.345,
		}
		b.Steps = append(b.Steps, st)
	}
	for i := range 7500 {
		j := i % jobs
		job := fmt.Sprintf("load-j%04d", j)
		b.Events = append(b.Events, pipeline.EventRow{
			Source: pipeline.Source{Topic: "ncclwatch-load-0123abcd", Partition: int32(i % parts), Offset: int64(100000 + i)},
			Time:   t0.Add(time.Duration(i) * time.Millisecond), Job: job, Namespace: "ml-team", Cluster: "load",
			Pod: job + "-worker-3", Container: "trainer", Node: "gpu-node-017", Host: "gpu-node-017", PID: "4242", Dev: i % 8, Rank: i % 32,
			Kind: "channel", Line: "gpu-node-017:4242:4300 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/IPC/read comm 0x1f2e3d4c5b6a7988 nRanks 32",
		})
	}
	b.Offsets = []pipeline.Offset{{Topic: "ncclwatch-load-0123abcd", Partition: 0, Next: 40000}}
	return b
}

// BenchmarkClickHouseConsume stores a load-shaped batch (two inserts) into
// the test server per iteration. cpu-ms/op is this process's CPU: the
// sink's and the driver's work (columns, encoding, compression), not the
// server's.
func BenchmarkClickHouseConsume(b *testing.B) {
	cfg := DefaultClickHouseConfig()
	cfg.Addr = []string{benchAddr(b)}
	cfg.Database = fmt.Sprintf("ncclwatch_bench_%d", time.Now().UnixNano())
	c, err := NewClickHouse(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	defer func() { _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.Database) }()
	if _, err := c.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	batch := loadBatch(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	cpu0 := processCPU()
	for b.Loop() {
		if err := c.Consume(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

func benchAddr(b *testing.B) string {
	b.Helper()
	addr := os.Getenv("NCCLWATCH_TEST_CLICKHOUSE")
	if addr == "" {
		b.Skip("NCCLWATCH_TEST_CLICKHOUSE not set")
	}
	return addr
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
