package assemble

import (
	"fmt"
	"strings"
)

// nodesOf assigns each process a node. Hostnames are not unique (two nodes
// both named "ubuntu", corpus 022; redacted "xxx-xxx-xxx-xxx", corpus 093),
// so processes of one hostname that show different addresses on the same
// interface are different nodes. Launcher IPs of lines without an NCCL
// process (Ray workers, corpus 047) add nodes no process was seen on.
//
// Where the envelope names the Kubernetes node of a process (run), that
// node is its identity: pods on one node have hostnames of their own. The
// nccl-tests device table names hosts only; in a job with Kubernetes nodes
// a listed host joins the node of a process with that hostname, or is not
// placed at all. k8s reports whether node names decided.
func nodesOf(procs []*proc, extraIPs []string) (map[*proc]string, int, bool) {
	nodeOf := make(map[*proc]string, len(procs))
	byHost := map[string][]*proc{}
	var hosts []string
	known := map[string]bool{}
	nodes := map[string]bool{}
	hostNode := map[string]string{}
	for _, p := range procs {
		if p.k8sNode != "" && p.host != "" {
			hostNode[p.host] = p.k8sNode
		}
	}
	k8s := false
	for _, p := range procs {
		if p.k8sNode != "" {
			k8s = true
			break
		}
	}
	torn := tornHosts(procs)
	for _, p := range procs {
		for _, ip := range p.ifaceIP {
			known[ip] = true
		}
		if p.launcherIP != "" {
			known[p.launcherIP] = true
		}
		if k8s {
			n := p.k8sNode
			if n == "" {
				n = hostNode[p.host]
			}
			if n != "" {
				id := "k8s|" + n
				nodeOf[p], nodes[id] = id, true
			}
			continue
		}
		h := p.host
		if real, ok := torn[h]; ok {
			h = real
		}
		if h == "" && p.launcherHost != "" {
			// An empty NCCL hostname (corpus 065) under a launcher label
			// that names the host (pdsh, mpirun).
			h = p.launcherHost
		}
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], p)
	}
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
	return nodeOf, len(nodes), k8s
}

// tornHosts maps each hostname that is a tear of another to that other: a
// header read from a torn or glued line takes the text before it into its
// host ("86gpu-dev-0342cf21", "nvlsPerRankSigpu-dev-0342cf21" beside the
// real "gpu-dev-0342cf21"; "found.host-a" after "No device found."), and
// such a host is no node. A host is a tear when another seen host ends it
// and the extra leading characters do not end in '-', where two real names
// ("a-node1", "node1") may differ.
func tornHosts(procs []*proc) map[string]string {
	var hosts []string
	seen := map[string]bool{}
	for _, p := range procs {
		if p.host != "" && !seen[p.host] {
			seen[p.host] = true
			hosts = append(hosts, p.host)
		}
	}
	torn := map[string]string{}
	for _, h := range hosts {
		best := ""
		for _, g := range hosts {
			if len(g) >= len(h) || len(g) <= len(best) || !strings.HasSuffix(h, g) {
				continue
			}
			if h[len(h)-len(g)-1] == '-' {
				continue
			}
			best = g
		}
		if best != "" {
			torn[h] = best
		}
	}
	// An empty host whose processes all print under one named host too
	// lost that name to a tear ("NAME :70918:70928" split from a glued
	// line, corpus 253): a pid is one process, and a process has one host.
	if hasEmpty(procs) {
		named := map[string]map[string]bool{} // pid → named hosts
		for _, p := range procs {
			if p.host != "" {
				if named[p.pid] == nil {
					named[p.pid] = map[string]bool{}
				}
				named[p.pid][p.host] = true
			}
		}
		owner, ok := "", true
		for _, p := range procs {
			if p.host != "" {
				continue
			}
			hs := named[p.pid]
			if len(hs) != 1 {
				ok = false
				break
			}
			for h := range hs {
				if owner != "" && owner != h {
					ok = false
				}
				owner = h
			}
		}
		if ok && owner != "" {
			torn[""] = owner
		}
	}
	// A tear of a tear ends at the real host.
	for h, g := range torn {
		for range 4 {
			next, ok := torn[g]
			if !ok {
				break
			}
			g = next
		}
		torn[h] = g
	}
	return torn
}

func hasEmpty(procs []*proc) bool {
	for _, p := range procs {
		if p.host == "" {
			return true
		}
	}
	return false
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
// another (corpus 051: "8[0] -> 0[0] [receive] via NET/Socket/0"; the
// corpus's 2.19+ excerpts 207, 209, 210 disagree, see the report).
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
//
// The offset says nothing where two processes of the node hold the same
// rank: those are ranks of different communicators, which versions without
// a commId cannot tell apart (corpus 283 without its first line: two 2-rank
// communicators of Ray actors that each see their own GPU as cudaDev 0, so
// both rank 1s sit "1 above" device 0 on one node).
func rankOffset(group []*proc) string {
	why, _ := rankOffsets(group)
	return why
}

// rankOffsets is rankOffset, and whether some rank of the node (not every
// one) sits at least its GPU count above its device index: a rank whose
// lower ranks are not all on this node, which keeps intra-node connections
// from proving one node (rule 9) though it proves no second node while
// lower ranks share this one (they may be another communicator's).
func rankOffsets(group []*proc) (why string, some bool) {
	rankOwner := map[int]*proc{}
	for _, p := range group {
		for r := range p.ranks {
			if q, ok := rankOwner[r]; ok && q != p {
				return "", false
			}
			rankOwner[r] = p
		}
	}
	// check reports whether every pair sits min above its device, and
	// whether one does.
	check := func(pairs map[int]int, min int) (all, one bool) {
		if len(pairs) == 0 {
			return false, false
		}
		devs := map[int]bool{}
		for _, d := range pairs {
			devs[d] = true
		}
		if len(devs) > min {
			min = len(devs)
		}
		all = true
		for r, d := range pairs {
			if r-d < min {
				all = false
			} else {
				one = true
			}
		}
		return all, one
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
	all, one := check(explicit, 1)
	if all {
		return "ranks on this host start above its GPU count", true
	}
	if len(explicit) == 0 {
		if all, one := check(prefix, 8); all {
			return "launcher ranks on this host start above its GPU count", true
		} else {
			return "", one
		}
	}
	return "", one
}

// inferNodes returns the node count of a multi-node set when the log makes it
// certain, else 0: every rank of the printed ring order is placed; or the
// printed nranks equals hosts × GPUs per host; or, without nranks, every host
// shows the same complete set of more than one GPU.
func inferNodes(v *view, ring []int, nranks int) (int, string) {
	rankNode := map[int]string{}
	perNode := map[string]map[int]bool{}
	for _, p := range v.procs {
		n := v.nodeOf[p]
		if n == "" {
			continue // not placed on a node
		}
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
		return n, KindRingOrder
	}
	if nranks > 1 && v.nodes >= nranks {
		// More hosts than ranks can only mean one rank per node (a host
		// renamed by hand, corpus 108).
		return nranks, KindDistinctNodes
	}
	if v.nodes != len(perNode) {
		return 0, "" // nodes known only by address: GPUs per node unknown
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
		return 0, ""
	}
	if nranks > 0 {
		if v.nodes*k == nranks {
			return v.nodes, KindHostsTimesGPUs
		}
		return 0, ""
	}
	if k < 2 {
		return 0, ""
	}
	for _, devs := range perNode {
		if len(devs) != k {
			return 0, ""
		}
	}
	return v.nodes, KindHostsTimesGPUs
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
