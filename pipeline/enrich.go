package pipeline

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultJobLabels are the pod labels that name a training job, tried in
// order: Kubeflow Training Operator, Kubernetes Jobs, JobSet, Volcano, Ray,
// Slurm-on-Kubernetes and the plain job-name convention.
var DefaultJobLabels = []string{
	"training.kubeflow.org/job-name",
	"batch.kubernetes.io/job-name",
	"jobset.sigs.k8s.io/jobset-name",
	"volcano.sh/job-name",
	"ray.io/cluster",
	"slurm.job-id",
	"slurm_job_id",
	"job-name",
	"app.kubernetes.io/instance",
}

// JobNamer derives a job's identity from a record: the first configured
// label present, then the envelope's own job field, then the Kafka key (the
// Fluent Bit output keys records by job), then the pod name.
type JobNamer struct {
	Labels []string
}

// Name returns the job name for rec; key is the Kafka record key (may be
// nil).
func (n JobNamer) Name(rec *Record, key []byte) string {
	if m := rec.Meta; m != nil {
		for _, l := range n.Labels {
			if v := m.Labels[l]; v != "" {
				return v
			}
		}
		if m.Job != "" {
			return m.Job
		}
	}
	if len(key) > 0 {
		return string(key)
	}
	if m := rec.Meta; m != nil && m.Pod != "" {
		return m.Pod
	}
	return "unknown"
}

// JobKey is the assembler's key for a job: cluster, namespace and name, so
// that two namespaces' jobs of the same name stay apart.
func JobKey(cluster, namespace, job string) string {
	return cluster + "/" + namespace + "/" + job
}

// SplitJobKey reverses JobKey.
func SplitJobKey(key string) (cluster, namespace, job string) {
	cluster, rest, _ := strings.Cut(key, "/")
	namespace, job, _ = strings.Cut(rest, "/")
	return cluster, namespace, job
}

// NodeFacts is what the inventory knows about a node. Region, Zone,
// Block, Subblock, Rack and Clique place it in the cluster's topology
// (widest first; pipeline/topology.go), as `ncclwatch inventory import`
// reads them from node labels; RDMASpan is the pool's policy on how far a
// multi-node RDMA job may spread.
type NodeFacts struct {
	Node     string `yaml:"node"`
	Pool     string `yaml:"pool,omitempty"`
	Region   string `yaml:"region,omitempty"`
	Zone     string `yaml:"zone,omitempty"`
	Block    string `yaml:"block,omitempty"`
	Subblock string `yaml:"subblock,omitempty"`
	Rack     string `yaml:"rack,omitempty"`
	// Clique is the node's multi-node NVLink domain (nvidia.com/gpu.clique).
	Clique string `yaml:"clique,omitempty"`
	// RDMASpan is the widest topology level a multi-node RDMA job on the
	// node must stay within: one of TopologyLevels, or "any"; empty means
	// DefaultRDMASpan.
	RDMASpan    string `yaml:"rdma_span,omitempty"`
	RDMACapable *bool  `yaml:"rdma_capable,omitempty"`
	HCAs        int    `yaml:"hcas,omitempty"`
	GDRExpected *bool  `yaml:"gdr_expected,omitempty"`
	// GDREveryGPU says every GPU of the node sits near a NIC, so partial
	// receive-side GDR there is degraded, not only a reason.
	GDREveryGPU *bool `yaml:"gdr_every_gpu,omitempty"`
}

// Inventory holds node facts loaded from a YAML or CSV file and reloads the
// file when it changes. It is safe for concurrent use.
//
// YAML: a list of NodeFacts, or {nodes: [...]}. CSV: a header row naming
// the columns node,pool,region,zone,block,subblock,rack,clique,rdma_span,
// rdma_capable,hcas,gdr_expected,gdr_every_gpu (any order; missing columns
// are unknown).
type Inventory struct {
	path  string
	mu    sync.RWMutex
	nodes map[string]NodeFacts
	mod   time.Time
	size  int64
	// gen counts the reloads that replaced nodes, so that a reader can
	// keep what it derived from them until the next (Gen).
	gen atomic.Uint64
}

// LoadInventory reads path.
func LoadInventory(path string) (*Inventory, error) {
	inv := &Inventory{path: path}
	if _, err := inv.Reload(); err != nil {
		return nil, err
	}
	return inv, nil
}

// Reload rereads the file when its modification time or size changed and
// reports whether it did. On a parse error the previous contents stay.
func (inv *Inventory) Reload() (bool, error) {
	st, err := os.Stat(inv.path)
	if err != nil {
		return false, fmt.Errorf("inventory: %w", err)
	}
	inv.mu.RLock()
	same := st.ModTime().Equal(inv.mod) && st.Size() == inv.size && inv.nodes != nil
	inv.mu.RUnlock()
	if same {
		return false, nil
	}
	b, err := os.ReadFile(inv.path)
	if err != nil {
		return false, fmt.Errorf("inventory: %w", err)
	}
	nodes, err := ParseInventory(inv.path, b)
	if err != nil {
		return false, err
	}
	inv.mu.Lock()
	inv.nodes, inv.mod, inv.size = nodes, st.ModTime(), st.Size()
	inv.gen.Add(1)
	inv.mu.Unlock()
	return true, nil
}

// Gen returns the number of loads that replaced the nodes (0 for nil): a
// value derived from Node stays valid while Gen does not change.
func (inv *Inventory) Gen() uint64 {
	if inv == nil {
		return 0
	}
	return inv.gen.Load()
}

// Node returns the facts of a node.
func (inv *Inventory) Node(name string) (NodeFacts, bool) {
	if inv == nil {
		return NodeFacts{}, false
	}
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	f, ok := inv.nodes[name]
	return f, ok
}

