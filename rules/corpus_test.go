package rules_test

// The built-in pack against the real NCCL excerpts of testdata/corpus: what
// `ncclwatch scan --rules builtin` fires. The summaries are made the way
// scan makes them (BlockScanner with the parsers' Finder, Decoder, Lines,
// Processor); this test imports parsers, which the rules package itself
// never does.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
	"github.com/ncclwatch/ncclwatch/rules"
)

const corpusDir = "../testdata/corpus"

// summarize reads one log as `ncclwatch scan` does.
func summarize(t testing.TB, path string) ([]pipeline.CommSummary, pipeline.JobSummary, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	asm := assemble.New(pipeline.DefaultAssemblerConfig())
	proc := pipeline.NewProcessor(asm, &parsers.Lines{}, func(*pipeline.Record) string { return "scan" })
	dcfg := parsers.DefaultDecoderConfig()
	dec := parsers.NewDecoder(dcfg)
	bs := pipeline.NewBlockScanner(f, &parsers.Finder{}, 64<<10)
	if err := bs.Scan(func(line []byte, _ int64) {
		if err := dec.Decode(line, proc.Record); err != nil && !errors.Is(err, parsers.ErrOversized) {
			t.Logf("%s: malformed record: %v", path, err)
		}
		dec.Flush(proc.Record)
	}); err != nil {
		t.Fatal(err)
	}
	return asm.Summaries("scan")
}

func TestRulesCorpusSocketFallback(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(corpusDir, "EXPECTED.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]struct {
		Fallback *bool `json:"fallback"`
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Load("builtin")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	fires, quiet := 0, 0
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			comms, sum, ok := summarize(t, filepath.Join(corpusDir, name))
			if !ok {
				// No NCCL line at all (corpus 257): nothing to alert on,
				// and the expectation must not claim a fallback.
				if w := want[name].Fallback; w != nil {
					t.Errorf("no NCCL summary; EXPECTED.json says fallback %v", *w)
				}
				return
			}
			alerts, err := rules.Check(rs, sum, comms, now)
			if err != nil {
				t.Fatalf("Check = %v", err)
			}
			var fired []string
			for _, a := range alerts {
				fired = append(fired, a.Rule)
			}
			got := slices.Contains(fired, "NCCLSocketFallback")
			w := want[name].Fallback
			switch {
			case w == nil:
				t.Logf("fallback null in EXPECTED.json; fired %v", fired)
			case *w != got:
				t.Errorf("NCCLSocketFallback fired = %v; want %v (fallback %v; verdict %s; fired %v)", got, *w, *w, sum.Verdict, fired)
			case got:
				fires++
			default:
				quiet++
			}
			// The rule and the classifier agree: the rule fires exactly
			// when scan's summary says fallback.
			if (sum.Fallback != nil && *sum.Fallback) != got {
				t.Errorf("NCCLSocketFallback fired = %v; summary.fallback = %v", got, sum.Fallback)
			}
		})
	}
	t.Logf("%d excerpts fire NCCLSocketFallback, %d do not", fires, quiet)
	if fires == 0 || quiet == 0 {
		t.Errorf("the corpus should hold both fallbacks (%d) and healthy jobs (%d)", fires, quiet)
	}
}

// The built-in pack's scenarios: each rule has a case that must fire and
// one that must not (testdata/rules/builtin/).
func TestRulesBuiltinScenarios(t *testing.T) {
	testScenarioPack(t, "../testdata/rules/builtin/*.yaml", "builtin")
}

// The fabric canary's telemetry rules (deploy/kubernetes/canary/rules.yaml)
// on real nccl-tests and trainer lines: each rule has a case that must
// fire and one that must not (testdata/rules/canary/).
func TestRulesCanaryScenarios(t *testing.T) {
	testScenarioPack(t, "../testdata/rules/canary/*.yaml", "../deploy/kubernetes/canary/rules.yaml")
}

