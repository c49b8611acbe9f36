package pipeline

import (
	"math"
	"math/bits"
	"time"
)

// Collective bandwidth: NCCL Inspector's per-collective records
// (parsers.ParseInspector fills a CollectiveRecord in a TelemetryLine of
// kind TelemetryCollective), folded into collective_perf rows — per job,
// communicator, collective, message-size bucket and minute — in the fold
// windows of training_steps (partFold), and summed up per job for the
// `collectives` section of `scan --json` and the bandwidth rule
// (CollectiveReport). docs/inspector.md describes the whole.

// CollectiveRecord is one NCCL Inspector record: one collective (or, from
// NCCL 2.30, one point-to-point operation) completed by one rank of one
// communicator. Byte slices alias the parsed line, valid until the
// parser's next call; numbers the record does not give are -1 (integers)
// or NaN (floats).
type CollectiveRecord struct {
	// Comm is header.id: the communicator's commHash as "0x%lx", the value
	// NCCL's init line prints as "commId 0x%llx" for a communicator made
	// by ncclCommInitRank* (docs/inspector.md).
	Comm     []byte
	CommName []byte // header.comm_name (NCCL 2.30+); "unknown" when unnamed
	Rank     int
	NRanks   int
	NNodes   int
	Version  []byte // metadata.inspector_output_format_version, e.g. "v4.0"
	Host     []byte // metadata.hostname
	PID      int64
	// DumpTimeUS is metadata.dump_timestamp_us: when the record was
	// written, microseconds since the epoch. It dates the record's row (a
	// fact of the record, whatever the envelope says).
	DumpTimeUS int64
	P2P        bool   // a p2p_perf record (Send, Recv)
	Op         []byte // coll or p2p: "AllReduce", "AllGather", "Send", …
	SN         int64  // coll_sn / p2p_sn
	Peer       int    // p2p_peer; -1 for collectives
	Bytes      int64  // *_msg_size_bytes
	ExecUS     float64
	Timing     []byte // *_timing_source: kernel_gpu, kernel_cpu, collective_cpu
	AlgBW      float64
	BusBW      float64 // GB/s
	Verbose    bool    // the record carries event_trace_sn/event_trace_ts
}

// Reset clears r for reuse.
func (r *CollectiveRecord) Reset() {
	nan := math.NaN()
	*r = CollectiveRecord{Rank: -1, NRanks: -1, NNodes: -1, PID: -1, DumpTimeUS: -1, SN: -1, Peer: -1, Bytes: -1,
		ExecUS: nan, AlgBW: nan, BusBW: nan}
}

// CollectivePerf is one collective_perf row: the Inspector records of one
// job, communicator, operation, message-size bucket and minute whose
// offsets fall in one fold window of a partition (the first record's
// coordinates are the row's, as for TrainingStep). The same row is written
// again as it grows; storage keeps the one with the highest Count. A
// minute with records in several windows has several rows: queries sum
// counts and merge histograms (docs/inspector.md).
type CollectivePerf struct {
	Source    Source
	Minute    time.Time // the minute of the first record's dump time (envelope time when it has none)
	Job       string
	Namespace string
	Cluster   string
	Pod       string
	Node      string
	Pool      string
	Host      string // hostname of the first record
	CommID    string // header.id
	CommName  string
	Op        string // collective or p2p operation
	P2P       bool
	// SizeBucket is the message size rounded down to a power of two
	// (bytes); 0 for empty messages.
	SizeBucket int64
	NRanks     int
	NNodes     int
	Count      int64   // records folded
	BusBWMin   float64 // GB/s; NaN when no record gave a number
	BusBWMax   float64
	BusBWSum   float64
	BusBWP50   float64
	ExecUSMin  float64 // microseconds; NaN when no record gave a number
	ExecUSMax  float64
	ExecUSSum  float64
	ExecUSP50  float64
	ExecUSP99  float64
	// BusBWHist and ExecHist are the row's log histograms (Hist): what
	// lets a query merge the quantiles of several rows.
	BusBWHist Hist
	ExecHist  Hist
}

