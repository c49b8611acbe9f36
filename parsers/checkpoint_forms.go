package parsers

import (
	"bytes"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

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
	case len(trimBlank(rest)) == 0 && bytes.Contains(b[:i], []byte("checkpoint_manager.py:")),
		len(trimBlank(rest)) > 0 && len(cutSource(rest)) == 0 && bytes.Contains(rest, []byte(":checkpoint_manager.py:")):
		// The source before the message (absl) or after it (openpi's
		// formatter, 237: "… at step 130    (2406527:checkpoint_manager.py:1286)").
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

// cutSource drops the source a log formatter prints after the message
// (openpi, 236: "… (1670817:async_checkpointer.py:439)") and the blanks
// before it.
func cutSource(b []byte) []byte {
	b = trimBlank(b)
	if len(b) == 0 || b[len(b)-1] != ')' {
		return b
	}
	k := bytes.LastIndexByte(b, '(')
	if k < 0 || k > 0 && b[k-1] != ' ' {
		return b
	}
	src := b[k+1 : len(b)-1]
	colon := bytes.IndexByte(src, ':')
	if colon <= 0 || !bytes.Contains(src[colon:], []byte(".py:")) {
		return b
	}
	for _, c := range src[:colon] {
		if !isDigit(c) {
			return b
		}
	}
	return trimRightSpace(b[:k])
}

// orbaxStarted reads "[sync] Started save checkpoint @ PATH." (or
// "[async] …") and the async checkpointer's "[process=0] Started async
// saving checkpoint to PATH." (236, 239).
func orbaxStarted(b []byte, i int, cl *pipeline.CheckpointLine) bool {
	m := len("Started save checkpoint @ ")
	if b[i+len("Started ")] == 'a' {
		m = len("Started async saving checkpoint to ")
	}
	p := bytes.TrimSuffix(cutSource(b[i+m:]), []byte("."))
	if len(p) == 0 {
		return false
	}
	cl.Framework, cl.Op, cl.Phase, cl.Path, cl.Repeated = pipeline.FrameworkOrbax, pipeline.CheckpointSave, pipeline.CheckpointStart, p, true
	cl.Step = orbaxStep(p)
	return true
}

// orbaxFinished reads Orbax's "[sync] Finished blocking save in 1.55
// seconds. Continuing save @ PATH." or (239) "Finished blocking save in
// 29.94 seconds. Continuing to save asynchronously to PATH." (a figure: the
// blocking part), "[sync] Finished save in 1.61 seconds @ PATH" and (238,
// 239) "Finished asynchronous save (blocking + background) in 192.92
// seconds to PATH" (the end). Their marker holds no "checkpoint"; a line
// reaches here only when its path or its source does.
func orbaxFinished(b []byte, cl *pipeline.CheckpointLine) bool {
	i := bytes.Index(b, []byte("] Finished "))
	if i < 0 {
		return false
	}
	rest := b[i+len("] Finished "):]
	phase, background := pipeline.CheckpointEnd, false
	switch {
	case hasPrefix(rest, "blocking save in "):
		phase, rest = pipeline.CheckpointAmend, rest[len("blocking save in "):]
	case hasPrefix(rest, "save in "):
		rest = rest[len("save in "):]
	case hasPrefix(rest, "asynchronous save (blocking + background) in "):
		// Its time includes the background write, which the training
		// loop did not wait for: no duration of the save (R6).
		rest, background = rest[len("asynchronous save (blocking + background) in "):], true
	default:
		return false
	}
	n, rest := nextField(rest)
	d, ok := parseNumber(n)
	if !ok || d < 0 || !hasPrefix(trimBlank(rest), "seconds") {
		return false
	}
	var p []byte
	for _, to := range [...]string{"@ ", " asynchronously to ", "seconds to "} {
		if k := bytes.Index(rest, []byte(to)); k >= 0 {
			p = bytes.TrimSuffix(cutSource(rest[k+len(to):]), []byte("."))
			break
		}
	}
	if len(p) == 0 {
		return false
	}
	if background {
		d = math.NaN()
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
