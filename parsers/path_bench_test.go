package parsers_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The record path's benchmarks run on the load benchmark's stream
// (deploy/local/load.sh): Fluent Bit records of a 2-node job, 5 % NCCL
// lines among the ranks' trainer progress lines and a few warnings.
var mixed struct {
	once  sync.Once
	recs  [][]byte
	bytes int64
}

func mixedRecords(b *testing.B) [][]byte {
	b.Helper()
	mixed.once.Do(func() {
		err := loadtest.Records(1, 0, "train-llm-7b", 0.05, 20000, nil, func(rec []byte) error {
			mixed.recs = append(mixed.recs, append([]byte(nil), rec...))
			mixed.bytes += int64(len(rec))
			return nil
		})
		if err != nil {
			panic(err)
		}
	})
	return mixed.recs
}

// loopRecords runs fn over the stream's records, one per iteration.
func loopRecords(b *testing.B, fn func(rec []byte)) {
	recs := mixedRecords(b)
	b.ReportAllocs()
	b.SetBytes(mixed.bytes / int64(len(recs)))
	i := 0
	cpu := parsers.CPUTime()
	for b.Loop() {
		fn(recs[i])
		if i++; i == len(recs) {
			i = 0
		}
	}
	b.ReportMetric(float64(parsers.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// The cluster shape's records (loadtest.ShapeCluster, Fluent Bit): many
// jobs of many pods interleaved, each job's trainer in its own line format.
var cluster struct {
	once  sync.Once
	recs  [][]byte
	bytes int64
}

func clusterRecords(b *testing.B) [][]byte {
	b.Helper()
	cluster.once.Do(func() {
		cfg := loadtest.DefaultGenConfig()
		cfg.Shape, cfg.Format, cfg.Bytes = loadtest.ShapeCluster, "fluentbit", 16<<20
		var buf bytes.Buffer
		if _, err := loadtest.Generate(&buf, cfg); err != nil {
			panic(err)
		}
		for rec := range bytes.Lines(buf.Bytes()) {
			rec = bytes.TrimSuffix(rec, []byte("\n"))
			cluster.recs = append(cluster.recs, rec)
			cluster.bytes += int64(len(rec))
		}
	})
	return cluster.recs
}

// loopCluster is loopRecords over the cluster shape's records.
func loopCluster(b *testing.B, fn func(rec []byte)) {
	recs := clusterRecords(b)
	b.ReportAllocs()
	b.SetBytes(cluster.bytes / int64(len(recs)))
	i := 0
	cpu := parsers.CPUTime()
	for b.Loop() {
		fn(recs[i])
		if i++; i == len(recs) {
			i = 0
		}
	}
	b.ReportMetric(float64(parsers.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkDecodeCluster decodes the envelope of the cluster shape's
// records: the pods of ~24 jobs interleaved, so their metadata objects
// come round less often than in the mixed stream's two pods.
func BenchmarkDecodeCluster(b *testing.B) { benchDecode(b, loopCluster) }

// BenchmarkRecordPathCluster is BenchmarkRecordPath on the cluster
// shape's records.
func BenchmarkRecordPathCluster(b *testing.B) { benchRecordPath(b, loopCluster) }

// BenchmarkPrefilterMixed is the run loop's prefilter (telemetry on) on
// whole records.
func BenchmarkPrefilterMixed(b *testing.B) {
	pre := parsers.Prefilter(true)
	n := 0
	loopRecords(b, func(rec []byte) {
		if pre(rec) {
			n++
		}
	})
}

// BenchmarkDecodeMixed decodes every record's envelope.
func BenchmarkDecodeMixed(b *testing.B) { benchDecode(b, loopRecords) }

// benchDecode decodes the envelope of every record loop hands it.
func benchDecode(b *testing.B, loop func(*testing.B, func([]byte))) {
	d := parsers.NewDecoder(parsers.DefaultDecoderConfig())
	emit := func(*pipeline.Record) {}
	loop(b, func(rec []byte) {
		if err := d.Decode(rec, emit); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRecordPath is a record's whole parse path in the run loop with
// telemetry on: envelope, the line parser (NCCL and telemetry) and the
// glued-message split of NCCL lines. `run` has no record prefilter with
// telemetry on (cmd/ncclwatch's recordPrefilter; BenchmarkPrefilterMixed
// is what it cost).
func BenchmarkRecordPath(b *testing.B) { benchRecordPath(b, loopRecords) }

// benchRecordPath is the whole parse path of every record loop hands it.
func benchRecordPath(b *testing.B, loop func(*testing.B, func([]byte))) {
	d := parsers.NewDecoder(parsers.DefaultDecoderConfig())
	lines := parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
	var ev pipeline.Event
	var tl pipeline.TelemetryLine
	var nccl, tel int
	emit := func(rec *pipeline.Record) {
		isNCCL, isTel := lines.Line(rec.Text, &ev, &tl)
		if isNCCL {
			nccl++
			lines.NextMessage(rec.Text)
		}
		if isTel {
			tel++
		}
	}
	loop(b, func(rec []byte) {
		if err := d.Decode(rec, emit); err != nil {
			b.Fatal(err)
		}
	})
	if nccl == 0 || tel == 0 {
		b.Fatalf("nccl lines %d, telemetry lines %d; want both", nccl, tel)
	}
}

// BenchmarkFinderMixed is the finders over 1 MiB blocks of a mixed raw
// log (`ncclwatch-load gen`, 5 % NCCL lines among trainer output), as
// scan's search goroutines run them: find a hit, skip to the next line.
// nccl is the NCCL finder (telemetry off; measured 2026-12-01 on the
// development machine: 3.5 GB/s, the finder before its anchor bytes, five
// bytes.Index passes, 0.56 GB/s), telemetry the telemetry finder, which
// finds nine lines in ten of this log.
func BenchmarkFinderMixed(b *testing.B) {
	cfg := loadtest.DefaultGenConfig()
	cfg.Bytes = 32 << 20
	var buf bytes.Buffer
	if _, err := loadtest.Generate(&buf, cfg); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	for _, bc := range []struct {
		name string
		f    *parsers.Finder
	}{{"nccl", &parsers.Finder{}}, {"telemetry", parsers.NewTelemetryFinder()}} {
		b.Run(bc.name, func(b *testing.B) {
			f := bc.f
			b.SetBytes(int64(len(data)))
			hits := 0
			cpu := parsers.CPUTime()
			for b.Loop() {
				hits = 0
				for off := 0; off < len(data); off += 1 << 20 {
					block := data[off:min(off+1<<20, len(data))]
					f.Reset(block)
					for pos := 0; pos < len(block); {
						h := f.Next(pos)
						if h < 0 {
							break
						}
						hits++
						nl := bytes.IndexByte(block[h:], '\n')
						if nl < 0 {
							break
						}
						pos = h + nl + 1
					}
				}
			}
			b.ReportMetric(float64(parsers.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(hits), "hits/op")
		})
	}
}

// BenchmarkLineTrainers is the line parser (telemetry on) on the decoded
// lines of one load-benchmark job per trainer (the load benchmark's jobs
// draw their trainer at random: Megatron-LM, torchtitan, Hugging Face,
// Lightning, DeepSpeed), NCCL lines and the trainers' other output
// included.
func BenchmarkLineTrainers(b *testing.B) {
	trainers := []struct{ name, marker string }{
		{"megatron", "elapsed time per iteration"}, {"torchtitan", "[titan]"}, {"hf", "{'loss'"},
		{"lightning", "Epoch "}, {"deepspeed", "SamplesPerSec"},
	}
	texts := map[string][][]byte{}
	d := parsers.NewDecoder(parsers.DefaultDecoderConfig())
	for j := 0; j < 32 && len(texts) < len(trainers); j++ {
		var lines [][]byte
		err := loadtest.Records(1, j, "train-llm-7b", 0.05, 2000, nil, func(rec []byte) error {
			return d.Decode(rec, func(r *pipeline.Record) { lines = append(lines, bytes.Clone(r.Text)) })
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, tr := range trainers {
			n := 0
			for _, l := range lines {
				if bytes.Contains(l, []byte(tr.marker)) {
					n++
				}
			}
			if n > len(lines)/2 && texts[tr.name] == nil {
				texts[tr.name] = lines
			}
		}
	}
	for _, tr := range trainers {
		lines := texts[tr.name]
		if lines == nil {
			b.Fatalf("no job of the first 32 runs %s", tr.name)
		}
		b.Run(tr.name, func(b *testing.B) {
			l := parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
			var ev pipeline.Event
			var tl pipeline.TelemetryLine
			i := 0
			b.ReportAllocs()
			cpu := parsers.CPUTime()
			for b.Loop() {
				l.Line(lines[i], &ev, &tl)
				if i++; i == len(lines) {
					i = 0
				}
			}
			b.ReportMetric(float64(parsers.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// shapeLogs holds a raw log of each stream shape (`ncclwatch-load gen
// --shape …`), split into lines, for BenchmarkScanShape; each is made
// when a benchmark first asks for it.
var shapeLogs = map[loadtest.Shape]*struct {
	once  sync.Once
	data  []byte
	lines [][]byte
}{loadtest.ShapeDefault: {}, loadtest.ShapeRandomSteps: {}, loadtest.ShapeCluster: {}, loadtest.ShapeClusterInspector: {}}

var benchShapes = []loadtest.Shape{loadtest.ShapeDefault, loadtest.ShapeRandomSteps, loadtest.ShapeCluster, loadtest.ShapeClusterInspector}

func shapeLog(b *testing.B, s loadtest.Shape) ([]byte, [][]byte) {
	b.Helper()
	l := shapeLogs[s]
	l.once.Do(func() {
		cfg := loadtest.DefaultGenConfig()
		cfg.Shape, cfg.Bytes = s, 8<<20
		var buf bytes.Buffer
		if _, err := loadtest.Generate(&buf, cfg); err != nil {
			panic(err)
		}
		l.data = buf.Bytes()
		for line := range bytes.Lines(l.data) {
			l.lines = append(l.lines, bytes.TrimSuffix(line, []byte("\n")))
		}
	})
	return l.data, l.lines
}

// BenchmarkScanShape is the per-line work of `scan` on each shape's raw
// log (8 MiB), one pass over the log per op. tel: telemetry on, where most
// lines hold a token and scan hands every line of a block on
// (pipeline.BlockScanner's dense stretch): the envelope and the line
// parser on every line. nccl: telemetry off, the NCCL finder over 1 MiB
// blocks and the line parser on the lines it finds. ns/line is per line
// of the log either way.
func BenchmarkScanShape(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(string(s)+"/tel", func(b *testing.B) {
			data, lines := shapeLog(b, s)
			d := parsers.NewDecoder(parsers.DefaultDecoderConfig())
			l := parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
			var ev pipeline.Event
			var tl pipeline.TelemetryLine
			var nccl, tel int
			emit := func(rec *pipeline.Record) {
				isNCCL, isTel := l.Line(rec.Text, &ev, &tl)
				if isNCCL {
					nccl++
				}
				if isTel {
					tel++
				}
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			cpu := parsers.CPUTime()
			for b.Loop() {
				for _, line := range lines {
					if err := d.DecodeLine(line, emit); err != nil {
						b.Fatal(err)
					}
					d.Flush(emit)
				}
			}
			b.ReportMetric(float64(parsers.CPUTime()-cpu)/float64(b.N*len(lines)), "cpu-ns/line")
			if nccl == 0 || tel == 0 {
				b.Fatalf("nccl lines %d, telemetry lines %d; want both", nccl, tel)
			}
		})
		b.Run(string(s)+"/nccl", func(b *testing.B) {
			data, lines := shapeLog(b, s)
			f := &parsers.Finder{}
			l := &parsers.Lines{}
			var ev pipeline.Event
			nccl := 0
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			cpu := parsers.CPUTime()
			for b.Loop() {
				for off := 0; off < len(data); off += 1 << 20 {
					block := data[off:min(off+1<<20, len(data))]
					f.Reset(block)
					for pos := 0; pos < len(block); {
						h := f.Next(pos)
						if h < 0 {
							break
						}
						start := bytes.LastIndexByte(block[:h], '\n') + 1
						end := len(block)
						if e := bytes.IndexByte(block[h:], '\n'); e >= 0 {
							end = h + e
						}
						if l.Classify(block[start:end], &ev) {
							nccl++
						}
						pos = end + 1
					}
				}
			}
			b.ReportMetric(float64(parsers.CPUTime()-cpu)/float64(b.N*len(lines)), "cpu-ns/line")
			if nccl == 0 {
				b.Fatal("no NCCL lines")
			}
		})
	}
}
