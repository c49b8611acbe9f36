package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// topologyInventory is a hand-made fleet: an H100 pool over two zones of
// us-east-1 (racks r1, r2 in a), a GB200 pool whose policy keeps jobs in
// one NVLink clique, a pool that lets RDMA spread anywhere, a TCP pool, and
// a node in another region.
func topologyInventory(t *testing.T) *Inventory {
	t.Helper()
	const y = `
- {node: a1, pool: h100-ib, region: us-east-1, zone: us-east-1a, rack: r1, rdma_capable: true}
- {node: a2, pool: h100-ib, region: us-east-1, zone: us-east-1a, rack: r2, rdma_capable: true}
- {node: b1, pool: h100-ib, region: us-east-1, zone: us-east-1b, rack: r7, rdma_capable: true}
- {node: w1, pool: h100-ib, region: us-west-2, zone: us-west-2a, rdma_capable: true}
- {node: g1, pool: gb200, zone: z1, block: blk1, clique: 3143b15b.0, rdma_span: clique, rdma_capable: true}
- {node: g2, pool: gb200, zone: z1, block: blk1, clique: 3143b15b.0, rdma_span: clique, rdma_capable: true}
- {node: g3, pool: gb200, zone: z1, block: blk1, clique: 3143b15b.1, rdma_span: clique, rdma_capable: true}
- {node: o1, pool: onprem-ib, zone: hall-a, rdma_span: any, rdma_capable: true}
- {node: o2, pool: onprem-ib, zone: hall-b, rdma_span: any, rdma_capable: true}
- {node: t1, pool: l4-eth, zone: us-east-1a, rdma_capable: false}
- {node: t2, pool: l4-eth, zone: us-east-1b, rdma_capable: false}
`
	nodes, err := ParseInventory("inv.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return &Inventory{nodes: nodes}
}

func TestTopology(t *testing.T) {
	str := func(s string) *string { return &s }
	yes := func() *bool { b := true; return &b }
	ib := JobSummary{Network: str("IB"), NetworkClass: str(ClassRDMA), MultiNode: yes(), Verdict: VerdictOK}
	socket := JobSummary{Network: str("Socket"), NetworkClass: str(ClassTCP), MultiNode: yes(), Verdict: VerdictSocketFallback}
	tcpOK := JobSummary{Network: str("Socket"), NetworkClass: str(ClassTCP), MultiNode: yes(), Verdict: VerdictOK}
	// Expectations written from CLASSIFICATION.md section 11 before the
	// code ran.
	for _, c := range []struct {
		name    string
		nodes   []string
		sum     JobSummary
		within  string
		crosses string
		reason  string
		zones   []string
		known   int
		unknown int
	}{
		{name: "rdma across two zones", nodes: []string{"a1", "b1"}, sum: ib, within: LevelZone, crosses: LevelZone,
			reason: "RDMA job spans 2 zones (us-east-1a, us-east-1b); pool h100-ib keeps it within one zone",
			zones:  []string{"us-east-1a", "us-east-1b"}, known: 2},
		{name: "two racks of one zone", nodes: []string{"a1", "a2"}, sum: ib, within: LevelZone,
			zones: []string{"us-east-1a"}, known: 2},
		{name: "regions before zones", nodes: []string{"a1", "w1"}, sum: ib, within: LevelZone, crosses: LevelRegion,
			reason: "RDMA job spans 2 regions (us-east-1, us-west-2); pool h100-ib keeps it within one zone",
			zones:  []string{"us-east-1a", "us-west-2a"}, known: 2},
		{name: "a fallback across zones counts", nodes: []string{"a1", "b1"}, sum: socket, within: LevelZone,
			crosses: LevelZone, reason: "RDMA job spans 2 zones (us-east-1a, us-east-1b); pool h100-ib keeps it within one zone",
			zones: []string{"us-east-1a", "us-east-1b"}, known: 2},
		{name: "intended tcp never counts", nodes: []string{"a1", "b1"}, sum: tcpOK, within: LevelZone,
			zones: []string{"us-east-1a", "us-east-1b"}, known: 2},
		{name: "clique policy", nodes: []string{"g1", "g3"}, sum: ib, within: LevelClique, crosses: LevelClique,
			reason: "multi-node NVLink job spans 2 NVLink cliques (3143b15b.0, 3143b15b.1); pool gb200 keeps it within one clique",
			zones:  []string{"z1"}, known: 2},
		{name: "one clique", nodes: []string{"g1", "g2"}, sum: ib, within: LevelClique, zones: []string{"z1"}, known: 2},
		{name: "the narrowest span of the job's pools", nodes: []string{"a1", "g1"}, sum: ib, within: LevelClique,
			crosses: LevelZone, reason: "RDMA job spans 2 zones (us-east-1a, z1); pool gb200, h100-ib keeps it within one clique",
			zones: []string{"us-east-1a", "z1"}, known: 2},
		{name: "any", nodes: []string{"o1", "o2"}, sum: ib, within: SpanAny, zones: []string{"hall-a", "hall-b"}, known: 2},
		{name: "unknown nodes", nodes: []string{"a1", "x9"}, sum: ib, within: LevelZone, zones: []string{"us-east-1a"},
			known: 1, unknown: 1},
		{name: "none known", nodes: []string{"x8", "x9"}, sum: ib, within: LevelZone, zones: []string{}, unknown: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			inv := topologyInventory(t)
			for range 2 { // the same summary decided twice: one reason
				sum := c.sum
				sum.Reasons = []string{"kept"}
				sum.Evidence = nil
				e := inv.Expect(c.nodes, Expectation{})
				inv.Topology(c.nodes, e, &sum)
				tp := sum.Topology
				if tp == nil {
					t.Fatal("Topology left nil")
				}
				if tp.Within != c.within || tp.Crosses != c.crosses || tp.Nodes != c.known || tp.UnknownNodes != c.unknown {
					t.Errorf("within %q crosses %q nodes %d/%d; want %q %q %d/%d", tp.Within, tp.Crosses, tp.Nodes,
						tp.UnknownNodes, c.within, c.crosses, c.known, c.unknown)
				}
				if !slices.Equal(c.zones, tp.Zones) {
					t.Errorf("zones %q; want %q", tp.Zones, c.zones)
				}
				want := []string{"kept"}
				if c.reason != "" {
					want = append(want, c.reason)
				}
				if !slices.Equal(want, sum.Reasons) {
					t.Errorf("reasons %q; want %q", sum.Reasons, want)
				}
				ev := slices.IndexFunc(sum.Evidence, func(e Evidence) bool { return e.Field == "topology" })
				if (ev >= 0) != (c.crosses != "") || ev >= 0 && sum.Evidence[ev].Kind != KindTopologySpan {
					t.Errorf("evidence %+v; want a %s entry: %v", sum.Evidence, KindTopologySpan, c.crosses != "")
				}
				if sum.Verdict != c.sum.Verdict {
					t.Errorf("verdict %s; topology must not change it (%s)", sum.Verdict, c.sum.Verdict)
				}
			}
		})
	}
}

