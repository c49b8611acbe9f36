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
// "checkpoint"s instead of searching the whole line once per form (21
// searches of a 250-byte line, 1.9 µs, for torch's "torch/utils/
// checkpoint.py: UserWarning" lines, 7 % of the load stream; the dispatch
// is compared with those searches by TestCheckpointLowerDispatch).
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

// megatronSaving reads "saving checkpoint at iteration N to PATH[ in FMT
// format]".
func megatronSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	rest := b[i+len("saving checkpoint at iteration "):]
	n, rest := nextField(rest)
	step, ok := stepNumber(n)
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Step = pipeline.FrameworkMegatron, pipeline.CheckpointSave, pipeline.CheckpointStart, step
	if p, ok := afterWord(rest, "to"); ok {
		if k := bytes.LastIndex(p, []byte(" in ")); k >= 0 && bytes.HasSuffix(p, []byte(" format")) {
			p = p[:k]
		}
		cl.Path = p
	}
	return true
}

// megatronSaved reads "successfully saved checkpoint (at|from) iteration N
// to PATH[ [ t 1/4, p 1/2 ]]".
func megatronSaved(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	rest := b[i+len("successfully saved checkpoint "):]
	w, rest := nextField(rest)
	if string(w) != "at" && string(w) != "from" {
		return false
	}
	w, rest = nextField(rest)
	if string(w) != "iteration" {
		return false
	}
	n, rest := nextField(rest)
	step, ok := stepNumber(n)
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Step = pipeline.FrameworkMegatron, pipeline.CheckpointSave, pipeline.CheckpointEnd, step
	if p, ok := afterWord(rest, "to"); ok {
		cl.Path = cutParallelRanks(p)
	}
	return true
}

// megatronLoading reads "loading [release ]checkpoint from PATH at
// iteration N".
func megatronLoading(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	rest := b[i:]
	rest = rest[bytes.Index(rest, []byte("from "))+len("from "):]
	k := bytes.LastIndex(rest, []byte(" at iteration "))
	if k < 0 {
		return false
	}
	step, ok := stepNumber(trimBlank(rest[k+len(" at iteration "):]))
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Step = pipeline.FrameworkMegatron, pipeline.CheckpointLoad, pipeline.CheckpointStart, step
	cl.Path = trimBlank(rest[:k])
	return true
}

// megatronLoaded reads "successfully loaded checkpoint from PATH[ [ t 1/4,
// p 1/2 ]] at iteration N".
func megatronLoaded(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	rest := b[i+len("successfully loaded checkpoint from "):]
	cl.Framework, cl.Op, cl.Phase = pipeline.FrameworkMegatron, pipeline.CheckpointLoad, pipeline.CheckpointEnd
	if k := bytes.LastIndex(rest, []byte(" at iteration ")); k >= 0 {
		cl.Step, _ = stepNumber(trimBlank(rest[k+len(" at iteration "):]))
		rest = rest[:k]
	}
	cl.Path = cutParallelRanks(trimBlank(rest))
	return true
}

// cutParallelRanks drops Megatron's " [ t 1/4, p 1/2 ]" from the end of a
// path.
func cutParallelRanks(p []byte) []byte {
	if k := bytes.LastIndex(p, []byte(" [ t ")); k >= 0 && bytes.HasSuffix(p, []byte("]")) {
		p = p[:k]
	}
	return trimBlank(p)
}

// megatronTimer reads a timer line of "(min, max) time across ranks
// (ms):": "save-checkpoint ……: (109332.44, 109332.57)", or one figure
// ("save-checkpoint ……: 1234.5") where a single rank reports. The slowest
// rank's time is the job's: the others wait for it at the barrier.
func megatronTimer(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	// The name starts the line, follows a blank, or follows its header on
	// the same line (207: "(min, max) time across ranks
	// (ms):save-checkpoint …").
	if len(trimBlank(b[:i])) > 0 && !bytes.HasSuffix(b[:i], []byte(" ")) && !bytes.HasSuffix(b[:i], []byte("(ms):")) {
		return false
	}
	name := b[i : i+len("save-checkpoint")]
	rest := b[i+len(name):]
	// The name is padded with dots (or blanks) up to a colon.
	k := 0
	for k < len(rest) && (rest[k] == '.' || rest[k] == ' ') {
		k++
	}
	if k >= len(rest) || rest[k] != ':' {
		return false
	}
	val := trimBlank(rest[k+1:])
	if len(val) > 1 && val[0] == '(' && val[len(val)-1] == ')' {
		_, hi, ok := bytes.Cut(val[1:len(val)-1], []byte(","))
		if !ok {
			return false
		}
		val = trimBlank(hi)
	}
	d, ok := parseScaled(val, -3)
	if !ok || d < 0 {
		return false
	}
	cl.Framework, cl.Phase, cl.Duration = pipeline.FrameworkMegatron, pipeline.CheckpointAmend, d
	cl.Op = pipeline.CheckpointSave
	if name[0] == 'l' {
		cl.Op = pipeline.CheckpointLoad
	}
	return true
}

