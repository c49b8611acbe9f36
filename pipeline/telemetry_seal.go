package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"encoding/gob"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// FoldSnapshot is a partition's open fold window as it stood when its
// commit passed the window's open rows (Runner: the partition was read to
// its end and quiet for fold_idle). It is stored with the batch whose
// commit is At, so that whoever reads the partition next from At (this
// process, a restarted one or another member of the group) goes on
// counting the same rows instead of opening new ones: folded rows stay a
// function of the input, whatever the timing and the member.
type FoldSnapshot struct {
	Topic     string
	Partition int32
	At        int64  // the offset committed with the snapshot
	State     []byte // the window's rows and series (gob, see foldState)
}

// FoldLoader reads back the snapshot stored with a committed offset; the
// ClickHouse sink implements it. ok is false when none was stored: the
// commit did not pass an open window.
type FoldLoader interface {
	LoadFold(ctx context.Context, topic string, partition int32, at int64) (state []byte, ok bool, err error)
}

// foldState is what a FoldSnapshot holds: the open rows with their keys,
// the step of each series' latest step line (for amend lines) and the
// nccl-tests runs begun in the partition and still open (their rows carry
// the run's header facts).
type foldState struct {
	Window int64
	Rows   []sealedRow
	Last   []sealedLast
	Runs   []sealedRun
	Colls  []sealedColl // open collective_perf rows
}

// sealedColl is an open collective_perf row with its key, its running
// figures and its histograms (the row's own Hist fields are left empty).
type sealedColl struct {
	Job, Comm, Op  string // Job: the job key
	P2P            bool
	Bucket, Minute int64
	Row            CollectivePerf
	BusBW, Exec    Hist
	NBus, NExe     int64
}

func sealColl(k collKey, o *openColl) sealedColl {
	return sealedColl{Job: k.job, Comm: k.comm, Op: k.op, P2P: k.p2p, Bucket: k.bucket, Minute: k.minute, Row: o.row,
		BusBW: o.busbw.sparse(), Exec: o.exec.sparse(), NBus: o.nbus, NExe: o.nexe}
}

// dense fills h from a sparse histogram.
func (h *denseHist) fill(s Hist) {
	for i, b := range s.Buckets {
		if i < len(s.Counts) {
			h[b] += s.Counts[i]
		}
	}
}

// sealedRun is a testRun with its job, in fields gob can write.
type sealedRun struct {
	Job                                string
	ID                                 string
	First                              int64
	Collective, Version, GPU, Format   string
	HdrMin, HdrMax, MinBytes, MaxBytes int64
	Ranks, Rows                        int
	Hosts                              []string
	Header, Devices, Closed            bool
	MaxOOP, MaxIP, Wrong, Avg          float64
}

func sealRun(job string, r *testRun) sealedRun {
	return sealedRun{Job: job, ID: r.id, First: r.first, Collective: r.collective, Version: r.version, GPU: r.gpu,
		Format: r.format, HdrMin: r.hdrMin, HdrMax: r.hdrMax, MinBytes: r.minBytes, MaxBytes: r.maxBytes,
		Ranks: r.ranks, Rows: r.rows, Hosts: r.hosts, Header: r.header, Devices: r.devices, Closed: r.closed,
		MaxOOP: r.maxOOP, MaxIP: r.maxIP, Wrong: r.wrong, Avg: r.avg}
}

func (s *sealedRun) run() *testRun {
	return &testRun{id: s.ID, first: s.First, collective: s.Collective, version: s.Version, gpu: s.GPU,
		format: s.Format, hdrMin: s.HdrMin, hdrMax: s.HdrMax, minBytes: s.MinBytes, maxBytes: s.MaxBytes,
		ranks: s.Ranks, rows: s.Rows, hosts: s.Hosts, header: s.Header, devices: s.Devices, closed: s.Closed,
		maxOOP: s.MaxOOP, maxIP: s.MaxIP, wrong: s.Wrong, avg: s.Avg}
}

