package pipeline

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The canary's MPIJob template carries the labels the assembler reads, and
// runs its test at NCCL_DEBUG=INFO.
func TestCanaryTemplateLabels(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "kubernetes", "canary", "base", "mpijob-template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		Kind     string                             `yaml:"kind"`
		Metadata struct{ Labels map[string]string } `yaml:"metadata"`
		Spec     struct {
			Replicas map[string]struct {
				Replicas int `yaml:"replicas"`
				Template struct {
					Metadata struct{ Labels map[string]string } `yaml:"metadata"`
				} `yaml:"template"`
			} `yaml:"mpiReplicaSpecs"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &job); err != nil {
		t.Fatalf("mpijob-template.yaml is not YAML: %v", err)
	}
	if job.Kind != "MPIJob" || job.Spec.Replicas["Worker"].Replicas != 2 {
		t.Errorf("template kind %q with %d workers; want an MPIJob over 2 nodes", job.Kind, job.Spec.Replicas["Worker"].Replicas)
	}
	cfg := DefaultTelemetryAssemblerConfig()
	for role, r := range job.Spec.Replicas {
		l := r.Template.Metadata.Labels
		if l[cfg.CanaryLabel] != "true" || l[cfg.PoolLabels[0]] != "@POOL@" {
			t.Errorf("%s pods' labels %v lack %s=true and %s", role, l, cfg.CanaryLabel, cfg.PoolLabels[0])
		}
	}
	if !strings.Contains(string(b), "NCCL_DEBUG=INFO") {
		t.Errorf("the canary does not run with NCCL_DEBUG=INFO")
	}
}

// rules.yaml has the engine's rule-file shape, and its expressions name only
// the fields deploy/kubernetes/canary/README.md documents for the engine.
func TestCanaryRules(t *testing.T) {
	dir := filepath.Join("..", "deploy", "kubernetes", "canary")
	b, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert         string            `yaml:"alert"`
				Expr          string            `yaml:"expr"`
				For           string            `yaml:"for"`
				KeepFiringFor string            `yaml:"keep_firing_for"`
				Labels        map[string]string `yaml:"labels"`
				Annotations   map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	names := regexp.MustCompile(`\b(canary|series|checkpoint)\.([a-z_]+)`)
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Labels["severity"] == "" ||
				r.Annotations["summary"] == "" || r.Annotations["runbook"] == "" {
				t.Errorf("rule %q: want alert, expr, a severity label and summary and runbook annotations", r.Alert)
			}
			for _, m := range names.FindAllString(r.Expr, -1) {
				if !strings.Contains(string(readme), "`"+m+"`") {
					t.Errorf("rule %s uses %s, which README.md does not document", r.Alert, m)
				}
			}
		}
	}
	if n != 3 {
		t.Errorf("%d rules; want the busbw, step-time regression and checkpoint save regression rules", n)
	}
}
