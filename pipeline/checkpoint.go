package pipeline

// CheckpointKind says what a checkpoint line reports.
type CheckpointKind uint8

// Checkpoint line kinds.
const (
	CheckpointNone CheckpointKind = iota
	// CheckpointSaveStart begins a save; a later CheckpointSaveEnd of the
	// same framework completes it (one event).
	CheckpointSaveStart
	// CheckpointSaveEnd completes a save (alone, it is a save whose start
	// was not seen).
	CheckpointSaveEnd
	// CheckpointSave is a whole save in one line.
	CheckpointSave
	// CheckpointLoad is a load.
	CheckpointLoad
	// CheckpointFile names a file a started save writes; its folder is the
	// save's path when the start line printed none (DeepSpeed).
	CheckpointFile
)

// CheckpointLine is one parsed checkpoint line. Path is valid until the
// parser's next call.
type CheckpointLine struct {
	Kind      CheckpointKind
	Framework string // megatron, hf_trainer, deepspeed, fairseq
	Path      []byte
	Step      int64
	HasStep   bool
	Seconds   float64 // the duration the line printed
	HasSecs   bool
}

// CheckpointReport is one checkpoint series of `scan --json` (README.md,
// "Checkpoints"): one framework's saves and loads in one input.
type CheckpointReport struct {
	Framework string `json:"framework"`
	// Saves counts save events; a save printed as a start and an end line
	// is one. UnfinishedSaves of them have a start and no end.
	Saves           int       `json:"saves"`
	UnfinishedSaves int       `json:"unfinished_saves"`
	Loads           int       `json:"loads"`
	SaveDurations   []float64 `json:"save_durations_s"`
	LoadDurations   []float64 `json:"load_durations_s"`
	Paths           []string  `json:"paths"`
	Steps           []int64   `json:"steps"`
}

// checkpointPathsMax bounds the distinct paths kept per series (a job saving
// every few minutes for weeks); durations and steps are bounded alike.
const checkpointPathsMax = 1000

// CheckpointSeries folds one input's checkpoint lines into reports, one per
// framework in order of first appearance. It is not safe for concurrent use.
type CheckpointSeries struct {
	order []*checkpointState
}

type checkpointState struct {
	r    CheckpointReport
	open bool // a save started and not ended
	// openPath says the open save has a path already.
	openPath bool
	seen     map[string]bool
}

func (s *CheckpointSeries) state(fw string) *checkpointState {
	for _, st := range s.order {
		if st.r.Framework == fw {
			return st
		}
	}
	st := &checkpointState{r: CheckpointReport{Framework: fw, SaveDurations: []float64{}, LoadDurations: []float64{},
		Paths: []string{}, Steps: []int64{}}, seen: map[string]bool{}}
	s.order = append(s.order, st)
	return st
}

func (st *checkpointState) path(p []byte) {
	if len(p) == 0 || len(st.r.Paths) >= checkpointPathsMax || st.seen[string(p)] {
		return
	}
	st.seen[string(p)] = true
	st.r.Paths = append(st.r.Paths, string(p))
}

func (st *checkpointState) step(l *CheckpointLine) {
	if l.HasStep && len(st.r.Steps) < checkpointPathsMax {
		st.r.Steps = append(st.r.Steps, l.Step)
	}
}

// Add folds one line in.
func (s *CheckpointSeries) Add(l *CheckpointLine) {
	if l.Kind == CheckpointNone {
		return
	}
	st := s.state(l.Framework)
	switch l.Kind {
	case CheckpointSaveStart:
		if st.open {
			st.r.UnfinishedSaves++ // the previous save never ended
		}
		st.r.Saves++
		st.open, st.openPath = true, len(l.Path) > 0
		st.path(l.Path)
		st.step(l)
	case CheckpointSaveEnd:
		if !st.open {
			st.r.Saves++ // its start was not in the input
			st.step(l)
		}
		st.open = false
		st.path(l.Path)
		if l.HasSecs && len(st.r.SaveDurations) < checkpointPathsMax {
			st.r.SaveDurations = append(st.r.SaveDurations, l.Seconds)
		}
	case CheckpointSave:
		st.r.Saves++
		st.path(l.Path)
		st.step(l)
		if l.HasSecs && len(st.r.SaveDurations) < checkpointPathsMax {
			st.r.SaveDurations = append(st.r.SaveDurations, l.Seconds)
		}
	case CheckpointLoad:
		st.r.Loads++
		st.path(l.Path)
		if l.HasSecs && len(st.r.LoadDurations) < checkpointPathsMax {
			st.r.LoadDurations = append(st.r.LoadDurations, l.Seconds)
		}
	case CheckpointFile:
		if st.open && !st.openPath {
			st.openPath = true
			st.path(l.Path)
		}
	}
}

// Reports returns the series' reports; saves still open count as
// unfinished.
func (s *CheckpointSeries) Reports() []CheckpointReport {
	out := make([]CheckpointReport, 0, len(s.order))
	for _, st := range s.order {
		r := st.r
		if st.open {
			r.UnfinishedSaves++
		}
		out = append(out, r)
	}
	return out
}
