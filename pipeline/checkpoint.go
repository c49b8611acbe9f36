package pipeline

import (
	"math"
	"slices"
	"time"
)

// Checkpoints: what trainers print about saving and loading their state —
// the storage half of a job's wall time. parsers.Checkpoint reads one line
// into a CheckpointLine (inside a TelemetryLine of kind
// TelemetryCheckpoint); the TelemetryAssembler folds the lines of a job into
// events (a save printed as a start and an end line is one event), stored
// as CheckpointEvent rows and reported per series (one per job and
// framework) as CheckpointReport: the `checkpoints` array of `ncclwatch
// scan --json`.

// CheckpointOp says whether a line is about saving or loading.
type CheckpointOp uint8

// The checkpoint operations.
const (
	CheckpointSave CheckpointOp = iota + 1
	CheckpointLoad
)

// String returns "save" or "load", as stored.
func (o CheckpointOp) String() string {
	switch o {
	case CheckpointSave:
		return "save"
	case CheckpointLoad:
		return "load"
	}
	return "unknown"
}

// CheckpointPhase says where in an event a line sits.
type CheckpointPhase uint8

// The phases of a checkpoint line.
const (
	// CheckpointStart opens an event ("saving checkpoint at iteration …").
	CheckpointStart CheckpointPhase = iota + 1
	// CheckpointEnd closes the series' open event of the same operation,
	// or is an event of its own when none is open (the log began in the
	// middle of a save).
	CheckpointEnd
	// CheckpointSingle is an event printed as one line (Hugging Face's
	// "Saving model checkpoint to …").
	CheckpointSingle
	// CheckpointAmend adds a figure to the series' latest event of the
	// operation (Megatron's save-checkpoint timer, torchtitan's async
	// request id, Orbax's blocking time); with no event yet it is dropped.
	CheckpointAmend
	// CheckpointFile is one file of an event (DeepSpeed's "Saving model
	// checkpoint: FILE", torchtune's "Model checkpoint of size … saved to
	// FILE"): part of the series' event in that folder, or, with none, an
	// event of its own (docs/checkpoints.md, R2).
	CheckpointFile
)

// CheckpointLine is one parsed checkpoint line. Path aliases the parsed
// line and is valid only until the parser's next call.
type CheckpointLine struct {
	Framework string // one of the Framework constants
	Op        CheckpointOp
	Phase     CheckpointPhase
	Step      int64   // iteration or global step, -1 when the line gives none
	Duration  float64 // seconds, NaN when the line gives none
	Path      []byte  // as printed, nil when the line gives none
	// Repeated is set for lines the framework prints on every rank or
	// host without a rank prefix (DeepSpeed's engine, Flax, Orbax): a
	// repeat of the latest event is that event (R4).
	Repeated bool
}

// Reset clears l for reuse.
func (l *CheckpointLine) Reset() {
	*l = CheckpointLine{Step: -1, Duration: math.NaN()}
}

// CheckpointEvent is one checkpoint save or load of a job, as stored in
// the checkpoint_events table. Source, Time, Pod, Node and Rank are those
// of the event's first line; later lines of the event (its end, a timer)
// store the row again under the same coordinates with a higher Lines,
// which storage keeps.
type CheckpointEvent struct {
	Source    Source
	Time      time.Time
	EndTime   time.Time // the time of the event's latest line
	Job       string
	Namespace string
	Cluster   string
	Pod       string
	Node      string
	Pool      string
	Framework string
	Op        string // "save" or "load"
	Rank      int    // launcher rank, -1 when absent
	Step      int64  // -1 when not printed
	Path      string // "" when not printed
	Duration  float64
	Complete  bool  // an end line (or a one-line event) was seen
	Lines     uint8 // lines folded into the event so far: the stored version
}

