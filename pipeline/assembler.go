package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// AssemblerConfig bounds the assembler's memory and sets the default fleet
// policy.
type AssemblerConfig struct {
	// MaxJobs caps the jobs held at once; the least recently seen job is
	// evicted first. 10 000 covers a large cluster's concurrent jobs.
	MaxJobs int `yaml:"max_jobs"`
	// MaxProcsPerJob caps the processes tracked per job; beyond it new
	// processes are counted but not tracked. 65 536 is more ranks than any
	// public NCCL job has run with.
	MaxProcsPerJob int `yaml:"max_procs_per_job"`
	// MaxWarnings caps the WARN messages kept per process (all are counted);
	// the first few say what went wrong, the rest repeat it.
	MaxWarnings int `yaml:"max_warnings"`
	// Expect is the policy for communicators whose job or node has no
	// policy of its own.
	Expect Expectation `yaml:"expect"`
}

// DefaultAssemblerConfig returns the defaults documented on each field.
func DefaultAssemblerConfig() AssemblerConfig {
	return AssemblerConfig{MaxJobs: 10000, MaxProcsPerJob: 65536, MaxWarnings: 8}
}

// Validate checks the configuration once at start.
func (c AssemblerConfig) Validate() error {
	var errs []error
	if c.MaxJobs <= 0 {
		errs = append(errs, errors.New("assembler.max_jobs: must be > 0"))
	}
	if c.MaxProcsPerJob <= 0 {
		errs = append(errs, errors.New("assembler.max_procs_per_job: must be > 0"))
	}
	if c.MaxWarnings < 0 {
		errs = append(errs, errors.New("assembler.max_warnings: must be >= 0"))
	}
	switch c.Expect.Network {
	case "", ClassRDMA, ClassTCP, ClassTCPX:
	default:
		errs = append(errs, fmt.Errorf("assembler.expect.network: %q is not rdma, tcp or tcpx", c.Expect.Network))
	}
	return errors.Join(errs...)
}

// Assembler groups NCCL events by job, process and communicator and reports
// summaries at any point. It is fed one event at a time; its memory is
// bounded by the number of live jobs, processes and communicators, not by the
// length of the input. It is not safe for concurrent use.
type Assembler struct {
	cfg  AssemblerConfig
	jobs map[string]*jobState
	key  []byte // reused process-key buffer
}

// NewAssembler returns an assembler; cfg must be valid.
func NewAssembler(cfg AssemblerConfig) *Assembler {
	return &Assembler{cfg: cfg, jobs: make(map[string]*jobState)}
}

