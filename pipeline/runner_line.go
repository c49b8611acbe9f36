package pipeline

import (
	"errors"
	"time"
)

// activitySample is how often one job's non-NCCL records are decoded to
// tell the rules its pods log: 10 s gives the absence rules (minutes) dozens
// of samples per pod while decoding a negligible share of the stream.
const activitySample = 10 * time.Second

// maxSampled bounds the keys remembered for sampling; beyond it the memory
// starts over (a burst of extra samples, never growth).
const maxSampled = 100000

// activity adds a sampled non-NCCL record of a job to Batch.Activity. It
// decodes with a decoder of its own: a sample must not disturb a partial
// line of the partition.
func (r *Runner) activity(m *Message) {
	now := r.curNow
	if r.sampled == nil {
		r.sampled = map[string]time.Time{}
	}
	if t, ok := r.sampled[string(m.Key)]; ok && now.Sub(t) < activitySample {
		return
	}
	if len(r.sampled) >= maxSampled {
		clear(r.sampled)
	}
	r.sampled[string(m.Key)] = now
	report := func(rec *Record) {
		var meta Meta
		if rec.Meta != nil {
			meta = *rec.Meta
		}
		meta.Job = r.namer.Name(rec, m.Key)
		if meta.Cluster == "" {
			meta.Cluster = r.cfg.Cluster
		}
		t := rec.Time
		if t.IsZero() {
			t = m.Time
		}
		r.batch.Activity = append(r.batch.Activity, Activity{Meta: meta, Time: t})
	}
	if r.sampler == nil {
		r.sampler = r.deps.NewDecoder()
	}
	_ = r.sampler.Decode(m.Value, report) // an undecodable record is not evidence
	r.sampler.Flush(report)
}

// ErrOversized is the error a Decoder returns (wrapped or as is) for a
// record or line over its size cap; parsers.ErrOversized is this value.
var ErrOversized = errors.New("oversized: exceeds the size cap")

// line applies a decoded, stamped line on the inline path: its NCCL
// events and its telemetry.
func (r *Runner) line(rec *Record) {
	r.proc.Record(rec)
	r.gave = r.gave || r.proc.gave
	if tl, ok := r.proc.Telemetry(); ok {
		r.fold(rec, tl)
	}
}

// fold hands a line's telemetry to the telemetry assembler.
func (r *Runner) fold(rec *Record, tl *TelemetryLine) {
	m := rec.Meta
	if k := [3]string{m.Cluster, m.Namespace, m.Job}; k != r.keyMeta || r.key == "" {
		r.keyMeta, r.key = k, JobKey(k[0], k[1], k[2])
	}
	job := r.key
	r.tel.Add(job, m, tl, rec.Time, rec.Source, &r.batch)
	// Telemetry-only jobs idle out like the others.
	if job != r.foldedJob || r.curNow != r.foldedAt {
		r.touched[job] = r.curNow
		r.telDirty[job] = true
		r.foldedJob, r.foldedAt = job, r.curNow
	}
}

// tap turns every NCCL event into a stored row and marks its job dirty.
func (r *Runner) tap(job string, rec *Record, ev *Event) {
	if mt := r.deps.Metrics; mt != nil {
		mt.NCCLLines.Inc()
	}
	m := rec.Meta
	rank := ev.Rank
	if rank < 0 {
		rank = ev.LauncherRank
	}
	row := EventRow{Source: rec.Source, Time: rec.Time, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Container: m.Container, Node: m.Node, Host: string(ev.Host), PID: string(ev.PID), Dev: ev.Dev,
		Rank: rank, Kind: ev.Kind.String(), Warn: ev.IsWarn(), Line: string(rec.Text)}
	r.batch.Events = appendRow(r.batch.Events, row)
	r.batch.Bytes += len(row.Line) + len(row.Job) + len(row.Pod) + 64
	r.dirty[job] = true
	r.touched[job] = r.curNow
}

func (r *Runner) deadLetter(m *Message, line int32, reason, msg string) {
	raw := m.Value
	if len(raw) > r.cfg.MaxDeadLetterBytes {
		raw = raw[:r.cfg.MaxDeadLetterBytes]
	}
	r.batch.DeadLetters = append(r.batch.DeadLetters, DeadLetter{
		Source: m.Source(line),
		Time:   m.Time, Reason: reason + ": " + msg, Raw: append([]byte(nil), raw...)})
	r.batch.Bytes += len(raw) + len(msg)
	if mt := r.deps.Metrics; mt != nil {
		mt.DeadLetters.WithLabelValues(reason).Inc()
		mt.ParseErrors.WithLabelValues(reason).Inc()
	}
}