// CheckpointReport is one checkpoint series found in a log (one per job
// and framework): an element of the `checkpoints` array of `ncclwatch scan
// --json`. Lists are in order of appearance, never null, and bounded by
// maxCheckpointList (Saves and Loads keep counting past it).
type CheckpointReport struct {
	Framework string `json:"framework"`
	Saves     int    `json:"saves"`
	// UnfinishedSaves counts saves that printed a start and no end (the
	// job crashed or was killed while saving, or the input ends there).
	UnfinishedSaves int       `json:"unfinished_saves"`
	Loads           int       `json:"loads"`
	SaveDurations   []float64 `json:"save_durations_s"` // only saves whose duration was printed
	LoadDurations   []float64 `json:"load_durations_s"`
	Paths           []string  `json:"paths"` // distinct, as printed
	Steps           []int64   `json:"steps"` // of saves, where printed
}

// Frameworks seen only through their checkpoint lines.
const (
	FrameworkFairseq    = "fairseq"    // fairseq and its forks (metaseq)
	FrameworkTorchtune  = "torchtune"  // torchtune recipes
	FrameworkTensorFlow = "tensorflow" // TensorFlow Estimator / Saver
	FrameworkFlax       = "flax"       // flax.training.checkpoints
	FrameworkOrbax      = "orbax"      // Orbax checkpointers (MaxText, Levanter, Flax)
	FrameworkLevanter   = "levanter"   // Levanter's tensorstore checkpointer
)

// checkpointEngine reports whether fw is a checkpoint engine that saves
// inside a trainer's save (R5): its lines join the trainer's event.
func checkpointEngine(fw string) bool {
	return fw == FrameworkDeepSpeed || fw == FrameworkOrbax
}

// maxCheckpointList bounds each list of a CheckpointReport: a job that
// checkpoints every 5 minutes for a week saves ~2000 times; beyond 4096 a
// report is a summary, and storage has every event.
const maxCheckpointList = 4096

// ckptSeries is one framework's checkpoint events in a job.
type ckptSeries struct {
	framework string
	rank      int // the launcher rank whose lines count; -1 until one is seen
	saves     int
	unended   int // save starts followed by another start before an end
	loads     int
	saveDur   []float64
	loadDur   []float64
	paths     []string
	steps     []int64
	// open, ended and last are the series' open, ended-by-an-end-line and
	// latest events per operation (index op-1); the event records what a
	// replayed row must carry. seq orders the latest events of all series
	// of a job (checkpointEngine's trainer save is the latest one).
	open  [2]bool
	ended [2]bool
	last  [2]*CheckpointEvent
	seq   [2]uint64
	// outer is the trainer's event the engine's current save is part of
	// (R5), nil when the engine saves on its own.
	outer *CheckpointEvent
}

func (j *telJob) ckptSeriesOf(fw string) *ckptSeries {
	for _, s := range j.ckpts {
		if s.framework == fw {
			return s
		}
	}
	s := &ckptSeries{framework: fw, rank: -1}
	j.ckpts = append(j.ckpts, s)
	return s
}

