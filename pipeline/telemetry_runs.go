package pipeline

import (
	"math"
	"slices"
	"strconv"
	"time"
)

// testRun is one nccl-tests run of a job.
type testRun struct {
	id    string
	first int64 // offset of its first line
	// hold is where a replay can take the run up again: its first line,
	// or the offset of the last snapshot that holds it (Seal, Restore).
	hold       int64
	collective string
	version    string
	gpu        string
	format     string
	hdrMin     int64
	hdrMax     int64
	ranks      int // highest device-line rank + 1
	hosts      []string
	header     bool // params or table header seen
	devices    bool
	rows       int
	minBytes   int64
	maxBytes   int64
	maxOOP     float64
	maxIP      float64
	wrong      float64
	avg        float64
	closed     bool
}

// test folds an nccl-tests line into the job's runs. A run begins at its
// command line, "Collective test starting", params line, device list or
// table header, and at any of them (or a row) after the previous run had
// its rows or average; it ends at "# Avg bus bandwidth" or "Collective
// test concluded".
func (j *telJob) test(tl *TelemetryLine, src Source, cfg TelemetryAssemblerConfig) {
	cur := j.current()
	busy := cur != nil && (cur.rows > 0 || cur.closed || !math.IsNaN(cur.avg))
	switch tl.Kind {
	case TelemetryTestCommand, TelemetryTestStart:
		if cur == nil || busy || cur.collective != "" && cur.collective != string(tl.Collective) && cur.header {
			cur = j.newRun(src, cfg)
		}
		cur.collective = string(tl.Collective)
	case TelemetryTestVersion:
		if cur == nil || busy {
			cur = j.newRun(src, cfg)
		}
		cur.version = string(tl.Version)
	case TelemetryTestParams:
		if cur == nil || busy || cur.hdrMin >= 0 {
			cur = j.newRun(src, cfg)
		}
		cur.hdrMin, cur.hdrMax, cur.header = tl.MinBytes, tl.MaxBytes, true
	case TelemetryTestDevice:
		if cur == nil || busy {
			cur = j.newRun(src, cfg)
		}
		cur.devices = true
		if tl.TestRank+1 > cur.ranks {
			cur.ranks = tl.TestRank + 1
		}
		if len(tl.Host) > 0 {
			cur.hosts = addHost(cur.hosts, tl.Host, cfg.MaxHostsPerRun)
		}
		if cur.gpu == "" {
			cur.gpu = string(tl.GPU)
		}
	case TelemetryTestHeader:
		if cur == nil || busy || cur.format != "" {
			cur = j.newRun(src, cfg)
		}
		cur.format, cur.header = tl.Format, true
	case TelemetryTestRow:
		if cur == nil || cur.closed || !math.IsNaN(cur.avg) {
			cur = j.newRun(src, cfg)
		}
		if cur.format == "" {
			cur.format = tl.Format
		}
		r := &tl.Row
		cur.rows++
		if cur.rows == 1 || r.Bytes < cur.minBytes {
			cur.minBytes = r.Bytes
		}
		// The largest size wins; of equal sizes (several types or ops in
		// one table) the first printed.
		if cur.rows == 1 || r.Bytes > cur.maxBytes {
			cur.maxBytes, cur.maxOOP, cur.maxIP = r.Bytes, r.OOP.BusBW, r.IP.BusBW
		}
		for _, w := range [2]float64{r.OOP.Wrong, r.IP.Wrong} {
			if !math.IsNaN(w) {
				cur.wrong += w
			}
		}
	case TelemetryTestAvg:
		if cur == nil || cur.closed || !math.IsNaN(cur.avg) {
			cur = j.newRun(src, cfg)
		}
		cur.avg, cur.closed = tl.Avg, true
	case TelemetryTestEnd:
		if cur != nil {
			cur.closed = true
		}
	}
}

func (j *telJob) current() *testRun {
	if len(j.runs) == 0 {
		return nil
	}
	return j.runs[len(j.runs)-1]
}

func (j *telJob) newRun(src Source, cfg TelemetryAssemblerConfig) *testRun {
	r := &testRun{id: coords(src), first: src.Offset, hold: src.Offset, hdrMin: -1, hdrMax: -1, minBytes: -1, maxBytes: -1,
		maxOOP: math.NaN(), maxIP: math.NaN(), avg: math.NaN()}
	j.pushRun(r, cfg)
	return r
}

// pushRun makes r the job's current run, closing the previous one.
func (j *telJob) pushRun(r *testRun, cfg TelemetryAssemblerConfig) {
	if cur := j.current(); cur != nil {
		cur.closed = true
	}
	if len(j.runs) >= cfg.MaxRunsPerJob {
		j.runs = slices.Delete(j.runs, 0, 1)
		j.dropped++
	}
	j.runs = append(j.runs, r)
}

