package rules

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const promDir = "../deploy/prometheus"

// The PrometheusRule carries exactly the groups of the plain rule file that
// promtool checks and tests.
func TestRulesDeployPrometheusRuleInStep(t *testing.T) {
	read := func(p string, v any) {
		b, err := os.ReadFile(filepath.Join(promDir, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	var plain struct {
		Groups any `yaml:"groups"`
	}
	var crd struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	read("rules/ncclwatch.rules.yml", &plain)
	read("prometheusrule.yaml", &crd)
	if crd.Kind != "PrometheusRule" || plain.Groups == nil || !reflect.DeepEqual(plain.Groups, crd.Spec.Groups) {
		t.Errorf("prometheusrule.yaml's spec.groups differ from rules/ncclwatch.rules.yml")
	}
	// One promtool test file per rule.
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	read("rules/ncclwatch.rules.yml", &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if _, err := os.Stat(filepath.Join(promDir, "tests", r.Alert+".test.yml")); err != nil {
				t.Errorf("rule %s has no test file: %v", r.Alert, err)
			}
		}
	}
}

// promtool check rules and test rules, when promtool is installed
// (deploy/local/promtool.sh installs it; `make test` runs it too).
func TestRulesDeployPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (deploy/local/promtool.sh install)")
	}
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(promDir, "rules", "ncclwatch.rules.yml")).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	tests, _ := filepath.Glob(filepath.Join(promDir, "tests", "*.test.yml"))
	cmd := exec.Command(promtool, append([]string{"test", "rules"}, tests...)...)
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "FAILED") {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
