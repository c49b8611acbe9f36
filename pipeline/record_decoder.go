package pipeline

import (
	"bytes"
	"cmp"
	"slices"
)

// recordDecoder is the pure, per-partition half of the run loop's work on
// a record: the size check, the prefilter, the envelope decode (one Decoder
// per partition, so that a partial line joins within it) and the stamping
// of each decoded line (source coordinates, time, metadata with the job
// named). The loop's inline path owns one, and so does each parse worker;
// the records of one partition always go to the same one, in offset order.
// Not safe for concurrent use.
type recordDecoder struct {
	maxBytes   int
	cand       func([]byte) bool
	newDecoder func() Decoder
	namer      JobNamer
	cluster    string

	parts map[partKey]*partDecoder
	lastK partKey // the partition of the last record, and its decoder:
	last  *partDecoder
	// The stamped metadata of the decoder's Meta values (shared and
	// immutable, parsers.Decoder), per Kafka key: built once, then shared
	// and immutable too.
	metas map[*Meta]stampedMeta

	cur   *Message
	line  int32
	to    func(*Record) // where the stamped lines go
	emitf func(*Record) // d.emit, bound once
}

// partDecoder is one partition's envelope decoder.
type partDecoder struct {
	dec     Decoder
	partial bool // a partial line is in progress: the prefilter is not asked
}

// stampedMeta is a decoder's Meta with the job named for one Kafka key.
type stampedMeta struct {
	key  []byte
	meta *Meta
}

// maxStamped bounds the stamped metadata remembered; beyond it the memory
// starts over. The decoder caches as many Meta values per partition
// (parsers' maxMetaEntries).
const maxStamped = 4096

func newRecordDecoder(cfg RunnerConfig, deps RunnerDeps) *recordDecoder {
	d := &recordDecoder{maxBytes: cfg.MaxRecordBytes, cand: deps.Candidate, newDecoder: deps.NewDecoder,
		namer: JobNamer{Labels: cfg.JobLabels}, cluster: cfg.Cluster}
	d.emitf = d.emit
	d.reset()
	return d
}

// reset drops every partition's decoder and its partial line.
func (d *recordDecoder) reset() {
	d.parts = map[partKey]*partDecoder{}
	d.last = nil
	d.metas = map[*Meta]stampedMeta{}
}

// recordOutcome says what became of a record.
type recordOutcome uint8

const (
	// recordDecoded: decoded, its lines handed on.
	recordDecoded recordOutcome = iota
	// recordOversized: over pipeline.max_record_bytes, a dead letter.
	recordOversized
	// recordSkipped: not a prefilter candidate (and no partial line of
	// its partition in progress): never decoded.
	recordSkipped
	// recordEmpty: decoded without error, but none of its lines was an
	// NCCL message, a launcher host or a telemetry line (or it held only
	// the first pieces of a partial line): for the rules it is activity,
	// as a skipped record is (without a prefilter, with telemetry on,
	// this is what a skipped record becomes).
	recordEmpty
)

// record reads m, a record of partition k: unless it is oversized or
// skipped, its lines go to to, stamped. lines is the number of lines
// handed on, pending whether the partition has a partial line in progress
// after it, err the decoder's error (the record is a dead letter at line
// lines).
func (d *recordDecoder) record(m *Message, k partKey, to func(*Record)) (out recordOutcome, lines int32, pending bool, err error) {
	if len(m.Value) > d.maxBytes {
		return recordOversized, 0, false, nil
	}
	p := d.part(k)
	if !p.partial && !d.cand(m.Value) {
		return recordSkipped, 0, false, nil
	}
	d.cur, d.line, d.to = m, 0, to
	err = p.dec.Decode(m.Value, d.emitf)
	d.cur, d.to = nil, nil
	pp, ok := p.dec.(interface{ Pending() bool })
	p.partial = ok && pp.Pending()
	return recordDecoded, d.line, p.partial, err
}

// part returns partition k's decoder.
func (d *recordDecoder) part(k partKey) *partDecoder {
	if d.last != nil && d.lastK == k {
		return d.last
	}
	p := d.parts[k]
	if p == nil {
		p = &partDecoder{dec: d.newDecoder()}
		d.parts[k] = p
	}
	d.lastK, d.last = k, p
	return p
}

// flush hands partition k's partial line on as a complete line, with m's
// coordinates; it does nothing for a partition without one.
func (d *recordDecoder) flush(k partKey, m *Message, to func(*Record)) {
	p := d.parts[k]
	if p == nil {
		return
	}
	d.cur, d.line, d.to = m, 0, to
	p.dec.Flush(d.emitf)
	d.cur, d.to = nil, nil
	p.partial = false
}

// partitions returns the partitions that have a decoder, sorted.
func (d *recordDecoder) partitions() []partKey {
	ks := make([]partKey, 0, len(d.parts))
	for k := range d.parts {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, comparePart)
	return ks
}

func comparePart(x, y partKey) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.part, y.part))
}

// emit stamps a decoded line with the record's coordinates, its time (the
// record's when the envelope gave none) and the metadata with the job
// named, and hands it on.
func (d *recordDecoder) emit(rec *Record) {
	m := d.cur
	rec.Source = m.Source(d.line)
	d.line++
	if rec.Time.IsZero() {
		rec.Time = m.Time
	}
	rec.Meta = d.stamp(rec, m.Key)
	d.to(rec)
}

// stamp returns rec's metadata with the job named (JobNamer: labels, then
// the record's job, then the Kafka key) and the cluster defaulted. The
// decoder shares one Meta among the records of a container, so the
// stamped copy is shared too, per key; nobody changes it.
func (d *recordDecoder) stamp(rec *Record, key []byte) *Meta {
	src := rec.Meta
	if s, ok := d.metas[src]; ok && bytes.Equal(s.key, key) {
		return s.meta
	}
	m := &Meta{}
	if src != nil {
		*m = *src
	}
	m.Job = d.namer.Name(rec, key)
	if m.Cluster == "" {
		m.Cluster = d.cluster
	}
	if len(d.metas) >= maxStamped {
		clear(d.metas)
	}
	d.metas[src] = stampedMeta{key: bytes.Clone(key), meta: m}
	return m
}
