package pipeline

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Summaries returns the communicator summaries and the job summary of job,
// as of the events fed so far. ok is false when the job is not held.
func (a *Assembler) Summaries(job string) (comms []CommSummary, sum JobSummary, ok bool) {
	j, ok := a.jobs[job]
	if !ok {
		return nil, JobSummary{}, false
	}
	expect := a.cfg.Expect
	if j.expect != nil {
		expect = *j.expect
	}
	// Communicators with an identity, then the processes no communicator
	// line claimed.
	claimed := make(map[string]bool)
	for _, c := range j.commOrder {
		procs := make([]*proc, 0, len(c.procs))
		for _, k := range c.procs {
			if p := j.procs[k]; p != nil {
				procs = append(procs, p)
				claimed[k] = true
			}
		}
		comms = append(comms, summarize(j, c.key, procs, []*comm{c}, expect))
	}
	var rest []*proc
	for _, p := range j.order {
		if !claimed[p.key] {
			rest = append(rest, p)
		}
	}
	if len(rest) > 0 || len(comms) == 0 {
		comms = append(comms, summarize(j, "", rest, nil, expect))
	}
	all := make([]*comm, len(j.commOrder))
	copy(all, j.commOrder)
	whole := summarize(j, "", j.order, all, expect)
	return comms, rollUp(j, whole, comms), true
}

// view is the facts of a set of processes, shared by communicator and job
// summaries.
type view struct {
	procs    []*proc
	nodeOf   map[*proc]string
	nodes    int
	networks []string
}

