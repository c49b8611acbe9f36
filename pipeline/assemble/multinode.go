package assemble

import (
	"fmt"
	"strings"
)

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
// policy. intraOnly says whether rule 9 (intra-node connections alone) may
// decide for this set (decideNodes).
func multiNode(v *view, comms []*comm, maxNR, printedNodes int, intra uint16, test *testList, intraOnly bool) (*bool, string, string) {
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
	someOffset := false
	for _, group := range byNode {
		if why := devConflict(group); why != "" {
			return ptr(true), why, KindSameGPUOverNet
		}
		why, some := rankOffsets(group)
		if why != "" {
			return ptr(true), why, KindRankOffset
		}
		someOffset = someOffset || some
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
	// Intra-node connections alone do not show one node where a rank sits
	// above the node's GPU count (its lower ranks are elsewhere, or on
	// this node as ranks of several communicators: rule 4).
	if intraOnly && v.nodes == 1 && intra != 0 && !netConn(v.procs) && !netTrace(v.procs) && !someOffset {
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