// Hist is a sparse log histogram: Counts[i] values fell in bucket
// Buckets[i], buckets in ascending order. Bucket b holds the values v with
// floor(HistPerOctave*log2(v)) + offset == b (offset histBusBWOffset for
// bus bandwidth in GB/s, 0 for times in microseconds), clamped to 0..255:
// eight buckets per octave, 9 % wide, so a quantile read from the bucket's
// geometric middle is within 4.5 % of the value.
type Hist struct {
	Buckets []uint8
	Counts  []uint32
}

// HistPerOctave is the number of Hist buckets per doubling.
const HistPerOctave = 8

// histBusBWOffset puts 1 GB/s in bucket 128: the busbw histogram spans
// 2^-16 to 2^16 GB/s.
const histBusBWOffset = 128

// HistBucket returns the bucket of v in a histogram with offset off.
func HistBucket(v float64, off int) uint8 {
	if !(v > 0) {
		return 0
	}
	b := int(math.Floor(HistPerOctave*math.Log2(v))) + off
	return uint8(min(max(b, 0), 255))
}

// HistValue returns the geometric middle of bucket b of a histogram with
// offset off.
func HistValue(b uint8, off int) float64 {
	return math.Exp2((float64(int(b)-off) + 0.5) / HistPerOctave)
}

// denseHist is an open row's histogram.
type denseHist [256]uint32

// quantile returns the q-quantile of the n values counted in h (offset
// off), clamped to [lo, hi], the exact extremes; NaN when n is 0.
func (h *denseHist) quantile(q float64, n int64, off int, lo, hi float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	// The rank of the nearest-rank quantile: ceil(q*n), at least 1.
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for b, c := range h {
		seen += int64(c)
		if seen >= rank {
			return min(max(HistValue(uint8(b), off), lo), hi)
		}
	}
	return hi
}

// sparse returns h as a Hist.
func (h *denseHist) sparse() Hist {
	var out Hist
	for b, c := range h {
		if c > 0 {
			out.Buckets = append(out.Buckets, uint8(b))
			out.Counts = append(out.Counts, c)
		}
	}
	return out
}

// SizeBucket rounds a message size down to a power of two.
func SizeBucket(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return 1 << (63 - bits.LeadingZeros64(uint64(n)))
}

// collKey is the fold key of a collective_perf row.
type collKey struct {
	job, comm, op string
	p2p           bool
	bucket        int64
	minute        int64 // Unix minutes
}

// openColl is an open collective_perf row: its fixed fields, its running
// figures and histograms, and whether it changed since it was last
// written to a batch (dirty).
type openColl struct {
	row        CollectivePerf
	busbw      denseHist
	exec       denseHist
	nbus, nexe int64
	dirty      bool
}

// recordTime is the time that dates a record's row: its dump time, else
// the envelope's.
func recordTime(c *CollectiveRecord, t time.Time) time.Time {
	if c.DumpTimeUS > 0 {
		return time.UnixMicro(c.DumpTimeUS).UTC()
	}
	return t.UTC()
}

// foldCollective counts an Inspector record in the open collective_perf
// row of its window with the same key, opening one when there is none.
// Rows are written to out only by EmitCollectives (at a flush, and when
// their window ends), once per batch however many records they took.
func (a *TelemetryAssembler) foldCollective(job string, m *rowMeta, c *CollectiveRecord, t time.Time, src Source, out *Batch) {
	pf := a.window(src, out)
	minute := recordTime(c, t).Truncate(time.Minute)
	key := collKey{job: job, op: string(c.Op), p2p: c.P2P, bucket: SizeBucket(c.Bytes), minute: minute.Unix() / 60}
	key.comm = string(c.Comm)
	o := pf.colls[key]
	if o == nil {
		o = pf.newColl()
		nan := math.NaN()
		o.row = CollectivePerf{Source: src, Minute: minute, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
			Pod: m.Pod, Node: m.Node, Pool: m.pool, Host: string(c.Host), CommID: key.comm, CommName: string(c.CommName),
			Op: key.op, P2P: c.P2P, SizeBucket: key.bucket, NRanks: c.NRanks, NNodes: c.NNodes,
			BusBWMin: nan, BusBWMax: nan, BusBWP50: nan, ExecUSMin: nan, ExecUSMax: nan, ExecUSP50: nan, ExecUSP99: nan}
		pf.colls[key] = o
		if pf.first < 0 || src.Offset < pf.first {
			pf.first = src.Offset
		}
	}
	o.add(c)
	if !o.dirty {
		o.dirty = true
		pf.touched = append(pf.touched, o)
		if out != nil {
			out.Bytes += collRowBytes + len(o.row.Host)
		}
	}
}

