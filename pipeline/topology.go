package pipeline

import (
	"fmt"
	"slices"
	"strings"
)

// Topology levels, widest first: where a node sits, as its labels say
// (docs/topology.md names the labels of each provider). A clique is a
// multi-node NVLink domain (an NVL72 rack).
const (
	LevelRegion   = "region"
	LevelZone     = "zone"
	LevelBlock    = "block"
	LevelSubblock = "subblock"
	LevelRack     = "rack"
	LevelClique   = "clique"
)

// TopologyLevels lists the levels widest first.
var TopologyLevels = []string{LevelRegion, LevelZone, LevelBlock, LevelSubblock, LevelRack, LevelClique}

// SpanAny is the NodeFacts.RDMASpan of a pool that lets RDMA jobs spread
// anywhere (an on-premises fabric whose "zones" are only labels).
const SpanAny = "any"

// DefaultRDMASpan is the span of a pool that states none: a multi-node RDMA
// job stays within one zone, since no cloud's RDMA fabric crosses zones.
const DefaultRDMASpan = LevelZone

// KindTopologySpan is the evidence kind of the topology decision
// (pipeline/CLASSIFICATION.md, section 11).
const KindTopologySpan = "topology_span"

// levelRank returns the position of level in TopologyLevels, -1 when it is
// not one.
func levelRank(level string) int { return slices.Index(TopologyLevels, level) }

// Topology is where a job's nodes sit, from the node inventory: the
// distinct values of each level over the nodes it knows, and the decision
// of pipeline/CLASSIFICATION.md section 11. Its JSON form is the summary's
// `topology` object of `scan --json`.
type Topology struct {
	// Nodes and UnknownNodes count the job's nodes the inventory lists and
	// those it does not.
	Nodes        int      `json:"nodes"`
	UnknownNodes int      `json:"unknown_nodes"`
	Pools        []string `json:"pools"`
	Regions      []string `json:"regions"`
	Zones        []string `json:"zones"`
	Blocks       []string `json:"blocks"`
	Subblocks    []string `json:"subblocks"`
	Racks        []string `json:"racks"`
	Cliques      []string `json:"cliques"`
	// Within is the level the job's pools keep a multi-node RDMA job in:
	// the narrowest rdma_span of its known nodes (DefaultRDMASpan when none
	// states one; "any" when every node allows any spread).
	Within string `json:"within"`
	// Crosses is the widest level at or above Within that a multi-node
	// RDMA job spans (two or more values); empty when it spans none or
	// does not count.
	Crosses string `json:"crosses"`
}

// Values returns the distinct values of level (one of TopologyLevels).
func (t *Topology) Values(level string) []string {
	switch level {
	case LevelRegion:
		return t.Regions
	case LevelZone:
		return t.Zones
	case LevelBlock:
		return t.Blocks
	case LevelSubblock:
		return t.Subblocks
	case LevelRack:
		return t.Racks
	case LevelClique:
		return t.Cliques
	}
	return nil
}

// Topology fills sum.Topology from the facts of nodes (the Kubernetes nodes
// the job's records came from) and decides whether the job spans more than
// its pools allow (pipeline/CLASSIFICATION.md, section 11): a reason and an
// evidence entry when it does. e is the job's expectation (Inventory.Expect).
// It never changes the verdict or fallback. Without an inventory or nodes
// it leaves sum.Topology nil.
func (inv *Inventory) Topology(nodes []string, e Expectation, sum *JobSummary) {
	if inv == nil || len(nodes) == 0 {
		return
	}
	t := &Topology{Pools: []string{}, Regions: []string{}, Zones: []string{}, Blocks: []string{}, Subblocks: []string{},
		Racks: []string{}, Cliques: []string{}}
	within, anySpan := -1, true
	add := func(s *[]string, v string) {
		if v != "" && !slices.Contains(*s, v) {
			*s = append(*s, v)
		}
	}
	for _, name := range nodes {
		f, ok := inv.Node(name)
		if !ok {
			t.UnknownNodes++
			continue
		}
		t.Nodes++
		add(&t.Pools, f.Pool)
		add(&t.Regions, f.Region)
		add(&t.Zones, f.Zone)
		add(&t.Blocks, f.Block)
		add(&t.Subblocks, f.Subblock)
		add(&t.Racks, f.Rack)
		add(&t.Cliques, f.Clique)
		span := f.RDMASpan
		if span == "" {
			span = DefaultRDMASpan
		}
		if span == SpanAny {
			continue
		}
		anySpan = false
		within = max(within, levelRank(span))
	}
	for _, s := range [][]string{t.Pools, t.Regions, t.Zones, t.Blocks, t.Subblocks, t.Racks, t.Cliques} {
		slices.Sort(s)
	}
	switch {
	case t.Nodes == 0:
		t.Within = DefaultRDMASpan
		within = levelRank(DefaultRDMASpan)
	case anySpan:
		t.Within = SpanAny
	default:
		t.Within = TopologyLevels[within]
	}
	sum.Topology = t
	if t.Within == SpanAny || !topologyCounts(sum, e, len(nodes)) {
		return
	}
	for _, level := range TopologyLevels[:within+1] {
		if vs := t.Values(level); len(vs) > 1 {
			t.Crosses = level
			break
		}
	}
	t.Explain(sum)
}

// Explain adds to sum the reason and the evidence of t's crossing (none
// when t is nil or crosses nothing), once.
func (t *Topology) Explain(sum *JobSummary) {
	if t == nil || t.Crosses == "" {
		return
	}
	vs := t.Values(t.Crosses)
	what := "RDMA job"
	if t.Crosses == LevelClique {
		what = "multi-node NVLink job"
	}
	pools := "its pool keeps"
	if len(t.Pools) > 0 {
		pools = "pool " + strings.Join(t.Pools, ", ") + " keeps"
	}
	r := fmt.Sprintf("%s spans %d %s (%s); %s it within one %s", what, len(vs), plural(t.Crosses),
		strings.Join(vs, ", "), pools, t.Within)
	if slices.Contains(sum.Reasons, r) {
		return
	}
	sum.Reasons = append(sum.Reasons, r)
	sum.Evidence = append(sum.Evidence, Evidence{Field: "topology", Kind: KindTopologySpan,
		Detail: fmt.Sprintf("%s %s of %d known nodes; within %s", plural(t.Crosses), strings.Join(vs, ", "), t.Nodes, t.Within)})
}

// topologyCounts says whether the span rule applies to a job
// (pipeline/CLASSIFICATION.md, section 11): it spans nodes, and RDMA is
// what it uses (network class rdma) or should have used (a socket fallback:
// the span may be why).
func topologyCounts(sum *JobSummary, e Expectation, nodes int) bool {
	multi := nodes > 1 || sum.MultiNode != nil && *sum.MultiNode
	if !multi || e.Network != "" && e.Network != ClassRDMA {
		return false
	}
	rdma := sum.NetworkClass != nil && *sum.NetworkClass == ClassRDMA
	return rdma || sum.Verdict == VerdictSocketFallback
}

func plural(level string) string {
	if level == LevelClique {
		return "NVLink cliques"
	}
	return level + "s"
}
