package assemble

import (
	"slices"
	"sort"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Assembler groups NCCL events by job, process and communicator and reports
// summaries at any point. It is fed one event at a time; its memory is
// bounded by the number of live jobs, processes and communicators, not by the
// length of the input. It is not safe for concurrent use.
type Assembler struct {
	cfg  pipeline.AssemblerConfig
	jobs map[string]*jobState
	key  []byte // reused process-key buffer
	// The last summaries of the jobs pushed out for a new one (MaxJobs)
	// since Pushed was last called, at most MaxJobs of them.
	pushedComms []pipeline.CommSummary
	pushedJobs  []pipeline.JobSummary
	// The last "NET/IB : Using" device list read and its HCAs (nil before
	// any): every rank of a job prints the same list.
	hcaList string
	hcas    []pipeline.HCA
}

// Factory is New as pipeline.RunnerDeps.NewAssembler takes it.
func Factory(cfg pipeline.AssemblerConfig) pipeline.NCCLAssembler { return New(cfg) }

// New returns an assembler; cfg must be valid.
func New(cfg pipeline.AssemblerConfig) *Assembler {
	return &Assembler{cfg: cfg, jobs: make(map[string]*jobState)}
}

// jobState is everything known about one job.
type jobState struct {
	name        string
	meta        pipeline.Meta
	procs       map[string]*proc
	order       []*proc // insertion order, for stable output
	comms       map[string]*comm
	commOrder   []*comm
	commAlias   map[string]string // split communicators merged into the one a commId names
	versions    []string
	ringMembers []int
	test        testList // the nccl-tests device table
	extraIPs    []string // launcher IPs from lines with no NCCL process
	nodes       []string // Kubernetes nodes (envelope metadata) the job's records came from
	lines       int64
	dropped     int64 // processes beyond MaxProcsPerJob
	created     int   // processes and communicators created (Created)
	expect      *pipeline.Expectation
	first, last time.Time
}

// proc is one NCCL process (host + pid).
type proc struct {
	key, host, pid string
	ifaceIP        map[string]string
	launcherIP     string
	loopback       bool
	usingNet       string
	netChan        []string
	hcas           []pipeline.HCA
	oobIface       string
	ibDevices      bool
	socketName     string
	ibNoDevice     bool
	noVerbs        bool
	sideband       bool
	pluginFailed   bool
	plugin         string
	assigned       string    // Assigned NET plugin X to comm (2.27+)
	netCands       []netCand // plugins and device lists that initialized, in line order, cancellations removed
	ibEmpty        bool      // NET/IB : Using [RO]; OOB … (no device)
	failedPlugins  []string  // Failed to initialize NET plugin X
	loadedPlugin   string    // P2P plugin IBext / Loaded net plugin X (not proof of use)
	k8sNode        string    // Kubernetes node of the record (envelope metadata)
	launcherHost   string    // host label of a launcher prefix (pdsh, mpirun)
	gdr            gdrFacts
	intra          uint16
	nvls, collnet  bool
	netConn        bool
	netTrace       bool // error traces through transport/net*.cc: a NET transport was in use
	rings, trees   bool
	channels       int
	env            map[string]string
	versions       []string
	warns          int
	warnMsgs       []string
	ranks          map[int]int // hosted rank → explicit cudaDev (-1 unknown)
	busRanks       map[int]int // hosted rank → PCI bus id
	prefixRanks    map[int]int // hosted rank (from a launcher prefix) → [dev] of the line
	intraPeers     []rankRef
	netPeers       []rankRef
	comms          []string
	ptrComm        map[string]string
	initComplete   bool
	devs           uint64 // devices seen in line prefixes ([dev], bits 0–63)
	first, last    time.Time
}

// netCand is a network a process showed it initialized, by the evidence
// kind that showed it.
type netCand struct{ name, kind string }

// gdrFacts counts the GDR evidence of a process (CLASSIFICATION.md, gdr).
type gdrFacts struct {
	conn, connPlain         int // NET connection lines with and without /GDRDMA
	send, sendPlain         int // [send] NET connections with and without /GDRDMA
	recv, recvPlain         int // [receive] NET connections with and without /GDRDMA
	collnet                 int // COLLNET connections or CollNet lines with /GDRDMA
	flag1, flag0            int // Connected all rings … GDR 1 / GDR 0
	capEnabled, capDisabled int // GPU Direct RDMA Enabled|Disabled for HCA|GPU
}

func (g *gdrFacts) add(o gdrFacts) {
	g.conn += o.conn
	g.connPlain += o.connPlain
	g.send += o.send
	g.sendPlain += o.sendPlain
	g.recv += o.recv
	g.recvPlain += o.recvPlain
	g.collnet += o.collnet
	g.flag1 += o.flag1
	g.flag0 += o.flag0
	g.capEnabled += o.capEnabled
	g.capDisabled += o.capDisabled
}

type rankRef struct {
	rank, dev int
	bus       bool
}

type comm struct {
	key        string
	nranks     int
	nnodes     int
	localRanks int
	members    map[int]string // rank → proc key
	procs      []string
}

const (
	maxSmall   = 256 // cap on per-process lists (peers, env, interfaces)
	maxMembers = 1 << 16
)

// Add feeds one NCCL event of job, seen at t (zero when unknown). meta may be
// nil; the first non-nil meta of a job is kept for enrichment.
func (a *Assembler) Add(job string, meta *pipeline.Meta, ev *pipeline.Event, t time.Time) {
	j := a.job(job, meta, t)
	j.lines++
	if ev.Kind == pipeline.EventVersion && len(ev.Host) == 0 && ev.PID == nil {
		// Un-prefixed banner: the job learns the version, no process does.
		j.addVersion(string(ev.Name))
		return
	}
	p := a.proc(j, ev, t)
	if p == nil {
		if ev.Kind == pipeline.EventVersion {
			j.addVersion(string(ev.Name))
		}
		return
	}
	if meta != nil && meta.Node != "" && p.k8sNode == "" && ev.Kind != pipeline.EventTestRank {
		p.k8sNode = meta.Node
	}
	a.apply(j, p, ev)
}

// AddLauncher records a launcher prefix seen on a line that held no NCCL
// event (for example a Ray worker's "(RayTrainWorker pid=1, ip=10.0.0.7)"):
// a host that is part of the job.
func (a *Assembler) AddLauncher(job string, meta *pipeline.Meta, host []byte, t time.Time) {
	if len(host) == 0 || !looksLikeIP(host) {
		return
	}
	j := a.job(job, meta, t)
	for _, ip := range j.extraIPs {
		if ip == string(host) {
			return
		}
	}
	if len(j.extraIPs) < maxSmall {
		j.extraIPs = append(j.extraIPs, string(host))
	}
}

// SetExpectation sets the fleet policy for a job (from node inventory or
// labels); nil restores the default.
func (a *Assembler) SetExpectation(job string, e *pipeline.Expectation) {
	if j, ok := a.jobs[job]; ok {
		j.expect = e
	}
}

// Nodes returns the Kubernetes nodes a job's records came from.
func (a *Assembler) Nodes(job string) []string {
	if j, ok := a.jobs[job]; ok {
		return slices.Clone(j.nodes)
	}
	return nil
}

// Jobs returns the names of the jobs held, sorted.
func (a *Assembler) Jobs() []string {
	names := make([]string, 0, len(a.jobs))
	for n := range a.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Len returns the number of jobs held.
func (a *Assembler) Len() int { return len(a.jobs) }

// Created returns how many processes and communicators job's state has
// created so far (0 when the job is not held). It grows whenever Summaries
// may show a communicator row that no earlier call showed: a new comm_id,
// or the row of processes no communicator claims (a process is claimed
// for good once a communicator line names it, so only a new process can
// bring that row back). The runner uses it to store such a row in the
// flush that ends the batch it appeared in, as it stores every summary
// when pipeline.summary_interval is 0.
func (a *Assembler) Created(job string) int {
	if j, ok := a.jobs[job]; ok {
		return j.created
	}
	return 0
}

// Evict forgets a job (after its final summary was stored).
func (a *Assembler) Evict(job string) { delete(a.jobs, job) }

// EvictIdle forgets jobs last seen before cutoff and returns their names.
func (a *Assembler) EvictIdle(cutoff time.Time) []string {
	var out []string
	for n, j := range a.jobs {
		if j.last.Before(cutoff) {
			out = append(out, n)
			delete(a.jobs, n)
		}
	}
	sort.Strings(out)
	return out
}

// LastSeen returns when the job was last fed an event.
func (a *Assembler) LastSeen(job string) (time.Time, bool) {
	j, ok := a.jobs[job]
	if !ok {
		return time.Time{}, false
	}
	return j.last, true
}

func (a *Assembler) job(name string, meta *pipeline.Meta, t time.Time) *jobState {
	j, ok := a.jobs[name]
	if !ok {
		if len(a.jobs) >= a.cfg.MaxJobs {
			a.evictOldest()
		}
		j = &jobState{name: name, procs: make(map[string]*proc), comms: make(map[string]*comm), first: t, last: t}
		a.jobs[name] = j
	}
	if meta != nil {
		if j.meta.Pod == "" && j.meta.Namespace == "" && j.meta.Job == "" {
			j.meta = *meta
			j.meta.Labels = nil // labels are for enrichment at decode time, not kept per job
		}
		if meta.Node != "" && len(j.nodes) < maxSmall && !slices.Contains(j.nodes, meta.Node) {
			j.nodes = append(j.nodes, meta.Node)
		}
	}
	if !t.IsZero() {
		if j.first.IsZero() || t.Before(j.first) {
			j.first = t
		}
		if t.After(j.last) {
			j.last = t
		}
	}
	return j
}

// evictOldest pushes out the least recently seen job, keeping its last
// summaries for Pushed.
func (a *Assembler) evictOldest() {
	var oldest string
	var ot time.Time
	first := true
	for n, j := range a.jobs {
		if first || j.last.Before(ot) {
			oldest, ot, first = n, j.last, false
		}
	}
	if len(a.pushedJobs) < a.cfg.MaxJobs {
		if comms, sum, ok := a.Summaries(oldest); ok {
			a.pushedComms = append(a.pushedComms, comms...)
			a.pushedJobs = append(a.pushedJobs, sum)
		}
	}
	delete(a.jobs, oldest)
}

// Pushed returns the last summaries of the jobs pushed out to make room
// for new ones (AssemblerConfig.MaxJobs) since the last call, and forgets
// them: their state is gone, so these are their final summaries, which
// the runner stores with the next batch (before the commit that covers
// their records). At most MaxJobs jobs are kept between calls: beyond,
// more new jobs than that came between two batches, and the summaries of
// those pushed out are lost as before.
func (a *Assembler) Pushed() (comms []pipeline.CommSummary, jobs []pipeline.JobSummary) {
	comms, jobs = a.pushedComms, a.pushedJobs
	a.pushedComms, a.pushedJobs = nil, nil
	return comms, jobs
}

func (j *jobState) addVersion(v string) {
	if !slices.Contains(j.versions, v) {
		j.versions = append(j.versions, v)
	}
}

// proc finds or creates the process an event belongs to. Lines whose prefix
// was stripped by the log source (" [0] NCCL INFO …", corpus 033, 053) have
// no host and pid; they are keyed by their device.
func (a *Assembler) proc(j *jobState, ev *pipeline.Event, t time.Time) *proc {
	a.key = append(a.key[:0], ev.Host...)
	a.key = append(a.key, 0)
	a.key = append(a.key, ev.PID...)
	if len(ev.PID) == 0 {
		a.key = append(a.key, 0, byte('0'+ev.Dev%10))
	}
	p, ok := j.procs[string(a.key)]
	if !ok {
		if len(j.procs) >= a.cfg.MaxProcsPerJob {
			j.dropped++
			return nil
		}
		p = &proc{key: string(a.key), host: string(ev.Host), pid: string(ev.PID), channels: -1, first: t}
		j.procs[p.key] = p
		j.created++
		j.order = append(j.order, p)
	}
	if !t.IsZero() {
		p.last = t
	}
	return p
}

// displayName is the job's own name (from metadata) or its key.
func (j *jobState) displayName() string {
	if j.meta.Job != "" {
		return j.meta.Job
	}
	return j.name
}