func coords(s Source) string {
	b := make([]byte, 0, len(s.Topic)+32)
	b = append(b, s.Topic...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(s.Partition), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, s.Offset, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(s.Line), 10)
	return string(b)
}

// runRanks returns a run's rank count and hosts: from its device list, or
// else from the job's NCCL communicator lines (nccl-tests built without MPI
// prints no device list in some versions; the comm lines still tell).
func (j *telJob) runRanks(r *testRun) (int, []string) {
	if r.devices {
		return r.ranks, r.hosts
	}
	n := -1
	if j.ncclRanks > 0 {
		n = j.ncclRanks
	}
	return n, j.ncclHosts
}

func (j *telJob) testRow(m rowMeta, tl *TelemetryLine, t time.Time, src Source) NCCLTestRun {
	r := j.current()
	nranks, hosts := j.runRanks(r)
	var ctx uint8
	if r.header {
		ctx |= 1
	}
	if r.devices {
		ctx |= 2
	}
	if r.collective != "" {
		ctx |= 4
	}
	out := NCCLTestRun{Source: src, Time: t, Job: m.Job, Namespace: m.Namespace, Cluster: m.Cluster,
		Pod: m.Pod, Node: m.Node, Pool: m.pool, Canary: m.canary, RunID: r.id, Context: ctx,
		Collective: r.collective, Version: r.version, NRanks: nranks, Hosts: slices.Clone(hosts), GPU: r.gpu,
		Bytes: -1, Count: -1, Root: -1, OOP: tl.Row.OOP, IP: tl.Row.IP, AvgBusBW: math.NaN()}
	if tl.Kind == TelemetryTestRow {
		out.Kind = "row"
		out.Bytes, out.Count, out.Type, out.Redop, out.Root = tl.Row.Bytes, tl.Row.Count, string(tl.Row.Type), string(tl.Row.Redop), tl.Row.Root
	} else {
		out.Kind = "avg"
		out.AvgBusBW = tl.Avg
	}
	return out
}

func addHost(hosts []string, h []byte, limit int) []string {
	for _, x := range hosts {
		if x == string(h) {
			return hosts
		}
	}
	if len(hosts) >= limit {
		return hosts
	}
	return append(hosts, string(h))
}

// hostScan is how many host names addHost's pass serves: a job's NCCL
// lines name its hosts again and again (every rank, every communicator),
// and past a few of them a map finds one in less time than a pass.
const hostScan = 8

// addNCCLHost is addHost for the hosts of the job's NCCL lines.
func (j *telJob) addNCCLHost(h []byte, limit int) {
	if len(j.ncclHosts) < hostScan {
		j.ncclHosts = addHost(j.ncclHosts, h, limit)
		return
	}
	if j.ncclHostSet == nil {
		j.ncclHostSet = make(map[string]struct{}, 2*len(j.ncclHosts))
		for _, x := range j.ncclHosts {
			j.ncclHostSet[x] = struct{}{}
		}
	}
	if _, ok := j.ncclHostSet[string(h)]; ok || len(j.ncclHosts) >= limit {
		return
	}
	name := string(h)
	j.ncclHosts = append(j.ncclHosts, name)
	j.ncclHostSet[name] = struct{}{}
}

func (j *telJob) testReport(r *testRun) NCCLTestReport {
	nranks, hosts := j.runRanks(r)
	rep := NCCLTestReport{Rows: r.rows, AvgBusBW: fptr(r.avg), HostNames: slices.Clone(hosts), Wrong: r.wrong}
	if rep.HostNames == nil {
		rep.HostNames = []string{}
	}
	if r.collective != "" {
		rep.Collective = strptr(r.collective)
	}
	if nranks > 0 {
		rep.NRanks = &nranks
	}
	if len(hosts) > 0 {
		n := len(hosts)
		rep.Hosts = &n
	}
	if r.rows > 0 {
		rep.MinBytes, rep.MaxBytes = i64ptr(r.minBytes), i64ptr(r.maxBytes)
		rep.MaxSizeBusBWOOP, rep.MaxSizeBusBWIP = fptr(r.maxOOP), fptr(r.maxIP)
	}
	if r.gpu != "" {
		rep.GPU = strptr(r.gpu)
	}
	if r.version != "" {
		rep.Version = strptr(r.version)
	}
	if r.hdrMin >= 0 {
		rep.HeaderMinBytes, rep.HeaderMaxBytes = i64ptr(r.hdrMin), i64ptr(r.hdrMax)
	}
	if r.format != "" {
		rep.Format = strptr(r.format)
	}
	return rep
}
