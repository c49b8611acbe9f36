package assemble_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

var corpusDir = filepath.Join("..", "..", "testdata", "corpus")

// corpusFiles returns the names of the real excerpts, sorted.
func corpusFiles(t testing.TB) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(corpusDir, "*.log"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	sort.Strings(m)
	return m
}

func readLines(t testing.TB, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(corpusDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// run classifies lines as one job the way scan does, under policy e, and
// checks the invariant every summary must hold (fallback is true exactly
// when the job's verdict is socket_fallback).
func run(t testing.TB, lines []string, meta *pipeline.Meta, e pipeline.Expectation) ([]pipeline.CommSummary, pipeline.JobSummary) {
	t.Helper()
	cfg := pipeline.DefaultAssemblerConfig()
	cfg.Expect = e
	asm := assemble.New(cfg)
	proc := pipeline.NewProcessor(asm, &parsers.Lines{}, nil)
	for _, l := range lines {
		proc.Record(&pipeline.Record{Text: []byte(l), Meta: meta})
	}
	comms, sum, ok := asm.Summaries("")
	if !ok {
		return nil, pipeline.JobSummary{Verdict: pipeline.VerdictOK}
	}
	fb := sum.Fallback != nil && *sum.Fallback
	if fb != (sum.Verdict == pipeline.VerdictSocketFallback) {
		t.Errorf("fallback %s with verdict %s", show(sum.Fallback), sum.Verdict)
	}
	return comms, sum
}

// facts is the part of a job summary that comes from the log alone.
func facts(s pipeline.JobSummary) string {
	return show(map[string]any{"network": s.Network, "network_class": s.NetworkClass, "fabric": s.Fabric,
		"gdr": s.GDR, "gdr_send": s.GDRSend, "gdr_recv": s.GDRRecv, "gdr_partial": s.GDRPartial,
		"multi_node": s.MultiNode, "nnodes": s.NNodes, "nranks": s.NRanks, "intra": s.Intra})
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// parse returns the event of one line, or false.
func parse(line string) (pipeline.Event, bool) {
	var ev pipeline.Event
	var l parsers.Lines
	ok := l.Classify([]byte(line), &ev)
	// Copy the slices the assembler would copy.
	ev.Host = []byte(string(ev.Host))
	ev.PID = []byte(string(ev.PID))
	return ev, ok
}

// header returns the "host:pid:tid [dev] NCCL INFO " text that starts the
// NCCL message of line, or "".
func header(line string) string {
	i := strings.Index(line, "NCCL INFO ")
	if i < 0 {
		return ""
	}
	return line[:i+len("NCCL INFO ")]
}

func jsonRoundTrip(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