// add counts c in the row.
func (o *openColl) add(c *CollectiveRecord) {
	r := &o.row
	r.Count++
	if v := c.BusBW; !math.IsNaN(v) && v >= 0 {
		if o.nbus == 0 || v < r.BusBWMin {
			r.BusBWMin = v
		}
		if o.nbus == 0 || v > r.BusBWMax {
			r.BusBWMax = v
		}
		r.BusBWSum += v
		o.busbw[HistBucket(v, histBusBWOffset)]++
		o.nbus++
	}
	if v := c.ExecUS; !math.IsNaN(v) && v >= 0 {
		if o.nexe == 0 || v < r.ExecUSMin {
			r.ExecUSMin = v
		}
		if o.nexe == 0 || v > r.ExecUSMax {
			r.ExecUSMax = v
		}
		r.ExecUSSum += v
		o.exec[HistBucket(v, 0)]++
		o.nexe++
	}
}

// emit returns the row as it stands, its quantiles and histograms filled.
func (o *openColl) emit() CollectivePerf {
	r := o.row
	r.BusBWP50 = o.busbw.quantile(0.5, o.nbus, histBusBWOffset, r.BusBWMin, r.BusBWMax)
	r.ExecUSP50 = o.exec.quantile(0.5, o.nexe, 0, r.ExecUSMin, r.ExecUSMax)
	r.ExecUSP99 = o.exec.quantile(0.99, o.nexe, 0, r.ExecUSMin, r.ExecUSMax)
	r.BusBWHist, r.ExecHist = o.busbw.sparse(), o.exec.sparse()
	return r
}

// emitColls appends the window's rows that changed since they were last
// written to out.
func (pf *partFold) emitColls(out *Batch) {
	for _, o := range pf.touched {
		if out != nil {
			out.Collectives = appendRow(out.Collectives, o.emit(), out.rowLimit)
		}
		o.dirty = false
	}
	clear(pf.touched)
	pf.touched = pf.touched[:0]
}

// EmitCollectives appends to out every open collective_perf row that
// changed since it was last written: the run loop calls it when it
// prepares a batch, before Hold and Seal, so that a batch holds each
// changed row once, as it stands.
func (a *TelemetryAssembler) EmitCollectives(out *Batch) {
	if rows := a.retired.Collectives; len(rows) > 0 {
		for i := range rows {
			out.Collectives = appendRow(out.Collectives, rows[i], out.rowLimit)
		}
		clear(rows)
		a.retired.Collectives = rows[:0]
	}
	for _, pf := range a.folds {
		pf.emitColls(out)
	}
}

// newColl returns an unused open collective row of the window's slab.
func (pf *partFold) newColl() *openColl {
	b, i := pf.cused/openCollBlock, pf.cused%openCollBlock
	if b == len(pf.cslab) {
		pf.cslab = append(pf.cslab, make([]openColl, openCollBlock))
	}
	pf.cused++
	o := &pf.cslab[b][i]
	*o = openColl{}
	return o
}

// openCollBlock is the size of a partFold.cslab block: a window holds a
// few dozen rows (communicators × operations × size buckets of the jobs
// in the partition).
const openCollBlock = 16