// checkpoint folds one checkpoint line into the job's series and returns
// the event row it changed, or nil when the line changed none (an amend
// with no event, a duplicate from another rank or host). The rules are
// docs/checkpoints.md's; R-numbers below refer to them.
func (j *telJob) checkpoint(m rowMeta, cl *CheckpointLine, rank int, t time.Time, src Source) *CheckpointEvent {
	if cl.Op != CheckpointSave && cl.Op != CheckpointLoad {
		return nil
	}
	s := j.ckptSeriesOf(cl.Framework)
	// R4: the first rank seen speaks for the series; figures (Megatron's
	// timers, printed on the last rank) count from any rank.
	if rank >= 0 && cl.Phase != CheckpointAmend {
		if s.rank < 0 {
			s.rank = rank
		} else if rank != s.rank {
			return nil
		}
	}
	// R5: an engine's line inside a trainer's save is that save's.
	if checkpointEngine(cl.Framework) && cl.Op == CheckpointSave {
		if outer := j.outerSave(s, cl); outer != nil {
			return j.engineLine(outer, cl, t)
		}
	}
	i := int(cl.Op) - 1
	latest := s.last[i]
	// R4: another host's line repeating the latest event is that event.
	// So is a repeat of a line printed on every rank, when it names the
	// event (a step or path); its end still finishes an unfinished event.
	if latest != nil && cl.Phase != CheckpointAmend && sameEvent(latest, cl) &&
		(otherHost(latest, m) || cl.Repeated && (cl.Step >= 0 || len(cl.Path) > 0)) &&
		(cl.Phase != CheckpointEnd || s.ended[i]) {
		// Being that event, it fills in what the event's lines have not
		// printed yet (R8): Orbax's "Saving checkpoint at step 19" is
		// followed by "Started save checkpoint @ …/19" on every process.
		if !fillsIn(latest, cl) {
			return nil
		}
		s.fill(latest, cl, t)
		return latest
	}
	var ev *CheckpointEvent
	switch cl.Phase {
	case CheckpointStart, CheckpointSingle:
		if s.open[i] && cl.Op == CheckpointSave {
			s.unended++
		}
		ev = j.newCheckpointEvent(s, m, cl, rank, t, src)
		s.open[i] = cl.Phase == CheckpointStart
		ev.Complete = cl.Phase == CheckpointSingle
	case CheckpointEnd:
		// R2, R3: an end closes the open event, or finishes a one-line
		// event of the same step; otherwise it is an event of its own.
		switch {
		case s.open[i] && latest != nil,
			latest != nil && !s.ended[i] && sameEvent(latest, cl):
			ev = latest
		default:
			ev = j.newCheckpointEvent(s, m, cl, rank, t, src)
		}
		s.open[i], s.ended[i] = false, true
		ev.Complete = true
	case CheckpointFile:
		// R2: a file of the open or unfinished event in its folder; with
		// none, an event of its own, complete when its line is printed.
		if latest != nil && (s.open[i] || !s.ended[i] && sameEvent(latest, cl)) {
			ev = latest
		} else {
			ev = j.newCheckpointEvent(s, m, cl, rank, t, src)
			ev.Complete = true
		}
	case CheckpointAmend:
		if ev = latest; ev == nil {
			return nil
		}
	default:
		return nil
	}
	s.fill(ev, cl, t)
	return ev
}

// outerSave returns the trainer's save an engine line belongs to (R5):
// the job's latest save of another framework, when the line's step
// equals its step or the line's path lies under its path; or the trainer's
// save the engine's current save already joined, for lines that name
// neither. It returns nil for an engine save of its own.
func (j *telJob) outerSave(s *ckptSeries, cl *CheckpointLine) *CheckpointEvent {
	var outer *CheckpointEvent
	var best uint64
	for _, o := range j.ckpts {
		if !checkpointEngine(o.framework) && o.last[0] != nil && o.seq[0] > best {
			outer, best = o.last[0], o.seq[0]
		}
	}
	switch {
	case outer == nil:
	case cl.Step >= 0 && cl.Step == outer.Step,
		len(cl.Path) > 0 && outer.Path != "" && underPath(string(cl.Path), outer.Path):
		s.outer = outer
		return outer
	case cl.Step < 0 && len(cl.Path) == 0 && s.outer == outer:
		return outer
	}
	if cl.Phase == CheckpointStart || cl.Phase == CheckpointSingle {
		s.outer = nil
	}
	return s.outer
}

// engineLine folds an engine's line into the trainer's save it is part
// of: it fills what the trainer's lines did not print and may finish an
// open save, but never ends it for R2 (the trainer's own end line still
// finishes it rather than opening a save).
func (j *telJob) engineLine(outer *CheckpointEvent, cl *CheckpointLine, t time.Time) *CheckpointEvent {
	var s *ckptSeries
	for _, o := range j.ckpts {
		if o.last[0] == outer {
			s = o
		}
	}
	if s == nil {
		return nil
	}
	if cl.Phase == CheckpointEnd && s.open[0] {
		s.open[0] = false
		outer.Complete = true
	}
	s.fill(outer, cl, t)
	return outer
}

