package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/rules"
)

const rulesUsage = `usage: ncclwatch rules check FILE|builtin...
       ncclwatch rules test SCENARIO...

  check   load and compile rule files, type-check their expressions against
          the documented fields (rules/README.md) and lint their templates,
          severity labels and runbook annotations
  test    run rule scenario files: inputs (NCCL log lines, summaries,
          activity, proofs) at given times and the alerts expected then,
          like promtool test rules

Exit status: 0 all good, 1 a rule file is invalid or a scenario failed,
2 usage or I/O error.
`

// runRules implements `ncclwatch rules check|test`.
func runRules(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, rulesUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("rules "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rulesUsage) }
	switch args[0] {
	case "check", "test":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, rulesUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "ncclwatch rules: unknown command %q\n\n%s", args[0], rulesUsage)
		return exitUsage
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	files := fs.Args()
	if len(files) == 0 {
		fmt.Fprintf(stderr, "ncclwatch rules %s: no files given\n\n%s", args[0], rulesUsage)
		return exitUsage
	}
	if args[0] == "check" {
		return rulesCheck(files, stdout, stderr)
	}
	return rulesTest(files, stdout, stderr)
}

func rulesCheck(files []string, stdout, stderr io.Writer) int {
	status := exitOK
	for _, f := range files {
		rs, err := rules.Load(f)
		if err != nil {
			for _, e := range splitJoined(err) {
				fmt.Fprintln(stderr, e)
			}
			status = max(status, exitFinding)
			if errors.Is(err, os.ErrNotExist) {
				status = exitUsage
			}
			continue
		}
		errs, warns := 0, 0
		for _, fd := range rules.Lint(rs) {
			fmt.Fprintln(stderr, fd)
			if fd.Warning {
				warns++
			} else {
				errs++
			}
		}
		if errs > 0 {
			status = max(status, exitFinding)
			fmt.Fprintf(stdout, "%s: FAILED: %d rules, %d errors, %d warnings\n", f, len(rs.Rules), errs, warns)
			continue
		}
		fmt.Fprintf(stdout, "%s: SUCCESS: %d rules found", f, len(rs.Rules))
		if warns > 0 {
			fmt.Fprintf(stdout, ", %d warnings", warns)
		}
		fmt.Fprintln(stdout)
	}
	return status
}

func rulesTest(files []string, stdout, stderr io.Writer) int {
	deps := rules.ScenarioDeps{
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(parsers.DefaultDecoderConfig()) },
		Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Telemetry:  true,
	}
	status := exitOK
	for _, r := range rules.RunScenarios(files, deps) {
		switch {
		case r.Err != nil:
			fmt.Fprintf(stdout, "%s: FAILED\n", r.File)
			for _, e := range splitJoined(r.Err) {
				fmt.Fprintln(stderr, "  "+e)
			}
			status = max(status, exitFinding)
			if errors.Is(r.Err, os.ErrNotExist) {
				status = exitUsage
			}
		case len(r.Failures) > 0:
			fmt.Fprintf(stdout, "%s: FAILED: %d tests, %d failures\n", r.File, r.Tests, len(r.Failures))
			for _, f := range r.Failures {
				fmt.Fprintln(stderr, "  "+f)
			}
			status = max(status, exitFinding)
		default:
			fmt.Fprintf(stdout, "%s: SUCCESS: %d tests\n", r.File, r.Tests)
		}
	}
	return status
}

func splitJoined(err error) []string {
	return strings.Split(err.Error(), "\n")
}

// loadScanRules loads the rules of `scan --rules FILE|builtin` (a
// comma-separated list).
func loadScanRules(spec string) (*rules.RuleSet, error) {
	var files []string
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f != "" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, errors.New("--rules: name a rule file or builtin")
	}
	return rules.Load(files...)
}

// printAlerts writes the alerts of `scan --rules` after the table.
func printAlerts(w io.Writer, alerts []pipeline.Alert) {
	if len(alerts) == 0 {
		fmt.Fprintln(w, "\nalerts: none would fire")
		return
	}
	fmt.Fprintf(w, "\nalerts that would fire: %d\n", len(alerts))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ALERT\tSEVERITY\tSUMMARY")
	for _, a := range alerts {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Rule, a.Severity, a.Annotations["summary"])
	}
	tw.Flush()
	for _, a := range alerts {
		if rb := a.Annotations["runbook"]; rb != "" {
			fmt.Fprintf(w, "  %s runbook: %s\n", a.Rule, rb)
		}
	}
}

// sortScanAlerts orders alerts by severity (critical first), then name.
func sortScanAlerts(alerts []pipeline.Alert) {
	rank := map[string]int{"critical": 0, "warning": 1, "info": 2}
	sort.SliceStable(alerts, func(i, j int) bool {
		ri, ok := rank[alerts[i].Severity]
		if !ok {
			ri = 3
		}
		rj, ok := rank[alerts[j].Severity]
		if !ok {
			rj = 3
		}
		if ri != rj {
			return ri < rj
		}
		return alerts[i].Rule < alerts[j].Rule
	})
}