// CollectiveReport sums up one operation of one communicator of a job
// over the Inspector records seen: an element of the `collectives` array
// of `ncclwatch scan --json` and what the bandwidth rule reads. Fields are
// null where no record gave them.
type CollectiveReport struct {
	CommID   string  `json:"comm_id"`
	CommName *string `json:"comm_name"`
	Op       string  `json:"collective"`
	P2P      bool    `json:"p2p"`
	NRanks   *int    `json:"nranks"`
	NNodes   *int    `json:"nnodes"`
	Records  int     `json:"records"`
	MaxBytes int64   `json:"max_bytes"`
	// BusBWP50 is the median bus bandwidth of every record (GB/s),
	// BusBWMax the highest.
	BusBWP50 *float64 `json:"busbw_p50"`
	BusBWMax *float64 `json:"busbw_max"`
	// LargeRecords are the records of at least LargeBytes bytes
	// (TelemetryAssemblerConfig.LargeMessageBytes), LargeBusBWP50 their
	// median bus bandwidth: what compares with a pool's nccl-tests
	// baseline, measured at large sizes.
	LargeBytes    int64    `json:"large_bytes"`
	LargeRecords  int      `json:"large_records"`
	LargeBusBWP50 *float64 `json:"large_busbw_p50"`
	ExecUSP50     *float64 `json:"exec_us_p50"`
}

// collStat is a job's running summary of one communicator's operation.
type collStat struct {
	comm, name, op string
	p2p            bool
	nranks, nnodes int
	records, large int
	maxBytes       int64
	busMax         float64
	all, big, exec sampler
}

// maxCollStats bounds the operations summed up per job: a job has a few
// communicators (data, tensor, pipeline parallel groups) of a few
// operations each.
const maxCollStats = 64

// collective counts c in the job's summary of its communicator's
// operation.
func (j *telJob) collective(c *CollectiveRecord, cfg TelemetryAssemblerConfig) {
	var s *collStat
	for _, x := range j.colls {
		if x.p2p == c.P2P && x.op == string(c.Op) && x.comm == string(c.Comm) {
			s = x
			break
		}
	}
	if s == nil {
		if len(j.colls) >= maxCollStats {
			return
		}
		s = &collStat{comm: string(c.Comm), name: string(c.CommName), op: string(c.Op), p2p: c.P2P,
			nranks: -1, nnodes: -1, busMax: math.NaN()}
		s.all.init(cfg.MedianSamples)
		s.big.init(cfg.MedianSamples)
		s.exec.init(cfg.MedianSamples)
		j.colls = append(j.colls, s)
	}
	s.records++
	if s.name == "" {
		s.name = string(c.CommName) // NCCL 2.30 names communicators
	}
	s.nranks, s.nnodes = max(s.nranks, c.NRanks), max(s.nnodes, c.NNodes)
	s.maxBytes = max(s.maxBytes, c.Bytes)
	if v := c.BusBW; !math.IsNaN(v) && v >= 0 {
		s.all.add(v)
		if math.IsNaN(s.busMax) || v > s.busMax {
			s.busMax = v
		}
		if c.Bytes >= cfg.LargeMessageBytes {
			s.large++
			s.big.add(v)
		}
	}
	if v := c.ExecUS; !math.IsNaN(v) && v >= 0 {
		s.exec.add(v)
	}
}

// Collectives returns the job's collective summaries, in order of first
// appearance; empty (not nil) for a job without Inspector records.
func (a *TelemetryAssembler) Collectives(job string) []CollectiveReport {
	out := []CollectiveReport{}
	j := a.jobs[job]
	if j == nil {
		return out
	}
	for _, s := range j.colls {
		r := CollectiveReport{CommID: s.comm, Op: s.op, P2P: s.p2p, Records: s.records, MaxBytes: s.maxBytes,
			BusBWP50: fptr(s.all.median()), BusBWMax: fptr(s.busMax), LargeBytes: a.cfg.LargeMessageBytes,
			LargeRecords: s.large, LargeBusBWP50: fptr(s.big.median()), ExecUSP50: fptr(s.exec.median())}
		if s.name != "" {
			r.CommName = strptr(s.name)
		}
		if s.nranks >= 0 {
			n := s.nranks
			r.NRanks = &n
		}
		if s.nnodes >= 0 {
			n := s.nnodes
			r.NNodes = &n
		}
		out = append(out, r)
	}
	return out
}