// hfSaving reads the Trainer's "Saving model checkpoint to PATH"; the
// directory of a periodic save is "checkpoint-<global step>"
// (trainer.py PREFIX_CHECKPOINT_DIR).
func hfSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	p := trimBlank(b[i+len("Saving model checkpoint to "):])
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkHF, pipeline.CheckpointSave, pipeline.CheckpointSingle, p
	cl.Step = stepSuffix(p, "checkpoint-")
	return true
}

// deepSpeedPath reads "Saving model checkpoint: FILE", a model file of the
// save in progress; the save's path is the file's folder (…/global_step10).
func deepSpeedPath(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	p := trimBlank(b[i+len("Saving model checkpoint: "):])
	if k := bytes.LastIndexByte(p, '/'); k > 0 {
		p = p[:k]
	}
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkDeepSpeed, pipeline.CheckpointSave, pipeline.CheckpointFile, p
	return true
}

// deepSpeedZeroFile reads "zero checkpoint saved FILE": the save's path is
// the file's folder.
func deepSpeedZeroFile(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	p := firstField(b[i+len("zero checkpoint saved "):])
	k := bytes.LastIndexByte(p, '/')
	if k <= 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkDeepSpeed, pipeline.CheckpointSave, pipeline.CheckpointFile, p[:k]
	return true
}

// atStepSaving reads "Saving checkpoint at step N to PATH" (Levanter) and
// Orbax CheckpointManager's "checkpoint_manager.py:NNN] [process=P] Saving
// checkpoint at step N"; both are printed by every host. Other lines of
// these words (a script's own print) are no checkpoint lines.
func atStepSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	n, rest := nextField(b[i+len("Saving checkpoint at step "):])
	step, ok := stepNumber(n)
	if !ok {
		return false
	}
	switch p, to := afterWord(rest, "to"); {
	case to:
		cl.Framework, cl.Path = pipeline.FrameworkLevanter, p
	case len(trimBlank(rest)) == 0 && bytes.Contains(b[:i], []byte("checkpoint_manager.py:")):
		cl.Framework = pipeline.FrameworkOrbax
	default:
		return false
	}
	cl.Op, cl.Phase, cl.Step, cl.Repeated = pipeline.CheckpointSave, pipeline.CheckpointStart, step, true
	return true
}

// tfSupervisorSaving reads "Saving checkpoint to path PATH", one save of
// the Supervisor's saver thread (it prints no step).
func tfSupervisorSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	p := trimBlank(b[i+len("Saving checkpoint to path "):])
	if len(p) == 0 || bytes.IndexByte(p, ' ') >= 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkTensorFlow, pipeline.CheckpointSave, pipeline.CheckpointSingle, p
	cl.Step = stepSuffix(p, "ckpt-")
	return true
}

// levanterSaving reads "Saving|Saved checkpoint to PATH for step N"; the
// step ends the line, which keeps fairseq's per-shard "Saving checkpoint
// to FILE" out.
func levanterSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	start := b[i+len("Sav")] == 'i'
	rest := b[i+len("Saved checkpoint to "):]
	if start {
		rest = b[i+len("Saving checkpoint to "):]
	}
	k := bytes.LastIndex(rest, []byte(" for step "))
	if k <= 0 {
		return false
	}
	step, ok := stepNumber(trimBlank(rest[k+len(" for step "):]))
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Step, cl.Path, cl.Repeated = pipeline.FrameworkLevanter, pipeline.CheckpointSave, step, trimBlank(rest[:k]), true
	cl.Phase = pipeline.CheckpointEnd
	if start {
		cl.Phase = pipeline.CheckpointStart
	}
	return true
}

