package sinks

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/compress"
	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// loadBatch is a batch shaped like the load benchmark's (deploy/local/
// load.sh): about 40 k rows a second of a 3 M-record stream, 32 000
// training steps and 7 500 NCCL events over 64 jobs and 8 partitions.
func loadBatch(t0 time.Time) *pipeline.Batch {
	const jobs, parts = 64, 8
	b := &pipeline.Batch{}
	series := make([]*pipeline.StepSeries, jobs)
	for i := range 32000 {
		j := i % jobs
		job := fmt.Sprintf("load-j%04d", j)
		if series[j] == nil {
			// The rows of a series share it, as the assembler's do.
			series[j] = &pipeline.StepSeries{Job: job, Namespace: "ml-team", Cluster: "load", Pod: job + "-worker-3",
				Node: "gpu-node-017", Pool: "h100", Model: "llama-70b", Framework: "megatron", Kind: "step", Network: "IB",
				NetworkClass: "rdma"}
			series[j].Series = pipeline.SeriesKey(series[j])
		}
		st := pipeline.TrainingStep{
			Source: pipeline.Source{Topic: "ncclwatch-load-0123abcd", Partition: int32(i % parts), Offset: int64(i), Line: 0},
			Time:   t0.Add(time.Duration(i) * time.Millisecond), StepSeries: series[j], Rank: i % 32, Step: int64(i / jobs),
			Ranks: 4, StepTime: 1.25, TokensPerS: 51234.5, SamplesPerS: math.NaN(), ItPerS: math.NaN(), TFLOPs: 412.3,
			MFU: 41.7, Loss: 2.345,
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

// benchSink is a sink on a fresh, migrated database of the test server,
// dropped when the benchmark ends.
func benchSink(b *testing.B) *ClickHouse {
	b.Helper()
	cfg := DefaultClickHouseConfig()
	cfg.Addr = []string{benchAddr(b)}
	cfg.Database = fmt.Sprintf("ncclwatch_bench_%d", time.Now().UnixNano())
	c, err := NewClickHouse(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.Database)
		c.Close()
	})
	if _, err := c.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkClickHouseConsume stores a load-shaped batch (two inserts) into
// the test server per iteration. cpu-ms/op is this process's CPU: the
// sink's and the driver's work (columns, encoding, compression), not the
// server's.
func BenchmarkClickHouseConsume(b *testing.B) {
	c := benchSink(b)
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

// stepSeriesRows are the eleven per-series strings of 100 000
// training_steps rows shaped like the cluster stream: 24 jobs running at
// once, 8 pods each, the rows of one series sharing their strings as the
// pipeline's rows do.
func stepSeriesRows() [][]string {
	const n = 100000
	rows := make([][]string, n)
	series := map[int][]string{}
	for i := range rows {
		j, p := i%24, (i/24)%8
		k := j*8 + p
		if r, ok := series[k]; ok {
			rows[i] = r
			continue
		}
		job := fmt.Sprintf("cl-job-%04d", j)
		r := []string{job, "ml-team", "prod-east", fmt.Sprintf("%s-worker-%d", job, p), fmt.Sprintf("gpu-node-%03d", k),
			"h100-pool", "llama-70b", "megatron", "step", "IB", "rdma"}
		series[k], rows[i] = r, r
	}
	return rows
}

// benchStepStrings encodes and compresses the per-series strings of
// stepSeriesRows as the driver sends them in an insert, one column of
// type typ per string: the client's share of what a stored step's
// constant strings cost. cpu-ns/row is this process's CPU.
func benchStepStrings(b *testing.B, typ string) {
	rows := stepSeriesRows()
	vals := make([]string, len(rows))
	w := compress.NewWriter(compress.LevelZero, compress.LZ4)
	var size int
	cpu0 := processCPU()
	for b.Loop() {
		var buf chproto.Buffer
		for c := range rows[0] {
			col, err := column.Type(typ).Column("c", nil)
			if err != nil {
				b.Fatal(err)
			}
			for j := range rows {
				vals[j] = rows[j][c]
			}
			if _, err := col.Append(vals); err != nil {
				b.Fatal(err)
			}
			if s, ok := col.(column.CustomSerialization); ok {
				if err := s.WriteStatePrefix(&buf); err != nil {
					b.Fatal(err)
				}
			}
			col.Encode(&buf)
		}
		size = len(buf.Buf)
		for off := 0; off < len(buf.Buf); off += 1 << 20 {
			if err := w.Compress(buf.Buf[off:min(off+1<<20, len(buf.Buf))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(size)/float64(len(rows)), "B/row")
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*len(rows)), "cpu-ns/row")
}

// BenchmarkStepStrings compares the ways of sending a stored step's
// per-series strings (docs/performance.md, "The cost of a stored step"):
// String columns (18.16), LowCardinality(String) columns through the
// driver's generic path (newer servers), and one UInt64 series key
// hashed from the strings per row (a dimension table).
func BenchmarkStepStrings(b *testing.B) {
	b.Run("String", func(b *testing.B) { benchStepStrings(b, "String") })
	b.Run("LowCardinality", func(b *testing.B) { benchStepStrings(b, "LowCardinality(String)") })
	// The key hashed from the strings for every row (an upper bound),
	// and carried by the row from where its series was made.
	b.Run("SeriesKeyHashed", func(b *testing.B) { benchSeriesKey(b, true) })
	b.Run("SeriesKey", func(b *testing.B) { benchSeriesKey(b, false) })
}

func benchSeriesKey(b *testing.B, hashEach bool) {
	rows := stepSeriesRows()
	keys := make([]uint64, len(rows))
	h := fnv.New64a()
	hash := func(r []string) uint64 {
		h.Reset()
		for _, v := range r {
			io.WriteString(h, v)
			h.Write([]byte{0})
		}
		return h.Sum64()
	}
	made := make([]uint64, len(rows))
	for j, r := range rows {
		made[j] = hash(r)
	}
	w := compress.NewWriter(compress.LevelZero, compress.LZ4)
	cpu0 := processCPU()
	for b.Loop() {
		col, err := column.Type("UInt64").Column("series", nil)
		if err != nil {
			b.Fatal(err)
		}
		for j, r := range rows {
			if hashEach {
				keys[j] = hash(r)
			} else {
				keys[j] = made[j]
			}
		}
		if _, err := col.Append(keys); err != nil {
			b.Fatal(err)
		}
		var buf chproto.Buffer
		col.Encode(&buf)
		if err := w.Compress(buf.Buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(8, "B/row")
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*len(rows)), "cpu-ns/row")
}

// BenchmarkClickHouseCollectives stores 40 000 collective_perf rows (the
// cluster-inspector stream gives ~100 k per million records), each with
// eight-bucket histograms, into the test server per iteration; cpu-ms/op
// is this process's CPU.
func BenchmarkClickHouseCollectives(b *testing.B) {
	c := benchSink(b)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	batch := &pipeline.Batch{}
	hist := pipeline.Hist{Buckets: []uint8{180, 181, 182, 183, 184, 185, 186, 187}, Counts: []uint32{1, 2, 3, 4, 4, 3, 2, 1}}
	for i := range 40000 {
		job := fmt.Sprintf("load-j%04d", i%24)
		batch.Collectives = append(batch.Collectives, pipeline.CollectivePerf{
			Source: pipeline.Source{Topic: "ncclwatch-load-0123abcd", Partition: int32(i % 8), Offset: int64(i)},
			Minute: t0, Job: job, Namespace: "ml-team", Cluster: "load", Pod: job + "-worker-3", Node: "gpu-node-017",
			Pool: "h100", Host: "gpu-node-017", CommID: "0x4f2a9c31d07e15", Op: "AllReduce", SizeBucket: 1 << (10 + i%20),
			NRanks: 64, NNodes: 8, Count: 20, BusBWMin: 200, BusBWMax: 260, BusBWSum: 4600, BusBWP50: 230,
			ExecUSMin: 100, ExecUSMax: 900, ExecUSSum: 9000, ExecUSP50: 450, ExecUSP99: math.NaN(),
			BusBWHist: hist, ExecHist: hist,
		})
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if err := c.Consume(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