func TestTopologyNone(t *testing.T) {
	var sum JobSummary
	var inv *Inventory
	inv.Topology([]string{"a1", "b1"}, Expectation{}, &sum)
	if sum.Topology != nil {
		t.Errorf("nil inventory: topology %+v; want nil", sum.Topology)
	}
	topologyInventory(t).Topology(nil, Expectation{}, &sum)
	if sum.Topology != nil {
		t.Errorf("no nodes: topology %+v; want nil", sum.Topology)
	}
}

func TestParseInventoryTopology(t *testing.T) {
	csv := "node,pool,region,zone,block,subblock,rack,clique,rdma_span\n" +
		"n1,a4x,us-central1,us-central1-b,b-7,sb-2,,cl.4,subblock\n"
	nodes, err := ParseInventory("x.csv", []byte(csv))
	if err != nil {
		t.Fatal(err)
	}
	want := NodeFacts{Node: "n1", Pool: "a4x", Region: "us-central1", Zone: "us-central1-b", Block: "b-7",
		Subblock: "sb-2", Clique: "cl.4", RDMASpan: LevelSubblock}
	if got := nodes["n1"]; got != want {
		t.Errorf("csv: %+v; want %+v", got, want)
	}
	for _, bad := range []string{"- {node: n1, rdma_span: rack2}\n", "node,rdma_span\nn1,zones\n"} {
		name := "x.yaml"
		if strings.HasPrefix(bad, "node,") {
			name = "x.csv"
		}
		if _, err := ParseInventory(name, []byte(bad)); err == nil || !strings.Contains(err.Error(), "rdma_span") {
			t.Errorf("ParseInventory(%q) error %v; want one naming rdma_span", bad, err)
		}
	}
	// The file `inventory import` writes loads back.
	p := filepath.Join(t.TempDir(), "inv.yaml")
	if err := os.WriteFile(p, []byte("nodes:\n  - node: n1\n    zone: z\n    clique: c.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := LoadInventory(p)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := inv.Node("n1"); f.Clique != "c.0" || f.Zone != "z" {
		t.Errorf("loaded %+v", f)
	}
}
