package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The node labels clusters publish for where a node sits, tried in order
// for each level (docs/topology.md cites each provider's documentation).
var (
	// RegionLabels and ZoneLabels: Kubernetes' well-known labels, then
	// their deprecated beta names (still set by some providers).
	RegionLabels = []string{"topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"}
	ZoneLabels   = []string{"topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"}
	// BlockLabels, SubblockLabels, RackLabels: GKE's physical topology
	// (A3 Ultra, A4, A4X), and the EC2 instance topology EKS publishes,
	// whose layer 1 is the network node farthest from the instance and
	// layer 3 the nearest.
	BlockLabels    = []string{"cloud.google.com/gce-topology-block", "topology.k8s.aws/network-node-layer-1"}
	SubblockLabels = []string{"cloud.google.com/gce-topology-subblock", "topology.k8s.aws/network-node-layer-2"}
	RackLabels     = []string{"topology.k8s.aws/network-node-layer-3"}
	// CliqueLabels: NVIDIA GPU feature discovery's multi-node NVLink
	// domain, "<fabric cluster UUID>.<clique ID>".
	CliqueLabels = []string{"nvidia.com/gpu.clique"}
	// PoolLabels: GKE node pools, EKS managed node groups, Karpenter node
	// pools, AKS agent pools.
	PoolLabels = []string{"cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "karpenter.sh/nodepool",
		"kubernetes.azure.com/agentpool", "agentpool"}
	// RDMAResources are the extended resources of RDMA device plugins: a
	// node that offers one is RDMA-capable (EFA, and the rdma/ prefix of
	// the k8s-rdma-shared-dev-plugin and SR-IOV network device plugins).
	RDMAResources = []string{"vpc.amazonaws.com/efa", "rdma/"}
)

// NodeImport says how `ncclwatch inventory import` reads a node: the
// labels named here come before the built-in ones of their level.
type NodeImport struct {
	PoolLabel  string
	BlockLabel string
	RackLabel  string
	// RDMASpan is the rdma_span of every node; PoolSpans overrides it per
	// pool.
	RDMASpan  string
	PoolSpans map[string]string
	// MaxBytes caps the input; 0 means MaxNodeListBytes.
	MaxBytes int64
}

// MaxNodeListBytes caps the kubectl output import reads: 256 MiB holds
// the NodeList of a cluster of many thousand nodes, image lists included.
const MaxNodeListBytes = 256 << 20

// ErrNodeListTooLarge is returned for input over the cap.
var ErrNodeListTooLarge = errors.New("node list too large")

// kubeNode is the part of a v1 Node that import reads.
type kubeNode struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Status struct {
		Allocatable map[string]string `json:"allocatable"`
	} `json:"status"`
}

// ImportNodes reads the output of `kubectl get nodes -o json` (a List or
// NodeList; also one Node, `kubectl get node NAME -o json`) and returns
// each node's facts, sorted by name. Labels a node lacks leave the field
// empty; rdma_capable is set only to true, from an RDMA resource the node
// offers (RDMAResources), since its absence proves nothing.
func ImportNodes(r io.Reader, cfg NodeImport) ([]NodeFacts, error) {
	limit := cfg.MaxBytes
	if limit <= 0 {
		limit = MaxNodeListBytes
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("inventory import: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("inventory import: %w (over %d bytes)", ErrNodeListTooLarge, limit)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("inventory import: %w", err)
	}
	var doc struct {
		kubeNode
		Items *[]kubeNode `json:"items"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("inventory import: not the JSON of kubectl get nodes -o json: %w", err)
	}
	var items []kubeNode
	switch {
	case doc.Items != nil:
		items = *doc.Items
	case doc.Kind == "Node":
		items = []kubeNode{doc.kubeNode}
	default:
		return nil, fmt.Errorf("inventory import: a %q object without items; want the output of kubectl get nodes -o json", doc.Kind)
	}
	out := make([]NodeFacts, 0, len(items))
	for i, n := range items {
		if n.Kind != "" && n.Kind != "Node" {
			return nil, fmt.Errorf("inventory import: item %d is a %s, not a Node", i+1, n.Kind)
		}
		if n.Metadata.Name == "" {
			return nil, fmt.Errorf("inventory import: item %d: metadata.name: must not be empty", i+1)
		}
		out = append(out, cfg.facts(n))
	}
	slices.SortFunc(out, func(a, b NodeFacts) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// validate checks the spans.
func (cfg NodeImport) validate() error {
	bad := func(span string) bool { return span != SpanAny && levelRank(span) < 0 }
	if cfg.RDMASpan != "" && bad(cfg.RDMASpan) {
		return fmt.Errorf("rdma span %q: want any, %s", cfg.RDMASpan, strings.Join(TopologyLevels, ", "))
	}
	for pool, span := range cfg.PoolSpans {
		if bad(span) {
			return fmt.Errorf("rdma span of pool %s %q: want any, %s", pool, span, strings.Join(TopologyLevels, ", "))
		}
	}
	return nil
}

// facts maps one node's labels and resources to its facts.
func (cfg NodeImport) facts(n kubeNode) NodeFacts {
	l := n.Metadata.Labels
	first := func(own string, keys []string) string {
		if own != "" && l[own] != "" {
			return l[own]
		}
		for _, k := range keys {
			if v := l[k]; v != "" {
				return v
			}
		}
		return ""
	}
	f := NodeFacts{Node: n.Metadata.Name, Pool: first(cfg.PoolLabel, PoolLabels), Region: first("", RegionLabels),
		Zone: first("", ZoneLabels), Block: first(cfg.BlockLabel, BlockLabels), Subblock: first("", SubblockLabels),
		Rack: first(cfg.RackLabel, RackLabels), Clique: first("", CliqueLabels), RDMASpan: cfg.RDMASpan}
	if s, ok := cfg.PoolSpans[f.Pool]; ok && f.Pool != "" {
		f.RDMASpan = s
	}
	for res, q := range n.Status.Allocatable {
		for _, r := range RDMAResources {
			if res == r || strings.HasSuffix(r, "/") && strings.HasPrefix(res, r) {
				if v, err := strconv.ParseInt(q, 10, 64); err == nil && v > 0 {
					yes := true
					f.RDMACapable = &yes
				}
			}
		}
	}
	return f
}