func summarize(j *jobState, id string, procs []*proc, comms []*comm, expect Expectation) CommSummary {
	s := CommSummary{Job: j.displayName(), Cluster: j.meta.Cluster, CommID: id, Expect: expect, Env: map[string]string{},
		NCCLVersions: []string{}, HCAs: []HCA{}, Hosts: []string{}, Intra: []string{},
		RDMAFailure: []string{}, Warnings: []string{}, Reasons: []string{}}
	if id == "" {
		s.CommID = "unattributed"
	}
	v := view{procs: procs}
	v.nodeOf, v.nodes = nodesOf(procs, j.extraIPs)
	s.Processes = len(procs)

	var versions []string
	for _, p := range procs {
		for _, ver := range p.versions {
			if !slices.Contains(versions, ver) {
				versions = append(versions, ver)
			}
		}
	}
	if id == "" {
		// The unattributed set and the whole job also own the un-prefixed
		// banners no process printed.
		for _, ver := range j.versions {
			if !slices.Contains(versions, ver) {
				versions = append(versions, ver)
			}
		}
	}
	sortVersions(versions)
	s.NCCLVersions = append(s.NCCLVersions, versions...)

	var intra uint16
	var gdrPos, gdrNeg, netConn bool
	hostSet := map[string]bool{}
	fabric := map[string]bool{}
	hcaSeen := map[string]bool{}
	for _, p := range procs {
		if n := procNetwork(p); n != "" && !slices.Contains(v.networks, n) {
			v.networks = append(v.networks, n)
		}
		hostSet[p.host] = true
		intra |= p.intra
		gdrPos = gdrPos || p.gdrPos
		gdrNeg = gdrNeg || p.gdrNeg
		netConn = netConn || p.netConn
		s.NVLS = s.NVLS || p.nvls
		s.CollNet = s.CollNet || p.collnet
		s.Rings = s.Rings || p.rings
		s.Trees = s.Trees || p.trees
		s.InitComplete = s.InitComplete || p.initComplete
		s.Warns += p.warns
		for _, w := range p.warnMsgs {
			if len(s.Warnings) < 32 && !slices.Contains(s.Warnings, w) {
				s.Warnings = append(s.Warnings, w)
			}
		}
		for k, val := range p.env {
			s.Env[k] = val
		}
		for _, h := range p.hcas {
			fabric[h.LinkLayer] = true
			k := h.Device + ":" + fmt.Sprint(h.Port)
			if !hcaSeen[k] {
				hcaSeen[k] = true
				s.HCAs = append(s.HCAs, h)
			}
		}
		if s.OOBIface == nil && p.oobIface != "" {
			s.OOBIface = ptr(p.oobIface)
		}
		if s.Plugin == nil && p.plugin != "" {
			s.Plugin = ptr(p.plugin)
		}
		if p.channels > 0 && (s.Channels == nil || p.channels > *s.Channels) {
			s.Channels = ptr(p.channels)
		}
		for _, f := range rdmaFailures(p) {
			if !slices.Contains(s.RDMAFailure, f) {
				s.RDMAFailure = append(s.RDMAFailure, f)
			}
		}
		s.RanksSeen += len(p.ranks)
	}
	for h := range hostSet {
		s.Hosts = append(s.Hosts, h)
	}
	sort.Strings(s.Hosts)
	for t := TransportP2PIPC; t <= TransportSHM; t++ {
		if intra&(1<<t) != 0 {
			s.Intra = append(s.Intra, t.String())
		}
	}
	if s.NVLS {
		s.Intra = append(s.Intra, "NVLS")
	}
	if s.CollNet {
		s.Intra = append(s.Intra, "CollNet")
	}
	sort.Strings(s.Intra)

	switch len(v.networks) {
	case 0:
	case 1:
		s.Network = ptr(v.networks[0])
	default:
		s.Network = ptr("mixed")
	}
	switch {
	case fabric["IB"] && fabric["RoCE"]:
		s.Fabric = ptr("mixed")
	case fabric["IB"]:
		s.Fabric = ptr("IB")
	case fabric["RoCE"]:
		s.Fabric = ptr("RoCE")
	}
	// GDR is AND-ed over ranks and connections: one plain NET connection or
	// "GDR 0" makes it false; without any evidence it stays null.
	switch {
	case gdrNeg:
		s.GDR = ptr(false)
	case gdrPos:
		s.GDR = ptr(true)
	}

	// Size and shape.
	maxNR, printedNodes := -1, -1
	var largest *comm
	for _, c := range comms {
		if c.nranks > maxNR {
			maxNR, largest = c.nranks, c
		}
		if c.nnodes > printedNodes {
			printedNodes = c.nnodes
		}
		if c.localRanks > 0 && (s.LocalRanks == nil || c.localRanks > *s.LocalRanks) {
			s.LocalRanks = ptr(c.localRanks)
		}
	}
	if maxNR > 0 {
		s.NRanks = ptr(maxNR)
	}
	multi, why := multiNode(&v, comms, printedNodes, netConn, intra)
	s.MultiNode = multi
	switch {
	case largest != nil && largest.nnodes > 0:
		s.NNodes = ptr(largest.nnodes)
	case printedNodes > 0:
		s.NNodes = ptr(printedNodes)
	case multi != nil && !*multi:
		s.NNodes = ptr(1)
	case multi != nil && *multi:
		if n := inferNodes(&v, j.ringMembers, maxNR); n > 1 {
			s.NNodes = ptr(n)
		}
	}

	s.NetworkClass = classOf(s.Network, multi)
	s.Verdict, s.Reasons = verdict(&s, expect, why)
	s.FirstSeen, s.LastSeen = j.first, j.last
	s.Version = uint64(j.lines)
	if j.meta.Namespace != "" {
		s.Namespace = j.meta.Namespace
	}
	return s
}

func classOf(network *string, multi *bool) string {
	if network != nil {
		return NetworkClass(*network)
	}
	if multi != nil && !*multi {
		return ClassNone
	}
	return ClassUnknown
}

// procNetwork decides the network one process uses. "Using network" is
// decisive (2.7+); without it the NET connection lines, then the 2.4/2.5
// device lines decide. In 2.4 every rank prints "NET/Socket : Using" even on
// IB (corpus README traps), so a socket device line alone means Socket only
// next to a failed or disabled IB attempt.
func procNetwork(p *proc) string {
	switch {
	case p.usingNet != "":
		return p.usingNet
	case len(p.netChan) > 0:
		return p.netChan[0]
	case p.ibDevices:
		return "IB"
	case p.socketName != "" && (p.ibNoDevice || p.noVerbs || p.ibDisabled() || p.sideband):
		return p.socketName
	}
	return ""
}

