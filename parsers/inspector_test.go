package parsers

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// inspWant is what ParseInspector must read from a record; NaN floats and
// -1 integers are absent figures.
type inspWant struct {
	comm, name, version, host, op, timing string
	rank, nranks, nnodes, peer            int
	pid, dump, sn, bytes                  int64
	exec, alg, bus                        float64
	p2p, verbose                          bool
}

func (w inspWant) String() string { return fmt.Sprintf("%+v", struct{ inspWant }{w}) }

func gotInsp(r *pipeline.CollectiveRecord) inspWant {
	return inspWant{comm: string(r.Comm), name: string(r.CommName), version: string(r.Version), host: string(r.Host),
		op: string(r.Op), timing: string(r.Timing), rank: r.Rank, nranks: r.NRanks, nnodes: r.NNodes, peer: r.Peer,
		pid: r.PID, dump: r.DumpTimeUS, sn: r.SN, bytes: r.Bytes, exec: r.ExecUS, alg: r.AlgBW, bus: r.BusBW,
		p2p: r.P2P, verbose: r.Verbose}
}

func sameFloat(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

func (w inspWant) equal(g inspWant) bool {
	fw, fg := w, g
	fw.exec, fw.alg, fw.bus, fg.exec, fg.alg, fg.bus = 0, 0, 0, 0, 0, 0
	return fw == fg && sameFloat(w.exec, g.exec) && sameFloat(w.alg, g.alg) && sameFloat(w.bus, g.bus)
}

// inspectorCases are the records of testdata/inspector (SOURCES.md: the
// published examples of NVIDIA's READMEs, pretty-printed as published,
// and records derived from the writer's source), with what the writer's
// fields say, written from the source before the parser ran on them.
var inspectorCases = []struct {
	file string
	line int // 0-based line of a .log file; -1: the whole file is one record
	want inspWant
}{
	// README v2.28.3 "Output Example": an older shape (rec_mechanism
	// profiler_plugin, no coll_timing_source).
	{"published_readme_plain_v2.28.3.json", -1, inspWant{comm: "0x7f8c496ae9f661", version: "v4.0", host: "example-hostname",
		op: "AllReduce", rank: 2, nranks: 8, nnodes: 1, peer: -1, pid: 1639453, dump: 1748030377748202, sn: 1407,
		bytes: 17179869184, exec: 61974, alg: 277.210914, bus: 485.119099}},
	{"published_readme_verbose_v2.28.3.json", -1, inspWant{comm: "0xe62dedaa97644a", version: "v4.0", host: "example-hostname",
		op: "ReduceScatter", timing: "kernel_gpu", rank: 4, nranks: 8, nnodes: 1, peer: -1, pid: 438776, dump: 1752867229276385,
		sn: 1231, bytes: 2147483648, exec: 41057, alg: 418.439467, bus: 366.134533, verbose: true}},
	{"published_exporter_v2.28.3.json", -1, inspWant{comm: "0x9e7a479f95a66c", version: "v4.0", host: "example-hostname",
		op: "ReduceScatter", timing: "kernel_gpu", rank: 31, nranks: 32, nnodes: 4, peer: -1, pid: 468528, dump: 1749490229087081,
		sn: 129, bytes: 65536, exec: 110, alg: 19.065018, bus: 18.469236}},
	{"derived_v2.28.3_plain.log", 0, inspWant{comm: "0x4f2a9c31d07e15", version: "v4.0", host: "gpu-node-a", op: "AllReduce",
		timing: "kernel_gpu", rank: 0, nranks: 16, nnodes: 2, peer: -1, pid: 41235, dump: 1764072000123456, sn: 812,
		bytes: 268435456, exec: 1893, alg: 141.804467, bus: 265.883376}},
	{"derived_v2.28.3_plain.log", 1, inspWant{comm: "0x4f2a9c31d07e15", version: "v4.0", host: "gpu-node-b", op: "ReduceScatter",
		timing: "kernel_cpu", rank: 9, nranks: 16, nnodes: 2, peer: -1, pid: 51877, dump: 1764072000124001, sn: 813,
		bytes: 33554432, exec: 402, alg: 83.469731, bus: 78.252873}},
	// jsonDouble writes a NaN as the string "nan".
	{"derived_v2.28.3_plain.log", 2, inspWant{comm: "0x4f2a9c31d07e15", version: "v4.0", host: "gpu-node-a", op: "AllGather",
		timing: "collective_cpu", rank: 0, nranks: 16, nnodes: 2, peer: -1, pid: 41235, dump: 1764072000125100, sn: 814,
		bytes: 0, exec: 0, alg: nan, bus: nan}},
	{"derived_v2.28.3_verbose.log", 0, inspWant{comm: "0x4f2a9c31d07e15", version: "v4.0", host: "gpu-node-a", op: "AllReduce",
		timing: "kernel_gpu", rank: 0, nranks: 16, nnodes: 2, peer: -1, pid: 41235, dump: 1764072001000000, sn: 900,
		bytes: 1073741824, exec: 7551, alg: 142.196066, bus: 266.617624, verbose: true}},
	{"derived_v2.30.3_plain.log", 0, inspWant{comm: "0x4f2a9c31d07e15", name: "DP Group 0", version: "v4.0", host: "gpu-node-a",
		op: "AllReduce", timing: "kernel_gpu", rank: 0, nranks: 16, nnodes: 2, peer: -1, pid: 41235, dump: 1764072002000000,
		sn: 1000, bytes: 268435456, exec: 1893, alg: 141.804467, bus: 265.883376}},
	{"derived_v2.30.3_plain.log", 1, inspWant{comm: "0x1c9e07d3b2a4f8", name: "unknown", version: "v4.0", host: "gpu-node-a",
		op: "Send", timing: "kernel_gpu", rank: 0, nranks: 16, nnodes: 2, peer: 8, pid: 41235, dump: 1764072002000500,
		sn: 17, bytes: 536870912, exec: 1154, alg: 465.225126, bus: 465.225126, p2p: true}},
	{"derived_v2.30.3_verbose.log", 0, inspWant{comm: "0x1c9e07d3b2a4f8", name: "PP Group 1", version: "v4.0", host: "gpu-node-b",
		op: "Recv", timing: "kernel_gpu", rank: 9, nranks: 16, nnodes: 2, peer: 1, pid: 51877, dump: 1764072003000000,
		sn: 18, bytes: 536870912, exec: 1170, alg: 458.86312, bus: 458.86312, p2p: true, verbose: true}},
	{"derived_v2.30.3_verbose.log", 1, inspWant{comm: "0x4f2a9c31d07e15", name: "DP Group 0", version: "v4.0", host: "gpu-node-a",
		op: "AllGather", timing: "kernel_gpu", rank: 0, nranks: 16, nnodes: 2, peer: -1, pid: 41235, dump: 1764072003000100,
		sn: 1001, bytes: 134217728, exec: 1021, alg: 131.456342, bus: 123.240321, verbose: true}},
}

func inspectorInput(t testing.TB, file string, line int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "inspector", file))
	if err != nil {
		t.Fatal(err)
	}
	if line < 0 {
		return b
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if line >= len(lines) {
		t.Fatalf("%s has %d lines", file, len(lines))
	}
	return lines[line]
}

