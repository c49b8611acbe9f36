package pipeline

import (
	"math"
	"slices"
	"time"
)

// partFold is one partition's open fold window: the rows of step lines
// whose offsets fall in [window*FoldRecords, (window+1)*FoldRecords).
type partFold struct {
	window int64
	rows   map[foldKey]*openRow
	first  int64 // the lowest offset of a row's first line; rows is empty when -1
	// sealed is the offset at which the commit passed the window's open
	// rows (TelemetryAssembler.Seal), -1 when it did not: from then on
	// the window holds the commit there, not at first.
	sealed int64
	last   map[seriesKey]int64 // step of the window's latest step line of each series
	// The series of the window's last step line and its step, not yet in
	// last: the lines of a partition mostly continue one series, so the
	// map is written only when the series changes.
	cur     seriesKey
	curStep int64
	curSet  bool
	// hit is the row of rows the last step line went to, under hitKey (nil:
	// none): the ranks of a job print one step line after another.
	hitKey foldKey
	hit    *openRow
	// slab holds the window's open rows, in blocks that stay put (the map
	// points into them) and are reused by the next window, as rows and
	// last are: a row and two maps made per window and per new row were a
	// visible share of the loop's CPU on the load benchmark.
	slab [][]openRow
	used int // rows of slab handed out in this window
	// colls are the window's open collective_perf rows (collective.go),
	// in blocks of cslab as rows are in slab; touched are those changed
	// since they were last written to a batch.
	colls   map[collKey]*openColl
	touched []*openColl
	cslab   [][]openColl
	cused   int
}

// openRowBlock is the size of a partFold.slab block.
const openRowBlock = 64

// reset starts window w, keeping the maps' and the slab's memory: the
// previous window's rows are dropped.
func (pf *partFold) reset(w int64) {
	rows, last, slab := pf.rows, pf.last, pf.slab
	colls, touched, cslab := pf.colls, pf.touched[:0], pf.cslab
	if rows == nil {
		rows, last, colls = map[foldKey]*openRow{}, map[seriesKey]int64{}, map[collKey]*openColl{}
	}
	clear(rows)
	clear(last)
	clear(colls)
	*pf = partFold{window: w, rows: rows, first: -1, sealed: -1, last: last, slab: slab,
		colls: colls, touched: touched, cslab: cslab}
}

// newRow returns an unused open row of the window's slab.
func (pf *partFold) newRow() *openRow {
	b, i := pf.used/openRowBlock, pf.used%openRowBlock
	if b == len(pf.slab) {
		pf.slab = append(pf.slab, make([]openRow, openRowBlock))
	}
	pf.used++
	return &pf.slab[b][i]
}

// row returns the open row of key, or nil.
func (pf *partFold) row(key foldKey) *openRow {
	if pf.hit != nil && pf.hitKey == key {
		return pf.hit
	}
	o := pf.rows[key]
	if o != nil {
		pf.hitKey, pf.hit = key, o
	}
	return o
}

// setRow opens the row of key.
func (pf *partFold) setRow(key foldKey, o *openRow) {
	pf.rows[key] = o
	pf.hitKey, pf.hit = key, o
}

// lastStep returns the step of series' latest step line in the window.
func (pf *partFold) lastStep(series seriesKey) (int64, bool) {
	if pf.curSet && pf.cur == series {
		return pf.curStep, true
	}
	s, ok := pf.last[series]
	return s, ok
}

// setLast records step as the latest step line of series.
func (pf *partFold) setLast(series seriesKey, step int64) {
	if pf.curSet && pf.cur != series {
		pf.last[pf.cur] = pf.curStep
	}
	pf.cur, pf.curStep, pf.curSet = series, step, true
}

// seriesKey is a job's series of one framework: a struct, not a joined
// string, so that a step line's lookup builds no string.
type seriesKey struct{ job, framework string }

type foldKey struct {
	job, framework string
	kind           TelemetryKind
	step           int64
}

// openRow is a row of the open window; idx is where it was last appended
// to a batch (checked against the row's coordinates: the batch may have
// been flushed since).
type openRow struct {
	row TrainingStep
	idx int
}

// series is one framework's training progress in a job.
type series struct {
	framework  string
	steps      int
	distinct   int
	maxStep    int64
	firstStep  int64
	lastStep   int64
	firstTime  float64
	lastTime   float64
	tokens     float64
	samples    float64
	mfu        float64
	tflops     float64
	itFirst    float64
	itLast     float64
	runtime    float64
	all        sampler // every step time
	seg        sampler // step times since the latest network change
	segSteps   int
	network    string // network when the segment began
	prevNet    string
	prevMedian float64
	changedAt  int64
}

