package parsers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// line is what a test keeps of one emitted record.
type line struct {
	Text   string
	Time   time.Time
	Stream string
	Meta   *pipeline.Meta
	Line   int32
}

func (l line) String() string {
	m := "nil"
	if l.Meta != nil {
		m = fmt.Sprintf("%+v", *l.Meta)
	}
	return fmt.Sprintf("{%q %s %q %s line %d}", l.Text, l.Time.Format(time.RFC3339Nano), l.Stream, m, l.Line)
}

func sameLine(a, b line) bool {
	if a.Text != b.Text || !a.Time.Equal(b.Time) || a.Stream != b.Stream || a.Line != b.Line {
		return false
	}
	if (a.Meta == nil) != (b.Meta == nil) {
		return false
	}
	if a.Meta == nil {
		return true
	}
	x, y := *a.Meta, *b.Meta
	return x.Job == y.Job && x.Namespace == y.Namespace && x.Pod == y.Pod && x.Container == y.Container &&
		x.Node == y.Node && x.Cluster == y.Cluster && maps.Equal(x.Labels, y.Labels)
}

// run decodes records in order, then flushes, and returns what came out.
func run(d *Decoder, records []string) (got []line, errs []error, envs []Envelope) {
	return runWith(d, records, d.Decode)
}

// runWith is run decoding each record with decode (d.Decode or
// d.DecodeLine).
func runWith(d *Decoder, records []string, decode func([]byte, func(*pipeline.Record)) error) (got []line, errs []error, envs []Envelope) {
	collect := func(r *pipeline.Record) {
		got = append(got, line{string(r.Text), r.Time, r.Stream, r.Meta, r.Source.Line})
	}
	for _, rec := range records {
		errs = append(errs, decode([]byte(rec), collect))
		envs = append(envs, d.Last())
	}
	d.Flush(collect)
	return got, errs, envs
}

