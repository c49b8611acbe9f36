package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