// TestParseInspector parses each record twice with the same value (no
// state may leak from one record to the next) and checks every field,
// then through the one line parser, as run reads a dump file's line.
func TestParseInspector(t *testing.T) {
	var r pipeline.CollectiveRecord
	lines := NewLines(NewTelemetry(DefaultTelemetryConfig()))
	for _, c := range inspectorCases {
		in := inspectorInput(t, c.file, c.line)
		for range 2 {
			if err := ParseInspector(in, &r); err != nil {
				t.Fatalf("%s:%d: ParseInspector = %v", c.file, c.line, err)
			}
			if got := gotInsp(&r); !c.want.equal(got) {
				t.Errorf("%s:%d: ParseInspector =\n %v\nwant\n %v", c.file, c.line, got, c.want)
			}
		}
		if c.line < 0 {
			continue // pretty-printed: never one line of a dump file
		}
		var ev pipeline.Event
		var tl pipeline.TelemetryLine
		tl.Reset()
		nccl, tel := lines.Line(in, &ev, &tl)
		if nccl || !tel || tl.Kind != pipeline.TelemetryCollective || !c.want.equal(gotInsp(&tl.Coll)) {
			t.Errorf("%s:%d: Lines.Line = nccl %v telemetry %v kind %s %v; want a collective %v", c.file, c.line, nccl, tel, tl.Kind,
				gotInsp(&tl.Coll), c.want)
		}
		if !allSet.contains(in) {
			t.Errorf("%s:%d: no finder token in the record", c.file, c.line)
		}
		// The finder property (FuzzFinderCovers) on the record and on it
		// with its token cut: then no parser may take it.
		checkFinderCovers(t, in)
		checkFinderCovers(t, bytes.ReplaceAll(in, []byte("busbw"), []byte("bus_bw")))
	}
}