// All returns every node's facts, sorted by name (the fleet rules
// enumerate node pools with it).
func (inv *Inventory) All() []NodeFacts {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	out := make([]NodeFacts, 0, len(inv.nodes))
	for _, f := range inv.nodes {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Len returns the number of nodes known.
func (inv *Inventory) Len() int {
	inv.mu.RLock()
	defer inv.mu.RUnlock()
	return len(inv.nodes)
}

// ParseInventory parses YAML or CSV (chosen by the name's extension, YAML
// otherwise).
func ParseInventory(name string, b []byte) (map[string]NodeFacts, error) {
	var list []NodeFacts
	switch {
	case strings.HasSuffix(strings.ToLower(name), ".csv"):
		var err error
		if list, err = parseInventoryCSV(b); err != nil {
			return nil, fmt.Errorf("inventory %s: %w", name, err)
		}
	default:
		if err := yaml.Unmarshal(b, &list); err != nil {
			var wrapped struct {
				Nodes []NodeFacts `yaml:"nodes"`
			}
			if err2 := yaml.Unmarshal(b, &wrapped); err2 != nil {
				return nil, fmt.Errorf("inventory %s: %w", name, err)
			}
			list = wrapped.Nodes
		}
	}
	out := make(map[string]NodeFacts, len(list))
	for i, n := range list {
		if n.Node == "" {
			return nil, fmt.Errorf("inventory %s: entry %d: node: must not be empty", name, i+1)
		}
		if n.RDMASpan != "" && n.RDMASpan != SpanAny && levelRank(n.RDMASpan) < 0 {
			return nil, fmt.Errorf("inventory %s: entry %d (%s): rdma_span: %q is not one of any, %s", name, i+1, n.Node,
				n.RDMASpan, strings.Join(TopologyLevels, ", "))
		}
		out[n.Node] = n
	}
	return out, nil
}

func parseInventoryCSV(b []byte) ([]NodeFacts, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.TrimLeadingSpace = true
	r.Comment = '#'
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	if _, ok := col["node"]; !ok {
		return nil, errors.New("header: no node column")
	}
	var out []NodeFacts
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		get := func(k string) string {
			if i, ok := col[k]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		n := NodeFacts{Node: get("node"), Pool: get("pool"), Region: get("region"), Zone: get("zone"), Block: get("block"),
			Subblock: get("subblock"), Rack: get("rack"), Clique: get("clique"), RDMASpan: get("rdma_span")}
		if v := get("rdma_capable"); v != "" {
			bv, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: rdma_capable: %w", line, err)
			}
			n.RDMACapable = &bv
		}
		if v := get("gdr_expected"); v != "" {
			bv, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: gdr_expected: %w", line, err)
			}
			n.GDRExpected = &bv
		}
		if v := get("gdr_every_gpu"); v != "" {
			bv, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: gdr_every_gpu: %w", line, err)
			}
			n.GDREveryGPU = &bv
		}
		if v := get("hcas"); v != "" {
			if n.HCAs, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("line %d: hcas: %w", line, err)
			}
		}
		out = append(out, n)
	}
}

// Expect derives a job's expectation from the facts of the nodes it runs
// on: fleet policy, not what the job asked for (the pod spec that should
// request RDMA may be the thing that broke). A node in an RDMA-capable pool
// expects RDMA; a pool marked not RDMA-capable expects TCP; the smallest HCA
// count of the job's nodes is the count each should use. Nodes not in the
// inventory leave def in place.
func (inv *Inventory) Expect(nodes []string, def Expectation) Expectation {
	e := def
	seen := false
	for _, name := range nodes {
		f, ok := inv.Node(name)
		if !ok {
			continue
		}
		if f.RDMACapable != nil {
			if *f.RDMACapable {
				e.Network = ClassRDMA
			} else if !seen || e.Network != ClassRDMA {
				e.Network = ClassTCP
			}
		}
		if f.GDRExpected != nil {
			g := *f.GDRExpected
			e.GDR = &g
		}
		if f.GDREveryGPU != nil {
			// Every node of the job must promise it.
			e.GDREveryGPU = *f.GDREveryGPU && (!seen || e.GDREveryGPU)
		}
		if f.HCAs > 0 && (e.HCAs == 0 || f.HCAs < e.HCAs) {
			e.HCAs = f.HCAs
		}
		seen = true
	}
	return e
}

// Enricher is the enrich stage of the chain: it joins a job's assembled
// state with what the fleet says of its nodes — the expectation it is
// judged by (Inventory.Expect) and where the nodes sit (Inventory.
// Topology). The run loop calls it for every job whose summaries a batch
// carries, scan once for its one job. Without an Inventory it leaves the
// job alone: the assembler's default expectation holds.
type Enricher struct {
	Inventory *Inventory  // nil: no inventory
	Default   Expectation // what the inventory's facts refine
}

// Expect sets job's expectation in asm from the inventory's facts of its
// nodes and returns it; without an inventory it returns Default and
// leaves asm alone.
func (en *Enricher) Expect(asm NCCLAssembler, job string) Expectation {
	if en.Inventory == nil {
		return en.Default
	}
	e := en.Inventory.Expect(asm.Nodes(job), en.Default)
	asm.SetExpectation(job, &e)
	return e
}

// Place sets sum's Topology from the inventory's facts of job's nodes,
// judged by e, and reports whether it had an inventory to do so.
func (en *Enricher) Place(asm NCCLAssembler, job string, e Expectation, sum *JobSummary) bool {
	if en.Inventory == nil {
		return false
	}
	en.Inventory.Topology(asm.Nodes(job), e, sum)
	return true
}
