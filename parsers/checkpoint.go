package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Checkpoint lines: what trainers print when they save or load their
// state. Every format named here cites the sample in testdata/checkpoints
// (SOURCES.md) that shows it, or the trainer's source when no published
// log shows it.

// maxCheckpointPath bounds a path kept from a line: PATH_MAX on Linux. A
// longer "path" is not one, and the event keeps no path.
const maxCheckpointPath = 4096

// Checkpoint parses checkpoint save and load lines of Megatron-LM (and
// Megatron-DeepSpeed, NeMo 2 / Megatron-Bridge, which print Megatron's
// lines), DeepSpeed's checkpoint engines, the Hugging Face Trainer,
// PyTorch Lightning, torchtitan (which writes PyTorch Distributed
// Checkpoints), NeMo 2, torchtune, TensorFlow's Estimator, Flax and Orbax.
// Which kind of line each form is (start, end, single, file, figure)
// follows docs/checkpoints.md. It keeps no state: events are assembled by
// pipeline.TelemetryAssembler. The zero value is ready; it is safe to reuse
// and not safe for concurrent use.
type Checkpoint struct{}

// Checkpoint markers: every checkpoint line holds one of these, so a line
// without any is rejected after two substring searches.
var (
	tokCheckpointLower = []byte("checkpoint")
	tokCheckpointUpper = []byte("Checkpoint")
	tokSavingModelTo   = []byte("saving model to ")
	// TensorFlow's Saver (212, 214): "Restoring parameters from
	// ./model/model.ckpt-1000", a load whose line holds no "checkpoint".
	tokRestoringParameters = []byte("Restoring parameters from ")
)

// CheckpointTokens are the prefilter's substrings for checkpoint lines
// (TelemetryCandidate and the telemetry finder use them).
var CheckpointTokens = [...][]byte{tokCheckpointLower, tokCheckpointUpper, tokSavingModelTo, tokRestoringParameters}

// Parse reads one line whose launcher prefix, colours and trailing blanks
// are removed (Telemetry.Parse does that and then calls it). It reports
// whether the line is a checkpoint line; when it is, cl holds it, with Path
// aliasing b (valid while b is). cl is reset first.
func (c *Checkpoint) Parse(b []byte, cl *pipeline.CheckpointLine) bool {
	return c.parse(b, cl, lineSet.mask(b))
}

// parse is Parse with the markers found in b: lineSet.mask(b).
func (c *Checkpoint) parse(b []byte, cl *pipeline.CheckpointLine, m uint64) bool {
	cl.Reset()
	if len(b) == 0 || len(b) > maxTelemetryLine {
		return false
	}
	ok := m&(1<<markCheckpointLower) != 0 && parseCheckpointLower(b, cl)
	if !ok && m&(1<<markCheckpointUpper) != 0 {
		cl.Reset()
		ok = parseCheckpointUpper(b, cl)
	}
	if !ok && m&(1<<markSavingModelTo) != 0 {
		cl.Reset()
		ok = parseLightningSave(b, cl)
	}
	if !ok && m&(1<<markRestoringParameters) != 0 {
		cl.Reset()
		ok = tfRestoring(b, cl)
	}
	if !ok || cl.Op == 0 || cl.Phase == 0 {
		cl.Reset()
		return false
	}
	if len(cl.Path) > maxCheckpointPath {
		cl.Path = nil
	}
	return true
}

// checkpointForm is one line form: the marker that finds it and the
// function that reads it (b is the whole line, i the marker's index).
type checkpointForm struct {
	marker []byte
	parse  func(b []byte, i int, cl *pipeline.CheckpointLine) bool
}

