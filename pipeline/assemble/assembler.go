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

// addCand records that process p showed network name initialized; a later
// candidate of the same name moves to the end (the last one wins).
func (p *proc) addCand(name, kind string) {
	p.dropCand(name)
	if len(p.netCands) < 16 {
		p.netCands = append(p.netCands, netCand{name, kind})
	}
}

// dropCand cancels a candidate: the plugin failed or found no device.
func (p *proc) dropCand(name string) {
	p.netCands = slices.DeleteFunc(p.netCands, func(c netCand) bool { return c.name == name })
}

// apply folds one event into a process and its communicators.
func (a *Assembler) apply(j *jobState, p *proc, ev *pipeline.Event) {
	if ev.IsWarn() {
		p.warns++
		if len(p.warnMsgs) < a.cfg.MaxWarnings {
			p.warnMsgs = append(p.warnMsgs, string(ev.Value))
		}
	}
	if ev.Kind == pipeline.EventTestRank {
		if ev.Rank >= 0 && ev.Rank < maxMembers {
			if j.test.hosts == nil {
				j.test.hosts = make(map[int]string)
			}
			j.test.hosts[ev.Rank] = string(ev.Host)
		}
		// The nccl-tests device table is printed by one process about all
		// ranks: its launcher prefix says nothing about the rank listed.
		if ev.FromDev >= 0 && ev.FromDev < 64 {
			p.devs |= 1 << ev.FromDev
		}
		p.hostRank(ev.Rank, ev.FromDev)
		return
	}
	if ev.Dev >= 0 && ev.Dev < 64 {
		p.devs |= 1 << ev.Dev
	}
	if ev.LauncherRank >= 0 && ev.Dev >= 0 {
		p.hostPrefixRank(ev.LauncherRank, ev.Dev)
	}
	if len(ev.LauncherHost) > 0 && p.launcherHost == "" {
		p.launcherHost = string(ev.LauncherHost)
		if looksLikeIP(ev.LauncherHost) {
			p.launcherIP = p.launcherHost
		}
	}
	switch ev.Kind {
	case pipeline.EventVersion:
		v := string(ev.Name)
		j.addVersion(v)
		if !slices.Contains(p.versions, v) {
			p.versions = append(p.versions, v)
		}
	case pipeline.EventNetwork:
		p.usingNet = pipeline.NormalizeNetwork(string(ev.Name))
	case pipeline.EventIBDevices:
		hcas := a.parsedHCAs(ev.Value)
		if len(hcas) == 0 {
			// "NET/IB : Using [RO]; OOB eth0…": IB found no device
			// (NCCL then prints Failed to initialize NET plugin IB).
			p.ibEmpty = true
			p.dropCand("IB")
			if hpcxPlugin(p.loadedPlugin) {
				p.dropCand(p.loadedPlugin)
				p.loadedPlugin = ""
			}
		} else {
			p.ibDevices = true
			for _, h := range hcas {
				if len(p.hcas) < 64 && !slices.Contains(p.hcas, h) {
					p.hcas = append(p.hcas, h)
				}
			}
			// An IB list printed after the HPC-X plugin loaded is that
			// plugin's (it prints NET/IB lines of its own).
			if hpcxPlugin(p.loadedPlugin) {
				p.addCand(p.loadedPlugin, KindPluginDeviceList)
			} else {
				p.addCand("IB", KindDeviceList)
			}
		}
		p.addIface(ev.Iface, ev.IP)
		if p.oobIface == "" && len(ev.Iface) > 0 {
			p.oobIface = string(ev.Iface)
		}
	case pipeline.EventIBNoDevice:
		p.ibNoDevice = true
		p.dropCand("IB")
		if hpcxPlugin(p.loadedPlugin) {
			p.dropCand(p.loadedPlugin)
			p.loadedPlugin = ""
		}
	case pipeline.EventIBSideband:
		p.sideband = true
	case pipeline.EventSocketDevices:
		name := pipeline.NormalizeNetwork(string(ev.Name))
		if name == "Socket" {
			// Not a candidate on its own: 2.4 prints it on every rank
			// before IB (corpus README traps).
			p.socketName = name
		} else {
			p.addCand(name, KindDeviceList)
		}
		p.addIface(ev.Iface, ev.IP)
	case pipeline.EventNoVerbs:
		p.noVerbs = true
	case pipeline.EventPluginLoaded:
		if len(ev.Name) == 0 {
			if ev.Flags&pipeline.FlagAssigned != 0 && p.loadedPlugin != "" {
				// "Using non-device net plugin": the net selected is the
				// plugin that loaded and was not cancelled.
				p.addCand(p.loadedPlugin, KindPluginSelected)
			}
			break
		}
		name := pipeline.NormalizeNetwork(string(ev.Name))
		switch {
		case ev.Flags&pipeline.FlagAssigned != 0:
			p.assigned = name
		case ev.Flags&pipeline.FlagInitOK != 0:
			p.addCand(name, KindPluginInitialized)
		default:
			p.loadedPlugin = name
		}
		if name != "IB" && name != "Socket" {
			p.plugin = name
		}
	case pipeline.EventPluginFailed:
		p.pluginFailed = true
		if len(ev.Name) > 0 {
			name := pipeline.NormalizeNetwork(string(ev.Name))
			p.dropCand(name)
			if p.loadedPlugin == name {
				p.loadedPlugin = ""
			}
			if !slices.Contains(p.failedPlugins, name) && len(p.failedPlugins) < 8 {
				p.failedPlugins = append(p.failedPlugins, name)
			}
		}
	case pipeline.EventBootstrap:
		p.addIface(ev.Iface, ev.IP)
	case pipeline.EventConnection:
		a.connection(p, ev)
	case pipeline.EventRingOrder:
		p.hostRank(0, -1)
		if ev.Channels > p.channels {
			p.channels = ev.Channels
		}
		if members := parseRankList(ev.Value); len(members) > len(j.ringMembers) {
			j.ringMembers = members
		}
	case pipeline.EventTrees:
		if ev.Rank >= 0 {
			p.hostRank(ev.Rank, -1)
		}
	case pipeline.EventConnected:
		if ev.Flags&pipeline.FlagRings != 0 {
			p.rings = true
		}
		if ev.Flags&pipeline.FlagTreesDone != 0 {
			p.trees = true
		}
		if ev.Flags&pipeline.FlagNVLSTree != 0 {
			p.nvls = true
		}
		if ev.Flags&pipeline.FlagGDR != 0 {
			p.gdr.flag1++
		}
		if ev.Flags&pipeline.FlagNoGDR != 0 {
			p.gdr.flag0++
		}
	case pipeline.EventComm, pipeline.EventCommNodes, pipeline.EventInitTimings:
		a.commLine(j, p, ev)
	case pipeline.EventEnv:
		if p.env == nil {
			p.env = make(map[string]string)
		}
		if len(p.env) < maxSmall {
			p.env[string(ev.Name)] = string(ev.Value)
		}
	case pipeline.EventNVLS:
		if ev.Flags&pipeline.FlagNVLSTree != 0 {
			p.nvls = true
		}
	case pipeline.EventCollNet:
		p.collnet = true
		if ev.Flags&pipeline.FlagGDR != 0 {
			p.gdr.collnet++
		}
	case pipeline.EventGDR:
		if ev.Flags&pipeline.FlagEnabled != 0 {
			p.gdr.capEnabled++
		} else {
			p.gdr.capDisabled++
		}
	case pipeline.EventNetTrace:
		p.netTrace = true
	case pipeline.EventChannelCounts:
		if ev.NVLSChannels > 0 {
			p.nvls = true
		}
		if ev.Channels > p.channels {
			p.channels = ev.Channels
		}
	}
}

