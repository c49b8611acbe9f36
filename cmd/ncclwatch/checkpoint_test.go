package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestScanCheckpoints runs `scan --json` over every checkpoint sample and
// compares the checkpoints array with testdata/checkpoints/EXPECTED.json;
// with telemetry off the array is null.
func TestScanCheckpoints(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "checkpoints")
	raw, err := os.ReadFile(filepath.Join(dir, "EXPECTED.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) < 11 {
		t.Fatalf("%d expectations; want at least 11", len(want))
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if rc := runScan([]string{"--json", "--telemetry", "on", filepath.Join(dir, name)}, nil, &out, &errb); rc != 0 {
				t.Fatalf("scan = %d: %s", rc, errb.String())
			}
			var doc struct {
				Checkpoints json.RawMessage `json:"checkpoints"`
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			var got, exp any
			if err := json.Unmarshal(doc.Checkpoints, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(w, &exp); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("checkpoints = %s; want %s", doc.Checkpoints, w)
			}
		})
	}
	var out, errb bytes.Buffer
	if rc := runScan([]string{"--json", "--telemetry", "off", filepath.Join(dir, "101_megatron_core_torch_dist_save_timer_two_saves.log")}, nil, &out, &errb); rc != 0 {
		t.Fatalf("scan = %d: %s", rc, errb.String())
	}
	if !strings.Contains(out.String(), `"checkpoints": null`) && !strings.Contains(out.String(), `"checkpoints":null`) {
		t.Errorf("scan --telemetry off: checkpoints not null in %s", out.String())
	}
}