// nanoGPTSaving reads nanoGPT's "saving checkpoint to OUT_DIR": the line is
// those words and one path (a quoted paste's "> " before them is allowed).
func nanoGPTSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	if head := trimBlank(b[:i]); len(head) > 0 && string(head) != ">" {
		return false
	}
	p := trimBlank(b[i+len("saving checkpoint to "):])
	if len(p) == 0 || bytes.IndexByte(p, ' ') >= 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkNanoGPT, pipeline.CheckpointSave, pipeline.CheckpointSingle, p
	return true
}

// titanSaving reads the start of a torchtitan save.
func titanSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	cl.Framework, cl.Op, cl.Phase = pipeline.FrameworkTorchtitan, pipeline.CheckpointSave, pipeline.CheckpointStart
	if k := bytes.Index(b, []byte("last step, step ")); k >= 0 {
		cl.Step, _ = stepNumber(bytes.TrimRight(firstField(b[k+len("last step, step "):]), "."))
	}
	return true
}

// titanLoading reads "Loading the checkpoint from PATH." or "Loading the
// checkpoint at step N.".
func titanLoading(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	rest := bytes.TrimSuffix(trimBlank(b[i+len("Loading the checkpoint "):]), []byte("."))
	switch {
	case hasPrefix(rest, "from "):
		cl.Path = trimBlank(rest[len("from "):])
		cl.Step = stepSuffix(cl.Path, "step-")
	case hasPrefix(rest, "at step "):
		cl.Step, _ = stepNumber(rest[len("at step "):])
	default:
		return false
	}
	cl.Framework, cl.Op, cl.Phase = pipeline.FrameworkTorchtitan, pipeline.CheckpointLoad, pipeline.CheckpointStart
	return true
}

// titanFinished reads "Finished saving|loading the checkpoint …in X
// seconds." (the async form has no blank before "in").
func titanFinished(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	cl.Framework, cl.Phase = pipeline.FrameworkTorchtitan, pipeline.CheckpointEnd
	cl.Op = pipeline.CheckpointSave
	if b[i+len("Finished ")] == 'l' {
		cl.Op = pipeline.CheckpointLoad
	}
	if k := bytes.LastIndex(b, []byte(" seconds")); k > i {
		s := k
		for s > 0 && (isDigit(b[s-1]) || b[s-1] == '.') {
			s--
		}
		if s < k && s >= 3 && string(b[s-3:s]) == "in " {
			cl.Duration, _ = parseNumber(b[s:k])
		}
	}
	return true
}

// titanAsyncID reads the async saver's request id: the checkpoint's
// folder, "…/step-800".
func titanAsyncID(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	p := firstField(b[i+len("Received async checkpoint request with id="):])
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkTorchtitan, pipeline.CheckpointSave, pipeline.CheckpointAmend, p
	cl.Step = stepSuffix(p, "step-")
	return true
}

// fairseqSaved reads "Saved checkpoint PATH (epoch E @ N updates[, score
// S]) (writing took X seconds)": the step is N updates.
func fairseqSaved(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	rest := b[i+len("Saved checkpoint "):]
	k := bytes.Index(rest, []byte(" (epoch "))
	if k <= 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkFairseq, pipeline.CheckpointSave, pipeline.CheckpointSingle, rest[:k]
	tail := rest[k:]
	if a := bytes.Index(tail, []byte("@ ")); a >= 0 {
		n, r := nextField(tail[a+2:])
		if v, ok := stepNumber(n); ok && hasPrefix(trimBlank(r), "updates") {
			cl.Step = v
		}
	}
	if w := bytes.Index(tail, []byte("(writing took ")); w >= 0 {
		if v, ok := parseNumber(firstField(tail[w+len("(writing took "):])); ok && v >= 0 {
			cl.Duration = v
		}
	}
	return true
}

func lightningRestoring(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	return lightningLoad(b[i+len("Restoring states from the checkpoint path at "):], pipeline.CheckpointStart, cl)
}

