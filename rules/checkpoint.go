package rules

import (
	"slices"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// minBaselineSaves is how many earlier timed saves the checkpoint view
// needs before it compares the latest with them: one slow first save (a
// cold file system, a new directory) must not be the baseline.
const minBaselineSaves = 3

// CheckpointView is a job's checkpoint series (pipeline.CheckpointReport)
// as expressions see it: the series with the most timed saves (a job runs
// one trainer; DeepSpeed under the Hugging Face Trainer prints two series,
// of which DeepSpeed's is the timed one when either is). A job without
// checkpoint lines has Known false and every other field empty.
type CheckpointView struct {
	Known     bool   `expr:"known"`
	Framework string `expr:"framework"`
	Saves     int    `expr:"saves"`
	Loads     int    `expr:"loads"`
	// Unfinished counts saves with a start and no end.
	Unfinished int `expr:"unfinished_saves"`
	// TimedSaves counts saves whose duration was printed.
	TimedSaves int `expr:"timed_saves"`
	// LastSave is the latest printed save duration, seconds;
	// BaselineSave the median of the printed durations before it, once
	// there are minBaselineSaves of them; SaveRegression is last /
	// baseline.
	LastSave       *float64 `expr:"last_save_s"`
	BaselineSave   *float64 `expr:"baseline_save_s"`
	SaveRegression *float64 `expr:"save_regression"`
	// LastPath is the latest path printed.
	LastPath *string `expr:"last_path"`
}

func checkpointView(reps []pipeline.CheckpointReport) CheckpointView {
	var best *pipeline.CheckpointReport
	for i := range reps {
		if best == nil || len(reps[i].SaveDurations) > len(best.SaveDurations) {
			best = &reps[i]
		}
	}
	if best == nil {
		return CheckpointView{}
	}
	v := CheckpointView{Known: true, Framework: best.Framework, Saves: best.Saves, Loads: best.Loads,
		Unfinished: best.UnfinishedSaves, TimedSaves: len(best.SaveDurations)}
	if n := len(best.Paths); n > 0 {
		p := best.Paths[n-1]
		v.LastPath = &p
	}
	d := best.SaveDurations
	if len(d) == 0 {
		return v
	}
	last := d[len(d)-1]
	v.LastSave = &last
	if prev := d[:len(d)-1]; len(prev) >= minBaselineSaves {
		s := slices.Clone(prev)
		slices.Sort(s)
		m := s[len(s)/2]
		if len(s)%2 == 0 {
			m = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		v.BaselineSave = &m
		if m > 0 {
			r := last / m
			v.SaveRegression = &r
		}
	}
	return v
}
