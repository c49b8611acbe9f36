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
	// operation (Megatron's save-checkpoint timer, DeepSpeed's model file
	// path, torchtitan's async request id); with no event yet it is
	// dropped.
	CheckpointAmend
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

// FrameworkFairseq is fairseq and its forks (metaseq): checkpoint lines
// only.
const FrameworkFairseq = "fairseq"

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
	// open and last are the series' open and latest events per operation
	// (index op-1); the event records what a replayed row must carry.
	open [2]bool
	last [2]*CheckpointEvent
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
// with no event, a duplicate from another rank).
func (j *telJob) checkpoint(m rowMeta, cl *CheckpointLine, rank int, t time.Time, src Source) *CheckpointEvent {
	if cl.Op != CheckpointSave && cl.Op != CheckpointLoad {
		return nil
	}
	s := j.ckptSeriesOf(cl.Framework)
	// Every rank may print the same line (torchtitan logs on all ranks):
	// the first rank seen speaks for the job.
	if rank >= 0 {
		if s.rank < 0 {
			s.rank = rank
		} else if rank != s.rank {
			return nil
		}
	}
	i := int(cl.Op) - 1
	var ev *CheckpointEvent
	switch cl.Phase {
	case CheckpointStart, CheckpointSingle:
		if s.open[i] && cl.Op == CheckpointSave {
			s.unended++
		}
		ev = s.newEvent(m, cl, rank, t, src)
		s.open[i] = cl.Phase == CheckpointStart
		ev.Complete = cl.Phase == CheckpointSingle
	case CheckpointEnd:
		if s.open[i] && s.last[i] != nil {
			ev = s.last[i]
		} else {
			ev = s.newEvent(m, cl, rank, t, src)
		}
		s.open[i] = false
		ev.Complete = true
	case CheckpointAmend:
		ev = s.last[i]
		if ev == nil {
			return nil
		}
	default:
		return nil
	}
	if ev.Lines < math.MaxUint8 {
		ev.Lines++
	}
	ev.EndTime = t
	if ev.Step < 0 && cl.Step >= 0 {
		ev.Step = cl.Step
		if cl.Op == CheckpointSave && len(s.steps) < maxCheckpointList {
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
		if cl.Op == CheckpointLoad {
			d = &s.loadDur
		}
		if len(*d) < maxCheckpointList {
			*d = append(*d, cl.Duration)
		}
	}
	return ev
}

func (s *ckptSeries) newEvent(m rowMeta, cl *CheckpointLine, rank int, t time.Time, src Source) *CheckpointEvent {
	if cl.Op == CheckpointSave {
		s.saves++
	} else {
		s.loads++
	}
	ev := &CheckpointEvent{Source: src, Time: t, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Node: m.Node, Pool: m.pool, Framework: cl.Framework, Op: cl.Op.String(), Rank: rank,
		Step: -1, Duration: math.NaN()}
	s.last[int(cl.Op)-1] = ev
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
