package parsers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// telemetryReport runs the parser and the assembler over a file, the way
// `ncclwatch scan` does, and returns its reports.
func telemetryReport(t testing.TB, path string) ([]pipeline.NCCLTestReport, []pipeline.TrainingReport) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := NewTelemetry(DefaultTelemetryConfig())
	asm := pipeline.NewTelemetryAssembler(pipeline.DefaultTelemetryAssemblerConfig(), nil)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var tl pipeline.TelemetryLine
	name := filepath.Base(path)
	for n := int64(0); sc.Scan(); n++ {
		if p.Parse(sc.Bytes(), &tl) {
			asm.Add("job", nil, &tl, time.Time{}, pipeline.Source{Topic: name, Offset: n}, nil)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return asm.Report("job")
}

// frameworkKinds maps EXPECTED.json kinds to the frameworks that report
// them (kind "other" is any trainer outside the five named ones).
var frameworkKinds = map[string][]string{
	"megatron":   {pipeline.FrameworkMegatron},
	"torchtitan": {pipeline.FrameworkTorchtitan},
	"hf_trainer": {pipeline.FrameworkHF},
	"lightning":  {pipeline.FrameworkLightning},
	"deepspeed":  {pipeline.FrameworkDeepSpeed},
	"other":      {pipeline.FrameworkNeMo, pipeline.FrameworkComposer, pipeline.FrameworkJSON, pipeline.FrameworkNanoGPT, pipeline.FrameworkMaxText, pipeline.FrameworkProgress},
}

// goldenDiffs compares a file's reports with its EXPECTED.json entry and
// returns the differences.
func goldenDiffs(want map[string]any, tests []pipeline.NCCLTestReport, training []pipeline.TrainingReport) []string {
	var diffs []string
	check := func(field string, got any) {
		w, ok := want[field]
		if !ok {
			return
		}
		if !sameValue(got, w) {
			diffs = append(diffs, fmt.Sprintf("%s = %s; want %v", field, show(got), w))
		}
	}
	kind, _ := want["kind"].(string)
	if kind == "none" {
		// A log the rules read nothing from: no training series at all.
		if len(training) > 0 {
			return []string{fmt.Sprintf("%d training series %v; want none", len(training), training)}
		}
		return nil
	}
	if kind == "nccl_tests" {
		if len(tests) != 1 {
			return []string{fmt.Sprintf("%d nccl-tests runs %v; want 1", len(tests), tests)}
		}
		r := tests[0]
		if in, _ := want["collective_in_file"].(bool); in {
			check("collective", r.Collective)
		}
		check("nranks", r.NRanks)
		check("hosts", r.Hosts)
		check("rows", r.Rows)
		check("min_bytes", r.MinBytes)
		check("max_bytes", r.MaxBytes)
		check("avg_busbw", r.AvgBusBW)
		check("max_size_busbw_oop", r.MaxSizeBusBWOOP)
		check("max_size_busbw_ip", r.MaxSizeBusBWIP)
		check("header_min_bytes", r.HeaderMinBytes)
		check("header_max_bytes", r.HeaderMaxBytes)
		check("gpu", r.GPU)
		return diffs
	}
	var s *pipeline.TrainingReport
	for i := range training {
		for _, fw := range frameworkKinds[kind] {
			if training[i].Framework == fw && s == nil {
				s = &training[i]
			}
		}
	}
	if s == nil {
		return []string{fmt.Sprintf("no %s series in %d series", kind, len(training))}
	}
	check("steps", s.Steps)
	check("distinct_steps", s.DistinctSteps)
	check("first_step", s.FirstStep)
	check("last_step", s.LastStep)
	check("first_step_time_s", s.FirstStepTime)
	check("last_step_time_s", s.LastStepTime)
	check("tokens_per_s_last", s.TokensPerSLast)
	check("samples_per_s_last", s.SamplesPerSLast)
	check("mfu_last", s.MFULast)
	check("tflops_last", s.TFLOPsLast)
	check("it_per_s_first", s.ItPerSFirst)
	check("it_per_s_last", s.ItPerSLast)
	check("train_runtime_s", s.TrainRuntime)
	if w, ok := want["s_per_it_last"].(float64); ok {
		// A slow bar prints s/it; the report keeps the rate as it/s.
		if s.ItPerSLast == nil || math.Abs(1 / *s.ItPerSLast - w) > 1e-9*w {
			diffs = append(diffs, fmt.Sprintf("1/it_per_s_last = %s; want %v", show(s.ItPerSLast), w))
		}
	}
	return diffs
}

// sameValue compares a report field with a decoded JSON value: numbers
// within 1e-9 relative, nil pointers with null.
func sameValue(got, want any) bool {
	var g *float64
	switch v := got.(type) {
	case *float64:
		g = v
	case *int64:
		if v != nil {
			f := float64(*v)
			g = &f
		}
	case *int:
		if v != nil {
			f := float64(*v)
			g = &f
		}
	case int:
		f := float64(v)
		g = &f
	case *string:
		if v == nil {
			return want == nil
		}
		w, ok := want.(string)
		return ok && w == *v
	}
	if g == nil || want == nil {
		return g == nil && want == nil
	}
	w, ok := want.(float64)
	return ok && math.Abs(*g-w) <= 1e-9*math.Max(1, math.Abs(w))
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// goldenRun checks every entry of dir/EXPECTED.json and returns the number
// of files that match and the failures.
func goldenRun(t *testing.T, dir string) (matched int, failures []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "EXPECTED.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		tests, training := telemetryReport(t, filepath.Join(dir, name))
		if d := goldenDiffs(want[name], tests, training); len(d) > 0 {
			failures = append(failures, fmt.Sprintf("%s:\n\t%s", name, strings.Join(d, "\n\t")))
			continue
		}
		matched++
	}
	return matched, failures
}

// TestTelemetryGolden checks the parser and assembler on the real samples
// of testdata/telemetry against EXPECTED.json.
func TestTelemetryGolden(t *testing.T) {
	matched, failures := goldenRun(t, filepath.Join("..", "testdata", "telemetry"))
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d files match EXPECTED.json", matched)
}

// TestTelemetryReference runs the same check on the held-out reference
// samples named by NCCLWATCH_TELEMETRY_REFERENCE (a directory with its own
// EXPECTED.json, never copied into the project). It reports the matches
// and fails on none: the reference set is for development.
func TestTelemetryReference(t *testing.T) {
	dir := os.Getenv("NCCLWATCH_TELEMETRY_REFERENCE")
	if dir == "" {
		t.Skip("NCCLWATCH_TELEMETRY_REFERENCE not set")
	}
	matched, failures := goldenRun(t, dir)
	for _, f := range failures {
		t.Log(f)
	}
	t.Logf("%d of %d reference files match EXPECTED.json", matched, matched+len(failures))
}