// Forms whose text holds "checkpoint", tried in order; the first whose
// marker is present and whose parser accepts the line wins.
var lowerForms = [...]checkpointForm{
	// Megatron-LM (101): "saving checkpoint at iteration      35 to
	// /root/…/checkpoints in torch_dist format"; before 2024 without
	// " in … format" (Megatron-LM checkpointing.py).
	{[]byte("saving checkpoint at iteration "), megatronSaving},
	// Megatron-LM (101): "  successfully saved checkpoint from iteration
	// 35 to /root/…/checkpoints [ t 1/4, p 1/2 ]"; before 2024 "… at
	// iteration     100 to /path".
	{[]byte("successfully saved checkpoint "), megatronSaved},
	// Megatron-LM (004): " loading checkpoint from /nas/megatron_gpt/ at
	// iteration 100"; also "loading release checkpoint from …".
	{[]byte("loading checkpoint from "), megatronLoading},
	{[]byte("loading release checkpoint from "), megatronLoading},
	// Megatron-LM: " successfully loaded checkpoint from /path [ t 1/4,
	// p 1/2 ] at iteration 100" (checkpointing.py load_checkpoint).
	{[]byte("successfully loaded checkpoint from "), megatronLoaded},
	// Megatron-LM timers (101): "    save-checkpoint ……: (109332.44,
	// 109332.57)", milliseconds (min, max) across ranks.
	{[]byte("save-checkpoint"), megatronTimer},
	{[]byte("load-checkpoint"), megatronTimer},
	// Hugging Face Trainer (104): "… >> Saving model checkpoint to
	// /fsx/…/checkpoint-1136".
	{[]byte("Saving model checkpoint to "), hfSaving},
	// DeepSpeed (102): "… [Rank 0] Saving model checkpoint:
	// experiments/…/global_step10/mp_rank_00_model_states.pt".
	{[]byte("Saving model checkpoint: "), deepSpeedPath},
	// DeepSpeed (235): "[engine.py:3381:_save_zero_checkpoint] zero
	// checkpoint saved …/global_step2/zero_pp_rank_0_mp_rank_00_optim_
	// states.pt", a file of the save in progress.
	{[]byte("zero checkpoint saved "), deepSpeedZeroFile},
	// torchtitan (103): "Saving the checkpoint (or staging if async is
	// enabled)." and "Finished saving the checkpoint (or staging if async
	// is enabled)in 0.02 seconds."; before async (2024) "Saving a full
	// checkpoint at last step, step 1000." and "Finished saving the
	// checkpoint in 2.84 seconds." (torchtitan checkpoint.py).
	{[]byte("Finished saving the checkpoint"), titanFinished},
	{[]byte("Saving the checkpoint"), titanSaving},
	{[]byte("checkpoint at last step, step "), titanSaving},
	{[]byte("Finished loading the checkpoint"), titanFinished},
	// torchtitan: "Loading the checkpoint from ./outputs/checkpoint/
	// step-10." and "Loading the checkpoint at step 10." (checkpoint.py).
	{[]byte("Loading the checkpoint "), titanLoading},
	// torchtitan's async saver (103): "Received async checkpoint request
	// with id=./outputs/checkpoint/step-800".
	{[]byte("Received async checkpoint request with id="), titanAsyncID},
	// NeMo 2 (210): "Successfully saved checkpoint from iteration       0
	// to nemo_llama_nemotron_model", after its async finalisation.
	{[]byte("Successfully saved checkpoint from iteration "), nemoSaved},
	// torchtune (211): "Saving checkpoint. This may take some time.
	// Retrieving full model state dict...", then "Saving checkpoint took
	// 6.64 secs"; (211, 216, 217) "Model checkpoint of size 2.30 GiB saved
	// to FILE", "Adapter …", "Recipe …" per file.
	{[]byte("Saving checkpoint. This may take some time."), tuneSaving},
	{[]byte("Saving checkpoint took "), tuneTook},
	{[]byte(" checkpoint of size "), tuneFile},
	// TensorFlow Estimator (212-215): "Saving checkpoints for 1001 into
	// ./model/model.ckpt." (CheckpointSaverHook).
	{[]byte("Saving checkpoints for "), tfSaving},
	// Flax on absl logging (218): "… checkpoints.py:571] Saving checkpoint
	// at step: 2000", printed by every host.
	{[]byte("Saving checkpoint at step: "), flaxSaving},
	// Orbax's CheckpointManager (231): "checkpoint_manager.py:1512]
	// [process=0] Saving checkpoint at step 19"; Levanter: "Saving
	// checkpoint at step 9485 to gs://…/step-9485" (checkpoint.py).
	{[]byte("Saving checkpoint at step "), atStepSaving},
	// TensorFlow's Supervisor (233, 234): "INFO:tensorflow:Saving
	// checkpoint to path training/model.ckpt".
	{[]byte("Saving checkpoint to path "), tfSupervisorSaving},
	// Levanter (232), on every host: "Saving checkpoint to gs://…/step-9485
	// for step 9485", then "Saved checkpoint to … for step 9485".
	{[]byte("Saving checkpoint to "), levanterSaving},
	{[]byte("Saved checkpoint to "), levanterSaving},
	// nanoGPT (train.py): "saving checkpoint to out", the whole line.
	{[]byte("saving checkpoint to "), nanoGPTSaving},
	// Orbax (218): "[process=0] [sync] Started save checkpoint @ PATH."
	// (event_tracking.py), per process.
	{[]byte("Started save checkpoint @ "), orbaxStarted},
	// Orbax's async checkpointer (236, 239): "[process=0] Started async
	// saving checkpoint to PATH.".
	{[]byte("Started async saving checkpoint to "), orbaxStarted},
	// fairseq and metaseq (005): "Saved checkpoint /scratch/…/checkpoint_10-
	// model_part-0-shard0.pt (epoch 1 @ 10 updates) (writing took
	// 1.2194619262591004 seconds)", one line per save (checkpoint_utils.py);
	// its "Saving checkpoint to" / "Finished saving checkpoint to" lines
	// are per shard and not read.
	{[]byte("Saved checkpoint "), fairseqSaved},
	// Lightning (105, 106): "Restoring states from the checkpoint path at
	// /…/epoch=9-step=16000-v1.ckpt", then "Loaded model weights from
	// checkpoint at …" or "Restored all states from the checkpoint at …".
	{[]byte("Restoring states from the checkpoint path at "), lightningRestoring},
	{[]byte("Restored all states from the checkpoint at "), lightningRestored},
	{[]byte("Loaded model weights from checkpoint at "), lightningRestored},
	{[]byte("Loaded model weights from the checkpoint at "), lightningRestored},
}

