package parsers

import (
	"bytes"
	"strconv"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Checkpoint lines of the common trainers, as printed (samples and sources
// in testdata/checkpoints/SOURCES.md):
//
//	Megatron-LM  saving checkpoint at iteration   10000 to PATH in torch_dist format      (003)
//	             successfully saved checkpoint from iteration     845 to PATH [ t 1/1, p 1/1 ]
//	              loading checkpoint from PATH at iteration 100                           (004)
//	HF Trainer   … >> Saving model checkpoint to PATH/checkpoint-1500                      (001, 002)
//	DeepSpeed    [Torch] Checkpoint global_step10 is about to be saved!                    (002)
//	             Saving model checkpoint: PATH/global_step10/zero_pp_rank_0_…_model_states.pt
//	             [Torch] Checkpoint global_step10 is ready now!
//	fairseq      Saved checkpoint PATH (epoch 1 @ 10 updates) (writing took 1.21 seconds)  (005)
var (
	ckptToken          = []byte("heckpoint")
	ckptMegatronSave   = []byte("saving checkpoint at iteration")
	ckptMegatronSaved  = []byte("successfully saved checkpoint ")
	ckptMegatronLoad   = []byte("loading checkpoint from ")
	ckptHFSave         = []byte("Saving model checkpoint to ")
	ckptDeepSpeedFile  = []byte("Saving model checkpoint: ")
	ckptDeepSpeedTorch = []byte("[Torch] Checkpoint ")
	ckptDeepSpeedStart = []byte(" is about to be saved!")
	ckptDeepSpeedReady = []byte(" is ready now!")
	ckptFairseqSaved   = []byte("Saved checkpoint ")
	ckptIteration      = []byte("iteration")
	ckptTo             = []byte(" to ")
	ckptAtIteration    = []byte(" at iteration ")
	ckptEpoch          = []byte(" (epoch ")
	ckptUpdates        = []byte(" updates")
	ckptWritingTook    = []byte("(writing took ")
	ckptGlobalStep     = []byte("global_step")
	ckptDash           = []byte("checkpoint-")
)

// checkpointTokens are the telemetry finder's tokens for checkpoint lines
// (finder.go).
var checkpointTokens = [...][]byte{ckptToken}

// CheckpointCandidate reports whether line may be a checkpoint line (the
// one token every format above holds).
func CheckpointCandidate(line []byte) bool { return bytes.Contains(line, ckptToken) }

// ParseCheckpoint parses one checkpoint save or load line into out and
// reports whether it was one. out.Path aliases line.
func ParseCheckpoint(line []byte, out *pipeline.CheckpointLine) bool {
	*out = pipeline.CheckpointLine{}
	if !CheckpointCandidate(line) {
		return false
	}
	switch {
	case megatronSave(line, out), deepSpeed(line, out), hfSave(line, out), fairseqSaved(line, out):
		return true
	}
	return false
}

// untilSpace returns b up to the first space (or its end), without a
// trailing carriage return.
func untilSpace(b []byte) []byte {
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	return bytes.TrimRight(b, "\r")
}

// ckptInt parses the digits at the start of b (after spaces).
func ckptInt(b []byte) (int64, []byte, bool) {
	b = bytes.TrimLeft(b, " ")
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, b, false
	}
	v, err := strconv.ParseInt(string(b[:n]), 10, 64)
	return v, b[n:], err == nil
}

func megatronSave(line []byte, out *pipeline.CheckpointLine) bool {
	var rest []byte
	switch {
	case bytes.Contains(line, ckptMegatronSaved):
		_, after, _ := bytes.Cut(line, ckptMegatronSaved)
		// "at iteration N" (older) or "from iteration N".
		i := bytes.Index(after, ckptIteration)
		if i < 0 || i > len("from ") {
			return false
		}
		out.Kind, rest = pipeline.CheckpointSaveEnd, after[i+len(ckptIteration):]
	case bytes.Contains(line, ckptMegatronSave):
		_, after, _ := bytes.Cut(line, ckptMegatronSave)
		out.Kind, rest = pipeline.CheckpointSaveStart, after
	case bytes.Contains(line, ckptMegatronLoad):
		// " loading checkpoint from PATH at iteration N": the step is the
		// one loaded, not a save step.
		_, after, _ := bytes.Cut(line, ckptMegatronLoad)
		path, _, ok := bytes.Cut(after, ckptAtIteration)
		if !ok {
			return false
		}
		out.Kind, out.Framework, out.Path = pipeline.CheckpointLoad, "megatron", bytes.TrimSpace(path)
		return true
	default:
		return false
	}
	step, rest, ok := ckptInt(rest)
	if !ok || !bytes.HasPrefix(rest, ckptTo) {
		return false
	}
	out.Framework, out.Step, out.HasStep = "megatron", step, true
	out.Path = untilSpace(rest[len(ckptTo):])
	return true
}

func hfSave(line []byte, out *pipeline.CheckpointLine) bool {
	_, after, ok := bytes.Cut(line, ckptHFSave)
	if !ok {
		return false
	}
	out.Kind, out.Framework, out.Path = pipeline.CheckpointSave, "hf_trainer", bytes.TrimRight(after, " \t\r")
	// The Trainer names the folder checkpoint-<global step>.
	if i := bytes.LastIndex(out.Path, ckptDash); i >= 0 {
		if v, rest, ok := ckptInt(out.Path[i+len(ckptDash):]); ok && len(rest) == 0 {
			out.Step, out.HasStep = v, true
		}
	}
	return true
}

func deepSpeed(line []byte, out *pipeline.CheckpointLine) bool {
	if _, after, ok := bytes.Cut(line, ckptDeepSpeedFile); ok {
		file := bytes.TrimRight(after, " \t\r")
		i := bytes.LastIndexByte(file, '/')
		if i <= 0 {
			return false
		}
		out.Kind, out.Framework, out.Path = pipeline.CheckpointFile, "deepspeed", file[:i]
		return true
	}
	_, after, ok := bytes.Cut(line, ckptDeepSpeedTorch)
	if !ok {
		return false
	}
	var tag []byte
	switch {
	case bytes.Contains(after, ckptDeepSpeedStart):
		tag, _, _ = bytes.Cut(after, ckptDeepSpeedStart)
		out.Kind = pipeline.CheckpointSaveStart
	case bytes.Contains(after, ckptDeepSpeedReady):
		tag, _, _ = bytes.Cut(after, ckptDeepSpeedReady)
		out.Kind = pipeline.CheckpointSaveEnd
	default:
		return false
	}
	out.Framework = "deepspeed"
	if v, rest, ok := ckptInt(bytes.TrimPrefix(tag, ckptGlobalStep)); ok && len(rest) == 0 && bytes.HasPrefix(tag, ckptGlobalStep) {
		out.Step, out.HasStep = v, true
	}
	return true
}

func fairseqSaved(line []byte, out *pipeline.CheckpointLine) bool {
	_, after, ok := bytes.Cut(line, ckptFairseqSaved)
	if !ok {
		return false
	}
	path, rest, ok := bytes.Cut(after, ckptEpoch)
	if !ok {
		return false
	}
	out.Kind, out.Framework, out.Path = pipeline.CheckpointSave, "fairseq", path
	// "(epoch 1 @ 10 updates, score …) (writing took 1.2 seconds)"
	if _, u, ok := bytes.Cut(rest, []byte("@ ")); ok {
		if v, tail, ok := ckptInt(u); ok && bytes.HasPrefix(tail, ckptUpdates) {
			out.Step, out.HasStep = v, true
		}
	}
	if _, w, ok := bytes.Cut(rest, ckptWritingTook); ok {
		num := untilSpace(w)
		if v, err := strconv.ParseFloat(string(num), 64); err == nil {
			out.Seconds, out.HasSecs = v, true
		}
	}
	return true
}
