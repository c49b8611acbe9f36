package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func importFile(t *testing.T, name string, cfg NodeImport) []NodeFacts {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "topology", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nodes, err := ImportNodes(f, cfg)
	if err != nil {
		t.Fatalf("ImportNodes(%s) = %v", name, err)
	}
	return nodes
}

func checkFacts(t *testing.T, got, want []NodeFacts) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d nodes %+v; want %d", len(got), got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		rdma := func(p *bool) string {
			if p == nil {
				return "unset"
			}
			if *p {
				return "true"
			}
			return "false"
		}
		if rdma(g.RDMACapable) != rdma(w.RDMACapable) {
			t.Errorf("%s: rdma_capable %s; want %s", w.Node, rdma(g.RDMACapable), rdma(w.RDMACapable))
		}
		g.RDMACapable, w.RDMACapable = nil, nil
		if g != w {
			t.Errorf("node %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// The real EKS output: pool from the managed node group, region and zone
// from the well-known labels; nothing else is labelled, and no RDMA
// resource is offered (t3.small).
func TestImportNodesEKS(t *testing.T) {
	got := importFile(t, "eks_cluster_info_nodelist.json", NodeImport{})
	checkFacts(t, got, []NodeFacts{
		{Node: "ip-10-0-10-170.ec2.internal", Pool: "ecommerce-dev-node-group", Region: "us-east-1", Zone: "us-east-1a"},
		{Node: "ip-10-0-20-143.ec2.internal", Pool: "ecommerce-dev-node-group", Region: "us-east-1", Zone: "us-east-1b"},
	})
	// --pool-label names another label: the node's NodeGroup label.
	got = importFile(t, "eks_cluster_info_nodelist.json", NodeImport{PoolLabel: "NodeGroup", RDMASpan: LevelRegion})
	if got[0].Pool != "main" || got[1].Pool != "main" || got[0].RDMASpan != LevelRegion {
		t.Errorf("--pool-label NodeGroup: %+v", got)
	}
}

// The EC2 instance topology labels of aws-ofi-nccl's documentation: layer
// 1 is the block, 2 the sub-block, 3 the rack.
func TestImportNodesAWSDocLabels(t *testing.T) {
	got := importFile(t, "aws_ofi_nccl_doc_labels.json", NodeImport{})
	checkFacts(t, got, []NodeFacts{
		{Node: "ip-192-168-0-1.us-west-2.compute.internal", Region: "us-west-2", Zone: "us-west-2a",
			Block: "nn-1111111111example", Subblock: "nn-2222222222example", Rack: "nn-3333333333example"},
		{Node: "ip-192-168-50-1.us-west-2.compute.internal", Region: "us-west-2", Zone: "us-west-2b",
			Block: "nn-4444444444example", Subblock: "nn-5555555555example", Rack: "nn-6666666666example"},
		{Node: "ip-192-168-51-1.us-west-2.compute.internal", Region: "us-west-2", Zone: "us-west-2b",
			Block: "nn-4444444444example", Subblock: "nn-7777777777example", Rack: "nn-8888888888example"},
	})
	// --rack-label wins over the built-in layer 3.
	got = importFile(t, "aws_ofi_nccl_doc_labels.json", NodeImport{RackLabel: "topology.k8s.aws/zone-id"})
	if got[0].Rack != "usw2-az2" {
		t.Errorf("--rack-label: rack %q; want usw2-az2", got[0].Rack)
	}

	// What the topology decision makes of them (CLASSIFICATION.md
	// section 11), for a multi-node IB job.
	inv := &Inventory{nodes: map[string]NodeFacts{}}
	for _, f := range importFile(t, "aws_ofi_nccl_doc_labels.json", NodeImport{}) {
		inv.nodes[f.Node] = f
	}
	ib, rdma, yes := "IB", ClassRDMA, true
	for _, c := range []struct {
		nodes   []string
		span    string
		crosses string
	}{
		{[]string{"ip-192-168-0-1.us-west-2.compute.internal", "ip-192-168-50-1.us-west-2.compute.internal"}, "", LevelZone},
		{[]string{"ip-192-168-50-1.us-west-2.compute.internal", "ip-192-168-51-1.us-west-2.compute.internal"}, "", ""},
		{[]string{"ip-192-168-50-1.us-west-2.compute.internal", "ip-192-168-51-1.us-west-2.compute.internal"}, LevelBlock, ""},
		{[]string{"ip-192-168-50-1.us-west-2.compute.internal", "ip-192-168-51-1.us-west-2.compute.internal"}, LevelSubblock, LevelSubblock},
	} {
		for k, f := range inv.nodes {
			f.RDMASpan = c.span
			inv.nodes[k] = f
		}
		sum := JobSummary{Network: &ib, NetworkClass: &rdma, MultiNode: &yes, Verdict: VerdictOK}
		inv.Topology(c.nodes, Expectation{}, &sum)
		if sum.Topology.Crosses != c.crosses {
			t.Errorf("%v within %q: crosses %q; want %q", c.nodes, c.span, sum.Topology.Crosses, c.crosses)
		}
	}
}

// The hand-made GKE A4X list: blocks, sub-blocks, cliques, the pool, and
// rdma_capable from an offered rdma/ resource (not from one of 0).
func TestImportNodesGKE(t *testing.T) {
	got := importFile(t, "gke_a4x_handmade.json", NodeImport{PoolSpans: map[string]string{"a4x-pool": LevelClique}})
	yes := true
	checkFacts(t, got, []NodeFacts{
		{Node: "gke-a4x-pool-1", Pool: "a4x-pool", Region: "us-central1", Zone: "us-central1-a", Block: "block-hand-made-1",
			Subblock: "subblock-hand-made-1", Clique: "cluster-uuid-hand-made.1", RDMASpan: LevelClique, RDMACapable: &yes},
		{Node: "gke-a4x-pool-2", Pool: "a4x-pool", Region: "us-central1", Zone: "us-central1-a", Block: "block-hand-made-1",
			Subblock: "subblock-hand-made-2", Clique: "cluster-uuid-hand-made.2", RDMASpan: LevelClique},
	})
}

func TestImportNodesErrors(t *testing.T) {
	for _, c := range []struct {
		in   string
		cfg  NodeImport
		want string
	}{
		{`{"kind": "Node", "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z"}}}`, NodeImport{}, ""},
		{`not json`, NodeImport{}, "not the JSON of kubectl get nodes -o json"},
		{`{"kind": "PodList"}`, NodeImport{}, "without items"},
		{`{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}`, NodeImport{}, "item 1 is a Pod"},
		{`{"kind": "List", "items": [{"metadata": {}}]}`, NodeImport{}, "metadata.name"},
		{`{"kind": "List", "items": []}`, NodeImport{RDMASpan: "galaxy"}, `rdma span "galaxy"`},
		{`{"kind": "List", "items": []}`, NodeImport{PoolSpans: map[string]string{"p": "row"}}, "rdma span of pool p"},
	} {
		nodes, err := ImportNodes(strings.NewReader(c.in), c.cfg)
		switch {
		case c.want == "" && (err != nil || len(nodes) != 1 || nodes[0].Zone != "z"):
			t.Errorf("ImportNodes(%q) = %+v, %v; want node n1 in zone z", c.in, nodes, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("ImportNodes(%q) error %v; want one containing %q", c.in, err, c.want)
		}
	}
	big := strings.NewReader(`{"kind": "List", "items": [` + strings.Repeat(" ", 100) + `]}`)
	if _, err := ImportNodes(big, NodeImport{MaxBytes: 64}); !errors.Is(err, ErrNodeListTooLarge) {
		t.Errorf("ImportNodes(over the cap) error %v; want ErrNodeListTooLarge", err)
	}
}