// lowerAt is where "checkpoint" lies in each marker of lowerForms: every
// marker holds it, so a marker is found by looking around the line's few
// "checkpoint"s instead of searching the whole line once per form (one
// search per form of a long line added up on torch's "torch/utils/
// checkpoint.py: UserWarning" lines, frequent in trainer output; the
// dispatch is compared with those searches by TestCheckpointLowerDispatch).
var lowerAt = func() (at [len(lowerForms)]int) {
	for i, f := range lowerForms {
		if at[i] = bytes.Index(f.marker, tokCheckpointLower); at[i] < 0 {
			panic("parsers: checkpoint form without \"checkpoint\": " + string(f.marker))
		}
	}
	return at
}()

// maxLowerHits is how many "checkpoint"s of a line parseCheckpointLower
// looks around; a line with more is searched form by form.
const maxLowerHits = 8

func parseCheckpointLower(b []byte, cl *pipeline.CheckpointLine) bool {
	var hits [maxLowerHits]int
	n := 0
	for from := 0; ; {
		// By its 'k' (indexBy): bytes.Index of "checkpoint" stops at
		// every 'c' ("local", "dist-packages", "torch"), a third of the
		// cost of a torch checkpoint warning line.
		k := indexBy(b[from:], "checkpoint", 4)
		if k < 0 {
			break
		}
		if n == len(hits) {
			return parseCheckpointForms(b, cl)
		}
		hits[n], n = from+k, n+1
		from += k + 1
	}
	for fi, f := range lowerForms {
		// The first occurrence of the marker is the first hit it
		// surrounds: every occurrence holds a hit at lowerAt[fi].
		for _, h := range hits[:n] {
			if i := h - lowerAt[fi]; i >= 0 && b[i] == f.marker[0] && bytes.HasPrefix(b[i:], f.marker) {
				if f.parse(b, i, cl) {
					return true
				}
				cl.Reset() // what the form wrote before it gave up
				break
			}
		}
	}
	return orbaxFinished(b, cl)
}

// parseCheckpointForms is parseCheckpointLower searching the line once per
// form.
func parseCheckpointForms(b []byte, cl *pipeline.CheckpointLine) bool {
	for _, f := range lowerForms {
		if i := bytes.Index(b, f.marker); i >= 0 && f.parse(b, i, cl) {
			return true
		}
		cl.Reset()
	}
	return orbaxFinished(b, cl)
}

// parseCheckpointUpper reads DeepSpeed's checkpoint engine lines (102):
// "[Torch] Checkpoint global_step10 is about to be saved!" and "[Torch]
// Checkpoint global_step10 is ready now!" ("[AsyncTorch]", "[Nebula]",
// "[DataStates]" engines print the same words).
func parseCheckpointUpper(b []byte, cl *pipeline.CheckpointLine) bool {
	i := bytes.Index(b, []byte("] Checkpoint "))
	if i < 0 {
		return nemoGlobal(b, cl)
	}
	rest := b[i+len("] Checkpoint "):]
	tag, after := nextField(rest)
	switch string(trimBlank(after)) {
	case "is about to be saved!":
		cl.Phase = pipeline.CheckpointStart
	case "is ready now!":
		cl.Phase = pipeline.CheckpointEnd
	default:
		return false
	}
	// Every rank commits (201 prints "is ready now!" five times).
	cl.Framework, cl.Op, cl.Repeated = pipeline.FrameworkDeepSpeed, pipeline.CheckpointSave, true
	// The default tag is "global_step<N>" (engine.py save_checkpoint).
	if hasPrefix(tag, "global_step") {
		cl.Step, _ = stepNumber(tag[len("global_step"):])
	}
	return true
}

// afterWord returns what follows word (a blank-separated field) at the
// start of b, trimmed.
func afterWord(b []byte, word string) ([]byte, bool) {
	w, rest := nextField(b)
	if string(w) != word {
		return nil, false
	}
	rest = trimBlank(rest)
	return rest, len(rest) > 0
}

// stepSuffix reads the step number a checkpoint's name ends with after
// prefix ("checkpoint-1136", "step-800", "epoch=9-step=16000-v1.ckpt"), -1
// when there is none.
func stepSuffix(p []byte, prefix string) int64 {
	k := bytes.LastIndex(p, []byte(prefix))
	if k < 0 {
		return -1
	}
	d := p[k+len(prefix):]
	e := 0
	for e < len(d) && isDigit(d[e]) {
		e++
	}
	// The number ends the name or a component of it.
	if e == 0 || e < len(d) && d[e] != '/' && d[e] != '-' && d[e] != '.' {
		return -1
	}
	n, ok := stepNumber(d[:e])
	if !ok {
		return -1
	}
	return n
}

// stepNumber reads a step or iteration count: unsigned decimal digits
// only, so "step -10" is no step (-1, false) rather than a negative one.
func stepNumber(b []byte) (int64, bool) {
	if len(b) == 0 || !isDigit(b[0]) {
		return -1, false
	}
	return atoi64(b)
}