// fill adds what cl prints and ev lacks (R6, R8: the first step, path and
// duration printed for an event are its own).
func (s *ckptSeries) fill(ev *CheckpointEvent, cl *CheckpointLine, t time.Time) {
	if ev.Lines < math.MaxUint8 {
		ev.Lines++
	}
	ev.EndTime = t
	op := CheckpointSave
	if ev.Op == CheckpointLoad.String() {
		op = CheckpointLoad
	}
	if ev.Step < 0 && cl.Step >= 0 {
		ev.Step = cl.Step
		if op == CheckpointSave && len(s.steps) < maxCheckpointList {
			s.steps = append(s.steps, cl.Step)
		}
	}
	if ev.Path == "" && len(cl.Path) > 0 {
		ev.Path = string(cl.Path)
		if !slices.Contains(s.paths, ev.Path) && len(s.paths) < maxCheckpointList {
			s.paths = append(s.paths, ev.Path)
		}
	}
	if math.IsNaN(ev.Duration) && !math.IsNaN(cl.Duration) {
		ev.Duration = cl.Duration
		d := &s.saveDur
		if op == CheckpointLoad {
			d = &s.loadDur
		}
		if len(*d) < maxCheckpointList {
			*d = append(*d, cl.Duration)
		}
	}
}

// fillsIn reports whether cl prints a step, path or duration ev lacks.
func fillsIn(ev *CheckpointEvent, cl *CheckpointLine) bool {
	return ev.Step < 0 && cl.Step >= 0 || ev.Path == "" && len(cl.Path) > 0 ||
		math.IsNaN(ev.Duration) && !math.IsNaN(cl.Duration)
}

// sameEvent reports whether cl may be a line of ev: the same step where
// both print one, and the same path (or one under the other) where both
// print one.
func sameEvent(ev *CheckpointEvent, cl *CheckpointLine) bool {
	if cl.Step >= 0 && ev.Step >= 0 && cl.Step != ev.Step {
		return false
	}
	if len(cl.Path) == 0 || ev.Path == "" {
		return true
	}
	p := string(cl.Path)
	return underPath(p, ev.Path) || underPath(ev.Path, p)
}

// underPath reports whether p is dir or lies under it.
func underPath(p, dir string) bool {
	if len(p) < len(dir) || p[:len(dir)] != dir {
		return false
	}
	return len(p) == len(dir) || dir[len(dir)-1] == '/' || p[len(dir)] == '/'
}

// otherHost reports whether a line with metadata m comes from another
// host than ev's first line: another pod, else another node.
func otherHost(ev *CheckpointEvent, m rowMeta) bool {
	if ev.Pod != "" && m.Pod != "" {
		return ev.Pod != m.Pod
	}
	return ev.Node != "" && m.Node != "" && ev.Node != m.Node
}

func (j *telJob) newCheckpointEvent(s *ckptSeries, m rowMeta, cl *CheckpointLine, rank int, t time.Time, src Source) *CheckpointEvent {
	i := int(cl.Op) - 1
	if cl.Op == CheckpointSave {
		s.saves++
	} else {
		s.loads++
	}
	var seq uint64
	for _, o := range j.ckpts {
		seq = max(seq, o.seq[0], o.seq[1])
	}
	ev := &CheckpointEvent{Source: src, Time: t, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Node: m.Node, Pool: m.pool, Framework: cl.Framework, Op: cl.Op.String(), Rank: rank,
		Step: -1, Duration: math.NaN()}
	s.last[i], s.seq[i], s.ended[i] = ev, seq+1, false
	if checkpointEngine(s.framework) && cl.Op == CheckpointSave {
		s.outer = nil
	}
	return ev
}

// Checkpoints returns the job's checkpoint series in order of first
// appearance; empty (not nil) for a job without checkpoint lines. The
// slices are copies.
func (a *TelemetryAssembler) Checkpoints(job string) []CheckpointReport {
	out := []CheckpointReport{}
	j := a.jobs[job]
	if j == nil {
		return out
	}
	for _, s := range j.ckpts {
		if s.saves == 0 && s.loads == 0 {
			continue
		}
		r := CheckpointReport{Framework: s.framework, Saves: s.saves, UnfinishedSaves: s.unended, Loads: s.loads,
			SaveDurations: append([]float64{}, s.saveDur...), LoadDurations: append([]float64{}, s.loadDur...),
			Paths: append([]string{}, s.paths...), Steps: append([]int64{}, s.steps...)}
		if s.open[0] {
			r.UnfinishedSaves++
		}
		out = append(out, r)
	}
	return out
}