// jobState is everything known about one job.
type jobState struct {
	name        string
	meta        Meta
	procs       map[string]*proc
	order       []*proc // insertion order, for stable output
	comms       map[string]*comm
	commOrder   []*comm
	versions    []string
	ringMembers []int
	extraIPs    []string // launcher IPs from lines with no NCCL process
	nodes       []string // Kubernetes nodes (envelope metadata) the job's records came from
	lines       int64
	dropped     int64 // processes beyond MaxProcsPerJob
	expect      *Expectation
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
	hcas           []HCA
	oobIface       string
	ibDevices      bool
	socketName     string
	ibNoDevice     bool
	noVerbs        bool
	sideband       bool
	pluginFailed   bool
	plugin         string
	gdrPos, gdrNeg bool
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
func (a *Assembler) Add(job string, meta *Meta, ev *Event, t time.Time) {
	j := a.job(job, meta, t)
	j.lines++
	if ev.Kind == EventVersion && len(ev.Host) == 0 && ev.PID == nil {
		// Un-prefixed banner: the job learns the version, no process does.
		j.addVersion(string(ev.Name))
		return
	}
	p := a.proc(j, ev, t)
	if p == nil {
		if ev.Kind == EventVersion {
			j.addVersion(string(ev.Name))
		}
		return
	}
	a.apply(j, p, ev)
}

// AddLauncher records a launcher prefix seen on a line that held no NCCL
// event (for example a Ray worker's "(RayTrainWorker pid=1, ip=10.0.0.7)"):
// a host that is part of the job.
func (a *Assembler) AddLauncher(job string, meta *Meta, host []byte, t time.Time) {
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
func (a *Assembler) SetExpectation(job string, e *Expectation) {
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

func (a *Assembler) job(name string, meta *Meta, t time.Time) *jobState {
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

func (a *Assembler) evictOldest() {
	var oldest string
	var ot time.Time
	first := true
	for n, j := range a.jobs {
		if first || j.last.Before(ot) {
			oldest, ot, first = n, j.last, false
		}
	}
	delete(a.jobs, oldest)
}

func (j *jobState) addVersion(v string) {
	if !slices.Contains(j.versions, v) {
		j.versions = append(j.versions, v)
	}
}

// proc finds or creates the process an event belongs to. Lines whose prefix
// was stripped by the log source (" [0] NCCL INFO …", corpus 033, 053) have
// no host and pid; they are keyed by their device.
func (a *Assembler) proc(j *jobState, ev *Event, t time.Time) *proc {
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
		j.order = append(j.order, p)
	}
	if !t.IsZero() {
		p.last = t
	}
	return p
}

// apply folds one event into a process and its communicators.
func (a *Assembler) apply(j *jobState, p *proc, ev *Event) {
	if ev.IsWarn() {
		p.warns++
		if len(p.warnMsgs) < a.cfg.MaxWarnings {
			p.warnMsgs = append(p.warnMsgs, string(ev.Value))
		}
	}
	if ev.Kind == EventTestRank {
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
	if len(ev.LauncherHost) > 0 && p.launcherIP == "" && looksLikeIP(ev.LauncherHost) {
		p.launcherIP = string(ev.LauncherHost)
	}
	switch ev.Kind {
	case EventVersion:
		v := string(ev.Name)
		j.addVersion(v)
		if !slices.Contains(p.versions, v) {
			p.versions = append(p.versions, v)
		}
	case EventNetwork:
		p.usingNet = NormalizeNetwork(string(ev.Name))
	case EventIBDevices:
		p.ibDevices = true
		if p.hcas == nil {
			p.hcas = parseHCAs(string(ev.Value))
		}
		p.addIface(ev.Iface, ev.IP)
		if p.oobIface == "" && len(ev.Iface) > 0 {
			p.oobIface = string(ev.Iface)
		}
	case EventIBNoDevice:
		p.ibNoDevice = true
	case EventIBSideband:
		p.sideband = true
	case EventSocketDevices:
		p.socketName = NormalizeNetwork(string(ev.Name))
		p.addIface(ev.Iface, ev.IP)
	case EventNoVerbs:
		p.noVerbs = true
	case EventPluginLoaded:
		if len(ev.Name) > 0 {
			p.plugin = NormalizeNetwork(string(ev.Name))
		}
	case EventPluginFailed:
		p.pluginFailed = true
	case EventBootstrap:
		p.addIface(ev.Iface, ev.IP)
	case EventConnection:
		a.connection(p, ev)
	case EventRingOrder:
		p.hostRank(0, -1)
		if ev.Channels > p.channels {
			p.channels = ev.Channels
		}
		if members := parseRankList(ev.Value); len(members) > len(j.ringMembers) {
			j.ringMembers = members
		}
	case EventTrees:
		if ev.Rank >= 0 {
			p.hostRank(ev.Rank, -1)
		}
	case EventConnected:
		if ev.Flags&FlagRings != 0 {
			p.rings = true
		}
		if ev.Flags&FlagTreesDone != 0 {
			p.trees = true
		}
		if ev.Flags&FlagNVLSTree != 0 {
			p.nvls = true
		}
		if ev.Flags&FlagGDR != 0 {
			p.gdrPos = true
		}
		if ev.Flags&FlagNoGDR != 0 {
			p.gdrNeg = true
		}
	case EventComm, EventCommNodes, EventInitTimings:
		a.commLine(j, p, ev)
	case EventEnv:
		if p.env == nil {
			p.env = make(map[string]string)
		}
		if len(p.env) < maxSmall {
			p.env[string(ev.Name)] = string(ev.Value)
		}
	case EventNVLS:
		if ev.Flags&FlagNVLSTree != 0 {
			p.nvls = true
		}
	case EventCollNet:
		p.collnet = true
		if ev.Flags&FlagGDR != 0 {
			p.gdrPos = true
		}
	case EventGDR:
		if ev.Flags&FlagEnabled != 0 {
			p.gdrPos = true
		} else {
			p.gdrNeg = true
		}
	case EventNetTrace:
		p.netTrace = true
	case EventChannelCounts:
		if ev.NVLSChannels > 0 {
			p.nvls = true
		}
		if ev.Channels > p.channels {
			p.channels = ev.Channels
		}
	}
}

func (a *Assembler) connection(p *proc, ev *Event) {
	// The process printing the line owns the sending end, except for
	// [receive] lines where it owns the receiving end (transport/net.cc).
	mine, peer := rankRef{ev.From, ev.FromDev, false}, rankRef{ev.To, ev.ToDev, false}
	if ev.Flags&FlagReceive != 0 {
		mine, peer = peer, mine
	}
	bus := ev.Flags&FlagBusID != 0
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
	case TransportNet:
		p.netConn = true
		if name := NormalizeNetwork(string(ev.Name)); !slices.Contains(p.netChan, name) && len(p.netChan) < 8 {
			p.netChan = append(p.netChan, name)
		}
		if ev.Flags&FlagGDR != 0 {
			p.gdrPos = true
		} else {
			p.gdrNeg = true
		}
		if peer.rank >= 0 && peer.dev >= 0 && len(p.netPeers) < maxSmall && !slices.Contains(p.netPeers, peer) {
			p.netPeers = append(p.netPeers, peer)
		}
	case TransportCollNet:
		p.collnet = true
		if ev.Flags&FlagGDR != 0 {
			p.gdrPos = true
		}
	case TransportUnknown, TransportP2PMNNVL:
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

// commLine records a communicator line: which rank of which communicator the
// process holds.
func (a *Assembler) commLine(j *jobState, p *proc, ev *Event) {
	if ev.Flags&FlagComplete != 0 {
		p.initComplete = true
	}
	key := ""
	ptr := string(ev.CommPtr)
	switch {
	case len(ev.CommID) > 0:
		key = "0x" + strings.TrimPrefix(string(ev.CommID), "0x")
		if ptr != "" {
			if old := p.ptrComm[ptr]; old != "" && old != key {
				// The pointer was first seen on a line without a commId
				// (an nNodes line before Init START): move what it told
				// to the real communicator.
				j.moveMember(p, old, key)
			}
			p.setPtrComm(ptr, key)
		}
	case ptr != "" && p.ptrComm[ptr] != "":
		key = p.ptrComm[ptr]
	case ev.NRanks > 0:
		// Versions without a commId: the rank/nranks tuple is the only key.
		key = fmt.Sprintf("nranks=%d", ev.NRanks)
		if ptr == "" {
			// Init timings print no pointer; prefer a comm the process
			// already holds with the same size.
			for _, k := range p.comms {
				if c := j.comms[k]; c != nil && c.nranks == ev.NRanks {
					key = k
					break
				}
			}
		} else {
			p.setPtrComm(ptr, key)
		}
	default:
		return
	}
	c, ok := j.comms[key]
	if !ok {
		c = &comm{key: key, nranks: -1, nnodes: -1, localRanks: -1, members: make(map[int]string)}
		j.comms[key] = c
		j.commOrder = append(j.commOrder, c)
	}
	if ev.NRanks > 0 {
		c.nranks = ev.NRanks
	}
	if ev.NNodes > 0 {
		c.nnodes = ev.NNodes
	}
	if ev.LocalRanks > 0 {
		c.localRanks = ev.LocalRanks
	}
	if ev.Rank >= 0 && len(c.members) < maxMembers {
		c.members[ev.Rank] = p.key
		p.hostRank(ev.Rank, ev.FromDev)
	}
	if !slices.Contains(c.procs, p.key) && len(c.procs) < maxMembers {
		c.procs = append(c.procs, p.key)
	}
	if !slices.Contains(p.comms, key) && len(p.comms) < maxSmall {
		p.comms = append(p.comms, key)
	}
}

func (p *proc) setPtrComm(ptr, key string) {
	if p.ptrComm == nil {
		p.ptrComm = make(map[string]string)
	}
	if len(p.ptrComm) < maxSmall {
		p.ptrComm[ptr] = key
	}
}

// moveMember moves process p's membership from communicator from to to,
// dropping from when no process is left in it.
func (j *jobState) moveMember(p *proc, from, to string) {
	c := j.comms[from]
	if c == nil {
		return
	}
	t, ok := j.comms[to]
	if !ok {
		t = &comm{key: to, nranks: c.nranks, nnodes: c.nnodes, localRanks: c.localRanks, members: make(map[int]string)}
		j.comms[to] = t
		j.commOrder = append(j.commOrder, t)
	}
	for r, k := range c.members {
		if k == p.key {
			t.members[r] = k
			delete(c.members, r)
		}
	}
	if t.nnodes < 0 {
		t.nnodes = c.nnodes
	}
	if t.localRanks < 0 {
		t.localRanks = c.localRanks
	}
	c.procs = slices.DeleteFunc(c.procs, func(k string) bool { return k == p.key })
	p.comms = slices.DeleteFunc(p.comms, func(k string) bool { return k == from })
	if len(c.procs) == 0 {
		delete(j.comms, from)
		j.commOrder = slices.DeleteFunc(j.commOrder, func(x *comm) bool { return x == c })
	}
}

func (p *proc) hostRank(rank, dev int) {
	if p.ranks == nil {
		p.ranks = make(map[int]int)
	}
	if old, ok := p.ranks[rank]; ok && (dev < 0 || old >= 0) {
		return
	}
	if len(p.ranks) < maxMembers {
		p.ranks[rank] = dev
	}
}

func (p *proc) hostPrefixRank(rank, dev int) {
	if p.prefixRanks == nil {
		p.prefixRanks = make(map[int]int)
	}
	if len(p.prefixRanks) < maxSmall {
		p.prefixRanks[rank] = dev
	}
	p.hostRank(rank, -1)
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

// NormalizeNetwork maps the names NCCL and its plugins print to the names
// the summary uses: versioned plugin names lose their suffix
// ("IBext_v8" → "IBext", "GPUDirectTCPX_v7" → "GPUDirectTCPX") and
// aws-ofi-nccl ≥ 1.18's "Libfabric" is "AWS Libfabric".
func NormalizeNetwork(name string) string {
	name = strings.TrimSpace(name)
	if i := strings.LastIndex(name, "_v"); i > 0 && isDigits(name[i+2:]) {
		name = name[:i]
	}
	switch name {
	case "Libfabric", "OFI":
		return "AWS Libfabric"
	}
	return name
}

// NetworkClass returns the class of a network name: rdma, tcp, tcpx or
// unknown.
func NetworkClass(name string) string {
	switch name {
	case "IB", "IBext", "AWS Libfabric", "gIB", "RoCE":
		return ClassRDMA
	case "Socket", "FastSocket":
		return ClassTCP
	case "GPUDirectTCPX", "FasTrak":
		return ClassTCPX
	case "mixed":
		return ClassMixed
	case "":
		return ""
	}
	return ClassUnknown
}

// parseHCAs reads "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE/SHARP [RO]".
func parseHCAs(list string) []HCA {
	var out []HCA
	for _, f := range strings.Fields(list) {
		if !strings.HasPrefix(f, "[") {
			continue
		}
		e := strings.IndexByte(f, ']')
		if e < 0 || e == len(f)-1 {
			continue // "[RO]"
		}
		f = f[e+1:]
		parts := strings.Split(f, "/")
		dev, port, _ := strings.Cut(parts[0], ":")
		h := HCA{Device: dev, Port: atoiOr(port, 0)}
		for _, s := range parts[1:] {
			switch s {
			case "IB", "RoCE":
				h.LinkLayer = s
			case "SHARP":
				h.SHARP = true
			}
		}
		out = append(out, h)
		if len(out) >= 64 {
			break
		}
	}
	if out == nil {
		out = []HCA{}
	}
	return out
}

// parseRankList reads a ring-order rank list "0   7   6   5" (possibly cut
// with "..." at 128 characters).
func parseRankList(b []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		v, err := atoiStrict(f)
		if err != nil {
			break
		}
		out = append(out, v)
		if len(out) >= maxMembers {
			break
		}
	}
	return out
}

func atoiStrict(s string) (int, error) {
	if !isDigits(s) {
		return 0, errors.New("not a number")
	}
	return atoiOr(s, 0), nil
}

func atoiOr(s string, def int) int {
	if !isDigits(s) || len(s) > 9 {
		return def
	}
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validIP rejects addresses mangled in a paste ("10.10.10..2", corpus 064)
// or redacted ("X.X.X.X", corpus 010) so that they do not split a host.
func validIP(ip []byte) bool {
	if len(ip) == 0 {
		return false
	}
	if bytes.IndexByte(ip, ':') >= 0 {
		return true // IPv6
	}
	octets, n := 0, 0
	for _, c := range ip {
		switch {
		case c == '.':
			if n == 0 {
				return false
			}
			octets, n = octets+1, 0
		case c >= '0' && c <= '9':
			n++
		default:
			return false
		}
	}
	return n > 0 && octets == 3
}

func isLoopback(ip []byte) bool {
	s := string(ip)
	return strings.HasPrefix(s, "127.") || s == "::1"
}

// looksLikeIP reports whether b is a dotted IPv4 address (launcher labels
// such as pdsh "10.3.35.83: " and Ray "ip=10.52.3.7").
func looksLikeIP(b []byte) bool {
	dots := 0
	for _, c := range b {
		switch {
		case c == '.':
			dots++
		case c < '0' || c > '9':
			return false
		}
	}
	return dots == 3
}
