package loadtest

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// The cluster-inspector shape: the cluster stream with NCCL Inspector
// records mixed in, as Fluent Bit sends them from the jobs' dump
// directories (deploy/fluent-bit/inspector.conf). The cluster stream's
// lines are clusterLineInterval apart in stream time; Inspector records
// come at InspectorRate records per second of the same time, each from a
// rank of a running job, shaped as the records in testdata/inspector
// (NCCL 2.28.3's and 2.30.3's plain records): header.id is the job's
// commId, as the job's NCCL init prints it, so `run` joins them.

// DefaultInspectorRate is the Inspector records per second of stream time
// the cluster-inspector shape carries when none is given: 200 beside the
// cluster's 1000 lines a second makes one record in six an Inspector
// record, which is 100 k Inspector records a second when `run` consumes
// the 600 k records a second it aims at. A stream that is nearly all
// Inspector records (--inspector-rate 100000) measures the collective
// fold alone.
const DefaultInspectorRate = 200

// clusterLineInterval is the stream time between two lines of the cluster
// stream (its records' timestamps).
const clusterLineInterval = time.Millisecond

// inspectorColls are the collectives a training job's Inspector records
// name, with the weight of each.
var inspectorColls = []struct {
	name   string
	weight int
	factor float64 // busbw / algbw: 2(n-1)/n for AllReduce, (n-1)/n for the gathers
}{
	{"AllReduce", 5, 2}, {"ReduceScatter", 3, 1}, {"AllGather", 3, 1}, {"Broadcast", 1, 1},
}

// inspectorMix draws the Inspector records mixed into a cluster stream.
// Its draws do not depend on which jobs are formatted, so producers that
// each take a part of the jobs walk the same stream.
type inspectorMix struct {
	rate  float64 // records per second of stream time
	rng   *rand.Rand
	lines int64 // cluster lines so far
	made  int64 // Inspector records so far
	rec   []byte
	msg   []byte
}

func newInspectorMix(seed uint64, rate float64) *inspectorMix {
	return &inspectorMix{rate: rate, rng: rand.New(rand.NewPCG(seed, 0x510e527fade682d1))}
}

// due returns how many Inspector records come before the cluster stream's
// next line: those whose stream time is before it, by the rate.
func (m *inspectorMix) due() int64 {
	want := int64(float64(m.lines) * m.rate * clusterLineInterval.Seconds())
	return max(want-m.made, 0)
}

// at returns the stream time of the next Inspector record after base,
// the stream's start: its place among the records of its line interval.
func (m *inspectorMix) at(base time.Time) time.Time {
	sec := float64(m.made) / m.rate
	return base.Add(time.Duration(sec * float64(time.Second)))
}

// next draws the next record from the jobs running in slots and, when
// keep accepts its job (nil: all), appends it as a Fluent Bit record at t
// to dst. It returns the job and the record.
func (m *inspectorMix) next(dst []byte, slots []*clusterJob, keep func(int) bool, t time.Time) (*clusterJob, []byte, bool) {
	m.made++
	j := slots[m.rng.IntN(len(slots))]
	rank := m.rng.IntN(j.ranks)
	w := m.rng.IntN(12)
	coll := inspectorColls[0]
	for _, c := range inspectorColls {
		if w -= c.weight; w < 0 {
			coll = c
			break
		}
	}
	size := int64(1) << (16 + m.rng.IntN(16)) // 64 KiB … 2 GiB
	busbw := jobBusBW(j) * (0.6 + 0.4*m.rng.Float64())
	j.collSN++
	if keep != nil && !keep(j.id) {
		return j, dst, false
	}
	n := float64(j.ranks)
	algbw := busbw / (coll.factor * (n - 1) / n)
	if j.ranks == 1 {
		algbw = busbw
	}
	execUS := int64(float64(size)/(algbw*1e3)) + 1
	m.msg = j.inspectorLine(m.msg[:0], rank, coll.name, size, execUS, algbw, busbw, t)
	node := rank / clusterGPUs
	return j, appendInspectorRecord(dst, m.msg, t, j.ns, j.name, j.pods[node], j.nodeNm[node], j.pid+rank%clusterGPUs), true
}

