package parsers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// gradedFields are the EXPECTED.json fields goldenDiffs compares for a
// training series.
var gradedFields = []string{
	"steps", "distinct_steps", "first_step", "last_step", "first_step_time_s", "last_step_time_s",
	"tokens_per_s_last", "samples_per_s_last", "mfu_last", "tflops_last", "it_per_s_first", "it_per_s_last",
}

// TestProgressGoldenFields scores the excerpts of trainers no named reader
// covers (EXPECTED.json entries with a "reader" field) field by field: the
// figure the issue that asked for the generic reader was measured in.
// TestTelemetryGolden fails on any difference; this one reports the count.
func TestProgressGoldenFields(t *testing.T) {
	dir := filepath.Join("..", "testdata", "telemetry")
	b, err := os.ReadFile(filepath.Join(dir, "EXPECTED.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(want))
	for n, w := range want {
		if _, ok := w["reader"]; ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) < 30 {
		t.Fatalf("%d excerpts with a reader field; want at least 30", len(names))
	}
	right, total := 0, 0
	for _, name := range names {
		w := want[name]
		tests, training := telemetryReport(t, filepath.Join(dir, name))
		diffs := goldenDiffs(w, tests, training)
		graded := 1 // kind "none": one field, the absence of a series
		if w["kind"] != "none" {
			graded = 0
			for _, f := range gradedFields {
				if _, ok := w[f]; ok {
					graded++
				}
			}
		}
		wrong := len(diffs)
		if len(diffs) == 1 && (strings.HasPrefix(diffs[0], "no ") || w["kind"] == "none") {
			wrong = graded // no series (or one too many): every field is wrong
		}
		total += graded
		right += graded - wrong
		if wrong > 0 {
			t.Logf("%s: %d of %d wrong:\n\t%s", name, wrong, graded, strings.Join(diffs, "\n\t"))
		}
	}
	t.Logf("%d of %d graded fields right on %d excerpts", right, total, len(names))
}
