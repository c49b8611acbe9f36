package assemble

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// This file is the decision table of pipeline/CLASSIFICATION.md: every
// summary field is decided here, in the order and from the evidence kinds
// that document names, and each decision records the evidence it used.
// Facts (network, gdr, multi_node, nnodes, nranks, intra) come only from
// the log; the fleet policy (Expectation) enters only fallback and verdict.

// Evidence kinds, as CLASSIFICATION.md names them.
const (
	// network
	KindUsingNetwork        = "using_network"
	KindPluginAssigned      = "plugin_assigned"
	KindNetChannel          = "net_channel"
	KindPluginInitialized   = "plugin_initialized"
	KindDeviceList          = "device_list"
	KindPluginDeviceList    = "plugin_device_list"
	KindPluginSelected      = "plugin_selected"
	KindSocketAfterFailure  = "socket_after_rdma_failure"
	KindProcessesDisagree   = "processes_disagree"
	KindNoNetworkEvidence   = "no_network_evidence"
	KindCancelledCandidates = "cancelled"
	// network_class
	KindClassTable = "class_table"
	// fabric
	KindHCALinkLayer = "hca_link_layer"
	// gdr, gdr_send, gdr_recv, gdr_partial
	KindNetConnGDR    = "net_connection_gdrdma"
	KindCollNetGDR    = "collnet_gdrdma"
	KindConnectedGDR  = "connected_gdr_flag"
	KindNetConnPlain  = "net_connection_plain"
	KindGDRCapability = "gdr_capability"
	KindDirectedConn  = "directed_net_connections"
	KindPartialRecv   = "receive_paths_mixed"
	// multi_node, nnodes
	KindPrintedNNodes  = "printed_nnodes"
	KindDistinctNodes  = "distinct_nodes"
	KindSameGPUOverNet = "net_peer_same_gpu"
	KindRankOffset     = "rank_offset"
	KindTestDevices    = "nccl_tests_devices"
	KindRanksOneHost   = "all_ranks_one_host"
	KindOneRank        = "nranks_1"
	KindLoopback       = "loopback_bootstrap"
	KindIntraOnly      = "intra_only"
	KindRingOrder      = "ring_order"
	KindHostsTimesGPUs = "hosts_times_gpus"
	KindSingleNode     = "single_node"
	KindJobSingleNode  = "job_single_node"
	// nranks, intra
	KindPrintedNRanks = "printed_nranks"
	KindTransports    = "intra_transports"
	// fallback, verdict (policy)
	KindPolicy      = "policy"
	KindRDMAFailure = "rdma_failure"
	KindVersionSkew = "version_skew"
	KindHCACount    = "hca_count"
)

// Summaries returns the communicator summaries and the job summary of job,
// as of the events fed so far. ok is false when the job is not held.
func (a *Assembler) Summaries(job string) (comms []pipeline.CommSummary, sum pipeline.JobSummary, ok bool) {
	j, ok := a.jobs[job]
	if !ok {
		return nil, pipeline.JobSummary{}, false
	}
	expect := a.cfg.Expect
	if j.expect != nil {
		expect = *j.expect
	}
	// Communicators with an identity, then the processes no communicator
	// line claimed.
	all := make([]*comm, len(j.commOrder))
	copy(all, j.commOrder)
	whole := summarize(j, "", j.order, all, expect, nil)
	claimed := make(map[string]bool)
	for _, c := range j.commOrder {
		procs := make([]*proc, 0, len(c.procs))
		for _, k := range c.procs {
			if p := j.procs[k]; p != nil {
				procs = append(procs, p)
				claimed[k] = true
			}
		}
		comms = append(comms, summarize(j, c.key, procs, []*comm{c}, expect, whole.MultiNode))
	}
	var rest []*proc
	for _, p := range j.order {
		if !claimed[p.key] {
			rest = append(rest, p)
		}
	}
	if len(rest) > 0 || len(comms) == 0 {
		comms = append(comms, summarize(j, "", rest, nil, expect, whole.MultiNode))
	}
	return comms, rollUp(j, whole, comms, expect), true
}