// TestParseInspectorRejects: what is not a whole, well-formed record is an
// error, each of its kind, and leaves no field set.
func TestParseInspectorRejects(t *testing.T) {
	good := string(inspectorInput(t, "derived_v2.28.3_plain.log", 0))
	cases := []struct {
		name, in string
		want     error
	}{
		{"step line", `{"step": 5, "step_time": 1.5}`, ErrNotInspector},
		{"no perf object", `{"header":{"id":"0x1","rank":0},"metadata":{}}`, ErrNotInspector},
		{"cut short", good[:len(good)/2], ErrInspectorRecord},
		{"trailing bytes", good + `}`, ErrInspectorRecord},
		{"no busbw", strings.Replace(good, `"coll_busbw_gbs"`, `"coll_other"`, 1), ErrInspectorRecord},
		{"no id", strings.Replace(good, `"id"`, `"di"`, 1), ErrInspectorRecord},
		{"string size", strings.Replace(good, `"coll_msg_size_bytes":268435456`, `"coll_msg_size_bytes":"268435456"`, 1), ErrInspectorRecord},
		{"deep", `{"header":{"id":"0x1","x":[[[[[[[[[[1]]]]]]]]]]},"coll_perf":{}}`, ErrInspectorRecord},
		{"too long", `{"header":{"id":"` + strings.Repeat("a", MaxInspectorRecord) + `"}}`, ErrInspectorTooLong},
	}
	var r pipeline.CollectiveRecord
	for _, c := range cases {
		err := ParseInspector([]byte(c.in), &r)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: ParseInspector = %v; want %v", c.name, err, c.want)
		}
	}
	var ev pipeline.Event
	var tl pipeline.TelemetryLine
	tl.Reset()
	if _, tel := NewLines(NewTelemetry(DefaultTelemetryConfig())).Line([]byte(good[:len(good)-2]), &ev, &tl); tel {
		t.Errorf("a record cut short is a telemetry line of kind %s", tl.Kind)
	}
}

// FuzzParseInspector: no input panics; an accepted record holds the finder
// token "busbw" (so the finder finds every record the parser takes),
// gives a communicator, an operation and a size, parses the same again,
// and is accepted by the line parser as a collective.
func FuzzParseInspector(f *testing.F) {
	for _, c := range inspectorCases {
		f.Add(inspectorInput(f, c.file, c.line))
	}
	lines := NewLines(NewTelemetry(DefaultTelemetryConfig()))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 2*MaxInspectorRecord {
			return
		}
		var r, again pipeline.CollectiveRecord
		if ParseInspector(b, &r) != nil {
			return
		}
		if !bytes.Contains(b, []byte("busbw")) || !allSet.contains(b) {
			t.Fatalf("accepted %q without the finder token", b)
		}
		if len(r.Comm) == 0 || len(r.Op) == 0 || r.Bytes < 0 {
			t.Fatalf("accepted %q without comm, op or size: %+v", b, r)
		}
		if err := ParseInspector(b, &again); err != nil || !gotInsp(&r).equal(gotInsp(&again)) {
			t.Fatalf("second parse of %q: %v %+v; first %+v", b, err, again, r)
		}
		if bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\r') < 0 && bytes.IndexByte(b, 0x1b) < 0 {
			var ev pipeline.Event
			var tl pipeline.TelemetryLine
			tl.Reset()
			if _, tel := lines.Line(b, &ev, &tl); !tel || tl.Kind != pipeline.TelemetryCollective {
				t.Fatalf("Lines.Line(%q) = telemetry %v kind %s; want a collective", b, tel, tl.Kind)
			}
		}
	})
}

func BenchmarkParseInspector(b *testing.B) {
	for _, c := range inspectorCases {
		if c.line < 0 {
			continue
		}
		in := inspectorInput(b, c.file, c.line)
		b.Run(fmt.Sprintf("%s:%d", c.file, c.line), func(b *testing.B) {
			var r pipeline.CollectiveRecord
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if err := ParseInspector(in, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestInspectorFluentBitRecord: a record as deploy/fluent-bit/inspector.conf
// sends it (the dump line as "message", the job and namespace its path
// names, the node) decodes to the dump line itself, which parses, with the
// job's metadata.
func TestInspectorFluentBitRecord(t *testing.T) {
	line := inspectorInput(t, "derived_v2.30.3_plain.log", 0)
	rec := []byte(`{"@timestamp":1764072002.5,"message":` + strconv.Quote(string(line)) +
		`,"inspector_file":"/var/log/nccl-inspector/ml/llm-70b/gpu-node-a-pid41235.log","job":"llm-70b",` +
		`"kubernetes":{"namespace_name":"ml","host":"gpu-node-a"},"cluster":"gpu-east-1"}`)
	dec := NewDecoder(DefaultDecoderConfig())
	var got []pipeline.Record
	err := dec.Decode(rec, func(r *pipeline.Record) {
		c := *r
		c.Text = append([]byte(nil), r.Text...)
		if r.Meta != nil {
			m := *r.Meta
			c.Meta = &m
		}
		got = append(got, c)
	})
	dec.Flush(func(*pipeline.Record) {})
	if err != nil || len(got) != 1 {
		t.Fatalf("Decode = %v, %d records; want one", err, len(got))
	}
	r := got[0]
	if !bytes.Equal(r.Text, line) {
		t.Errorf("text = %q; want the dump line", r.Text)
	}
	if r.Meta == nil || r.Meta.Job != "llm-70b" || r.Meta.Namespace != "ml" || r.Meta.Node != "gpu-node-a" || r.Meta.Cluster != "gpu-east-1" {
		t.Errorf("meta = %+v; want job llm-70b, namespace ml, node gpu-node-a, cluster gpu-east-1", r.Meta)
	}
	var c pipeline.CollectiveRecord
	if err := ParseInspector(r.Text, &c); err != nil || string(c.CommName) != "DP Group 0" {
		t.Errorf("ParseInspector = %v, %q", err, c.CommName)
	}
}