func lightningRestored(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	m := len("Restored all states from the checkpoint at ")
	switch {
	case bytes.HasPrefix(b[i:], []byte("Loaded model weights from checkpoint at ")):
		m = len("Loaded model weights from checkpoint at ")
	case bytes.HasPrefix(b[i:], []byte("Loaded model weights from the checkpoint at ")):
		m = len("Loaded model weights from the checkpoint at ")
	}
	return lightningLoad(b[i+m:], pipeline.CheckpointEnd, cl)
}

func lightningLoad(p []byte, phase pipeline.CheckpointPhase, cl *pipeline.CheckpointLine) bool {
	p = trimBlank(p)
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkLightning, pipeline.CheckpointLoad, phase, p
	cl.Step = stepSuffix(p, "step=")
	return true
}

// parseLightningSave reads ModelCheckpoint's verbose line (105): "Epoch 9,
// global step 16000: 'dev_loss' reached 0.28007 (best 0.28007), saving
// model to '/…/epoch=9-step=16000-v1.ckpt' as top 1", or without a
// monitor "Epoch 9, global step 16000: saving model to '…'".
func parseLightningSave(b []byte, cl *pipeline.CheckpointLine) bool {
	g := bytes.Index(b, []byte("global step "))
	s := bytes.Index(b, tokSavingModelTo)
	if g < 0 || s < g {
		return false
	}
	step, ok := stepNumber(bytes.TrimSuffix(firstField(b[g+len("global step "):]), []byte(":")))
	if !ok {
		return false
	}
	p := b[s+len(tokSavingModelTo):]
	if len(p) < 2 || p[0] != '\'' {
		return false
	}
	e := bytes.IndexByte(p[1:], '\'')
	if e < 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase = pipeline.FrameworkLightning, pipeline.CheckpointSave, pipeline.CheckpointSingle
	cl.Step, cl.Path = step, p[1:1+e]
	return true
}

// nemoGlobal reads NeMo's one-line save (210): "Global Checkpoint Save :
// Rank: 0 : Iteration: 0 : Start time: 1755612135.735s : Save duration:
// 13.567s" (NeMo 1 prints no Iteration field).
func nemoGlobal(b []byte, cl *pipeline.CheckpointLine) bool {
	const marker = "Global Checkpoint Save : "
	i := bytes.Index(b, []byte(marker))
	if i < 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase = pipeline.FrameworkNeMo, pipeline.CheckpointSave, pipeline.CheckpointSingle
	for rest := b[i+len(marker):]; len(rest) > 0; {
		field, after, _ := bytes.Cut(rest, []byte(" : "))
		rest = after
		name, val, ok := bytes.Cut(field, []byte(": "))
		if !ok {
			continue
		}
		val = trimBlank(val)
		switch string(name) {
		case "Iteration":
			cl.Step, _ = stepNumber(val)
		case "Save duration":
			if d, ok := parseNumber(bytes.TrimSuffix(val, []byte("s"))); ok && d >= 0 {
				cl.Duration = d
			}
		}
	}
	return true
}

// nemoSaved reads NeMo's "Successfully saved checkpoint from iteration N
// to PATH", the end of a save whose one-line start gave its duration.
func nemoSaved(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	n, rest := nextField(b[i+len("Successfully saved checkpoint from iteration "):])
	step, ok := stepNumber(n)
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Step = pipeline.FrameworkNeMo, pipeline.CheckpointSave, pipeline.CheckpointEnd, step
	if p, ok := afterWord(rest, "to"); ok {
		cl.Path = p
	}
	return true
}

func tuneSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	cl.Framework, cl.Op, cl.Phase = pipeline.FrameworkTorchtune, pipeline.CheckpointSave, pipeline.CheckpointStart
	return true
}

