package rules

import (
	"fmt"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Check evaluates rs once over one job, as `ncclwatch scan --rules` does,
// and returns the alerts that would fire. The input is complete, so `for`
// is not waited for; absence and pool rules see no activity and no
// inventory and do not fire. nodes and fleet may be nil.
func Check(rs *RuleSet, sum pipeline.JobSummary, comms []pipeline.CommSummary, now time.Time) ([]pipeline.Alert, error) {
	cfg := DefaultConfig()
	cfg.IgnoreFor = true
	eng, err := NewEngine(cfg, rs, EngineDeps{})
	if err != nil {
		return nil, err
	}
	eng.Observe(sum, comms, nil)
	changes, err := eng.Eval(now)
	var out []pipeline.Alert
	for _, a := range changes {
		if a.State == pipeline.AlertFiring {
			out = append(out, a)
		}
	}
	return out, err
}

// Finding is one lint result of a rule.
type Finding struct {
	File    string
	Rule    string
	Line    int
	Warning bool // false: an error
	Message string
}

func (f Finding) String() string {
	kind := "error"
	if f.Warning {
		kind = "warning"
	}
	return fmt.Sprintf("%s:%d: rule %s: %s: %s", f.File, f.Line, f.Rule, kind, f.Message)
}

// Lint checks what compiling cannot: templates that name fields the data
// does not have, and the conventions of a rule pack (a severity label, a
// summary and a runbook annotation).
func Lint(rs *RuleSet) []Finding {
	var out []Finding
	for _, r := range rs.Rules {
		add := func(warn bool, format string, args ...any) {
			out = append(out, Finding{File: r.File, Rule: r.Name, Line: r.Line, Warning: warn, Message: fmt.Sprintf(format, args...)})
		}
		data := sampleData(r.Scope)
		data["labels"] = map[string]string{}
		for _, what := range []struct {
			name  string
			tmpls map[string]*template.Template
		}{{"labels", r.labelTmpl}, {"annotations", r.annotTmpl}} {
			for _, k := range sortedKeys(what.tmpls) {
				t, err := what.tmpls[k].Clone()
				if err != nil {
					add(false, "%s.%s: %v", what.name, k, err)
					continue
				}
				var b strings.Builder
				if err := t.Option("missingkey=error").Execute(&b, data); err != nil {
					add(false, "%s.%s: %v (template data: %s)", what.name, k, err, strings.Join(sortedKeys(data), ", "))
				}
			}
		}
		switch sev := r.Labels["severity"]; {
		case sev == "":
			add(true, "no severity label (Alertmanager routes on it); warning is assumed")
		case !slices.Contains([]string{"critical", "warning", "info"}, sev) && !strings.Contains(sev, "{{"):
			add(true, "severity %q is not critical, warning or info", sev)
		}
		for _, a := range []string{"summary", "runbook"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				add(true, "no %s annotation", a)
			}
		}
		if r.KeepFiringFor > 0 && r.KeepFiringFor > 24*time.Hour {
			add(true, "keep_firing_for %s holds resolved alerts for more than a day", r.KeepFiringFor)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