// testScenarioPack runs the scenarios of glob through the real decoder,
// parsers and assemblers, and checks that every rule of pack has a case
// that fires and one that must not.
func testScenarioPack(t *testing.T, glob, pack string) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	deps := rules.ScenarioDeps{
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(parsers.DefaultDecoderConfig()) },
		Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Telemetry:  true,
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, r := range rules.RunScenarios(files, deps) {
		if r.Err != nil {
			t.Errorf("%s: %v", r.File, r.Err)
		}
		for _, f := range r.Failures {
			t.Error(f)
		}
		b, err := os.ReadFile(r.File)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Tests []struct {
				Expect []struct {
					Alert  string `yaml:"alert"`
					Alerts []any  `yaml:"alerts"`
				} `yaml:"expect"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		for _, tc := range doc.Tests {
			for _, ex := range tc.Expect {
				if len(ex.Alerts) > 0 {
					fires[ex.Alert] = true
				} else {
					quiet[ex.Alert] = true
				}
			}
		}
	}
	rs, err := rules.Load(pack)
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range rs.Rules {
		if !fires[rule.Name] || !quiet[rule.Name] {
			t.Errorf("rule %s: a scenario that fires: %v, one that must not: %v; want both", rule.Name, fires[rule.Name], quiet[rule.Name])
		}
	}
}

// stageSink records what the rules stage passes on: the sink's view.
type stageSink struct{ batches []pipeline.Batch }

func (s *stageSink) Consume(_ context.Context, b *pipeline.Batch) error {
	cp := *b
	cp.Jobs = append([]pipeline.JobSummary(nil), b.Jobs...)
	cp.Alerts = append([]pipeline.Alert(nil), b.Alerts...)
	cp.Offsets = append([]pipeline.Offset(nil), b.Offsets...)
	s.batches = append(s.batches, cp)
	return nil
}

type commits struct{ offs [][]pipeline.Offset }

func (c *commits) Commit(_ context.Context, offs []pipeline.Offset) error {
	c.offs = append(c.offs, append([]pipeline.Offset(nil), offs...))
	return nil
}

// Through the real runner: the stage sits in front of the sink, and the
// fallback alert is stored in the batch that holds the job's summary and
// the offsets of the lines that caused it, which are committed after.
func TestRulesRunnerBatchCarriesAlerts(t *testing.T) {
	rs, err := rules.Load("builtin")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rules.NewEngine(rules.DefaultConfig(), rs, rules.EngineDeps{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sink := &stageSink{}
	stage := rules.NewStage(eng, sink, time.Minute, rules.StageDeps{Now: func() time.Time { return now }})
	com := &commits{}
	cfg := pipeline.DefaultRunnerConfig()
	runner := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(parsers.DefaultDecoderConfig()) }, Classifier: &parsers.Lines{},
		Candidate: parsers.Candidate, Sink: stage, Committer: com, Now: func() time.Time { return now }, Observe: true,
	})
	b, err := os.ReadFile(filepath.Join(corpusDir, "051_socket_fallback_gke_a3_nccl2.22.3_net_socket_channels.log"))
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if err := runner.Message(t.Context(), pipeline.Message{Topic: "logs", Offset: off, Key: []byte("llm-13b"),
			Value: line, Time: now}); err != nil {
			t.Fatal(err)
		}
		off++
	}
	if err := runner.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(sink.batches) != 1 {
		t.Fatalf("%d batches stored; want 1", len(sink.batches))
	}
	got := sink.batches[0]
	if len(got.Jobs) != 1 || len(got.Alerts) != 1 || got.Alerts[0].Rule != "NCCLSocketFallback" ||
		got.Alerts[0].State != pipeline.AlertFiring || got.Alerts[0].Labels["job_name"] != "llm-13b" {
		t.Fatalf("stored batch: %d jobs, alerts %+v", len(got.Jobs), got.Alerts)
	}
	if len(com.offs) != 1 || com.offs[0][0].Next != off {
		t.Errorf("commits = %v; want the batch's offsets (next %d) after the store", com.offs, off)
	}
	// The next flush carries no repeat of the alert.
	runner.Message(t.Context(), pipeline.Message{Topic: "logs", Offset: off, Key: []byte("llm-13b"), Value: []byte("step 1"), Time: now})
	if err := runner.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, b := range sink.batches[1:] {
		if len(b.Alerts) != 0 {
			t.Errorf("a later batch repeats alerts %+v", b.Alerts)
		}
	}
}

// Through the real runner, wired as `ncclwatch run` wires it (the stage
// reads the batch's summaries and telemetry): fabric canaries' nccl-tests tables, sent as Fluent Bit
// records of labelled pods, become the canary view. The first ok run sets
// the pool's baseline; a later run at half of it fires
// NCCLCanaryBusBandwidthLow, but only once its table is complete.
func TestRulesRunnerCanaryTelemetry(t *testing.T) {
	rs, err := rules.Load("../deploy/kubernetes/canary/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rules.NewEngine(rules.DefaultConfig(), rs, rules.EngineDeps{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sink := &stageSink{}
	stage := rules.NewStage(eng, sink, time.Minute, rules.StageDeps{Now: func() time.Time { return now }})
	runner := pipeline.NewRunner(pipeline.DefaultRunnerConfig(), pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(parsers.DefaultDecoderConfig()) }, Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Candidate: parsers.Prefilter(true), Sink: stage,
		Now:     func() time.Time { return now },
		Observe: true,
	})
	init, err := os.ReadFile(filepath.Join(corpusDir, "083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log"))
	if err != nil {
		t.Fatal(err)
	}
	table := func(busbw float64) []string {
		out := []string{"# Collective test starting: all_reduce_perf",
			"# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
			"#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"}
		for i, size := range []int{1 << 30, 2 << 30, 4 << 30, 8 << 30} {
			bw := busbw * (0.94 + 0.02*float64(i))
			out = append(out, fmt.Sprintf("%12d  %12d     float     sum      -1  %7.0f  %6.2f  %6.2f      0  %7.0f  %6.2f  %6.2f      0",
				size, size/4, float64(size)/bw/1e3, bw, bw, float64(size)/bw/1e3, bw, bw))
		}
		return append(out, "# Out of bounds values : 0 OK", fmt.Sprintf("# Avg bus bandwidth    : %.4f", busbw*0.97))
	}
	var off int64
	send := func(job string, lines []string) {
		t.Helper()
		for _, l := range lines {
			v, err := json.Marshal(map[string]any{"log": "[1,0]<stdout>:" + l + "\n", "stream": "stdout",
				"time": "2026-11-29T12:00:00Z", "kubernetes": map[string]any{
					"pod_name": job + "-launcher", "namespace_name": "ncclwatch", "host": "gpu-1",
					"labels": map[string]string{"training.kubeflow.org/job-name": job, "ncclwatch.io/canary": "true",
						"ncclwatch.io/pool": "h200-ib"}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := runner.Message(t.Context(), pipeline.Message{Topic: "logs", Offset: off, Key: []byte(job), Value: v, Time: now}); err != nil {
				t.Fatal(err)
			}
			off++
		}
		if err := runner.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	alerts := func() []pipeline.Alert {
		var out []pipeline.Alert
		for _, b := range sink.batches {
			out = append(out, b.Alerts...)
		}
		return out
	}
	initLines := strings.Split(strings.TrimRight(string(init), "\n"), "\n")
	send("nccl-canary-h200-ib-a1", append(slices.Clone(initLines), table(180)...))
	if a := alerts(); len(a) != 0 {
		t.Fatalf("the pool's first run fired %+v", a)
	}
	// Half as fast: the rows printed so far, then the rest of the table.
	slow := table(90)
	send("nccl-canary-h200-ib-b2", append(slices.Clone(initLines), slow[:4]...))
	if a := alerts(); len(a) != 0 {
		t.Fatalf("a half-printed table fired %+v", a)
	}
	send("nccl-canary-h200-ib-b2", slow[4:])
	a := alerts()
	if len(a) != 1 || a[0].Rule != "NCCLCanaryBusBandwidthLow" || a[0].State != pipeline.AlertFiring ||
		a[0].Labels["job_name"] != "nccl-canary-h200-ib-b2" ||
		!strings.Contains(a[0].Annotations["summary"], "reached 90 GB/s, below 80% of the pool's baseline 180.0 GB/s") {
		t.Fatalf("alerts = %+v; want NCCLCanaryBusBandwidthLow firing for nccl-canary-h200-ib-b2", a)
	}
}
