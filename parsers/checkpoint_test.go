package parsers

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestCheckpointGolden folds every line of the real excerpts in
// testdata/checkpoints through ParseCheckpoint and compares the reports with
// EXPECTED.json (written from the rules before the parser ran).
func TestCheckpointGolden(t *testing.T) {
	b, err := os.ReadFile("../testdata/checkpoints/EXPECTED.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]pipeline.CheckpointReport
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../testdata/checkpoints/*.log")
	if len(files) != len(want) {
		t.Fatalf("%d excerpts, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s pipeline.CheckpointSeries
		var l pipeline.CheckpointLine
		for _, line := range bytes.Split(data, []byte("\n")) {
			if ParseCheckpoint(line, &l) {
				s.Add(&l)
			}
		}
		got := s.Reports()
		if w := want[filepath.Base(f)]; !reflect.DeepEqual(got, w) {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(w)
			t.Errorf("%s:\n got %s\nwant %s", filepath.Base(f), gb, wb)
		}
	}
}

// checkpointCases are real lines (testdata/checkpoints) and near misses.
var checkpointCases = []struct {
	name string
	in   string
	want pipeline.CheckpointLine
	ok   bool
}{
	{"megatron save start", "2026-01-09 17:40:26.049709 master-0 >> saving checkpoint at iteration   10000 to /ckpt/checkpoint-10000 in torch_dist format",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointSaveStart, Framework: "megatron", Path: []byte("/ckpt/checkpoint-10000"), Step: 10000, HasStep: true}, true},
	{"megatron save end", "  successfully saved checkpoint from iteration     845 to /tmp/run [ t 1/1, p 1/1 ]",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointSaveEnd, Framework: "megatron", Path: []byte("/tmp/run"), Step: 845, HasStep: true}, true},
	{"megatron load", " loading checkpoint from /nas/megatron_gpt/ at iteration 100",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointLoad, Framework: "megatron", Path: []byte("/nas/megatron_gpt/")}, true},
	{"hf save", "[INFO|trainer.py:2103] 2022-01-28 23:53:21,517 >> Saving model checkpoint to /tmp/debug_squad/checkpoint-1500",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointSave, Framework: "hf_trainer", Path: []byte("/tmp/debug_squad/checkpoint-1500"), Step: 1500, HasStep: true}, true},
	{"deepspeed start", "[2023-12-12 06:20:12,261] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step10 is about to be saved!",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointSaveStart, Framework: "deepspeed", Step: 10, HasStep: true}, true},
	{"deepspeed file", "[Rank 0] Saving model checkpoint: /s/tmp-checkpoint-10/global_step10/zero_pp_rank_0_mp_rank_00_model_states.pt",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointFile, Framework: "deepspeed", Path: []byte("/s/tmp-checkpoint-10/global_step10")}, true},
	{"fairseq saved", "2022-11-09 12:41:48 | INFO | metaseq.checkpoint_utils | Saved checkpoint /s/c.pt (epoch 1 @ 10 updates) (writing took 1.2194619262591004 seconds)",
		pipeline.CheckpointLine{Kind: pipeline.CheckpointSave, Framework: "fairseq", Path: []byte("/s/c.pt"), Step: 10, HasStep: true, Seconds: 1.2194619262591004, HasSecs: true}, true},
	{"dlrover set-up", "[ckpt_saver.py:472:_sync_shm_to_storage] Async flash checkpoint saver starts!", pipeline.CheckpointLine{}, false},
	{"checkpoint value", " > using checkpoint value 0.00015 for learning rate", pipeline.CheckpointLine{}, false},
	{"no token", "iter 10: loss 3.2202, time 893.76ms, mfu 16.68%", pipeline.CheckpointLine{}, false},
}

func TestParseCheckpoint(t *testing.T) {
	var l pipeline.CheckpointLine
	for _, tc := range checkpointCases {
		for range 2 { // twice: no state may leak between calls
			ok := ParseCheckpoint([]byte(tc.in), &l)
			if ok != tc.ok || !reflect.DeepEqual(l, tc.want) && tc.ok {
				t.Errorf("%s: ParseCheckpoint(%q) = %v %+v; want %v %+v", tc.name, tc.in, ok, l, tc.ok, tc.want)
			}
		}
	}
}

func BenchmarkParseCheckpoint(b *testing.B) {
	var l pipeline.CheckpointLine
	b.ReportAllocs()
	for b.Loop() {
		for _, tc := range checkpointCases {
			b.SetBytes(int64(len(tc.in)))
			ParseCheckpoint([]byte(tc.in), &l)
		}
	}
}

// FuzzParseCheckpoint: never panics, and a parsed path is part of the line.
func FuzzParseCheckpoint(f *testing.F) {
	for _, tc := range checkpointCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if len(line) > 64<<10 {
			return
		}
		var l pipeline.CheckpointLine
		if ParseCheckpoint(line, &l) {
			if !bytes.Contains(line, l.Path) || l.Framework == "" || l.Kind == pipeline.CheckpointNone {
				t.Errorf("ParseCheckpoint(%q) = %+v: path not in the line, or no framework/kind", line, l)
			}
		}
	})
}