func (p *proc) ibDisabled() bool { return p.env["NCCL_IB_DISABLE"] == "1" }

// rdmaFailures lists the evidence that an RDMA attempt failed or was
// disabled in process p.
func rdmaFailures(p *proc) []string {
	var out []string
	if p.ibNoDevice {
		out = append(out, "NET/IB: no device found")
	}
	if p.noVerbs {
		out = append(out, "libibverbs could not be opened")
	}
	if p.pluginFailed {
		out = append(out, "a net plugin failed to load or initialise")
	}
	if p.ibDisabled() {
		out = append(out, "NCCL_IB_DISABLE=1")
	}
	if v := p.env["NCCL_NET"]; strings.EqualFold(v, "Socket") {
		out = append(out, "NCCL_NET=Socket")
	}
	if p.sideband {
		out = append(out, "IB used only for sideband (NCCL ≤ 2.3)")
	}
	return out
}

// nodesOf assigns each process a node. Hostnames are not unique (two nodes
// both named "ubuntu", corpus 022; redacted "xxx-xxx-xxx-xxx", corpus 093),
// so processes of one hostname that show different addresses on the same
// interface are different nodes. Launcher IPs of lines without an NCCL
// process (Ray workers, corpus 047) add nodes no process was seen on.
func nodesOf(procs []*proc, extraIPs []string) (map[*proc]string, int) {
	nodeOf := make(map[*proc]string, len(procs))
	byHost := map[string][]*proc{}
	var hosts []string
	known := map[string]bool{}
	for _, p := range procs {
		if _, ok := byHost[p.host]; !ok {
			hosts = append(hosts, p.host)
		}
		byHost[p.host] = append(byHost[p.host], p)
		for _, ip := range p.ifaceIP {
			known[ip] = true
		}
		if p.launcherIP != "" {
			known[p.launcherIP] = true
		}
	}
	nodes := map[string]bool{}
	for _, h := range hosts {
		group := byHost[h]
		// The interface with the most distinct addresses splits the host.
		ips := map[string]map[string]bool{}
		for _, p := range group {
			for iface, ip := range p.ifaceIP {
				if ips[iface] == nil {
					ips[iface] = map[string]bool{}
				}
				ips[iface][ip] = true
			}
		}
		best, bestN := "", 0
		for iface, set := range ips {
			if len(set) > bestN || len(set) == bestN && iface < best {
				best, bestN = iface, len(set)
			}
		}
		for _, p := range group {
			id := h
			if bestN > 1 {
				if ip, ok := p.ifaceIP[best]; ok {
					id = h + "|" + ip
				} else {
					// No address on the splitting interface: join the
					// first of the host's nodes.
					first := ""
					for ip := range ips[best] {
						if first == "" || ip < first {
							first = ip
						}
					}
					id = h + "|" + first
				}
			}
			nodeOf[p] = id
			nodes[id] = true
		}
	}
	for _, ip := range extraIPs {
		if !known[ip] {
			nodes["ip|"+ip] = true
		}
	}
	return nodeOf, len(nodes)
}

// multiNode decides whether a set of processes spans nodes, and says why.
// It returns nil when the log does not show it.
func multiNode(v *view, comms []*comm, printedNodes int, netConn bool, intra uint16) (*bool, string) {
	if printedNodes > 1 {
		return ptr(true), fmt.Sprintf("nNodes %d", printedNodes)
	}
	if v.nodes > 1 {
		return ptr(true), fmt.Sprintf("%d hosts", v.nodes)
	}
	byNode := map[string][]*proc{}
	for _, p := range v.procs {
		byNode[v.nodeOf[p]] = append(byNode[v.nodeOf[p]], p)
	}
	for _, group := range byNode {
		if why := devConflict(group); why != "" {
			return ptr(true), why
		}
		if why := rankOffset(group); why != "" {
			return ptr(true), why
		}
	}
	if printedNodes == 1 {
		return ptr(false), "nNodes 1"
	}
	if v.nodes == 1 {
		for _, p := range v.procs {
			if p.loopback {
				return ptr(false), "bootstrap on loopback"
			}
		}
	}
	for _, c := range comms {
		if c.nranks == 1 {
			return ptr(false), "nranks 1"
		}
		if c.nranks > 1 && len(c.members) >= c.nranks {
			node, same := "", true
			for r := 0; r < c.nranks && same; r++ {
				k, ok := c.members[r]
				if !ok {
					same = false
					break
				}
				var n string
				for _, p := range v.procs {
					if p.key == k {
						n = v.nodeOf[p]
					}
				}
				if node == "" {
					node = n
				} else if n != node {
					same = false
				}
			}
			if same {
				return ptr(false), "every rank on one host"
			}
		}
	}
	if v.nodes == 1 && intra != 0 && !netConn && !netTrace(v.procs) {
		return ptr(false), "only intra-node connections"
	}
	return nil, ""
}