// seriesOf returns the job's series of framework fw, creating it when
// create is set.
func (j *telJob) seriesOf(fw string, create bool, samples int) *series {
	for _, s := range j.series {
		if s.framework == fw {
			if !create && s.steps == 0 {
				return nil
			}
			return s
		}
	}
	if !create {
		return nil
	}
	nan := math.NaN()
	s := &series{framework: fw, maxStep: math.MinInt64, firstStep: -1, lastStep: -1, firstTime: nan, lastTime: nan,
		tokens: nan, samples: nan, mfu: nan, tflops: nan, itFirst: nan, itLast: nan, runtime: nan, prevMedian: nan,
		changedAt: -1, network: j.network}
	s.all.init(samples)
	s.seg.init(samples)
	j.series = append(j.series, s)
	return s
}

func (s *series) add(tl *TelemetryLine) {
	if tl.Kind == TelemetryStep {
		s.steps++
		if tl.Step >= 0 {
			if s.firstStep < 0 {
				s.firstStep = tl.Step
			}
			s.lastStep = tl.Step
			if tl.Step > s.maxStep {
				s.maxStep = tl.Step
				s.distinct++
			}
		}
	}
	if !math.IsNaN(tl.StepTime) {
		if math.IsNaN(s.firstTime) {
			s.firstTime = tl.StepTime
		}
		s.lastTime = tl.StepTime
		s.all.add(tl.StepTime)
		s.seg.add(tl.StepTime)
		s.segSteps++
	}
	setLast(&s.tokens, tl.TokensPerS)
	setLast(&s.samples, tl.SamplesPerS)
	setLast(&s.mfu, tl.MFU)
	setLast(&s.tflops, tl.TFLOPs)
	setLast(&s.runtime, tl.Runtime)
	if !math.IsNaN(tl.ItPerS) {
		if math.IsNaN(s.itFirst) {
			s.itFirst = tl.ItPerS
		}
		s.itLast = tl.ItPerS
	}
}

func setLast(dst *float64, v float64) {
	if !math.IsNaN(v) {
		*dst = v
	}
}

// setNetwork records the job's NCCL network; a change closes the current
// segment of every series, keeping its median for the regression rule.
func (j *telJob) setNetwork(name string) {
	if name == "" || name == j.network {
		return
	}
	j.network = name
	for _, s := range j.series {
		if s.network == "" {
			s.network = name // the first network seen: no change
			continue
		}
		if s.network == name {
			continue
		}
		if m := s.seg.median(); !math.IsNaN(m) {
			s.prevMedian = m
		}
		s.prevNet, s.network = s.network, name
		s.changedAt = s.lastStep
		s.seg.reset()
		s.segSteps = 0
	}
}

// foldStep turns a step, amend or summary line into a training_steps row,
// or counts it in the open row of its window with the same job, series,
// kind and step number. Rows depend only on the records of their
// partition's window (the FoldRecords offsets around the line): the
// window of an offset is fixed, a row's coordinates are those of its
// window's first matching line, and an amend line takes the step of the
// latest step line of its series earlier in the window (step -1 when
// there is none). A row whose count changed is appended to out again (or
// updated in place while out still holds it); storage keeps the last
// written, the most complete. The job's NCCL network at the row's first
// line is the one part that comes from outside the partition.
func (a *TelemetryAssembler) foldStep(job string, j *telJob, m *rowMeta, tl *TelemetryLine, t time.Time, src Source, out *Batch) {
	pf := a.window(src, out)
	series := seriesKey{job, tl.Framework}
	step := tl.Step
	switch tl.Kind {
	case TelemetryAmend:
		step = -1
		if s, ok := pf.lastStep(series); ok {
			step = s
		}
	case TelemetryStep:
		if step >= 0 {
			pf.setLast(series, step)
		}
	}
	key := foldKey{job: job, framework: tl.Framework, kind: tl.Kind, step: step}
	if step >= 0 {
		if o := pf.row(key); o != nil {
			o.row.Ranks++
			if o.idx < len(out.Steps) && out.Steps[o.idx].Source == o.row.Source {
				out.Steps[o.idx].Ranks = o.row.Ranks
				return
			}
			o.idx = len(out.Steps)
			out.Steps = appendRow(out.Steps, o.row, out.rowLimit)
			out.Bytes += stepRowBytes
			return
		}
	}
	var row TrainingStep
	r := &row
	if step >= 0 {
		// Lines without a step number are rows of their own: complete at
		// once, nothing to hold.
		o := pf.newRow()
		o.idx = len(out.Steps)
		r = &o.row
		pf.setRow(key, o)
		if pf.first < 0 || src.Offset < pf.first {
			pf.first = src.Offset
		}
	}
	j.stepRow(r, m, tl, step, t, src) // rows carry their own line's pod and node
	out.Steps = appendRow(out.Steps, *r, out.rowLimit)
	out.Bytes += stepRowBytes
}

// window returns the open fold window of src's partition, starting it
// when src is past the window held: the rows of the window that ends are
// written to out first (or kept for EmitCollectives when out is nil).
func (a *TelemetryAssembler) window(src Source, out *Batch) *partFold {
	pk := partKey{src.Topic, src.Partition}
	w := src.Offset / a.cfg.FoldRecords
	pf := a.lastFold
	if pf == nil || a.lastPart != pk {
		pf = a.folds[pk]
	}
	if pf == nil || pf.window != w {
		if pf == nil {
			pf = &partFold{}
			a.folds[pk] = pf
		}
		a.retire(pf, out)
		pf.reset(w)
	}
	a.lastPart, a.lastFold = pk, pf
	return pf
}

