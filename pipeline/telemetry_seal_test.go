package pipeline

import (
	"bytes"
	"encoding/gob"
	"testing"
	"time"
)

// flatStep is a training_steps row as snapshots hold it (sealedStep),
// written here field by field: the layout of TrainingStep before rows
// shared their series, which stored snapshots have.
type flatStep struct {
	Source                                                           Source
	Time                                                             time.Time
	Job, Namespace, Cluster, Pod, Node, Pool, Model, Framework, Kind string
	Rank                                                             int
	Step                                                             int64
	Ranks                                                            int
	Network, NetworkClass                                            string
	Series                                                           uint64
	StepTime, TokensPerS, SamplesPerS, ItPerS, TFLOPs, MFU, Loss     float64
}

type flatRow struct {
	Job, Framework string
	Kind           TelemetryKind
	Step           int64
	Row            flatStep
}

type flatState struct {
	Window int64
	Rows   []flatRow
}

// TestSealedRowsKeepTheirLayout: a snapshot holds an open row's strings in
// the row, as before rows shared their series, both ways: a snapshot of
// that layout restores a row that goes on counting with its strings and
// series key, and a snapshot written now reads back in that layout.
func TestSealedRowsKeepTheirLayout(t *testing.T) {
	cfg := DefaultTelemetryAssemblerConfig()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	meta := &Meta{Job: "llama", Namespace: "ml", Cluster: "c1", Pod: "llama-worker-0", Node: "n7"}
	job := JobKey(meta.Cluster, meta.Namespace, meta.Job)
	src := func(off int64) Source { return Source{Topic: "logs", Partition: 3, Offset: off} }

	old := flatState{Window: 0, Rows: []flatRow{{Job: job, Framework: FrameworkMegatron, Kind: TelemetryStep, Step: 12,
		Row: flatStep{Source: src(4), Time: t0, Job: meta.Job, Namespace: meta.Namespace, Cluster: meta.Cluster,
			Pod: meta.Pod, Node: meta.Node, Framework: FrameworkMegatron, Kind: "step", Rank: 0, Step: 12, Ranks: 3,
			StepTime: 1.5}}}}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(old); err != nil {
		t.Fatal(err)
	}
	a := NewTelemetryAssembler(cfg, nil)
	if err := a.Restore("logs", 3, 5, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	b := &Batch{}
	a.Add(job, meta, stepLine(FrameworkMegatron, 12, 1.5), t0, src(6), b)
	if len(b.Steps) != 1 {
		t.Fatalf("%d rows after a line of the restored row's step; want 1", len(b.Steps))
	}
	r := &b.Steps[0]
	if r.Source != src(4) || r.Ranks != 4 || r.Job != meta.Job || r.Pod != meta.Pod || r.Node != meta.Node ||
		r.Kind != "step" || r.Series != SeriesKey(r.StepSeries) || r.Series == 0 {
		t.Errorf("restored row = %s; want the snapshot's row at 4 ranks, with its strings and their series key", stepString(r))
	}

	snap, ok, err := a.Seal("logs", 3, 7)
	if err != nil || !ok {
		t.Fatalf("Seal = %v, %v", ok, err)
	}
	var back flatState
	if err := gob.NewDecoder(bytes.NewReader(snap.State)).Decode(&back); err != nil {
		t.Fatal(err)
	}
	want := old.Rows[0].Row
	want.Ranks, want.Series = 4, r.Series
	if len(back.Rows) != 1 || back.Rows[0].Row != want {
		t.Errorf("snapshot rows read in the old layout = %+v; want %+v", back.Rows, want)
	}
}
