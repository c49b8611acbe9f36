package rules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRulesBuiltinLoadsInOrder(t *testing.T) {
	rs, err := Load(BuiltinName)
	if err != nil {
		t.Fatalf("Load(builtin) = %v", err)
	}
	var names []string
	for _, r := range rs.Rules {
		names = append(names, r.Name)
		if r.Annotations["runbook"] == "" {
			t.Errorf("%s has no runbook annotation", r.Name)
		}
	}
	want := []string{"NCCLSocketFallback", "NCCLGDRDisabled", "NCCLMixedNetworks", "NCCLVersionSkew",
		"NCCLFewerHCAs", "NCCLRDMADisabled", "NCCLJobSpansZones", "NCCLJobSpansBlocks", "NCCLMNNVLSpansCliques",
		"NCCLInitMissing", "NCCLFabricUnproven", "NCCLCollectiveBusBandwidthLow"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("builtin rules = %v; want %v", names, want)
	}
	for _, f := range Lint(rs) {
		t.Errorf("Lint(builtin): %s", f)
	}
	if r := rs.Rule("NCCLSocketFallback"); !r.perComm || r.timed || r.Severity() != "critical" {
		t.Errorf("NCCLSocketFallback perComm=%v timed=%v severity=%s; want per communicator, untimed, critical", r.perComm, r.timed, r.Severity())
	}
	if r := rs.Rule("NCCLInitMissing"); !r.timed || r.perComm {
		t.Errorf("NCCLInitMissing timed=%v perComm=%v; want timed, per job", r.timed, r.perComm)
	}
	if r := rs.Rule("NCCLFabricUnproven"); r.Scope != ScopePool {
		t.Errorf("NCCLFabricUnproven scope = %s; want pool", r.Scope)
	}
}

// Load errors name the file, the rule and the position of the problem.
func TestRulesLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // substrings of the error
	}{
		{"unknown field in a plain expression", `groups:
  - name: g
    rules:
      - alert: Bad
        expr: job.verdict == "ok" && job.networkclass == "tcp"
`, []string{"bad.yaml:5:", "rule Bad", "expr: type rules.JobView has no field networkclass"}},
		{"unknown field in a block expression", `groups:
  - name: g
    rules:
      - alert: Block
        expr: |
          comm.network_class == "tcp" &&
            comm.nnode > 1
`, []string{"bad.yaml:7:18:", "rule Block", "has no field nnode"}},
		{"pool names in a job rule", `groups:
  - name: g
    rules:
      - alert: Scope
        expr: pool.unproven_for > duration("1h") && job.seen
        scope: pool
`, []string{"bad.yaml:5:", "rule Scope", "unknown name job", "scope pool"}},
		{"not a bool", `groups:
  - name: g
    rules:
      - alert: Count
        expr: len(comms)
`, []string{"rule Count", "expected bool"}},
		{"syntax", `groups:
  - name: g
    rules:
      - alert: Syntax
        expr: "job.seen &&"
`, []string{"bad.yaml:5:", "rule Syntax", "unexpected token EOF"}},
		{"the clock is an argument", `groups:
  - name: g
    rules:
      - alert: Clock
        expr: now() > job.first_seen
`, []string{"rule Clock", "not callable"}},
		{"unbounded builtin", `groups:
  - name: g
    rules:
      - alert: Repeat
        expr: len(repeat("x", 1000000000)) > 0
`, []string{"rule Repeat"}},
		{"typo in a key", `groups:
  - name: g
    rules:
      - alert: Typo
        expr: job.seen
        for_: 5m
`, []string{"bad.yaml:6:9:", "rule Typo", `unknown key "for_"`}},
		{"bad duration", `groups:
  - name: g
    rules:
      - alert: Dur
        expr: job.seen
        for: 5 minutes
`, []string{"bad.yaml:6:14:", "rule Dur", "for:"}},
		{"reserved label", `groups:
  - name: g
    rules:
      - alert: Label
        expr: job.seen
        labels: {job_name: x}
`, []string{"rule Label", "job_name"}},
		{"template syntax", `groups:
  - name: g
    rules:
      - alert: Tmpl
        expr: job.seen
        annotations:
          summary: "{{ .job "
`, []string{"bad.yaml:7:", "rule Tmpl", "annotations.summary"}},
		{"recording rule", `groups:
  - name: g
    rules:
      - record: job:x:sum
        expr: job.seen
`, []string{"recording rules are not supported"}},
		{"yaml", "groups: [\n", []string{"bad.yaml:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error", tc.src)
			}
			var le *LoadError
			if !errors.As(err, &le) {
				t.Errorf("error %T is not a *LoadError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestRulesLoadDuplicateAndMissing(t *testing.T) {
	dir := t.TempDir()
	src := "groups:\n  - name: g\n    rules:\n      - alert: NCCLSocketFallback\n        expr: job.seen\n"
	p := filepath.Join(dir, "dup.yaml")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(BuiltinName, p)
	if err == nil || !strings.Contains(err.Error(), "alert name already defined at builtin:ncclwatch.rules.yaml") {
		t.Errorf("Load(builtin, dup) = %v; want a duplicate-name error", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want ErrNotExist", err)
	}
}

func TestRulesLintTemplates(t *testing.T) {
	rs, err := Parse("lint.yaml", []byte(`groups:
  - name: g
    rules:
      - alert: Typo
        expr: comm.network_class == "tcp"
        labels: {severity: page}
        annotations:
          summary: "{{ .jobname }} on {{ .network }}"
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range Lint(rs) {
		got = append(got, f.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`lint.yaml:4: rule Typo: error: annotations.summary:`, `map has no entry for key "jobname"`,
		`warning: severity "page" is not critical, warning or info`, "warning: no runbook annotation",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("Lint =\n%s\nwant %q", all, want)
		}
	}
}

func TestRulesParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "90s": 90 * time.Second, "5m": 5 * time.Minute, "1h30m": 90 * time.Minute,
		"7d": 7 * 24 * time.Hour, "1w": 7 * 24 * time.Hour, "250ms": 250 * time.Millisecond,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "5", "5 m", "m5", "1.5h", "-1m", "99999999999999y"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = nil error", in)
		}
	}
}

// Rule files come from users: Parse must never panic, and a file it
// accepts yields rules that evaluate without panicking either.
func FuzzRulesParse(f *testing.F) {
	b, err := builtinFS.ReadFile("builtin/ncclwatch.rules.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: any(comms, .gdr == false)\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > 64<<10 {
			return
		}
		rs, err := Parse("fuzz.yaml", src)
		if err != nil {
			return
		}
		for _, r := range rs.Rules {
			if r.program == nil || r.Name == "" {
				t.Fatalf("accepted rule %+v without a program or name", r)
			}
		}
		e, err := NewEngine(DefaultConfig(), rs, EngineDeps{Fleet: Nodes{"n": {Node: "n", Pool: "p"}}})
		if err != nil {
			t.Fatal(err)
		}
		sum, comms := fallbackJob("j", 1, false)
		e.Observe(sum, comms, []string{"n"})
		e.Eval(t0)
	})
}
