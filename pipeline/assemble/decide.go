package assemble

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
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
		comms = append(comms, summarize(j, c.key, procs, []*comm{c}, expect, &whole))
	}
	var rest []*proc
	for _, p := range j.order {
		if !claimed[p.key] {
			rest = append(rest, p)
		}
	}
	if len(rest) > 0 || len(comms) == 0 {
		comms = append(comms, summarize(j, "", rest, nil, expect, &whole))
	}
	return comms, rollUp(j, whole, comms, expect), true
}

// summarize decides one summary. It is the decision table of
// pipeline/CLASSIFICATION.md: it decides every field in the order and from
// the evidence kinds that document names (the rules are in network.go,
// gdr.go, multinode.go and verdict.go), and each decision records the
// evidence it used. Facts (network, gdr, multi_node, nnodes, nranks, intra)
// come only from the log; the fleet policy (expect) enters only fallback
// and verdict. whole is the whole job's summary when the set is a part of
// the job (a communicator, the unattributed processes), nil for the whole
// job itself: a part of a single-node job is on one node too.
func summarize(j *jobState, id string, procs []*proc, comms []*comm, expect pipeline.Expectation, whole *pipeline.CommSummary) pipeline.CommSummary {
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
	s.NCCLVersions = append(s.NCCLVersions, versionsOf(j, procs, id == "")...)
	f := gatherFacts(&s, procs)

	// 1. network, 2. network_class.
	s.Network = decideNetwork(&d, procs)
	// 3. fabric.
	s.Fabric = decideFabric(&d, f.fabric)
	// 4. gdr, gdr_send, gdr_recv, gdr_partial.
	s.GDR, s.GDRSend, s.GDRRecv, s.GDRPartial = decideGDR(&d, f.gdr)
	// 5. nranks (printed), 6. multi_node, 7. nnodes.
	multi, why := decideNodes(&d, &s, j, &v, comms, id == "", f.intra, whole)
	// 8. intra.
	decideIntra(&d, &s, f.intra)

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

// versionsOf returns the NCCL versions procs printed, sorted. The
// unattributed set and the whole job (unattributed) also own the
// un-prefixed banners no process printed.
func versionsOf(j *jobState, procs []*proc, unattributed bool) []string {
	var versions []string
	for _, p := range procs {
		for _, ver := range p.versions {
			if !slices.Contains(versions, ver) {
				versions = append(versions, ver)
			}
		}
	}
	if unattributed {
		for _, ver := range j.versions {
			if !slices.Contains(versions, ver) {
				versions = append(versions, ver)
			}
		}
	}
	sortVersions(versions)
	return versions
}

// facts is what the rules read of a set of processes beyond the summary
// fields gatherFacts fills.
type facts struct {
	intra  uint16 // intra-node transports, bit 1<<Transport
	gdr    gdrFacts
	fabric map[string]bool // HCA link layers
}

// gatherFacts folds the processes' own facts into s (hosts, HCAs,
// warnings, environment, channels, RDMA failures, ranks seen) and returns
// those the decision rules read.
func gatherFacts(s *pipeline.CommSummary, procs []*proc) facts {
	f := facts{fabric: map[string]bool{}}
	hostSet := map[string]bool{}
	hcaSeen := map[string]bool{}
	torn := tornHosts(procs)
	for _, p := range procs {
		if real, ok := torn[p.host]; ok {
			hostSet[real] = true
		} else {
			hostSet[p.host] = true
		}
		f.intra |= p.intra
		f.gdr.add(p.gdr)
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
			f.fabric[h.LinkLayer] = true
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
		for _, fail := range rdmaFailures(p) {
			if !slices.Contains(s.RDMAFailure, fail) {
				s.RDMAFailure = append(s.RDMAFailure, fail)
			}
		}
		s.RanksSeen += len(p.ranks)
	}
	for h := range hostSet {
		s.Hosts = append(s.Hosts, h)
	}
	sort.Strings(s.Hosts)
	return f
}

// decideNodes is rules 5-7: nranks as printed (or as the nccl-tests table
// of an unattributed set lists them), multi_node, and nnodes. It returns
// multi_node and why, for the class and the verdict.
func decideNodes(d *decision, s *pipeline.CommSummary, j *jobState, v *view, comms []*comm, unattributed bool, intra uint16, whole *pipeline.CommSummary) (*bool, string) {
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
	if unattributed {
		test = &j.test
		if n := test.complete(); s.NRanks == nil && n > 0 {
			// The nccl-tests table lists every rank of the test.
			s.NRanks = ptr(n)
			maxNR = n
			d.use("nranks", KindTestDevices, fmt.Sprintf("%d ranks listed", n))
		}
	}
	part := whole != nil
	jobSpans := part && whole.MultiNode != nil && *whole.MultiNode
	jobOneNode := part && whole.MultiNode != nil && !*whole.MultiNode
	// Rule 9 (intra-node connections alone) decides for the whole job, and
	// for a communicator of a job not known to span nodes; never for the
	// processes no communicator line claimed yet (rules 10 and 11 do).
	intraOnly := !part || !unattributed && !jobSpans
	multi, why, kind := multiNode(v, comms, maxNR, printedNodes, intra, test, intraOnly)
	if multi == nil && jobOneNode {
		multi, why, kind = ptr(false), "the whole job is on one node", KindJobSingleNode
	}
	if multi == nil && unattributed && jobSpans {
		multi, why, kind = ptr(true), "the whole job spans nodes", KindJobMultiNode
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
		if n, k := inferNodes(v, j.ringMembers, maxNR); n > 1 {
			s.NNodes = ptr(n)
			d.use("nnodes", k, fmt.Sprintf("%d nodes", n))
		}
	}
	return multi, why
}

// decideIntra is rule 8: the intra-node transports seen, with NVLS and
// CollNet, sorted.
func decideIntra(d *decision, s *pipeline.CommSummary, intra uint16) {
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
}

// view is the facts of a set of processes, shared by communicator and job
// summaries.
type view struct {
	procs  []*proc
	nodeOf map[*proc]string
	nodes  int
	k8s    bool // node identity came from Kubernetes metadata
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