// inspectorLine appends one dump-file line of rank: NCCL 2.30.3's plain
// record for even jobs, 2.28.3's (no comm_name, no timing source) for odd.
func (j *clusterJob) inspectorLine(dst []byte, rank int, coll string, size, execUS int64, algbw, busbw float64, t time.Time) []byte {
	v2303 := j.id%2 == 0
	dst = append(dst, `{"header":{"id":"`...)
	dst = append(dst, j.commID...)
	if v2303 {
		dst = append(dst, `","comm_name":"unknown`...)
	}
	dst = append(dst, `","rank":`...)
	dst = strconv.AppendInt(dst, int64(rank), 10)
	dst = append(dst, `,"n_ranks":`...)
	dst = strconv.AppendInt(dst, int64(j.ranks), 10)
	dst = append(dst, `,"nnodes":`...)
	dst = strconv.AppendInt(dst, int64(j.nodes), 10)
	dst = append(dst, `},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"`...)
	if v2303 {
		dst = append(dst, "nccl_profiler_interface"...)
	} else {
		dst = append(dst, "profiler_plugin"...)
	}
	dst = append(dst, `","dump_timestamp_us":`...)
	dst = strconv.AppendInt(dst, t.UnixMicro(), 10)
	dst = append(dst, `,"hostname":"`...)
	dst = append(dst, j.pods[rank/clusterGPUs]...)
	dst = append(dst, `","pid":`...)
	dst = strconv.AppendInt(dst, int64(j.pid+rank%clusterGPUs), 10)
	dst = append(dst, `},"coll_perf":{"coll":"`...)
	dst = append(dst, coll...)
	dst = append(dst, `","coll_sn":`...)
	dst = strconv.AppendInt(dst, j.collSN, 10)
	dst = append(dst, `,"coll_msg_size_bytes":`...)
	dst = strconv.AppendInt(dst, size, 10)
	dst = append(dst, `,"coll_exec_time_us":`...)
	dst = strconv.AppendInt(dst, execUS, 10)
	if v2303 {
		dst = append(dst, `,"coll_timing_source":"kernel_gpu"`...)
	}
	dst = append(dst, `,"coll_algobw_gbs":`...)
	dst = strconv.AppendFloat(dst, algbw, 'f', 6, 64)
	dst = append(dst, `,"coll_busbw_gbs":`...)
	dst = strconv.AppendFloat(dst, busbw, 'f', 6, 64)
	return append(dst, "}}"...)
}

// appendInspectorRecord appends line as deploy/fluent-bit/inspector.conf
// sends a dump-file line: the line as "message", the dump file's path,
// the job and namespace the path names and the node.
func appendInspectorRecord(dst, line []byte, t time.Time, ns, job, host, node string, pid int) []byte {
	dst = append(dst, `{"@timestamp":`...)
	dst = strconv.AppendFloat(dst, float64(t.UnixNano())/1e9, 'f', 6, 64)
	dst = append(dst, `,"message":`...)
	dst = strconv.AppendQuote(dst, string(line)) // ASCII: Go's quoting is JSON's
	dst = append(dst, `,"inspector_file":"/var/log/nccl-inspector/`...)
	dst = append(dst, ns...)
	dst = append(dst, '/')
	dst = append(dst, job...)
	dst = append(dst, '/')
	dst = append(dst, host...)
	dst = append(dst, "-pid"...)
	dst = strconv.AppendInt(dst, int64(pid), 10)
	dst = append(dst, `.log","job":"`...)
	dst = append(dst, job...)
	dst = append(dst, `","kubernetes":{"namespace_name":"`...)
	dst = append(dst, ns...)
	dst = append(dst, `","host":"`...)
	dst = append(dst, node...)
	return append(dst, `"}}`...)
}

// jobBusBW is the large-message bus bandwidth (GB/s) of job j's
// collectives: its network's, from j's id alone (the cluster stream's
// draws stay as they are without Inspector records).
func jobBusBW(j *clusterJob) float64 {
	bw := map[string]float64{"IB": 360, "RoCE": 280, "EFA": 200, "Socket": 3}[j.network]
	if bw == 0 {
		bw = 100
	}
	return bw * (0.8 + 0.4*float64(j.id*7919%100)/100)
}
