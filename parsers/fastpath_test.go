package parsers

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The fast paths of the line parsers are compared here with the plain
// code they stand for, on every line of testdata (corpus, telemetry,
// checkpoints) and on hand-made edge cases; the fuzz targets compare them on random lines too.

// testdataLines returns every line of the test logs, plus extra.
func testdataLines(t *testing.T, extra ...string) [][]byte {
	t.Helper()
	var lines [][]byte
	for _, dir := range []string{"corpus", "telemetry", "checkpoints"} {
		files, err := filepath.Glob(filepath.Join("..", "testdata", dir, "*.log"))
		if err != nil || len(files) == 0 {
			t.Fatalf("testdata/%s: %v, %d files", dir, err, len(files))
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for l := range bytes.SplitSeq(data, []byte("\n")) {
				lines = append(lines, l)
			}
		}
	}
	for _, e := range extra {
		lines = append(lines, []byte(e))
	}
	return lines
}

// checkpointEdgeCases have "checkpoint" where the dispatch of
// parseCheckpointLower could go wrong: many times, overlapping a marker's
// start, at the line's ends.
var checkpointEdgeCases = []string{
	"checkpoint",
	"save-checkpoint",
	"save-checkpoint ....: (1.0, 2.0)",
	"checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint Saving model checkpoint to /a",
	"checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint Saving model checkpoint to /a",
	"Saving model checkpoint to Saving model checkpoint to /b",
	"successfully saved checkpoint xx successfully saved checkpoint at iteration 5 to /p",
	"loading checkpoint from /x at iteration 7 and save-checkpoint: 3.0",
	"Saved checkpoint checkpoint_1.pt (epoch 1 @ 10 updates) (writing took 1.5 seconds)",
	"Finished saving the checkpointFinished saving the checkpoint in 2.84 seconds.",
}

// TestCheckpointLowerDispatch: parseCheckpointLower, which looks for each
// form's marker around the line's "checkpoint"s, reads every line as
// the search of the line once per form (parseCheckpointForms) does.
func TestCheckpointLowerDispatch(t *testing.T) {
	var fast, slow pipeline.CheckpointLine
	hits := 0
	for _, l := range testdataLines(t, checkpointEdgeCases...) {
		if !bytes.Contains(l, tokCheckpointLower) {
			continue
		}
		fast.Reset()
		slow.Reset()
		okF, okS := parseCheckpointLower(l, &fast), parseCheckpointForms(l, &slow)
		if okF != okS || !sameParse(fast, slow) {
			t.Errorf("parseCheckpointLower(%q) = %v %+v; parseCheckpointForms = %v %+v", l, okF, fast, okS, slow)
		}
		if okF {
			hits++
		}
	}
	if hits < 20 {
		t.Fatalf("%d checkpoint lines read; want the testdata's", hits)
	}
}

// sameParse compares two parse results field by field, NaN equal to NaN
// (the parsers' "absent").
func sameParse(a, b any) bool { return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) }