type sealedRow struct {
	Job, Framework string // the fold key: job key and framework
	Kind           TelemetryKind
	Step           int64
	Row            sealedStep
}

// sealedStep is an open row as a snapshot holds it: a TrainingStep with
// its series' strings in the row, the layout snapshots had before rows
// shared their series (gob matches fields by name), so that snapshots of
// either layout read back in both.
type sealedStep struct {
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

func sealStep(r *TrainingStep) sealedStep {
	s := r.StepSeries
	return sealedStep{Source: r.Source, Time: r.Time, Job: s.Job, Namespace: s.Namespace, Cluster: s.Cluster, Pod: s.Pod,
		Node: s.Node, Pool: s.Pool, Model: s.Model, Framework: s.Framework, Kind: s.Kind, Rank: r.Rank, Step: r.Step,
		Ranks: r.Ranks, Network: s.Network, NetworkClass: s.NetworkClass, Series: s.Series, StepTime: r.StepTime,
		TokensPerS: r.TokensPerS, SamplesPerS: r.SamplesPerS, ItPerS: r.ItPerS, TFLOPs: r.TFLOPs, MFU: r.MFU, Loss: r.Loss}
}

// row returns the row; its series key is worked out again (a snapshot
// written before rows carried their series key reads back without it).
func (r *sealedStep) row() TrainingStep {
	s := &StepSeries{Job: r.Job, Namespace: r.Namespace, Cluster: r.Cluster, Pod: r.Pod, Node: r.Node, Pool: r.Pool,
		Model: r.Model, Framework: r.Framework, Kind: r.Kind, Network: r.Network, NetworkClass: r.NetworkClass}
	s.Series = SeriesKey(s)
	return TrainingStep{Source: r.Source, Time: r.Time, StepSeries: s, Rank: r.Rank, Step: r.Step, Ranks: r.Ranks,
		StepTime: r.StepTime, TokensPerS: r.TokensPerS, SamplesPerS: r.SamplesPerS, ItPerS: r.ItPerS, TFLOPs: r.TFLOPs,
		MFU: r.MFU, Loss: r.Loss}
}

type sealedLast struct {
	Job, Framework string
	Step           int64
}

// Seal lets the commit of a partition pass its open window and its open
// nccl-tests runs at next: the window and the runs stay open (their later
// lines still count in them), and they hold the partition's commit at
// next from now on, where the snapshot lets a replay take them up. It
// returns their snapshot, false when neither a row nor a run is open.
func (a *TelemetryAssembler) Seal(topic string, part int32, next int64) (FoldSnapshot, bool, error) {
	pk := partKey{topic, part}
	st := foldState{Window: next / a.cfg.FoldRecords}
	var runs []*testRun
	if open := a.open[pk]; len(open) > 0 {
		for _, key := range slices.Sorted(maps.Keys(a.jobs)) {
			for _, r := range a.jobs[key].runs {
				if !r.closed && math.IsNaN(r.avg) && slices.Contains(open, r) {
					st.Runs = append(st.Runs, sealRun(key, r))
					runs = append(runs, r)
				}
			}
		}
	}
	pf := a.folds[pk]
	if pf != nil && (pf.first < 0 || pf.window != st.Window) {
		pf = nil
	}
	if pf == nil && len(st.Runs) == 0 {
		return FoldSnapshot{}, false, nil
	}
	if pf == nil {
		pf = &partFold{}
		pf.reset(st.Window)
		a.folds[pk] = pf
		a.lastFold = nil
	}
	for k, o := range pf.rows {
		st.Rows = append(st.Rows, sealedRow{Job: k.job, Framework: k.framework, Kind: k.kind, Step: k.step, Row: sealStep(&o.row)})
	}
	for k, o := range pf.colls {
		st.Colls = append(st.Colls, sealColl(k, o))
	}
	slices.SortFunc(st.Colls, func(x, y sealedColl) int {
		return cmp.Or(cmp.Compare(x.Row.Source.Offset, y.Row.Source.Offset), cmp.Compare(x.Row.Source.Line, y.Row.Source.Line),
			cmp.Compare(x.Job, y.Job), cmp.Compare(x.Comm, y.Comm), cmp.Compare(x.Op, y.Op),
			cmp.Compare(x.Bucket, y.Bucket), cmp.Compare(x.Minute, y.Minute))
	})
	slices.SortFunc(st.Rows, func(x, y sealedRow) int {
		return cmp.Or(cmp.Compare(x.Row.Source.Offset, y.Row.Source.Offset), cmp.Compare(x.Row.Source.Line, y.Row.Source.Line))
	})
	for s, step := range pf.last {
		if !pf.curSet || s != pf.cur {
			st.Last = append(st.Last, sealedLast{Job: s.job, Framework: s.framework, Step: step})
		}
	}
	if pf.curSet {
		st.Last = append(st.Last, sealedLast{Job: pf.cur.job, Framework: pf.cur.framework, Step: pf.curStep})
	}
	slices.SortFunc(st.Last, func(x, y sealedLast) int {
		return cmp.Or(cmp.Compare(x.Job, y.Job), cmp.Compare(x.Framework, y.Framework))
	})
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&st); err != nil {
		return FoldSnapshot{}, false, fmt.Errorf("seal fold window: %w", err)
	}
	pf.sealed = next
	for _, r := range runs {
		r.hold = next
	}
	return FoldSnapshot{Topic: topic, Partition: part, At: next, State: buf.Bytes()}, true, nil
}