// TestDecodeLine checks DecodeLine against Decode on every decode case
// whose records hold no newline (partial CRI and Docker lines in progress,
// oversized lines and the lines dropped after one included), twice with
// the same decoders.
func TestDecodeLine(t *testing.T) {
	n := 0
	cri := "2016-10-06T00:17:09.669794202Z stdout "
	extra := []decodeCase{
		{name: "raw line over the cap", max: 16, records: []string{"short", strings.Repeat("x", 40), "after"}},
		{name: "raw line after a dropped partial line", max: 16,
			records: []string{cri + "P " + strings.Repeat("y", 40), "raw line", cri + "F tail"}},
	}
	for _, tc := range append(extra, decodeCases...) {
		if slices.ContainsFunc(tc.records, func(r string) bool { return strings.Contains(strings.TrimSuffix(r, "\n"), "\n") }) {
			continue
		}
		n++
		cfg := DefaultDecoderConfig()
		if tc.max > 0 {
			cfg.MaxLineBytes = tc.max
		}
		d, dl := NewDecoder(cfg), NewDecoder(cfg)
		for pass := range 2 {
			got, errs, envs := run(d, tc.records)
			lgot, lerrs, lenvs := runWith(dl, tc.records, dl.DecodeLine)
			if !reflect.DeepEqual(got, lgot) || fmt.Sprint(errs) != fmt.Sprint(lerrs) || !slices.Equal(envs, lenvs) {
				t.Errorf("%s, pass %d: DecodeLine gives %v, %v, %v; Decode %v, %v, %v", tc.name, pass, lgot, lerrs, lenvs, got, errs, envs)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d cases without a newline inside a record", n)
	}
}

var (
	tsDocker   = time.Date(2017, 10, 2, 6, 29, 1, 228472527, time.UTC)
	tsFluent   = time.Date(2026, 11, 29, 15, 0, 0, 123456789, time.UTC)
	tsCRI      = time.Date(2016, 10, 6, 0, 17, 9, 669794202, time.UTC)
	tsEpoch    = time.Unix(1732890000, 123456000).UTC()
	metaWorker = &pipeline.Meta{
		Namespace: "ml", Pod: "job-worker-0", Container: "pytorch", Node: "node-a1",
		Labels: map[string]string{"training.kubeflow.org/job-name": "llm-7b", "training.kubeflow.org/replica-index": "0"},
	}
)

// fluentBitRecord is what Fluent Bit's Kafka output (Format json) writes for
// a Docker-runtime container: text is the JSON-escaped log line.
func fluentBitRecord(text string) string {
	return `{"@timestamp":1732890000.123456,"log":"` + text + `\n","stream":"stdout",` +
		`"time":"2026-11-29T15:00:00.123456789Z","kubernetes":{"pod_name":"job-worker-0",` +
		`"namespace_name":"ml","pod_id":"4f3c2a8e-9b1d-4c6e-a2f0-7d5b3e1c9a84","labels":{` +
		`"training.kubeflow.org/job-name":"llm-7b","training.kubeflow.org/replica-index":"0"},` +
		`"annotations":{"kubectl.kubernetes.io/default-container":"pytorch"},"host":"node-a1",` +
		`"container_name":"pytorch","docker_id":"8a1f9c2e4b7d","container_hash":` +
		`"nvcr.io/nvidia/pytorch@sha256:3e5f","container_image":"nvcr.io/nvidia/pytorch:24.05-py3"}}`
}

type decodeCase struct {
	name    string
	max     int
	records []string
	want    []line
	errs    []error    // per record; missing entries mean nil
	reasons []string   // per record, for ErrMalformed; missing entries skip the check
	envs    []Envelope // per record; nil skips the check
	invalid []int      // InvalidUTF8 count after each pass (metadata is repaired once, then cached)
}

var decodeCases = []decodeCase{
	{
		name:    "raw 016 NCCL line",
		records: []string{"ps-SYS-420GP-TNR:1697707:1697707 [0] NCCL INFO Bootstrap : Using eno1:192.168.223.11<0>"},
		want:    []line{{Text: "ps-SYS-420GP-TNR:1697707:1697707 [0] NCCL INFO Bootstrap : Using eno1:192.168.223.11<0>"}},
		envs:    []Envelope{EnvelopeRaw},
	},
	{
		name:    "raw 012 line ending in CR",
		records: []string{"myles-MC62-G40-00:6742:6769 [3] NCCL INFO Channel 00/0 : 3[3] -> 2[2] via P2P/direct pointer\r"},
		want:    []line{{Text: "myles-MC62-G40-00:6742:6769 [3] NCCL INFO Channel 00/0 : 3[3] -> 2[2] via P2P/direct pointer"}},
	},
	{
		name:    "raw 083 blank line",
		records: []string{""},
		want:    []line{{Text: ""}},
	},
	{
		name:    "raw 021 message value holding several lines",
		records: []string{"\n26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"},
		want: []line{
			{Text: ""},
			{Text: "26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]", Line: 1},
		},
	},
	{
		name:    "docker json-file public example (NCCL-FORMATS.md §12.4)",
		records: []string{`{"log":"PING 8.8.8.8 (8.8.8.8): 56 data bytes\n","stream":"stdout","time":"2017-10-02T06:29:01.228472527Z"}`},
		want:    []line{{Text: "PING 8.8.8.8 (8.8.8.8): 56 data bytes", Time: tsDocker, Stream: "stdout"}},
		envs:    []Envelope{EnvelopeDocker},
	},
	{
		name:    "docker 021 WARN on stderr",
		records: []string{`{"log":"26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n","stream":"stderr","time":"2017-10-02T06:29:01.228472527Z"}`},
		want:    []line{{Text: "26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]", Time: tsDocker, Stream: "stderr"}},
		envs:    []Envelope{EnvelopeDocker},
	},
	{
		name: "docker line split into partial records",
		records: []string{
			`{"log":"nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Channel 00/08 :    0   7   6   5","stream":"stdout","time":"2017-10-02T06:29:01.228472527Z"}`,
			`{"log":"   4   3   2   1   8  15  14  13","stream":"stdout","time":"2017-10-02T06:29:02Z"}`,
			`{"log":"  12  11  10   9\n","stream":"stdout","time":"2017-10-02T06:29:03Z"}`,
		},
		want: []line{{
			Text: "nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Channel 00/08 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9",
			Time: tsDocker, Stream: "stdout",
		}},
		envs: []Envelope{EnvelopeDocker, EnvelopeDocker, EnvelopeDocker},
	},
	{
		name:    "fluent bit kafka json (brief example, 082 line)",
		records: []string{fluentBitRecord("nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Using network AWS Libfabric")},
		want:    []line{{Text: "nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Using network AWS Libfabric", Time: tsFluent, Stream: "stdout", Meta: metaWorker}},
		envs:    []Envelope{EnvelopeFluentBit},
	},
	{
		name:    "fluent bit message, date, cluster and job",
		records: []string{`{"date":1732890000.123456,"message":"NCCL version 2.18.5+cuda11.8","cluster":"gke-a3","job":"llm-7b"}`},
		want:    []line{{Text: "NCCL version 2.18.5+cuda11.8", Time: tsEpoch, Meta: &pipeline.Meta{Cluster: "gke-a3", Job: "llm-7b"}}},
		envs:    []Envelope{EnvelopeFluentBit},
	},
	{
		name: "fluent bit escapes",
		records: []string{`{"log":"q\"b\\s\/t\tu\u00e9 r\ud83d\ude80 lone\ud800x \u003cb\u003e\r\n","kubernetes":{"pod_name":"p\u00f6d",` +
			`"labels":{"app.kubernetes.io\/name":"n\"q","n":1}}}`},
		want: []line{{Text: "q\"b\\s/t\tué r🚀 lone\uFFFDx <b>", Meta: &pipeline.Meta{Pod: "pöd",
			Labels: map[string]string{"app.kubernetes.io/name": "n\"q"}}}},
	},
	{
		name:    "fluent bit multiline log value",
		records: []string{`{"log":"Enabled NCCL Func/Proto/Algo Matrix:\n     Function |       LL     LL128    Simple   |\n","@timestamp":1732890000.123456}`},
		want: []line{
			{Text: "Enabled NCCL Func/Proto/Algo Matrix:", Time: tsEpoch},
			{Text: "     Function |       LL     LL128    Simple   |", Time: tsEpoch, Line: 1},
		},
	},
	{
		name: "fluent bit cri parser keeps _p",
		records: []string{
			`{"time":"2016-10-06T00:17:09.669794202Z","stream":"stdout","_p":"P","log":"node-a:1:1 [0] NCCL INFO "}`,
			`{"time":"2016-10-06T00:17:10Z","stream":"stdout","_p":"F","log":"Using network IB"}`,
			`{"time":"2016-10-06T00:17:09.669794202Z","stream":"stdout","_p":"F","log":"node-a:1:1 [0] NCCL INFO Init COMPLETE"}`,
		},
		want: []line{
			{Text: "node-a:1:1 [0] NCCL INFO Using network IB", Time: tsCRI, Stream: "stdout"},
			{Text: "node-a:1:1 [0] NCCL INFO Init COMPLETE", Time: tsCRI, Stream: "stdout"},
		},
		envs: []Envelope{EnvelopeFluentBit, EnvelopeFluentBit, EnvelopeFluentBit},
	},
	{
		name: "fluent bit classic cri regex parser: logtag and message",
		records: []string{
			`{"time":"2016-10-06T00:17:09.669794202Z","stream":"stderr","logtag":"P","message":"node-a:1:1 [0] NCCL INFO "}`,
			`{"time":"2016-10-06T00:17:10Z","stream":"stderr","logtag":"F","message":"Using network Socket"}`,
		},
		want: []line{{Text: "node-a:1:1 [0] NCCL INFO Using network Socket", Time: tsCRI, Stream: "stderr"}},
		envs: []Envelope{EnvelopeFluentBit, EnvelopeFluentBit},
	},
	{
		name:    "cri full line",
		records: []string{"2016-10-06T00:17:09.669794202Z stdout F node013:37715:38896 [0] NCCL INFO NET/IB : No device found."},
		want:    []line{{Text: "node013:37715:38896 [0] NCCL INFO NET/IB : No device found.", Time: tsCRI, Stream: "stdout"}},
		envs:    []Envelope{EnvelopeCRI},
	},
	{
		name: "cri partial lines joined",
		records: []string{
			"2016-10-06T00:17:09.669794202Z stderr P node-a:1:1 [0] transport/net_ib.cc:12",
			"2016-10-06T00:17:10.000000000Z stderr P  NCCL WARN NET/IB :",
			"2016-10-06T00:17:11.000000000+02:00 stderr F  Got completion with error 12",
		},
		want: []line{{Text: "node-a:1:1 [0] transport/net_ib.cc:12 NCCL WARN NET/IB : Got completion with error 12", Time: tsCRI, Stream: "stderr"}},
		envs: []Envelope{EnvelopeCRI, EnvelopeCRI, EnvelopeCRI},
	},
	{
		name:    "cri empty line and zone offset",
		records: []string{"2025-05-16T16:39:51.208-07:00 stdout F"},
		want:    []line{{Text: "", Time: time.Date(2025, 5, 16, 23, 39, 51, 208000000, time.UTC), Stream: "stdout"}},
	},
	{
		name:    "013 cloudwatch row is not cri",
		records: []string{"2025-05-16T16:39:51.208-07:00 | ip-10-36-29-253:79:79 [0] NCCL INFO cudaDriverVersion 12040"},
		want:    []line{{Text: "2025-05-16T16:39:51.208-07:00 | ip-10-36-29-253:79:79 [0] NCCL INFO cudaDriverVersion 12040"}},
		envs:    []Envelope{EnvelopeRaw},
	},
	{
		name:    "json without log or message is a dead letter",
		records: []string{`{"level":"info","msg":"NCCL_DEBUG=INFO"}`, `{}`, ` [ {"log":"in an array\n"} ]`, `[]`},
		errs:    []error{ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed},
		reasons: []string{ReasonJSONNoText, ReasonJSONNoText, ReasonJSONNoText, ReasonJSONNoText},
		envs:    []Envelope{EnvelopeRaw, EnvelopeRaw, EnvelopeRaw, EnvelopeRaw},
	},
	{
		// The fault-injection run's "lognum" poison: the NCCL line inside
		// must not be found by reading the record as text.
		name: "log that is not a string is a dead letter",
		records: []string{
			`{"level":"info","log":5}`,
			`{"log":12,"message":"chaos-0 [0] NCCL INFO Using network Socket","kubernetes":{"pod_name":"chaos-poison-lognum-0000"}}`,
			`{"log":null}`, `{"log":{"nested":"no"},"message":"m"}`, `{"message":["x"]}`, `{"log":true}`,
		},
		errs:    []error{ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed},
		reasons: []string{ReasonJSONType, ReasonJSONType, ReasonJSONType, ReasonJSONType, ReasonJSONType, ReasonJSONType},
	},
	{
		name: "truncated json is a dead letter",
		records: []string{
			`{"log":"cut off}`, `{"log":"chaos-1 [0] NCCL INFO Using network Socket\n","kubernetes":{"pod_name":"p`,
			`{`, ` [ `, `{"log":`, `{"log":"x\n"`, `{"log":"x\n",`, `{"log":"x\n","a":tr`, `{"log":"x\n","a":-12.`,
			`{"log":"x\u00`, `{"log":"x\`, `[{"log":"x\n"}`, `{"log":"x\n","a":[1,`,
		},
		errs: []error{ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed,
			ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed},
		reasons: []string{ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated,
			ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated,
			ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated, ReasonJSONTruncated},
	},
	{
		name: "invalid json is a dead letter",
		records: []string{`{"log":"x\n",}`, `{"log":"bad \x escape\n"}`, `{"log":"ok\n"} {}`, `{"log":"x\n","a":trve}`,
			`{"log":"x\n" "a":1}`, `{"log":"x\u00zz"}`, `[{"a":1} 2]`, `{"log":"ok\n"}`},
		want:    []line{{Text: "ok"}},
		errs:    []error{ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, nil},
		reasons: []string{ReasonJSONSyntax, ReasonJSONSyntax, ReasonJSONSyntax, ReasonJSONSyntax, ReasonJSONSyntax, ReasonJSONSyntax, ReasonJSONSyntax},
	},
	{
		name: "control bytes in json strings are a dead letter",
		records: []string{"{\"log\":\"chaos [0] NCCL INFO\x00Using network Socket\\n\"}", "{\"log\":\"tab\there\\n\"}",
			"{\"log\":\"x\\n\",\"kubernetes\":{\"pod_name\":\"p\x01\"}}", "{\"lo\x1fg\":\"x\\n\"}",
			"{\"log\":\"escaped \\u0000 is fine\\n\",\n\t\"stream\":\"stdout\"}\r"},
		want:    []line{{Text: "escaped \x00 is fine", Stream: "stdout"}},
		errs:    []error{ErrMalformed, ErrMalformed, ErrMalformed, ErrMalformed, nil},
		reasons: []string{ReasonJSONControl, ReasonJSONControl, ReasonJSONControl, ReasonJSONControl},
	},
	{
		name: "invalid utf-8 in json strings is replaced",
		records: []string{"{\"log\":\"a\xffb\xc3\\n\",\"kubernetes\":{\"pod_name\":\"p\xfe\"}}",
			// A character split between two Docker partial records is whole again.
			"{\"log\":\"euro \xe2\x82\",\"stream\":\"stdout\"}", "{\"log\":\"\xac sign\\n\",\"stream\":\"stdout\"}",
			"{\"log\":\"fine \xc3\xa9\\n\"}"},
		want: []line{{Text: "a\uFFFDb\uFFFD", Meta: &pipeline.Meta{Pod: "p\uFFFD"}}, {Text: "euro € sign", Stream: "stdout"},
			{Text: "fine é"}},
		envs:    []Envelope{EnvelopeFluentBit, EnvelopeDocker, EnvelopeDocker, EnvelopeDocker},
		invalid: []int{2, 3},
	},
	{
		name: "text that starts like json is raw text",
		records: []string{
			"{'loss': 0.392, 'grad_norm': 0.14998817443847656, 'epoch': 0.85, 'step': 8500}",
			"[rank0]:costa-671b-5-worker-1:382:675 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
			"[1,0]<stdout>:nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Using network AWS Libfabric",
			"[2026-04-28 14:14:49] t-20260428141043-cmz7n-worker-0:2341:3 [3] NCCL INFO Init COMPLETE",
			"{ hostname: gpu-1 } NCCL INFO \xff raw bytes stay",
		},
		want: []line{
			{Text: "{'loss': 0.392, 'grad_norm': 0.14998817443847656, 'epoch': 0.85, 'step': 8500}"},
			{Text: "[rank0]:costa-671b-5-worker-1:382:675 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"},
			{Text: "[1,0]<stdout>:nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Using network AWS Libfabric"},
			{Text: "[2026-04-28 14:14:49] t-20260428141043-cmz7n-worker-0:2341:3 [3] NCCL INFO Init COMPLETE"},
			{Text: "{ hostname: gpu-1 } NCCL INFO \xff raw bytes stay"},
		},
		envs: []Envelope{EnvelopeRaw, EnvelopeRaw, EnvelopeRaw, EnvelopeRaw, EnvelopeRaw},
	},
	{
		name:    "skipped values of every kind",
		records: []string{` { "a" : [1, -2.5e3, 0.5E+2, true, false, null, {"b": [ ], "c": {}}], "d": "\"}\\" , "log" : "x\n" } `},
		want:    []line{{Text: "x"}},
		envs:    []Envelope{EnvelopeFluentBit},
	},
	{
		name:    "duplicate keys: the last wins",
		records: []string{`{"log":"a\n","log":"b\n"}`, `{"log":5,"log":"c\n"}`},
		want:    []line{{Text: "b"}, {Text: "c"}},
	},
	{
		name: "time preferred over @timestamp, bad times ignored",
		records: []string{
			`{"@timestamp":1,"log":"a\n","time":"2017-10-02T06:29:01.228472527Z"}`,
			`{"@timestamp":"2016-10-06T00:17:09.669794202Z","log":"b\n","time":"yesterday"}`,
			`{"log":"c\n","time":"2017-02-30T06:29:01Z","date":1e3}`,
			`{"log":"d\n","time":12.5}`,
		},
		want: []line{
			{Text: "a", Time: tsDocker}, {Text: "b", Time: tsCRI}, {Text: "c", Time: time.Unix(1000, 0)},
			{Text: "d", Time: time.Unix(12, 5e8)},
		},
	},
	{
		name:    "other stream names kept",
		records: []string{`{"log":"x\n","stream":"custom"}`, `{"log":"y\n","stream":"custom"}`},
		want:    []line{{Text: "x", Stream: "custom"}, {Text: "y", Stream: "custom"}},
	},
	{
		name: "partial line flushed by a record from another pod",
		records: []string{
			`{"log":"pod-a partial","kubernetes":{"pod_name":"a"}}`,
			`{"log":"pod-b line\n","kubernetes":{"pod_name":"b"}}`,
		},
		want: []line{
			{Text: "pod-a partial", Meta: &pipeline.Meta{Pod: "a"}},
			{Text: "pod-b line", Meta: &pipeline.Meta{Pod: "b"}, Line: 1},
		},
	},
	{
		name: "partial line flushed by a raw record and at the end",
		records: []string{
			`{"log":"docker partial","stream":"stdout"}`,
			"raw line",
			"2016-10-06T00:17:09.669794202Z stdout P cri partial",
		},
		want: []line{
			{Text: "docker partial", Stream: "stdout"},
			{Text: "raw line", Line: 1},
			{Text: "cri partial", Time: tsCRI, Stream: "stdout"},
		},
	},
	{
		name:    "oversized raw line",
		max:     16,
		records: []string{"0123456789abcdefX", "0123456789abcdef", "a\n0123456789abcdefX", "0123456789abcdef\r"},
		want:    []line{{Text: "0123456789abcdef"}, {Text: "0123456789abcdef"}},
		errs:    []error{ErrOversized, nil, ErrOversized, nil},
	},
	{
		name: "oversized joined line is dropped to its end",
		max:  8,
		records: []string{
			`{"log":"abcde"}`,
			`{"log":"fghij"}`,
			`{"log":"klm"}`,
			`{"log":"no\n"}`,
			`{"log":"ok\n"}`,
			`{"log":"12345678\n"}`,
		},
		want: []line{{Text: "ok"}, {Text: "12345678"}},
		errs: []error{nil, ErrOversized, ErrOversized, ErrOversized, nil, nil},
	},
}

func TestDecode(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultDecoderConfig()
			var invalid count
			cfg.InvalidUTF8 = &invalid
			if tc.max > 0 {
				cfg.MaxLineBytes = tc.max
			}
			d := NewDecoder(cfg)
			// Twice with the same decoder, to catch state left behind.
			for pass := range 2 {
				got, errs, envs := run(d, tc.records)
				for i, err := range errs {
					var want error
					if i < len(tc.errs) {
						want = tc.errs[i]
					}
					if want == nil && err != nil || want != nil && !errors.Is(err, want) {
						t.Errorf("pass %d: Decode(%q) error = %v; want %v", pass, tc.records[i], err, want)
					}
					var me *MalformedError
					if i < len(tc.reasons) && (!errors.As(err, &me) || me.Reason != tc.reasons[i]) {
						t.Errorf("pass %d: Decode(%q) error = %v; want reason %s", pass, tc.records[i], err, tc.reasons[i])
					}
				}
				want := 0
				if tc.invalid != nil {
					want = tc.invalid[pass]
				}
				if int(invalid) != want {
					t.Errorf("pass %d: InvalidUTF8 counted %d; want %d", pass, invalid, want)
				}
				if tc.envs != nil && !equalEnvs(envs, tc.envs) {
					t.Errorf("pass %d: Last() = %v; want %v", pass, envs, tc.envs)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("pass %d: Decode(%q) = %v; want %v", pass, tc.records, got, tc.want)
				}
				for i := range got {
					if !sameLine(got[i], tc.want[i]) {
						t.Errorf("pass %d: Decode(%q) line %d = %v; want %v", pass, tc.records, i, got[i], tc.want[i])
					}
				}
			}
		})
	}
}

// count is a Counter.
type count int

func (c *count) Inc() { *c++ }

func equalEnvs(a, b []Envelope) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDecodeMetaShared(t *testing.T) {
	d := NewDecoder(DefaultDecoderConfig())
	var metas []*pipeline.Meta
	collect := func(r *pipeline.Record) { metas = append(metas, r.Meta) }
	for _, rec := range []string{
		fluentBitRecord("a"),
		fluentBitRecord("b"),
		`{"log":"c\n","kubernetes":{"pod_name":"other"}}`,
		fluentBitRecord("d"),
	} {
		if err := d.Decode([]byte(rec), collect); err != nil {
			t.Fatal(err)
		}
	}
	if len(metas) != 4 || metas[0] != metas[1] || metas[0] != metas[3] || metas[0] == metas[2] {
		t.Errorf("Meta pointers %p; want records 0, 1, 3 to share one and 2 to differ", metas)
	}
	if metas[0].Labels["training.kubeflow.org/job-name"] != "llm-7b" || metas[2].Pod != "other" {
		t.Errorf("Meta %+v, %+v: wrong content", *metas[0], *metas[2])
	}
}

// TestDecodeMetaManyPods: records of more pods than the decoder keeps
// valid objects for, round after round, each with the same object under
// two top-level job names, always get the metadata of their own pod and
// job (the valid slots are overwritten, and their metadata with them).
func TestDecodeMetaManyPods(t *testing.T) {
	d := NewDecoder(DefaultDecoderConfig())
	var got *pipeline.Meta
	collect := func(r *pipeline.Record) { got = r.Meta }
	for round := range 3 {
		for p := range 2*validSlots + 3 {
			for _, job := range []string{"j2", "j1", "j2"} {
				rec := fmt.Sprintf(`{"log":"x\n","job":%q,"kubernetes":{"pod_name":"pod-%d","namespace_name":"ns","labels":{"n":"%d"}}}`, job, p, p)
				if err := d.Decode([]byte(rec), collect); err != nil {
					t.Fatal(err)
				}
				if got == nil || got.Pod != fmt.Sprintf("pod-%d", p) || got.Job != job || got.Labels["n"] != fmt.Sprint(p) {
					t.Fatalf("round %d, pod %d, job %s: Meta %+v", round, p, job, got)
				}
			}
		}
	}
}

// TestDecodeMetaSlotRefilled: a record whose "kubernetes" object is
// followed by more object members than the valid table holds refills the
// object's slot in the same record; its metadata is still its own, and a
// later record whose object is one of those members gets that member's.
func TestDecodeMetaSlotRefilled(t *testing.T) {
	d := NewDecoder(DefaultDecoderConfig())
	var got *pipeline.Meta
	collect := func(r *pipeline.Record) { got = r.Meta }
	// Objects longer than validPrefix: their set does not depend on
	// what follows them.
	pad := strings.Repeat("p", validPrefix)
	var b strings.Builder
	fmt.Fprintf(&b, `{"log":"x\n","kubernetes":{"pod_name":"a","pad":%q}`, pad)
	for i := range 5 * validSlots {
		fmt.Fprintf(&b, `,"f%d":{"pod_name":"f%d","pad":%q}`, i, i, pad)
	}
	b.WriteString("}")
	for pass := range 2 {
		if err := d.Decode([]byte(b.String()), collect); err != nil {
			t.Fatal(err)
		}
		if got == nil || got.Pod != "a" {
			t.Fatalf("pass %d: Meta %+v; want pod a", pass, got)
		}
		// Newest first: the member that took the object's slot is among
		// the newest of its set, met before an older one refills it.
		for i := 5*validSlots - 1; i >= 0; i-- {
			rec := fmt.Sprintf(`{"log":"x\n","kubernetes":{"pod_name":"f%d","pad":%q}}`, i, pad)
			if err := d.Decode([]byte(rec), collect); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("f%d", i); got == nil || got.Pod != want {
				t.Fatalf("pass %d: Meta %+v; want pod %s", pass, got, want)
			}
		}
	}
}

func TestDecoderConfig(t *testing.T) {
	if err := DefaultDecoderConfig().Validate(); err != nil {
		t.Errorf("DefaultDecoderConfig().Validate() = %v", err)
	}
	for _, tc := range []struct {
		cfg  DecoderConfig
		want string
	}{
		{DecoderConfig{MaxLineBytes: 0}, "max_line_bytes: must be > 0"},
		{DecoderConfig{MaxLineBytes: -1}, "max_line_bytes: must be > 0"},
		{DecoderConfig{MaxLineBytes: 1 << 31}, "max_line_bytes: must be <= 1073741824"},
	} {
		if err := tc.cfg.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v.Validate() = %v; want %q", tc.cfg, err, tc.want)
		}
	}
	// A zero config still decodes, with the default cap.
	d := NewDecoder(DecoderConfig{})
	long := strings.Repeat("x", defaultMaxLineBytes)
	if err := d.Decode([]byte(long), func(*pipeline.Record) {}); err != nil {
		t.Errorf("Decode of a %d-byte line with a zero config: %v", len(long), err)
	}
}

func TestEnvelopeString(t *testing.T) {
	for e, want := range []string{"raw", "fluent-bit", "docker", "cri"} {
		if got := Envelope(e).String(); got != want {
			t.Errorf("Envelope(%d).String() = %q; want %q", e, got, want)
		}
	}
	if got := Envelope(9).String(); got != "envelope(9)" {
		t.Errorf("Envelope(9).String() = %q", got)
	}
}

// benchLines are real NCCL lines (082, EFA on p4d) to wrap in envelopes.
var benchLines = []string{
	"nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Channel 00/08 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9",
	"nccl-tests-efa-worker-0:27:72 [1] NCCL INFO Setting affinity for GPU 1 to ff,ffff0000,00ffffff",
	"nccl-tests-efa-worker-0:28:69 [2] NCCL INFO Channel 01 : 2[201c0] -> 7[a01d0] via P2P/IPC/read",
	"nccl-tests-efa-worker-0:33:73 [6] NCCL INFO Channel 03 : 15[a01d0] -> 6[a01c0] [receive] via NET/AWS Libfabric/3/GDRDMA",
	"nccl-tests-efa-worker-1:25:25 [0] NCCL INFO NET/OFI Selected Provider is efa",
	"nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric",
	"nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->7 [2] 1/-1/-1->0->7 [3] 1/-1/-1->0->7",
	"nccl-tests-efa-worker-1:28:28 [3] NCCL INFO Bootstrap : Using eth0:172.31.77.37<0>",
}

func benchRecords(wrap func(string) string) [][]byte {
	recs := make([][]byte, len(benchLines))
	for i, l := range benchLines {
		recs[i] = []byte(wrap(l))
	}
	return recs
}

func benchDecode(b *testing.B, recs [][]byte) {
	d := NewDecoder(DefaultDecoderConfig())
	n := 0
	for _, r := range recs {
		n += len(r)
	}
	emit := func(r *pipeline.Record) {
		if len(r.Text) == 0 {
			b.Fatal("empty line")
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(n / len(recs)))
	i := 0
	for b.Loop() {
		if err := d.Decode(recs[i], emit); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(recs) {
			i = 0
		}
	}
}

func BenchmarkDecodeFluentBit(b *testing.B) { benchDecode(b, benchRecords(fluentBitRecord)) }

func BenchmarkDecodeDocker(b *testing.B) {
	benchDecode(b, benchRecords(func(l string) string {
		return `{"log":"` + l + `\n","stream":"stdout","time":"2017-10-02T06:29:01.228472527Z"}`
	}))
}

func BenchmarkDecodeCRI(b *testing.B) {
	benchDecode(b, benchRecords(func(l string) string { return "2016-10-06T00:17:09.669794202Z stdout F " + l }))
}

func BenchmarkDecodeRaw(b *testing.B) {
	benchDecode(b, benchRecords(func(l string) string { return l }))
}

func TestDecodeAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs [][]byte
	}{
		{"fluent-bit", benchRecords(fluentBitRecord)},
		{"docker", benchRecords(func(l string) string {
			return `{"log":"` + l + `\n","stream":"stdout","time":"2017-10-02T06:29:01.228472527Z"}`
		})},
		{"cri", benchRecords(func(l string) string { return "2016-10-06T00:17:09.669794202Z stdout F " + l })},
		{"raw", benchRecords(func(l string) string { return l })},
		{"escaped", [][]byte{[]byte(`{"log":"a \"quoted\" \u00e9 line\n","stream":"stdout"}`)}},
		{"partial", [][]byte{[]byte(`{"log":"part one, "}`), []byte(`{"log":"part two\n"}`)}},
	} {
		d := NewDecoder(DefaultDecoderConfig())
		emit := func(*pipeline.Record) {}
		decodeAll := func() {
			for _, r := range tc.recs {
				if err := d.Decode(r, emit); err != nil {
					t.Fatal(err)
				}
			}
		}
		decodeAll() // warm up buffers and the metadata cache
		if allocs := testing.AllocsPerRun(100, decodeAll); allocs != 0 {
			t.Errorf("%s: Decode allocates %.1f times per run in steady state; want 0", tc.name, allocs)
		}
	}
}

// TestDecodeZeroCopy checks that text without escapes other than the final
// "\n" is not copied: Record.Text points into the record.
func TestDecodeZeroCopy(t *testing.T) {
	for _, rec := range [][]byte{
		[]byte(fluentBitRecord("nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric")),
		[]byte(`{"log":"nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric\n","stream":"stdout"}`),
		[]byte("2016-10-06T00:17:09.669794202Z stdout F nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric"),
		[]byte("nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric"),
	} {
		d := NewDecoder(DefaultDecoderConfig())
		n := 0
		err := d.Decode(rec, func(r *pipeline.Record) {
			n++
			if !aliases(rec, r.Text) || len(r.Text) == 0 {
				t.Errorf("Decode(%q) Text %q is a copy; want it to point into the record", rec, r.Text)
			}
		})
		if err != nil || n != 1 {
			t.Errorf("Decode(%q) = %v after %d lines; want 1 line", rec, err, n)
		}
	}
}

// expectLines is what a decoder must emit for decoded text: one line per
// "\n"-separated piece, a final "\n" ending the last one, "\r" trimmed.
func expectLines(text string) []string {
	text = strings.TrimSuffix(text, "\n")
	out := strings.Split(text, "\n")
	for i, l := range out {
		out[i] = strings.TrimSuffix(l, "\r")
	}
	return out
}

func texts(d *Decoder, rec []byte) ([]string, error) {
	var out []string
	collect := func(r *pipeline.Record) {
		out = append(out, string(r.Text))
	}
	err := d.Decode(rec, collect)
	d.Flush(collect)
	return out, err
}

// fuzzMaxRecord caps fuzz inputs well under the default MaxLineBytes.
const fuzzMaxRecord = 16 << 10

func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		for _, r := range tc.records {
			f.Add([]byte(r))
		}
	}
	lines, _ := corpusLines(f)
	for i, l := range lines {
		if i%11 == 0 {
			f.Add([]byte(l))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > fuzzMaxRecord {
			return
		}
		dec := NewDecoder(DefaultDecoderConfig())
		smallCfg := DefaultDecoderConfig()
		smallCfg.MaxLineBytes = 64
		small := NewDecoder(smallCfg)

		got, err := texts(dec, data)
		var me *MalformedError
		switch {
		case err == nil:
		case errors.As(err, &me):
			switch me.Reason {
			case ReasonJSONTruncated, ReasonJSONSyntax, ReasonJSONControl, ReasonJSONType, ReasonJSONNoText:
			default:
				t.Fatalf("Decode(%q) = %v: unknown reason %q", data, err, me.Reason)
			}
			// Decided once: a rejected record is not also read as text.
			if len(got) != 0 {
				t.Fatalf("Decode(%q) = %v and emitted %q; want nothing emitted", data, err, got)
			}
		default:
			t.Fatalf("Decode(%q) = %v; only malformed JSON may fail and no line is oversized", data, err)
		}
		for _, l := range got {
			if strings.IndexByte(l, '\n') >= 0 {
				t.Fatalf("Decode(%q) emitted %q holding a newline", data, l)
			}
		}

		body := bytes.TrimSuffix(data, []byte("\n"))
		trimmed := bytes.TrimLeft(body, " \t\n\r")
		jsonLike := len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') && looksJSON(trimmed, 0)
		if !jsonLike {
			// Anything else is CRI or raw text; raw text round-trips byte
			// for byte.
			if err != nil {
				t.Fatalf("Decode(%q) = %v for a record that does not look like JSON", data, err)
			}
			if dec.Last() == EnvelopeRaw && bytes.IndexByte(body, '\n') < 0 {
				want := string(bytes.TrimSuffix(body, []byte("\r")))
				if len(got) != 1 || got[0] != want {
					t.Fatalf("Decode(raw %q) = %q; want [%q]", data, got, want)
				}
			}
		} else {
			// A record that looks like JSON is accepted exactly when
			// encoding/json finds an object whose "log" (or, without one,
			// "message") is a string, and then says the same text, with
			// invalid UTF-8 replaced the same way.
			var obj map[string]json.RawMessage
			var want []string
			ok := json.Valid(data) && json.Unmarshal(data, &obj) == nil && obj != nil
			if ok {
				field := obj["log"]
				if field == nil {
					field = obj["message"]
				}
				var s string
				ok = field != nil && field[0] == '"' && json.Unmarshal(field, &s) == nil
				want = expectLines(s)
			}
			if ok != (err == nil) {
				t.Fatalf("Decode(%q) = %v; encoding/json finds an envelope: %v", data, err, ok)
			}
			if ok && strings.Join(got, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("Decode(%q) = %q; encoding/json says %q", data, got, want)
			}
			if ok && dec.Last() == EnvelopeRaw || !ok && dec.Last() != EnvelopeRaw {
				t.Fatalf("Decode(%q) = %v with envelope %v", data, err, dec.Last())
			}
		}

		// A small cap drops exactly the long lines' records. (The cap counts
		// bytes as received, before invalid UTF-8 is replaced.)
		sgot, serr := texts(small, data)
		capped := err == nil && utf8.Valid(data)
		long := false
		for _, l := range got {
			long = long || len(l) > 64
		}
		if capped && long != errors.Is(serr, ErrOversized) {
			t.Fatalf("Decode(%q) with a 64-byte cap: %v; lines %q", data, serr, got)
		}
		if capped && !long && strings.Join(sgot, "\x00") != strings.Join(got, "\x00") {
			t.Fatalf("Decode(%q) with a 64-byte cap = %q; want %q", data, sgot, got)
		}
		if capped && long && len(sgot) != 0 {
			t.Fatalf("Decode(%q) with a 64-byte cap emitted %q for an oversized record", data, sgot)
		}

		// A Fluent Bit record built by encoding/json from any string decodes
		// back to it, labels included.
		rec, err := json.Marshal(map[string]any{
			"log": string(data) + "\n", "stream": "stdout", "time": "2026-11-29T15:00:00.123456789Z",
			"kubernetes": map[string]any{"pod_name": "p", "labels": map[string]string{"a/b": string(data)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Log string `json:"log"`
		}
		if err := json.Unmarshal(rec, &back); err != nil {
			t.Fatal(err)
		}
		d := NewDecoder(DefaultDecoderConfig())
		var fb []string
		var meta *pipeline.Meta
		err = d.Decode(rec, func(r *pipeline.Record) {
			fb = append(fb, string(r.Text))
			meta = r.Meta
		})
		if want := expectLines(back.Log); err != nil || strings.Join(fb, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("Decode(%s) = %q, %v; want %q", rec, fb, err, want)
		}
		if meta == nil || meta.Labels["a/b"] != strings.TrimSuffix(back.Log, "\n") {
			t.Fatalf("Decode(%s) meta = %+v", rec, meta)
		}
	})
}