// retire writes the changed collective_perf rows of a window that ends to
// out, or, when out is nil, keeps them for the next EmitCollectives.
func (a *TelemetryAssembler) retire(pf *partFold, out *Batch) {
	if len(pf.touched) == 0 {
		return
	}
	if out == nil {
		out = &a.retired
	}
	pf.emitColls(out)
}

// stepRow fills r with the training_steps row of a step line (its own
// line's pod and node, the job's network of the moment).
func (j *telJob) stepRow(r *TrainingStep, m *rowMeta, tl *TelemetryLine, step int64, t time.Time, src Source) {
	s := StepSeries{Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster, Pod: m.Pod, Node: m.Node, Pool: m.pool,
		Model: m.model, Framework: tl.Framework, Kind: tl.Kind.String(), Network: j.network}
	s.NetworkClass = j.networkClass()
	*r = TrainingStep{Source: src, Time: t, StepSeries: j.rowSeries.of(&s), Rank: tl.Rank, Step: step, Ranks: 1,
		StepTime: tl.StepTime, TokensPerS: tl.TokensPerS, SamplesPerS: tl.SamplesPerS, ItPerS: tl.ItPerS,
		TFLOPs: tl.TFLOPs, MFU: tl.MFU, Loss: tl.Loss}
}

// networkClass returns NetworkClass(j.network), "" before any network,
// worked out once per network rather than per row.
func (j *telJob) networkClass() string {
	if j.network == "" {
		return ""
	}
	if j.netClassOf != j.network {
		j.netClass, j.netClassOf = NetworkClass(j.network), j.network
	}
	return j.netClass
}

func (s *series) report(network string) TrainingReport {
	r := TrainingReport{Framework: s.framework, Steps: s.steps, DistinctSteps: s.distinct,
		FirstStepTime: fptr(s.firstTime), LastStepTime: fptr(s.lastTime), MedianStepTime: fptr(s.all.median()),
		TokensPerSLast: fptr(s.tokens), SamplesPerSLast: fptr(s.samples), MFULast: fptr(s.mfu),
		TFLOPsLast: fptr(s.tflops), ItPerSFirst: fptr(s.itFirst), ItPerSLast: fptr(s.itLast),
		TrainRuntime: fptr(s.runtime)}
	if s.firstStep >= 0 {
		r.FirstStep, r.LastStep = i64ptr(s.firstStep), i64ptr(s.lastStep)
	}
	if network != "" {
		c := NetworkClass(network)
		r.Network, r.NetworkClass = &network, &c
	}
	if s.prevNet != "" {
		p := s.prevNet
		r.PreviousNetwork = &p
		r.PreviousMedian = fptr(s.prevMedian)
		r.SegmentMedian = fptr(s.seg.median())
		r.SegmentSteps = s.segSteps
		if s.changedAt >= 0 {
			r.NetworkChangedAt = i64ptr(s.changedAt)
		}
		if r.PreviousMedian != nil && r.SegmentMedian != nil && *r.PreviousMedian > 0 {
			r.StepTimeRegress = fptr(*r.SegmentMedian / *r.PreviousMedian)
		}
	}
	return r
}

// sampler keeps a bounded, evenly spaced sample of a stream of values:
// every stride-th value, halving the sample and doubling the stride when
// it is full. Its median stays close to the stream's on any length.
type sampler struct {
	vals   []float64
	limit  int
	stride int
	skip   int
}

func (s *sampler) init(limit int) { s.limit, s.stride = limit, 1 }

func (s *sampler) reset() { s.vals, s.stride, s.skip = s.vals[:0], 1, 0 }

func (s *sampler) add(v float64) {
	if s.skip > 0 {
		s.skip--
		return
	}
	s.skip = s.stride - 1
	if len(s.vals) >= s.limit {
		n := 0
		for i := 0; i < len(s.vals); i += 2 {
			s.vals[n] = s.vals[i]
			n++
		}
		s.vals = s.vals[:n]
		s.stride *= 2
		s.skip = s.stride - 1
	}
	if len(s.vals) == cap(s.vals) {
		// Doubling up to the limit: append would grow the last step
		// past it, room a job's series hold for good.
		grown := make([]float64, len(s.vals), min(max(2*len(s.vals), 16), s.limit))
		copy(grown, s.vals)
		s.vals = grown
	}
	s.vals = append(s.vals, v)
}

// median returns the median of the sample (Median).
func (s *sampler) median() float64 { return Median(s.vals) }

// Median returns the median of vals, the mean of the two middle values of
// an even count (ClickHouse's medianExact returns the upper one instead),
// NaN when empty. vals is not changed.
func Median(vals []float64) float64 {
	n := len(vals)
	if n == 0 {
		return math.NaN()
	}
	v := slices.Clone(vals)
	slices.Sort(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