func netTrace(procs []*proc) bool {
	for _, p := range procs {
		if p.netTrace {
			return true
		}
	}
	return false
}

// devConflict finds a NET peer that uses the same device as a different rank
// on this node: two ranks cannot share a GPU on one node, so the peer is on
// another (corpus 051: "8[0] -> 0[0] [receive] via NET/Socket/0").
func devConflict(group []*proc) string {
	type dk struct {
		dev int
		bus bool
	}
	local := map[dk]int{}
	for _, p := range group {
		for r, d := range p.ranks {
			if d >= 0 {
				local[dk{d, false}] = r
			}
		}
		for r, b := range p.busRanks {
			local[dk{b, true}] = r
		}
		for _, peer := range p.intraPeers {
			local[dk{peer.dev, peer.bus}] = peer.rank
		}
	}
	for _, p := range group {
		for _, peer := range p.netPeers {
			if r, ok := local[dk{peer.dev, peer.bus}]; ok && r != peer.rank {
				return fmt.Sprintf("NET peer rank %d uses the same GPU as local rank %d", peer.rank, r)
			}
		}
	}
	return ""
}

// rankOffset finds a node whose ranks all sit k ≥ (its GPU count) above their
// device index: the lower ranks are elsewhere (corpus 069: ranks 8–15 on
// cudaDev 0–7). A device taken from a line's "[dev]" prefix rather than a
// printed cudaDev needs an offset of at least 8, a full node.
func rankOffset(group []*proc) string {
	check := func(pairs map[int]int, min int) bool {
		if len(pairs) == 0 {
			return false
		}
		devs := map[int]bool{}
		for _, d := range pairs {
			devs[d] = true
		}
		if len(devs) > min {
			min = len(devs)
		}
		for r, d := range pairs {
			if r-d < min {
				return false
			}
		}
		return true
	}
	explicit, prefix := map[int]int{}, map[int]int{}
	for _, p := range group {
		for r, d := range p.ranks {
			if d >= 0 {
				explicit[r] = d
			}
		}
		for r, d := range p.prefixRanks {
			prefix[r] = d
		}
	}
	if check(explicit, 1) {
		return "ranks on this host start above its GPU count"
	}
	if len(explicit) == 0 && check(prefix, 8) {
		return "launcher ranks on this host start above its GPU count"
	}
	return ""
}

// inferNodes returns the node count of a multi-node set when the log makes it
// certain, else 0: every rank of the printed ring order is placed; or the
// printed nranks equals hosts × GPUs per host; or, without nranks, every host
// shows the same complete set of more than one GPU.
func inferNodes(v *view, ring []int, nranks int) int {
	rankNode := map[int]string{}
	perNode := map[string]map[int]bool{}
	for _, p := range v.procs {
		n := v.nodeOf[p]
		if perNode[n] == nil {
			perNode[n] = map[int]bool{}
		}
		for r, d := range p.ranks {
			rankNode[r] = n
			if d >= 0 {
				perNode[n][d] = true
			}
		}
		for _, d := range p.prefixRanks {
			perNode[n][d] = true
		}
		for d := range p.lineDevs() {
			perNode[n][d] = true
		}
	}
	if n := ringNodes(ring, rankNode); n > 0 {
		return n
	}
	if nranks > 1 && v.nodes >= nranks {
		// More hosts than ranks can only mean one rank per node (a host
		// renamed by hand, corpus 108).
		return nranks
	}
	if v.nodes != len(perNode) {
		return 0 // nodes known only by address: GPUs per node unknown
	}
	k := 0
	for _, devs := range perNode {
		for d := range devs {
			if d+1 > k {
				k = d + 1
			}
		}
	}
	if k == 0 {
		return 0
	}
	if nranks > 0 {
		if v.nodes*k == nranks {
			return v.nodes
		}
		return 0
	}
	if k < 2 {
		return 0
	}
	for _, devs := range perNode {
		if len(devs) != k {
			return 0
		}
	}
	return v.nodes
}