// tuneTook reads "Saving checkpoint took 6.64 secs".
func tuneTook(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	n, rest := nextField(b[i+len("Saving checkpoint took "):])
	d, ok := parseNumber(n)
	if !ok || d < 0 || !hasPrefix(trimBlank(rest), "sec") {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Duration = pipeline.FrameworkTorchtune, pipeline.CheckpointSave, pipeline.CheckpointEnd, d
	return true
}

// tuneFile reads "(Model|Adapter|Recipe) checkpoint of size X GB saved to
// FILE": the save's path is the file's folder.
func tuneFile(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	k := bytes.Index(b[i:], []byte(" saved to "))
	if k < 0 {
		return false
	}
	p := trimBlank(b[i+k+len(" saved to "):])
	if j := bytes.LastIndexByte(p, '/'); j > 0 {
		p = p[:j]
	}
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkTorchtune, pipeline.CheckpointSave, pipeline.CheckpointFile, p
	return true
}

// tfSaving reads "Saving checkpoints for N into PATH.".
func tfSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	n, rest := nextField(b[i+len("Saving checkpoints for "):])
	step, ok := stepNumber(n)
	if !ok {
		return false
	}
	p, ok := afterWord(rest, "into")
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Step = pipeline.FrameworkTensorFlow, pipeline.CheckpointSave, pipeline.CheckpointSingle, step
	cl.Path = bytes.TrimSuffix(p, []byte("."))
	return true
}

// tfRestoring reads TensorFlow's "Restoring parameters from PATH": a load
// of the checkpoint PATH (its step, "model.ckpt-1000", is not a save's).
func tfRestoring(b []byte, cl *pipeline.CheckpointLine) bool {
	i := bytes.Index(b, tokRestoringParameters)
	p := firstField(b[i+len(tokRestoringParameters):])
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkTensorFlow, pipeline.CheckpointLoad, pipeline.CheckpointSingle, p
	cl.Step = stepSuffix(p, "ckpt-")
	return true
}

// flaxSaving reads Flax's "checkpoints.py:NNN] Saving checkpoint at step:
// N"; the file name keeps a script's own print of the words out.
func flaxSaving(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	if !bytes.Contains(b[:i], []byte("checkpoints.py:")) {
		return false
	}
	step, ok := stepNumber(trimBlank(b[i+len("Saving checkpoint at step: "):]))
	if !ok {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Step, cl.Repeated = pipeline.FrameworkFlax, pipeline.CheckpointSave, pipeline.CheckpointStart, step, true
	return true
}

// orbaxStarted reads "[sync] Started save checkpoint @ PATH." (or
// "[async] …").
func orbaxStarted(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	p := bytes.TrimSuffix(trimBlank(b[i+len("Started save checkpoint @ "):]), []byte("."))
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path, cl.Repeated = pipeline.FrameworkOrbax, pipeline.CheckpointSave, pipeline.CheckpointStart, p, true
	cl.Step = orbaxStep(p)
	return true
}

// orbaxFinished reads Orbax's "[sync] Finished blocking save in 1.55
// seconds. Continuing save @ PATH." (a figure: the blocking part) and
// "[sync] Finished save in 1.61 seconds @ PATH" (the end). Their marker
// holds no "checkpoint"; a line reaches here only when its path does.
func orbaxFinished(b []byte, cl *pipeline.CheckpointLine) bool {
	i := bytes.Index(b, []byte("] Finished "))
	if i < 0 {
		return false
	}
	rest := b[i+len("] Finished "):]
	phase := pipeline.CheckpointEnd
	switch {
	case hasPrefix(rest, "blocking save in "):
		phase, rest = pipeline.CheckpointAmend, rest[len("blocking save in "):]
	case hasPrefix(rest, "save in "):
		rest = rest[len("save in "):]
	default:
		return false
	}
	n, rest := nextField(rest)
	d, ok := parseNumber(n)
	if !ok || d < 0 || !hasPrefix(trimBlank(rest), "seconds") {
		return false
	}
	k := bytes.Index(rest, []byte("@ "))
	if k < 0 {
		return false
	}
	p := bytes.TrimSuffix(trimBlank(rest[k+2:]), []byte("."))
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Duration, cl.Path, cl.Repeated = pipeline.FrameworkOrbax, pipeline.CheckpointSave, phase, d, p, true
	cl.Step = orbaxStep(p)
	return true
}

// orbaxStep reads the step an Orbax checkpoint folder is named after:
// "…/checkpoint_2000" (Flax) or "…/100" (CheckpointManager).
func orbaxStep(p []byte) int64 {
	if n := stepSuffix(p, "checkpoint_"); n >= 0 {
		return n
	}
	last := p[bytes.LastIndexByte(p, '/')+1:]
	if n, ok := stepNumber(last); ok && len(last) > 0 && isDigit(last[len(last)-1]) {
		for _, c := range last {
			if !isDigit(c) {
				return -1
			}
		}
		return n
	}
	return -1
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
