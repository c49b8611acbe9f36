package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/rules"
)

func runRulesCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runRules(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRulesCheckCommand(t *testing.T) {
	code, out, errOut := runRulesCmd(t, "check", "builtin")
	if code != exitOK || out != "builtin: SUCCESS: 12 rules found\n" || errOut != "" {
		t.Errorf("rules check builtin = %d, %q, %q", code, out, errOut)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("groups:\n  - name: g\n    rules:\n      - alert: X\n        expr: comm.nnode > 1\n"), 0o644)
	code, _, errOut = runRulesCmd(t, "check", bad)
	if code != exitFinding || !strings.Contains(errOut, "bad.yaml:5:") || !strings.Contains(errOut, "rule X") ||
		!strings.Contains(errOut, "has no field nnode") {
		t.Errorf("rules check bad = %d, %q", code, errOut)
	}

	lint := filepath.Join(dir, "lint.yaml")
	os.WriteFile(lint, []byte("groups:\n  - name: g\n    rules:\n      - alert: Y\n        expr: job.seen\n        annotations: {summary: '{{ .jb }}'}\n"), 0o644)
	code, out, errOut = runRulesCmd(t, "check", lint)
	if code != exitFinding || !strings.Contains(out, "FAILED") || !strings.Contains(errOut, `"jb"`) {
		t.Errorf("rules check lint = %d, %q, %q", code, out, errOut)
	}

	if code, _, _ := runRulesCmd(t, "check", filepath.Join(dir, "missing.yaml")); code != exitUsage {
		t.Errorf("rules check missing = %d; want %d", code, exitUsage)
	}
	for _, args := range [][]string{{}, {"check"}, {"frobnicate", "x"}} {
		if code, _, _ := runRulesCmd(t, args...); code != exitUsage {
			t.Errorf("rules %v = %d; want %d", args, code, exitUsage)
		}
	}
}

func TestRulesTestCommand(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/rules/builtin/*.yaml")
	canary, _ := filepath.Glob("../../testdata/rules/canary/*.yaml")
	files = append(files, canary...)
	if len(files) < 9 {
		t.Fatalf("%d builtin scenarios; want one per rule", len(files))
	}
	code, out, errOut := runRulesCmd(t, append([]string{"test"}, files...)...)
	if code != exitOK || strings.Count(out, "SUCCESS") != len(files) {
		t.Errorf("rules test = %d\n%s%s", code, out, errOut)
	}

	dir := t.TempDir()
	failing := filepath.Join(dir, "fail.yaml")
	corpusLog, _ := filepath.Abs("../../testdata/corpus/083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log")
	os.WriteFile(failing, []byte(`rule_files: [builtin]
tests:
  - name: a healthy job wrongly expected to fall back
    input: [{at: 0m, job: ok-job, log: `+corpusLog+`}]
    expect: [{at: 0m, alert: NCCLSocketFallback, alerts: [{labels: {job_name: ok-job}}]}]
`), 0o644)
	code, out, errOut = runRulesCmd(t, "test", failing)
	if code != exitFinding || !strings.Contains(out, "FAILED: 1 tests, 1 failures") ||
		!strings.Contains(errOut, "NCCLSocketFallback: 0 firing alerts; want 1") {
		t.Errorf("rules test failing = %d\n%s%s", code, out, errOut)
	}
}

// judgeSummaries hands one job's summaries through fileChain, as scan
// does, and returns the alerts its sink kept.
func judgeSummaries(rs *rules.RuleSet, comms []pipeline.CommSummary, sum pipeline.JobSummary, now time.Time) ([]pipeline.Alert, error) {
	sink, err := fileChain(rs, &pipeline.Batch{Jobs: []pipeline.JobSummary{sum}, Comms: comms}, now, zerolog.Nop())
	return sink.alerts, err
}

// What `scan --rules builtin` shows: the helpers the scan command calls.
func TestRulesScanAlerts(t *testing.T) {
	rs, err := loadScanRules("builtin")
	if err != nil {
		t.Fatal(err)
	}
	res := scanFile(t, "../../testdata/corpus/051_socket_fallback_gke_a3_nccl2.22.3_net_socket_channels.log")
	alerts, err := judgeSummaries(rs, res.Communicators, res.Summary, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) != 1 || alerts[0].Rule != "NCCLSocketFallback" || alerts[0].State != "firing" || alerts[0].Severity != "critical" {
		t.Fatalf("alerts = %+v", alerts)
	}
	b, err := json.Marshal(alerts)
	if err != nil {
		t.Fatal(err)
	}
	var doc []map[string]any
	json.Unmarshal(b, &doc)
	for _, k := range []string{"alert", "severity", "labels", "annotations", "state"} {
		if _, ok := doc[0][k]; !ok {
			t.Errorf("alerts[0] JSON lacks %q: %s", k, b)
		}
	}
	if _, ok := doc[0]["resolved_at"]; ok {
		t.Errorf("alerts[0] JSON has a zero resolved_at: %s", b)
	}
	var table bytes.Buffer
	printAlerts(&table, alerts)
	if !strings.Contains(table.String(), "NCCLSocketFallback  critical  scan fell back to NCCL Socket") {
		t.Errorf("table =\n%s", table.String())
	}

	// No NCCL evidence: nothing to judge.
	alerts, err = judgeSummaries(rs, nil, pipeline.JobSummary{}, time.Now())
	if err != nil || len(alerts) != 0 || alerts == nil {
		t.Errorf("fileChain(empty) = %v, %v; want an empty list", alerts, err)
	}
	if _, err := loadScanRules(" , "); err == nil {
		t.Errorf("loadScanRules(empty) = nil error")
	}
}