// view is the facts of a set of processes, shared by communicator and job
// summaries.
type view struct {
	procs  []*proc
	nodeOf map[*proc]string
	nodes  int
	k8s    bool // node identity came from Kubernetes metadata
}

// decision collects the reasons and evidence of one summary.
type decision struct {
	reasons  []string
	evidence []pipeline.Evidence
}

func (d *decision) use(field, kind, detail string) {
	if len(d.evidence) < 64 {
		d.evidence = append(d.evidence, pipeline.Evidence{Field: field, Kind: kind, Detail: detail})
	}
}

func (d *decision) reason(r string) {
	if !slices.Contains(d.reasons, r) {
		d.reasons = append(d.reasons, r)
	}
}

// summarize decides one summary. jobMulti is the whole job's multi_node
// (nil for the whole job itself): a part of a single-node job is on one
// node too.
func summarize(j *jobState, id string, procs []*proc, comms []*comm, expect pipeline.Expectation, jobMulti *bool) pipeline.CommSummary {
	s := pipeline.CommSummary{Job: j.displayName(), Cluster: j.meta.Cluster, CommID: id, Expect: expect, Env: map[string]string{},
		NCCLVersions: []string{}, HCAs: []pipeline.HCA{}, Hosts: []string{}, Intra: []string{},
		RDMAFailure: []string{}, Warnings: []string{}, Reasons: []string{}}
	if id == "" {
		s.CommID = pipeline.Unattributed
	}
	var d decision
	v := view{procs: procs}
	v.nodeOf, v.nodes, v.k8s = nodesOf(procs, j.extraIPs)
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
	var g gdrFacts
	hostSet := map[string]bool{}
	fabric := map[string]bool{}
	hcaSeen := map[string]bool{}
	torn := tornHosts(procs)
	for _, p := range procs {
		if real, ok := torn[p.host]; ok {
			hostSet[real] = true
		} else {
			hostSet[p.host] = true
		}
		intra |= p.intra
		g.add(p.gdr)
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

	// 1. network, 2. network_class.
	s.Network = decideNetwork(&d, procs)
	// 3. fabric.
	s.Fabric = decideFabric(&d, fabric)
	// 4. gdr, gdr_send, gdr_recv, gdr_partial.
	s.GDR, s.GDRSend, s.GDRRecv, s.GDRPartial = decideGDR(&d, g)

	// 5. nranks (printed), 6. multi_node, 7. nnodes.
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
		d.use("nranks", KindPrintedNRanks, fmt.Sprintf("nranks %d", maxNR))
	}
	var test *testList
	if id == "" {
		test = &j.test
		if n := test.complete(); s.NRanks == nil && n > 0 {
			// The nccl-tests table lists every rank of the test.
			s.NRanks = ptr(n)
			maxNR = n
			d.use("nranks", KindTestDevices, fmt.Sprintf("%d ranks listed", n))
		}
	}
	multi, why, kind := multiNode(&v, comms, maxNR, printedNodes, intra, test)
	if multi == nil && jobMulti != nil && !*jobMulti {
		multi, why, kind = ptr(false), "the whole job is on one node", KindJobSingleNode
	}
	s.MultiNode = multi
	if multi != nil {
		d.use("multi_node", kind, why)
	}
	switch {
	case largest != nil && largest.nnodes > 0:
		s.NNodes = ptr(largest.nnodes)
		d.use("nnodes", KindPrintedNNodes, fmt.Sprintf("nNodes %d", largest.nnodes))
	case printedNodes > 0:
		s.NNodes = ptr(printedNodes)
		d.use("nnodes", KindPrintedNNodes, fmt.Sprintf("nNodes %d", printedNodes))
	case multi != nil && !*multi:
		s.NNodes = ptr(1)
		d.use("nnodes", KindSingleNode, "multi_node is false")
	case multi != nil && *multi && test != nil && test.complete() > 0 && !v.k8s && len(test.hostSet()) > 1:
		n := len(test.hostSet())
		s.NNodes = ptr(n)
		d.use("nnodes", KindTestDevices, fmt.Sprintf("%d hosts in the nccl-tests device table", n))
	case multi != nil && *multi:
		if n, k := inferNodes(&v, j.ringMembers, maxNR); n > 1 {
			s.NNodes = ptr(n)
			d.use("nnodes", k, fmt.Sprintf("%d nodes", n))
		}
	}

	// 8. intra.
	for t := pipeline.TransportP2PIPC; t <= pipeline.TransportSHM; t++ {
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
	if len(s.Intra) > 0 {
		d.use("intra", KindTransports, strings.Join(s.Intra, ", "))
	}

	s.NetworkClass = classOf(&d, s.Network, multi)
	// 9. verdict (policy).
	s.Verdict = verdict(&d, &s, expect, why)
	s.Reasons = append(s.Reasons, d.reasons...)
	s.Evidence = d.evidence
	s.FirstSeen, s.LastSeen = j.first, j.last
	s.Version = uint64(j.lines)
	if j.meta.Namespace != "" {
		s.Namespace = j.meta.Namespace
	}
	return s
}

// procNetwork decides the network one process selected, in the order of
// CLASSIFICATION.md: "Using network" (2.7+), "Assigned NET plugin" (2.27+),
// NET channel lines, then the last plugin or device list that initialized
// and was not cancelled ("Failed to initialize NET plugin X", an empty IB
// list, "No device found"). A NET/Socket device list alone decides Socket
// only next to a failed or disabled RDMA attempt: in 2.4 every rank prints
// it before IB (corpus README traps).
func procNetwork(p *proc) (name, kind string) {
	switch {
	case p.usingNet != "":
		return p.usingNet, KindUsingNetwork
	case p.assigned != "":
		return p.assigned, KindPluginAssigned
	case len(p.netChan) > 0:
		return p.netChan[0], KindNetChannel
	case len(p.netCands) > 0:
		c := p.netCands[len(p.netCands)-1]
		return c.name, c.kind
	case p.socketName != "" && len(rdmaFailures(p)) > 0:
		return p.socketName, KindSocketAfterFailure
	}
	return "", ""
}

// decideNetwork is rule 1: one network per process, "mixed" when processes
// disagree, nil without evidence.
func decideNetwork(d *decision, procs []*proc) *string {
	var networks []string
	kinds := map[string]string{}
	for _, p := range procs {
		n, k := procNetwork(p)
		if n == "" {
			continue
		}
		if !slices.Contains(networks, n) {
			networks = append(networks, n)
			kinds[n] = k
		}
	}
	switch len(networks) {
	case 0:
		for _, p := range procs {
			if p.ibEmpty || len(p.failedPlugins) > 0 {
				d.use("network", KindCancelledCandidates, "every net that initialized was cancelled: "+strings.Join(cancelled(p), ", "))
				break
			}
		}
		return nil
	case 1:
		d.use("network", kinds[networks[0]], networks[0])
		return ptr(networks[0])
	}
	sort.Strings(networks)
	for _, n := range networks {
		d.use("network", kinds[n], n)
	}
	d.use("network", KindProcessesDisagree, strings.Join(networks, ", "))
	return ptr(pipeline.ClassMixed)
}

func cancelled(p *proc) []string {
	var out []string
	if p.ibEmpty {
		out = append(out, "IB (empty device list)")
	}
	if p.ibNoDevice {
		out = append(out, "IB (no device found)")
	}
	for _, f := range p.failedPlugins {
		out = append(out, f+" (failed to initialize)")
	}
	return out
}

// classOf is rule 2: the class table (pipeline.NetworkClass); "none" for a
// single node without a network, "unknown" otherwise.
func classOf(d *decision, network *string, multi *bool) string {
	if network != nil {
		c := pipeline.NetworkClass(*network)
		d.use("network_class", KindClassTable, *network+" → "+c)
		if c == pipeline.ClassUnknown {
			d.reason("network " + *network + " is not in the class table: class unknown")
		}
		return c
	}
	if multi != nil && !*multi {
		d.use("network_class", KindSingleNode, "no network on a single node")
		return pipeline.ClassNone
	}
	return pipeline.ClassUnknown
}

// decideFabric is rule 3: the link layers of the HCA lists.
func decideFabric(d *decision, fabric map[string]bool) *string {
	var f *string
	switch {
	case fabric["IB"] && fabric["RoCE"]:
		f = ptr("mixed")
	case fabric["IB"]:
		f = ptr("IB")
	case fabric["RoCE"]:
		f = ptr("RoCE")
	}
	if f != nil {
		d.use("fabric", KindHCALinkLayer, *f)
	}
	return f
}

// decideGDR is rule 4. gdr is true when any NET connection used GDR
// (/GDRDMA, a COLLNET path with /GDRDMA, or NCCL's own "GDR 1"); false when
// NET connections exist and none did, or "GDR 0"; without connection
// evidence the per-HCA/GPU capability lines decide; else nil. gdr_send and
// gdr_recv are the same rule over [send] and [receive] connections; partial
// is some receive paths with GDR and some without (nil without receive
// connections).
func decideGDR(d *decision, g gdrFacts) (gdr, send, recv, partial *bool) {
	switch {
	case g.conn > 0:
		gdr = ptr(true)
		d.use("gdr", KindNetConnGDR, fmt.Sprintf("%d NET connections with /GDRDMA, %d without", g.conn, g.connPlain))
	case g.collnet > 0:
		gdr = ptr(true)
		d.use("gdr", KindCollNetGDR, fmt.Sprintf("%d CollNet paths with /GDRDMA", g.collnet))
	case g.flag1 > 0:
		gdr = ptr(true)
		d.use("gdr", KindConnectedGDR, "Connected all rings … GDR 1")
	case g.connPlain > 0:
		gdr = ptr(false)
		d.use("gdr", KindNetConnPlain, fmt.Sprintf("%d NET connections, none with /GDRDMA", g.connPlain))
	case g.flag0 > 0:
		gdr = ptr(false)
		d.use("gdr", KindConnectedGDR, "Connected all rings … GDR 0")
	case g.capEnabled > 0:
		gdr = ptr(true)
		d.use("gdr", KindGDRCapability, fmt.Sprintf("GPU Direct RDMA Enabled on %d lines", g.capEnabled))
	case g.capDisabled > 0:
		gdr = ptr(false)
		d.use("gdr", KindGDRCapability, fmt.Sprintf("GPU Direct RDMA Disabled on %d lines", g.capDisabled))
	}
	dir := func(field string, with, without int) *bool {
		switch {
		case with > 0:
			d.use(field, KindDirectedConn, fmt.Sprintf("%d with /GDRDMA, %d without", with, without))
			return ptr(true)
		case without > 0:
			d.use(field, KindDirectedConn, fmt.Sprintf("%d, none with /GDRDMA", without))
			return ptr(false)
		}
		return nil
	}
	send = dir("gdr_send", g.send, g.sendPlain)
	recv = dir("gdr_recv", g.recv, g.recvPlain)
	if recv != nil && *recv && send != nil && !*send {
		d.reason("GDR on receives only: sends read GPU memory without GDR (normal before Ampere without NVLink; NCCL_NET_GDR_READ)")
	}
	if recv != nil {
		partial = ptr(g.recv > 0 && g.recvPlain > 0)
	}
	if g.recv > 0 && g.recvPlain > 0 {
		d.use("gdr_partial", KindPartialRecv, fmt.Sprintf("%d receive paths with /GDRDMA, %d without", g.recv, g.recvPlain))
		d.reason(fmt.Sprintf("partial GDR: %d of %d receive paths without GPUDirect RDMA (a GPU far from its NIC)", g.recvPlain, g.recv+g.recvPlain))
	}
	return gdr, send, recv, partial
}

func (p *proc) ibDisabled() bool { return p.env["NCCL_IB_DISABLE"] == "1" }

// rdmaFailures lists the evidence that an RDMA attempt failed or was
// disabled in process p.
func rdmaFailures(p *proc) []string {
	var out []string
	if p.ibNoDevice {
		out = append(out, "NET/IB: no device found")
	}
	if p.ibEmpty {
		out = append(out, "NET/IB: empty device list")
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

// testList is the nccl-tests "# Using devices" table of a job: the host of
// every rank listed.
type testList struct {
	hosts map[int]string
}

// complete returns the number of ranks when the table lists ranks 0..n-1
// without a gap, else 0.
func (t *testList) complete() int {
	for r := 0; r < len(t.hosts); r++ {
		if _, ok := t.hosts[r]; !ok {
			return 0
		}
	}
	return len(t.hosts)
}

func (t *testList) hostSet() map[string]bool {
	hosts := map[string]bool{}
	for _, h := range t.hosts {
		hosts[h] = true
	}
	return hosts
}

// multiNode is rule 6: whether a set of processes spans nodes, why, and by
// which evidence kind. Evidence that it does comes first; then evidence
// that it does not; nil when the log does not show it. It never reads the
// policy.
func multiNode(v *view, comms []*comm, maxNR, printedNodes int, intra uint16, test *testList) (*bool, string, string) {
	if printedNodes > 1 {
		return ptr(true), fmt.Sprintf("nNodes %d", printedNodes), KindPrintedNNodes
	}
	if v.nodes > 1 {
		if v.k8s {
			return ptr(true), fmt.Sprintf("%d Kubernetes nodes", v.nodes), KindDistinctNodes
		}
		return ptr(true), fmt.Sprintf("%d hosts", v.nodes), KindDistinctNodes
	}
	byNode := map[string][]*proc{}
	for _, p := range v.procs {
		byNode[v.nodeOf[p]] = append(byNode[v.nodeOf[p]], p)
	}
	for _, group := range byNode {
		if why := devConflict(group); why != "" {
			return ptr(true), why, KindSameGPUOverNet
		}
		if why := rankOffset(group); why != "" {
			return ptr(true), why, KindRankOffset
		}
	}
	if test != nil && len(test.hosts) > 0 {
		hosts := test.hostSet()
		if len(hosts) > 1 && !v.k8s {
			return ptr(true), fmt.Sprintf("nccl-tests devices on %d hosts", len(hosts)), KindTestDevices
		}
		if n := test.complete(); len(hosts) == 1 && n > 0 && (maxNR <= 0 || maxNR == n) {
			for h := range hosts {
				return ptr(false), fmt.Sprintf("nccl-tests devices: all %d ranks on %s", len(test.hosts), h), KindTestDevices
			}
		}
	}
	if printedNodes == 1 {
		return ptr(false), "nNodes 1", KindPrintedNNodes
	}
	if v.nodes == 1 {
		for _, p := range v.procs {
			if p.loopback {
				return ptr(false), "bootstrap on loopback", KindLoopback
			}
		}
	}
	for _, c := range comms {
		if c.nranks != maxNR {
			// A smaller communicator's ranks all on one host say nothing
			// about the job's largest one.
			continue
		}
		if c.nranks == 1 {
			return ptr(false), "nranks 1", KindOneRank
		}
		if c.nranks > 1 && v.nodes == 1 {
			if node, ok := ranksOnOneNode(v, c, len(comms)); ok {
				return ptr(false), fmt.Sprintf("all %d ranks on %s", c.nranks, node), KindRanksOneHost
			}
		}
	}
	if v.nodes == 1 && intra != 0 && !netConn(v.procs) && !netTrace(v.procs) {
		return ptr(false), "only intra-node connections", KindIntraOnly
	}
	return nil, "", ""
}

// ranksOnOneNode reports whether every rank 0..nranks-1 of communicator c is
// seen hosted on one node: from its communicator lines, and from the
// connection, tree and launcher ranks of processes that hold no other
// communicator (their ranks are in c's numbering).
func ranksOnOneNode(v *view, c *comm, ncomms int) (string, bool) {
	seen := map[int]string{}
	byKey := map[string]*proc{}
	for _, p := range v.procs {
		byKey[p.key] = p
	}
	for r, k := range c.members {
		if p := byKey[k]; p != nil {
			seen[r] = v.nodeOf[p]
		}
	}
	for _, p := range v.procs {
		only := len(p.comms) == 1 && p.comms[0] == c.key || len(p.comms) == 0 && ncomms == 1
		if !only {
			continue
		}
		for r := range p.ranks {
			if r < c.nranks {
				seen[r] = v.nodeOf[p]
			}
		}
	}
	node := ""
	for r := 0; r < c.nranks; r++ {
		n, ok := seen[r]
		if !ok || node != "" && n != node {
			return "", false
		}
		node = n
	}
	if node == "" {
		return "", false
	}
	return strings.TrimPrefix(node, "k8s|"), true
}

func netConn(procs []*proc) bool {
	for _, p := range procs {
		if p.netConn {
			return true
		}
	}
	return false
}

// verdict is rule 9, the only place the policy enters: the verdict of one
// summary with its reasons.
func verdict(d *decision, s *pipeline.CommSummary, e pipeline.Expectation, multiWhy string) pipeline.Verdict {
	net := ""
	if s.Network != nil {
		net = *s.Network
	}
	expectNet := e.Network
	if expectNet == "" {
		expectNet = pipeline.ClassRDMA
	}
	multi := s.MultiNode
	v := pipeline.VerdictOK
	switch s.NetworkClass {
	case pipeline.ClassTCP:
		switch {
		case net == "FastSocket":
			d.reason("FastSocket is an intended TCP plugin")
		case expectNet != pipeline.ClassRDMA:
			d.reason("policy expects " + expectNet + "; Socket is accepted")
			d.use("verdict", KindPolicy, "expect "+expectNet)
		case multi != nil && *multi:
			v = pipeline.VerdictSocketFallback
			d.reason("NCCL uses Socket across nodes (" + multiWhy + ") where RDMA is expected")
			for _, f := range s.RDMAFailure {
				d.reason(f)
			}
			d.use("verdict", KindPolicy, "multi-node communicators expect RDMA")
		case multi == nil && len(s.RDMAFailure) > 0:
			v = pipeline.VerdictSocketFallback
			d.reason("NCCL uses Socket after an RDMA attempt failed or was disabled: " + strings.Join(s.RDMAFailure, "; "))
			d.use("verdict", KindPolicy, "an unknown node count with a failed or disabled RDMA attempt counts as a fallback")
			d.use("verdict", KindRDMAFailure, strings.Join(s.RDMAFailure, "; "))
		case multi != nil && !*multi:
			d.reason("Socket on a single node (" + multiWhy + "): nothing crosses nodes")
		default:
			v = pipeline.VerdictUnknown
			d.reason("Socket with an unknown node count and no failed RDMA attempt")
		}
	case pipeline.ClassRDMA:
		gdrExpected := e.GDR == nil || *e.GDR
		if s.GDR != nil && !*s.GDR && gdrExpected {
			v = pipeline.VerdictGDROff
			d.reason(net + " without GPUDirect RDMA where GDR is expected")
			d.use("verdict", KindPolicy, "GDR expected")
		}
		if s.GDRPartial != nil && *s.GDRPartial && gdrExpected && e.GDREveryGPU {
			v = pipeline.Worse(v, pipeline.VerdictDegraded)
			d.reason("partial GDR where the inventory says every GPU should have it")
			d.use("verdict", KindPolicy, "gdr_every_gpu")
		}
		if e.HCAs > 0 && len(s.HCAs) > 0 && len(s.HCAs) < e.HCAs {
			v = pipeline.Worse(v, pipeline.VerdictDegraded)
			d.reason(fmt.Sprintf("%d HCAs in use, the pool provides %d", len(s.HCAs), e.HCAs))
			d.use("verdict", KindHCACount, fmt.Sprintf("%d < %d", len(s.HCAs), e.HCAs))
		}
		if v == pipeline.VerdictOK {
			d.reason(net + " (rdma)")
		}
	case pipeline.ClassTCPX:
		d.reason(net + " (GPUDirect TCPX)")
	case pipeline.ClassMixed:
		v = pipeline.VerdictDegraded
		d.reason("processes use different networks")
	case pipeline.ClassNone:
		d.reason("single node (" + multiWhy + "): no inter-node network")
	default:
		v = pipeline.VerdictUnknown
		if net != "" {
			d.reason("unrecognised network " + net)
		} else {
			d.reason("no network evidence")
		}
	}
	if len(s.NCCLVersions) > 1 {
		v = pipeline.Worse(v, pipeline.VerdictDegraded)
		d.reason("NCCL version skew: " + strings.Join(s.NCCLVersions, ", "))
		d.use("verdict", KindVersionSkew, strings.Join(s.NCCLVersions, ", "))
	}
	return v
}

// rollUp builds the job summary: whole-job facts, worst communicator
// verdict, the job-only reasons (mixed networks, version skew), and
// fallback (rule 10).
func rollUp(j *jobState, whole pipeline.CommSummary, comms []pipeline.CommSummary, e pipeline.Expectation) pipeline.JobSummary {
	js := pipeline.JobSummary{Job: j.displayName(), Namespace: j.meta.Namespace, Cluster: j.meta.Cluster,
		Network: whole.Network, Fabric: whole.Fabric, GDR: whole.GDR, GDRSend: whole.GDRSend, GDRRecv: whole.GDRRecv,
		GDRPartial: whole.GDRPartial, MultiNode: whole.MultiNode,
		NNodes: whole.NNodes, NRanks: whole.NRanks, Intra: whole.Intra, Warns: whole.Warns,
		NCCLLines: j.lines, FirstSeen: j.first, LastSeen: j.last, Reasons: []string{}, Version: uint64(j.lines)}
	js.Evidence = slices.Clone(whole.Evidence)
	if whole.Network != nil {
		js.NetworkClass = ptr(pipeline.NetworkClass(*whole.Network))
	}
	if len(whole.NCCLVersions) > 0 {
		js.NCCLVersion = ptr(whole.NCCLVersions[0])
		js.VersionSkew = len(whole.NCCLVersions) > 1
	}
	js.Verdict = pipeline.VerdictOK
	for _, c := range comms {
		js.Verdict = pipeline.Worse(js.Verdict, c.Verdict)
	}
	// The whole-job view sees hosts and skew no single communicator sees.
	js.Verdict = pipeline.Worse(js.Verdict, whole.Verdict)
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
	js.Fallback = fallback(&js, whole, comms, e)
	return js
}

// fallback is rule 10: true exactly when the job's verdict is
// socket_fallback; false where no fallback is possible or the policy
// accepts the net; nil when the network is unknown or Socket's node count
// is unclear.
func fallback(js *pipeline.JobSummary, whole pipeline.CommSummary, comms []pipeline.CommSummary, e pipeline.Expectation) *bool {
	ev := func(detail string) {
		js.Evidence = append(js.Evidence, pipeline.Evidence{Field: "fallback", Kind: KindPolicy, Detail: detail})
	}
	switch {
	case js.Verdict == pipeline.VerdictSocketFallback:
		ev("a summary's verdict is socket_fallback")
		return ptr(true)
	case js.Network == nil:
		return nil
	}
	switch whole.NetworkClass {
	case pipeline.ClassUnknown:
		return nil
	case pipeline.ClassTCP:
		if *js.Network == "FastSocket" || e.Network != "" && e.Network != pipeline.ClassRDMA {
			break
		}
		if whole.Verdict == pipeline.VerdictUnknown {
			return nil
		}
		for _, c := range comms {
			if c.NetworkClass == pipeline.ClassTCP && c.Verdict == pipeline.VerdictUnknown {
				return nil
			}
		}
	}
	ev("no summary's verdict is socket_fallback")
	return ptr(false)
}