// Restore opens a partition's window as a snapshot sealed at at left it,
// before the partition is read again from at. A snapshot of another
// window than at's is an error.
func (a *TelemetryAssembler) Restore(topic string, part int32, at int64, state []byte) error {
	var st foldState
	if err := gob.NewDecoder(bytes.NewReader(state)).Decode(&st); err != nil {
		return fmt.Errorf("restore fold window of %s/%d at %d: %w", topic, part, at, err)
	}
	if st.Window != at/a.cfg.FoldRecords {
		return fmt.Errorf("restore fold window of %s/%d at %d: snapshot of window %d, want %d", topic, part, at, st.Window, at/a.cfg.FoldRecords)
	}
	pk := partKey{topic, part}
	pf := a.folds[pk]
	if pf == nil {
		pf = &partFold{}
		a.folds[pk] = pf
	}
	a.retire(pf, nil)
	pf.reset(st.Window)
	a.lastFold = nil
	for _, c := range st.Colls {
		o := pf.newColl()
		// Stored with the snapshot's batch: not dirty until a record
		// after the restore changes it.
		o.row, o.nbus, o.nexe = c.Row, c.NBus, c.NExe
		o.busbw.fill(c.BusBW)
		o.exec.fill(c.Exec)
		k := collKey{job: c.Job, comm: c.Comm, op: c.Op, p2p: c.P2P, bucket: c.Bucket, minute: c.Minute}
		pf.colls[k] = o
		if pf.first < 0 || c.Row.Source.Offset < pf.first {
			pf.first = c.Row.Source.Offset
		}
	}
	for _, r := range st.Rows {
		o := pf.newRow()
		// Not in any batch: the first line counted after the restore
		// appends it.
		o.row, o.idx = r.Row.row(), math.MaxInt
		pf.setRow(foldKey{job: r.Job, framework: r.Framework, kind: r.Kind, step: r.Step}, o)
		if pf.first < 0 || r.Row.Source.Offset < pf.first {
			pf.first = r.Row.Source.Offset
		}
	}
	for _, l := range st.Last {
		pf.last[seriesKey{l.Job, l.Framework}] = l.Step
	}
	pf.sealed = at
	// The open runs continue as their jobs' current runs, holding the
	// commit at the snapshot until they end or are sealed again.
	for i := range st.Runs {
		r := st.Runs[i].run()
		r.hold = at
		a.job(st.Runs[i].Job).pushRun(r, a.cfg)
		a.open[pk] = append(a.open[pk], r)
	}
	return nil
}