// ringNodes counts the nodes of a printed ring order when every rank's node
// is known or follows from the ring: NCCL builds a ring so that each node's
// ranks are consecutive in it (an intra-node chain, then one NET hop to the
// next node), so a rank whose node is unknown but whose nearest known
// neighbours on both sides of the ring are on the same node is on that
// node too (corpus 082: 16 ranks, hosts known for 11 of them from mpirun
// prefixes). It needs ranks of at least two nodes known, and returns 0 when
// the ring does not decide.
func ringNodes(ring []int, rankNode map[int]string) int {
	if len(ring) < 2 {
		return 0
	}
	nodes := make([]string, len(ring))
	known := map[string]bool{}
	for i, r := range ring {
		nodes[i] = rankNode[r]
		if nodes[i] != "" {
			known[nodes[i]] = true
		}
	}
	if len(known) < 2 {
		return 0
	}
	for i := range nodes {
		if nodes[i] != "" {
			continue
		}
		var before, after string
		for k := 1; k < len(nodes) && before == ""; k++ {
			before = nodes[(i-k+len(nodes))%len(nodes)]
		}
		for k := 1; k < len(nodes) && after == ""; k++ {
			after = nodes[(i+k)%len(nodes)]
		}
		if before == "" || before != after {
			return 0
		}
	}
	// Fill in after deciding, so that a filled rank never vouches for
	// another.
	set := map[string]bool{}
	for _, n := range nodes {
		if n != "" {
			set[n] = true
		}
	}
	return len(set)
}

// verdict applies the classification semantics of ARCHITECTURE.md.
func verdict(s *CommSummary, e Expectation, multiWhy string) (Verdict, []string) {
	var reasons []string
	net := ""
	if s.Network != nil {
		net = *s.Network
	}
	class := s.NetworkClass
	expectNet := e.Network
	if expectNet == "" {
		expectNet = ClassRDMA
	}
	multi := s.MultiNode
	v := VerdictOK
	switch class {
	case ClassTCP:
		switch {
		case net == "FastSocket":
			reasons = append(reasons, "FastSocket is an intended TCP plugin")
		case expectNet != ClassRDMA:
			reasons = append(reasons, "policy expects "+expectNet+"; Socket is accepted")
		case multi != nil && *multi:
			v = VerdictSocketFallback
			reasons = append(reasons, "NCCL uses Socket across nodes ("+multiWhy+") where RDMA is expected")
			reasons = append(reasons, s.RDMAFailure...)
		case multi == nil && len(s.RDMAFailure) > 0:
			v = VerdictSocketFallback
			reasons = append(reasons, "NCCL uses Socket after an RDMA attempt failed or was disabled: "+strings.Join(s.RDMAFailure, "; "))
		case multi != nil && !*multi:
			reasons = append(reasons, "Socket on a single node ("+multiWhy+"): nothing crosses nodes")
		default:
			v = VerdictUnknown
			reasons = append(reasons, "Socket with an unknown node count and no failed RDMA attempt")
		}
	case ClassRDMA:
		gdrExpected := e.GDR == nil || *e.GDR
		if s.GDR != nil && !*s.GDR && gdrExpected {
			v = VerdictGDROff
			reasons = append(reasons, net+" without GPUDirect RDMA where GDR is expected")
		}
		if e.HCAs > 0 && len(s.HCAs) > 0 && len(s.HCAs) < e.HCAs {
			v = Worse(v, VerdictDegraded)
			reasons = append(reasons, fmt.Sprintf("%d HCAs in use, the pool provides %d", len(s.HCAs), e.HCAs))
		}
		if v == VerdictOK {
			reasons = append(reasons, net+" (rdma)")
		}
	case ClassTCPX:
		reasons = append(reasons, net+" (GPUDirect TCPX)")
	case ClassMixed:
		v = VerdictDegraded
		reasons = append(reasons, "processes use different networks")
	case ClassNone:
		reasons = append(reasons, "single node ("+multiWhy+"): no inter-node network")
	default:
		v = VerdictUnknown
		if net != "" {
			reasons = append(reasons, "unrecognised network "+net)
		} else {
			reasons = append(reasons, "no network evidence")
		}
	}
	if len(s.NCCLVersions) > 1 {
		v = Worse(v, VerdictDegraded)
		reasons = append(reasons, "NCCL version skew: "+strings.Join(s.NCCLVersions, ", "))
	}
	return v, reasons
}

