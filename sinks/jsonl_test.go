package sinks

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func TestJSONLinesWritesEveryTable(t *testing.T) {
	dir := t.TempDir()
	s, err := NewJSONLines(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := &pipeline.Batch{
		Events:      []pipeline.EventRow{{Job: "j", Kind: "network", Line: "h:1:1 [0] NCCL INFO Using network IB"}},
		Jobs:        []pipeline.JobSummary{{Job: "j", Verdict: pipeline.VerdictOK, Version: 1}},
		Comms:       []pipeline.CommSummary{{Job: "j", CommID: "0x1"}},
		Alerts:      []pipeline.Alert{{Rule: "NCCLSocketFallback", Job: "j", State: "firing"}},
		Steps:       []pipeline.TrainingStep{{StepSeries: &pipeline.StepSeries{Pod: "p-0", Series: 42}, Step: 7}},
		TestRuns:    []pipeline.NCCLTestRun{{AvgBusBW: math.NaN(), OOP: pipeline.NCCLTestResult{BusBW: math.NaN()}}},
		DeadLetters: []pipeline.DeadLetter{{Reason: "malformed: x", Raw: []byte("{")}},
	}
	for i := 0; i < 2; i++ {
		if err := s.Consume(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"nccl_events", "job_summaries", "comm_summaries", "alerts", "training_steps", "nccl_test_results", "dead_letters"} {
		f, err := os.Open(filepath.Join(dir, table+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Errorf("%s line %d: %v", table, n+1, err)
			}
			// A step keeps its strings; the series key is storage's.
			if _, ok := v["Series"]; table == "training_steps" && (ok || v["Pod"] != "p-0" || v["Step"] != 7.0) {
				t.Errorf("training_steps line %d = %s; want Pod p-0, Step 7 and no Series", n+1, sc.Bytes())
			}
			n++
		}
		f.Close()
		if n != 2 {
			t.Errorf("%s: %d lines; want 2 (appended twice)", table, n)
		}
	}
}
