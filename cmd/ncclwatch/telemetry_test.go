package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestScanTelemetryCorpus runs scan (telemetry on) over every file of
// testdata/telemetry and checks the nccl_tests and training arrays of the
// --json document against EXPECTED.json.
func TestScanTelemetryCorpus(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "telemetry")
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
		w := want[name]
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s := newScanner(pipeline.Expectation{}, 64<<10, nil, true)
			if err := s.read(name, f, 0); err != nil {
				t.Fatal(err)
			}
			res := s.result()
			var got map[string]any
			if w["kind"] == "nccl_tests" {
				if len(res.NCCLTests) == 0 {
					t.Fatalf("no nccl_tests entry; want %v", w)
				}
				got = toMap(t, res.NCCLTests[0])
				for _, k := range []string{"nranks", "hosts", "rows", "min_bytes", "max_bytes", "avg_busbw", "max_size_busbw_oop"} {
					checkField(t, k, got[k], w[k])
				}
				return
			}
			if w["kind"] == "none" {
				// A log the rules read nothing from (docs/telemetry.md).
				if len(res.Training) > 0 {
					t.Fatalf("training entries %v; want none", res.Training)
				}
				return
			}
			if len(res.Training) == 0 {
				t.Fatalf("no training entry; want %v", w)
			}
			got = toMap(t, res.Training[0])
			for _, k := range []string{"steps", "first_step", "last_step", "first_step_time_s", "last_step_time_s",
				"tokens_per_s_last", "samples_per_s_last", "mfu_last"} {
				if _, ok := w[k]; ok {
					checkField(t, k, got[k], w[k])
				}
			}
		})
	}
}

func toMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func checkField(t *testing.T, k string, got, want any) {
	t.Helper()
	gf, gok := got.(float64)
	wf, wok := want.(float64)
	switch {
	case gok && wok:
		if math.Abs(gf-wf) > 1e-6*math.Max(1, math.Abs(wf)) {
			t.Errorf("%s = %v; want %v", k, got, want)
		}
	case got != want:
		t.Errorf("%s = %v; want %v", k, got, want)
	}
}