// rollUp builds the job summary: whole-job facts, worst communicator
// verdict, and the job-only reasons (mixed networks, version skew).
func rollUp(j *jobState, whole CommSummary, comms []CommSummary) JobSummary {
	js := JobSummary{Job: j.displayName(), Namespace: j.meta.Namespace, Cluster: j.meta.Cluster,
		Network: whole.Network, Fabric: whole.Fabric, GDR: whole.GDR, MultiNode: whole.MultiNode,
		NNodes: whole.NNodes, NRanks: whole.NRanks, Intra: whole.Intra, Warns: whole.Warns,
		NCCLLines: j.lines, FirstSeen: j.first, LastSeen: j.last, Reasons: []string{}, Version: uint64(j.lines)}
	if whole.Network != nil {
		js.NetworkClass = ptr(NetworkClass(*whole.Network))
	}
	if len(whole.NCCLVersions) > 0 {
		js.NCCLVersion = ptr(whole.NCCLVersions[0])
		js.VersionSkew = len(whole.NCCLVersions) > 1
	}
	js.Verdict = VerdictOK
	fallbackUnknown := false
	for _, c := range comms {
		js.Verdict = Worse(js.Verdict, c.Verdict)
		if c.NetworkClass == ClassTCP && c.Verdict == VerdictUnknown {
			fallbackUnknown = true
		}
	}
	// The whole-job view sees hosts and skew no single communicator sees.
	js.Verdict = Worse(js.Verdict, whole.Verdict)
	// The reasons are those of the whole job and of every communicator
	// that shares the job's verdict.
	add := func(rs []string) {
		for _, r := range rs {
			if !slices.Contains(js.Reasons, r) {
				js.Reasons = append(js.Reasons, r)
			}
		}
	}
	if whole.Verdict == js.Verdict {
		add(whole.Reasons)
	} else {
		for _, c := range comms {
			if c.Verdict == js.Verdict {
				add(c.Reasons)
			}
		}
	}
	switch {
	case js.Verdict == VerdictSocketFallback:
		js.Fallback = ptr(true)
	case js.Network == nil:
	case fallbackUnknown || whole.NetworkClass == ClassTCP && whole.Verdict == VerdictUnknown:
	default:
		js.Fallback = ptr(false)
	}
	return js
}

// displayName is the job's own name (from metadata) or its key.
func (j *jobState) displayName() string {
	if j.meta.Job != "" {
		return j.meta.Job
	}
	return j.name
}

// lineDevs returns the devices this process printed in its line prefixes.
func (p *proc) lineDevs() map[int]bool {
	out := map[int]bool{}
	for d := 0; d < 64; d++ {
		if p.devs&(1<<d) != 0 {
			out[d] = true
		}
	}
	return out
}

// sortVersions orders NCCL versions numerically ("2.4.7" < "2.10.3").
func sortVersions(vs []string) {
	sort.Slice(vs, func(a, b int) bool { return versionLess(vs[a], vs[b]) })
}

func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, y := atoiOr(as[i], 0), atoiOr(bs[i], 0)
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

func ptr[T any](v T) *T { return &v }
