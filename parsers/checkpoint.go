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
// PyTorch Lightning and torchtitan (which writes PyTorch Distributed
// Checkpoints). It keeps no state: events are assembled by
// pipeline.TelemetryAssembler. The zero value is ready; it is safe to reuse
// and not safe for concurrent use.
type Checkpoint struct{}

// Checkpoint markers: every checkpoint line holds one of these, so a line
// without any is rejected after two substring searches.
var (
	tokCheckpointLower = []byte("checkpoint")
	tokCheckpointUpper = []byte("Checkpoint")
	tokSavingModelTo   = []byte("saving model to ")
)

// CheckpointTokens are the prefilter's substrings for checkpoint lines
// (TelemetryCandidate and the telemetry finder use them).
var CheckpointTokens = [...][]byte{tokCheckpointLower, tokCheckpointUpper, tokSavingModelTo}

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
	return false
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
	return false
}

// parseCheckpointUpper reads DeepSpeed's checkpoint engine lines (102):
// "[Torch] Checkpoint global_step10 is about to be saved!" and "[Torch]
// Checkpoint global_step10 is ready now!" ("[AsyncTorch]", "[Nebula]",
// "[DataStates]" engines print the same words).
func parseCheckpointUpper(b []byte, cl *pipeline.CheckpointLine) bool {
	i := bytes.Index(b, []byte("] Checkpoint "))
	if i < 0 {
		return false
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
	cl.Framework, cl.Op = pipeline.FrameworkDeepSpeed, pipeline.CheckpointSave
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
	if len(trimBlank(b[:i])) > 0 && !bytes.HasSuffix(b[:i], []byte(" ")) {
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
	cl.Framework, cl.Op, cl.Phase, cl.Path = pipeline.FrameworkDeepSpeed, pipeline.CheckpointSave, pipeline.CheckpointAmend, p
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