func (a *Assembler) connection(p *proc, ev *pipeline.Event) {
	// The process printing the line owns the sending end, except for
	// [receive] lines where it owns the receiving end (transport/net.cc).
	mine, peer := rankRef{ev.From, ev.FromDev, false}, rankRef{ev.To, ev.ToDev, false}
	if ev.Flags&pipeline.FlagReceive != 0 {
		mine, peer = peer, mine
	}
	bus := ev.Flags&pipeline.FlagBusID != 0
	mine.bus, peer.bus = bus, bus
	if mine.rank >= 0 {
		if bus {
			if p.busRanks == nil {
				p.busRanks = make(map[int]int)
			}
			if len(p.busRanks) < maxMembers {
				p.busRanks[mine.rank] = mine.dev
			}
			p.hostRank(mine.rank, -1)
		} else {
			p.hostRank(mine.rank, mine.dev)
		}
	}
	switch ev.Transport {
	case pipeline.TransportNet:
		p.netConn = true
		if name := pipeline.NormalizeNetwork(string(ev.Name)); !slices.Contains(p.netChan, name) && len(p.netChan) < 8 {
			p.netChan = append(p.netChan, name)
		}
		gdr := ev.Flags&pipeline.FlagGDR != 0
		if gdr {
			p.gdr.conn++
		} else {
			p.gdr.connPlain++
		}
		switch {
		case ev.Flags&pipeline.FlagSend != 0 && gdr:
			p.gdr.send++
		case ev.Flags&pipeline.FlagSend != 0:
			p.gdr.sendPlain++
		case ev.Flags&pipeline.FlagReceive != 0 && gdr:
			p.gdr.recv++
		case ev.Flags&pipeline.FlagReceive != 0:
			p.gdr.recvPlain++
		}
		if peer.rank >= 0 && peer.dev >= 0 && len(p.netPeers) < maxSmall && !slices.Contains(p.netPeers, peer) {
			p.netPeers = append(p.netPeers, peer)
		}
	case pipeline.TransportCollNet:
		p.collnet = true
		if ev.Flags&pipeline.FlagGDR != 0 {
			p.gdr.collnet++
		}
	case pipeline.TransportUnknown, pipeline.TransportP2PMNNVL:
		// P2P/MNNVL (2.20+) joins GPUs of a multi-node NVLink domain, which
		// may be on other nodes: it is no intra-node evidence, so it is kept
		// out of intra as it was while the parser called it unknown.
	default:
		p.intra |= 1 << ev.Transport
		if peer.rank >= 0 && peer.dev >= 0 && len(p.intraPeers) < maxSmall && !slices.Contains(p.intraPeers, peer) {
			p.intraPeers = append(p.intraPeers, peer)
		}
	}
}

func (p *proc) addIface(iface, ip []byte) {
	if len(iface) == 0 || !validIP(ip) {
		return
	}
	if isLoopback(ip) {
		p.loopback = true
	}
	if p.ifaceIP == nil {
		p.ifaceIP = make(map[string]string)
	}
	if _, ok := p.ifaceIP[string(iface)]; !ok && len(p.ifaceIP) < 16 {
		p.ifaceIP[string(iface)] = string(ip)
	}
}
