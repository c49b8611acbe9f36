package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestScanCheckpoints runs `scan --json` over the real checkpoint excerpts
// and compares its checkpoints field with testdata/checkpoints/EXPECTED.json.
func TestScanCheckpoints(t *testing.T) {
	b, err := os.ReadFile("../../testdata/checkpoints/EXPECTED.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]pipeline.CheckpointReport
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		var out, errOut bytes.Buffer
		path := filepath.Join("../../testdata/checkpoints", name)
		if code := runScan([]string{"--json", "--no-progress", path}, strings.NewReader(""), &out, &errOut); code != exitOK {
			t.Fatalf("scan %s = %d: %s", name, code, errOut.String())
		}
		var res struct {
			Checkpoints []pipeline.CheckpointReport `json:"checkpoints"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Checkpoints, w) {
			t.Errorf("scan --json %s checkpoints = %+v; want %+v", name, res.Checkpoints, w)
		}
	}
	var out bytes.Buffer
	runScan([]string{"--json", "--no-progress", "--telemetry", "off", "../../testdata/checkpoints/001_hf_trainer_tqdm_glued_saving_model_checkpoint_squad.log"},
		strings.NewReader(""), &out, &bytes.Buffer{})
	if !bytes.Contains(out.Bytes(), []byte(`"checkpoints": null`)) {
		t.Errorf("--telemetry off: checkpoints not null:\n%s", out.String())
	}
}
