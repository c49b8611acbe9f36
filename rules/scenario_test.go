package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The scenario runner reports what differs, per test and time, and checks
// pending alerts when asked.
func TestRulesScenarioFailures(t *testing.T) {
	dir := t.TempDir()
	rules := `groups:
  - name: g
    rules:
      - alert: Slow
        expr: job.verdict == "socket_fallback"
        for: 5m
        annotations: {summary: "{{ .job }} is slow"}
`
	scenario := `rule_files: [r.yaml]
tests:
  - name: pending then firing
    input:
      - at: 0m
        job: j
        summary: {verdict: socket_fallback, network: Socket, network_class: tcp}
    expect:
      - at: 1m
        alert: Slow
        state: pending
        alerts: [{labels: {job_name: j}}]
      - at: 1m
        alert: Slow
        alerts: []
      - at: 5m
        alert: Slow
        alerts: [{annotations: {summary: j is slow}}]
  - name: wrong expectations
    input:
      - at: 0m
        job: k
        summary: {verdict: socket_fallback}
    expect:
      - at: 5m
        alert: Slow
        alerts: []
      - at: 6m
        alert: Slow
        alerts: [{labels: {job_name: other}}]
`
	for name, body := range map[string]string{"r.yaml": rules, "s.yaml": scenario} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := RunScenarios([]string{filepath.Join(dir, "s.yaml")}, ScenarioDeps{})
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("RunScenarios = %+v", res)
	}
	r := res[0]
	if r.Tests != 2 || len(r.Failures) != 2 {
		t.Fatalf("tests %d, failures %q; want 2 tests, 2 failures (both in the second)", r.Tests, r.Failures)
	}
	for i, want := range []string{`test "wrong expectations": at 5m0s: Slow: 1 firing alerts; want 0`,
		`test "wrong expectations": at 6m0s: Slow: expected alert 1 (labels map[job_name:other]`} {
		if !strings.Contains(r.Failures[i], want) {
			t.Errorf("failure %d = %q; want %q", i, r.Failures[i], want)
		}
	}
	// Log inputs need the pipeline's decoder.
	bad := `rule_files: [r.yaml]
tests:
  - name: log
    input: [{lines: "NCCL INFO Using network Socket"}]
`
	if err := os.WriteFile(filepath.Join(dir, "log.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	res = RunScenarios([]string{filepath.Join(dir, "log.yaml")}, ScenarioDeps{})
	if len(res[0].Failures) != 1 || !strings.Contains(res[0].Failures[0], "ncclwatch rules test") {
		t.Errorf("failures = %q; want a hint to use ncclwatch rules test", res[0].Failures)
	}
	// Unknown keys and rules are errors, not silent passes.
	typo := "rule_files: [r.yaml]\ntests:\n  - name: t\n    expect: [{at: 0m, alert: Fast, alerts: []}]\n"
	if err := os.WriteFile(filepath.Join(dir, "typo.yaml"), []byte(typo+"    inptu: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := RunScenarios([]string{filepath.Join(dir, "typo.yaml")}, ScenarioDeps{}); res[0].Err == nil ||
		!strings.Contains(res[0].Err.Error(), "inptu") {
		t.Errorf("typo: %+v", res[0])
	}
	if err := os.WriteFile(filepath.Join(dir, "norule.yaml"), []byte(typo), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := RunScenarios([]string{filepath.Join(dir, "norule.yaml")}, ScenarioDeps{}); len(res[0].Failures) != 1 ||
		!strings.Contains(res[0].Failures[0], `no rule named "Fast"`) {
		t.Errorf("unknown rule: %+v", res[0])
	}
}

// Telemetry report inputs make the canary and series views without the
// pipeline's parsers; log inputs of rules that name them need the
// telemetry parser, and say so.
func TestRulesScenarioTelemetryReports(t *testing.T) {
	dir := t.TempDir()
	rules := `groups:
  - name: g
    rules:
      - alert: Slow
        expr: series.step_time_regression != nil && series.step_time_regression > 1.3
        annotations: {summary: "{{ .series_framework }}"}
      - alert: LowBW
        expr: canary.is && known(canary.busbw) && known(canary.baseline_busbw) && canary.busbw < 0.8 * canary.baseline_busbw
        annotations: {summary: "{{ .canary_pool }} {{ .canary_busbw }} {{ .canary_baseline_busbw }}"}
`
	scenario := `rule_files: [r.yaml]
inventory:
  - {node: gpu-1, pool: h200-ib, rdma_capable: true}
tests:
  - name: reports
    input:
      - {at: 0m, job: train, training: [{framework: hf_trainer, steps: 10}, {framework: megatron, steps: 40, previous_network: IB, network: Socket, step_time_regression: 1.5}]}
      - {at: 0m, job: c1, nodes: [gpu-1], labels: {ncclwatch.io/canary: "true"}, summary: {verdict: ok, network_class: rdma}, nccl_tests: [{collective: all_reduce_perf, rows: 4, max_size_busbw_oop: 180, avg_busbw: 170}]}
      - {at: 1h, job: c2, labels: {ncclwatch.io/canary: "true", ncclwatch.io/pool: h200-ib}, summary: {verdict: ok}, nccl_tests: [{collective: all_reduce_perf, rows: 4, max_size_busbw_oop: 90, avg_busbw: 85}]}
      - {at: 1h, job: not-canary, nccl_tests: [{collective: all_reduce_perf, rows: 4, max_size_busbw_oop: 1, avg_busbw: 1}]}
    expect:
      - {at: 0m, alert: Slow, alerts: [{labels: {job_name: train}, annotations: {summary: megatron}}]}
      - {at: 0m, alert: LowBW, alerts: []}
      - {at: 1h, alert: LowBW, alerts: [{labels: {job_name: c2}, annotations: {summary: h200-ib 90 180}}]}
`
	logs := "rule_files: [r.yaml]\ntests:\n  - name: log\n    input: [{lines: \"iteration 1/ 10 | elapsed time per iteration (ms): 100.0 |\"}]\n"
	for name, body := range map[string]string{"r.yaml": rules, "s.yaml": scenario, "log.yaml": logs} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deps := ScenarioDeps{NewDecoder: func() pipeline.Decoder { return lineDecoder{} }, Classifier: noNCCL{}}
	res := RunScenarios([]string{filepath.Join(dir, "s.yaml"), filepath.Join(dir, "log.yaml")}, deps)
	if !res[0].OK() || res[0].Tests != 1 {
		t.Errorf("reports: %+v", res[0])
	}
	if len(res[1].Failures) != 1 || !strings.Contains(res[1].Failures[0], "need the telemetry parser") {
		t.Errorf("log inputs without the telemetry parser: failures %q; want one naming the parser", res[1].Failures)
	}
}

// lineDecoder and noNCCL stand in for the parsers, which this package does
// not import.
type lineDecoder struct{}

func (lineDecoder) Decode(b []byte, emit func(*pipeline.Record)) error {
	emit(&pipeline.Record{Text: b})
	return nil
}

func (lineDecoder) Flush(func(*pipeline.Record)) {}

type noNCCL struct{}

func (noNCCL) Line([]byte, *pipeline.Event, *pipeline.TelemetryLine) (bool, bool) {
	return false, false
}
