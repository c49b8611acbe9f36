package rules

import (
	"reflect"
	"slices"
	"sort"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The expression environments. Every name an expression may use is a field
// below, spelled as its `expr` tag; rules/README.md documents them with the
// conventions for null values. A rule is compiled against JobEnv (scope
// job, the default) or PoolEnv (scope pool) and a name that is not here is a
// load error.
//
// Null convention: a fact the log did not show is a nil pointer (the same
// fields as the JSON of `scan --json`). `==` and `!=` are safe on them (nil
// equals only nil); ordering, arithmetic and `!` are not: write
// `(job.nnodes ?? 0) > 1`, `comm.gdr == false`, or test with `known(x)`.
// A rule whose expression fails at run time is counted as an evaluation
// failure and leaves its alert state unchanged.

// JobEnv is what a job rule's expression sees.
type JobEnv struct {
	// Job is the job's summary (JobSummary).
	Job JobView `expr:"job"`
	// Comm is the communicator under evaluation. A rule whose expression
	// names comm is evaluated once per communicator of the job and matches
	// when one matches; annotations then see that communicator.
	Comm CommView `expr:"comm"`
	// Comms are all the job's communicators.
	Comms []CommView `expr:"comms"`
	// Expect is fleet policy for the job, defaults resolved.
	Expect ExpectView `expr:"expect"`
	// Nodes are the Kubernetes nodes the job's records came from, with
	// their inventory facts.
	Nodes []NodeView `expr:"nodes"`
	// Pool sums up the job's nodes' pools.
	Pool PoolView `expr:"pool"`
	// Zones and Racks are the distinct zones and racks of the job's nodes
	// that the inventory knows, sorted.
	Zones []string `expr:"zones"`
	Racks []string `expr:"racks"`
	// Activity is what is known of the job's pods logging at all.
	Activity ActivityView `expr:"activity"`
	// Canary is the job's latest finished nccl-tests run when the job is
	// a fabric canary, with its pool's baseline.
	Canary CanaryView `expr:"canary"`
	// Series is the training series under evaluation. A rule whose
	// expression names series is evaluated once per training series of
	// the job (one per framework) and matches when one matches;
	// annotations then see that series.
	Series SeriesView `expr:"series"`
	// Checkpoint is the job's checkpoint series with the most timed saves
	// (pipeline.CheckpointReport; rules/checkpoint.go).
	Checkpoint CheckpointView `expr:"checkpoint"`
	// Collective is the job's NCCL Inspector bandwidth against its pool's
	// baseline (rules/collective.go).
	Collective CollectiveView `expr:"collective"`
	// Now is the evaluation time.
	Now time.Time `expr:"now"`
}

// PoolEnv is what a pool rule's expression sees: one node pool of the
// inventory.
type PoolEnv struct {
	Pool  PoolView   `expr:"pool"`
	Nodes []NodeView `expr:"nodes"`
	Now   time.Time  `expr:"now"`
}

// JobView is a job summary as expressions see it.
type JobView struct {
	Name      string `expr:"name"`
	Namespace string `expr:"namespace"`
	Cluster   string `expr:"cluster"`
	// Seen: some NCCL line of the job was seen (a summary exists). A job
	// known only from its pods' activity has Seen false and every other
	// fact empty.
	Seen         bool          `expr:"seen"`
	NCCLVersion  *string       `expr:"nccl_version"`
	NCCLVersions []string      `expr:"nccl_versions"` // every version printed, sorted
	VersionSkew  bool          `expr:"version_skew"`
	Network      *string       `expr:"network"`
	NetworkClass *string       `expr:"network_class"`
	Networks     []string      `expr:"networks"` // distinct networks of the communicators
	Fabric       *string       `expr:"fabric"`
	GDR          *bool         `expr:"gdr"`
	MultiNode    *bool         `expr:"multi_node"`
	NNodes       *int          `expr:"nnodes"`
	NRanks       *int          `expr:"nranks"`
	Intra        []string      `expr:"intra"`
	Fallback     *bool         `expr:"fallback"`
	Warns        int           `expr:"warns"`
	Verdict      string        `expr:"verdict"`
	Reasons      []string      `expr:"reasons"`
	NCCLLines    int           `expr:"nccl_lines"`
	FirstSeen    time.Time     `expr:"first_seen"`
	LastSeen     time.Time     `expr:"last_seen"`
	Age          time.Duration `expr:"age"` // now - first_seen; 0 when not seen
	// Topology is where the job's nodes sit and what they span beyond
	// their pools' policy (pipeline.Topology).
	Topology TopologyView `expr:"topology"`
}

// TopologyView is a job summary's topology (pipeline.Topology). Without
// one (no inventory, no Kubernetes node) Known is false, the lists are
// empty and the strings "".
type TopologyView struct {
	Known        bool     `expr:"known"`
	Nodes        int      `expr:"nodes"`         // the job's nodes the inventory lists
	UnknownNodes int      `expr:"unknown_nodes"` // those it does not
	Pools        []string `expr:"pools"`
	Regions      []string `expr:"regions"`
	Zones        []string `expr:"zones"`
	Blocks       []string `expr:"blocks"`
	Subblocks    []string `expr:"subblocks"`
	Racks        []string `expr:"racks"`
	Cliques      []string `expr:"cliques"`
	// Within is the level the job's pools keep a multi-node RDMA job in
	// ("any" when they allow every spread); Crosses the widest level at
	// or above it that a multi-node RDMA job spans ("" when none), and
	// Spanned that level's values.
	Within  string   `expr:"within"`
	Crosses string   `expr:"crosses"`
	Spanned []string `expr:"spanned"`
}

func topologyView(t *pipeline.Topology) TopologyView {
	if t == nil {
		return TopologyView{Pools: []string{}, Regions: []string{}, Zones: []string{}, Blocks: []string{},
			Subblocks: []string{}, Racks: []string{}, Cliques: []string{}, Spanned: []string{}}
	}
	return TopologyView{Known: true, Nodes: t.Nodes, UnknownNodes: t.UnknownNodes, Pools: nonNil(t.Pools),
		Regions: nonNil(t.Regions), Zones: nonNil(t.Zones), Blocks: nonNil(t.Blocks), Subblocks: nonNil(t.Subblocks),
		Racks: nonNil(t.Racks), Cliques: nonNil(t.Cliques), Within: t.Within, Crosses: t.Crosses,
		Spanned: nonNil(t.Values(t.Crosses))}
}

// CommView is a communicator summary as expressions see it.
type CommView struct {
	ID           string            `expr:"id"`
	NCCLVersions []string          `expr:"nccl_versions"`
	Network      *string           `expr:"network"`
	NetworkClass string            `expr:"network_class"`
	Fabric       *string           `expr:"fabric"`
	HCAs         int               `expr:"hcas"` // HCAs in use
	HCADevices   []string          `expr:"hca_devices"`
	OOBIface     *string           `expr:"oob_iface"`
	GDR          *bool             `expr:"gdr"`
	MultiNode    *bool             `expr:"multi_node"`
	NRanks       *int              `expr:"nranks"`
	NNodes       *int              `expr:"nnodes"`
	LocalRanks   *int              `expr:"local_ranks"`
	RanksSeen    int               `expr:"ranks_seen"`
	Hosts        []string          `expr:"hosts"`
	Processes    int               `expr:"processes"`
	Channels     *int              `expr:"channels"`
	NVLS         bool              `expr:"nvls"`
	CollNet      bool              `expr:"collnet"`
	Intra        []string          `expr:"intra"`
	Env          map[string]string `expr:"env"` // NCCL_* overrides; a missing key reads ""
	Plugin       *string           `expr:"plugin"`
	RDMAFailures []string          `expr:"rdma_failures"`
	Warns        int               `expr:"warns"`
	Warnings     []string          `expr:"warnings"`
	InitComplete bool              `expr:"init_complete"`
	Verdict      string            `expr:"verdict"`
	Reasons      []string          `expr:"reasons"`
}

// ExpectView is fleet policy with its defaults resolved: a pool without a
// policy expects rdma with GDR.
type ExpectView struct {
	Network string `expr:"network"` // rdma, tcp or tcpx
	GDR     bool   `expr:"gdr"`
	HCAs    int    `expr:"hcas"` // 0: unknown
}

// NodeView is one node with its inventory facts; Known is false for a node
// the inventory does not list.
type NodeView struct {
	Name        string `expr:"name"`
	Known       bool   `expr:"known"`
	Pool        string `expr:"pool"`
	Zone        string `expr:"zone"`
	Rack        string `expr:"rack"`
	RDMACapable *bool  `expr:"rdma_capable"`
	HCAs        int    `expr:"hcas"`
	GDRExpected *bool  `expr:"gdr_expected"`
}

// PoolView is a node pool. In a job rule it sums up the pools of the job's
// nodes (Name is "mixed" when they are several).
type PoolView struct {
	Name        string   `expr:"name"`
	Nodes       int      `expr:"nodes"`        // nodes the inventory lists (in a job rule: the job's known nodes)
	RDMACapable bool     `expr:"rdma_capable"` // some node is marked rdma_capable
	HCAs        int      `expr:"hcas"`         // the fewest HCAs a node provides; 0: unknown
	Zones       []string `expr:"zones"`
	// Proved: an ok RDMA communicator ran on the pool, or a canary proved
	// it, since ncclwatch started watching; LastProof is when (zero:
	// never).
	Proved    bool      `expr:"proved"`
	LastProof time.Time `expr:"last_proof"`
	// UnprovenFor is now minus the last proof, or minus the time ncclwatch
	// started watching the pool when nothing proved it yet: the
	// dead-man's switch of an idle fabric.
	UnprovenFor time.Duration `expr:"unproven_for"`
}

// ActivityView is what is known of a job's pods logging, NCCL or not.
type ActivityView struct {
	Seen      bool      `expr:"seen"`
	Nodes     int       `expr:"nodes"` // distinct nodes whose pods logged
	Pods      int       `expr:"pods"`
	FirstSeen time.Time `expr:"first_seen"`
	LastSeen  time.Time `expr:"last_seen"`
}

// CanaryView is a fabric canary's latest finished nccl-tests run
// (pipeline.NCCLTestReport) and its pool's baseline. A job that is not a
// canary has Is false and every other field empty; a canary with no
// finished run yet has Rows 0.
type CanaryView struct {
	// Is: the job's pods carry the canary label and the pool it tests is
	// known (the pool label, else the inventory's pool of its node).
	Is         bool    `expr:"is"`
	Pool       string  `expr:"pool"`
	Collective *string `expr:"collective"` // e.g. all_reduce_perf
	Rows       int     `expr:"rows"`       // rows of the results table
	MaxBytes   *int    `expr:"max_bytes"`  // the largest message size
	// BusBW is the out-of-place bus bandwidth at the largest size, GB/s.
	BusBW    *float64 `expr:"busbw"`
	AvgBusBW *float64 `expr:"avg_busbw"` // "# Avg bus bandwidth", GB/s
	// BaselineBusBW is the median BusBW of the pool's last ok canary runs
	// of the same collective before this one (CanaryBaselines);
	// null before the first.
	BaselineBusBW *float64 `expr:"baseline_busbw"`
}

// SeriesView is one training series of a job (pipeline.TrainingReport):
// its step times, and the segments before and after the job's latest
// change of NCCL network.
type SeriesView struct {
	Framework      string   `expr:"framework"`
	Steps          int      `expr:"steps"`
	MedianStepTime *float64 `expr:"median_step_time_s"`
	// Network is the job's latest NCCL "Using network"; PreviousNetwork
	// the one before the latest change.
	Network              *string `expr:"network"`
	PreviousNetwork      *string `expr:"previous_network"`
	NetworkChanged       bool    `expr:"network_changed"` // PreviousNetwork is known
	NetworkChangedAtStep *int    `expr:"network_changed_at_step"`
	// PreviousMedianStepTime is the median step time before the change,
	// SegmentMedianStepTime the median since, over SegmentSteps timed
	// steps; StepTimeRegression is segment / previous.
	PreviousMedianStepTime *float64 `expr:"previous_median_step_time_s"`
	SegmentMedianStepTime  *float64 `expr:"segment_median_step_time_s"`
	SegmentSteps           int      `expr:"segment_steps"`
	StepTimeRegression     *float64 `expr:"step_time_regression"`
}

// known reports whether a nullable fact is set: known(job.gdr).
func known(args ...any) (any, error) {
	v := args[0]
	if v == nil {
		return false, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return !rv.IsNil(), nil
	}
	return true, nil
}

// jobView derives JobView, the job as expressions and templates see it,
// from the subject's summary and communicators: the one place the job's
// fields are mapped. A job known only from its pods' activity (no summary
// yet) has its name and every fact empty.
func (sub *subject) jobView() JobView {
	s, comms := sub.sum, sub.comms
	if s == nil {
		return JobView{Name: sub.job, Namespace: sub.namespace, Cluster: sub.cluster,
			NCCLVersions: []string{}, Networks: []string{}, Intra: []string{}, Reasons: []string{},
			Topology: topologyView(nil)}
	}
	v := JobView{Name: s.Job, Namespace: s.Namespace, Cluster: s.Cluster, Seen: true,
		NCCLVersion: s.NCCLVersion, VersionSkew: s.VersionSkew, Network: s.Network, NetworkClass: s.NetworkClass,
		Fabric: s.Fabric, GDR: s.GDR, MultiNode: s.MultiNode, NNodes: s.NNodes, NRanks: s.NRanks,
		Intra: nonNil(s.Intra), Fallback: s.Fallback, Warns: s.Warns, Verdict: string(s.Verdict),
		Reasons: nonNil(s.Reasons), NCCLLines: int(s.NCCLLines), FirstSeen: s.FirstSeen, LastSeen: s.LastSeen,
		Topology: topologyView(s.Topology)}
	var versions, networks []string
	for i := range comms {
		for _, ver := range comms[i].NCCLVersions {
			if !slices.Contains(versions, ver) {
				versions = append(versions, ver)
			}
		}
		if n := comms[i].Network; n != nil && !slices.Contains(networks, *n) {
			networks = append(networks, *n)
		}
	}
	if len(versions) == 0 && s.NCCLVersion != nil {
		versions = []string{*s.NCCLVersion}
	}
	sort.Strings(versions)
	sort.Strings(networks)
	v.NCCLVersions, v.Networks = nonNil(versions), nonNil(networks)
	return v
}

func commView(c *pipeline.CommSummary) CommView {
	devs := make([]string, len(c.HCAs))
	for i, h := range c.HCAs {
		devs[i] = h.Device
	}
	env := c.Env
	if env == nil {
		env = map[string]string{}
	}
	return CommView{ID: c.CommID, NCCLVersions: nonNil(c.NCCLVersions), Network: c.Network,
		NetworkClass: c.NetworkClass, Fabric: c.Fabric, HCAs: len(c.HCAs), HCADevices: devs, OOBIface: c.OOBIface,
		GDR: c.GDR, MultiNode: c.MultiNode, NRanks: c.NRanks, NNodes: c.NNodes, LocalRanks: c.LocalRanks,
		RanksSeen: c.RanksSeen, Hosts: nonNil(c.Hosts), Processes: c.Processes, Channels: c.Channels, NVLS: c.NVLS,
		CollNet: c.CollNet, Intra: nonNil(c.Intra), Env: env, Plugin: c.Plugin, RDMAFailures: nonNil(c.RDMAFailure),
		Warns: c.Warns, Warnings: nonNil(c.Warnings), InitComplete: c.InitComplete, Verdict: string(c.Verdict),
		Reasons: nonNil(c.Reasons)}
}

// canaryView is a canary's latest finished run, rep (nil: none yet).
func canaryView(pool string, rep *pipeline.NCCLTestReport, baseline *float64) CanaryView {
	v := CanaryView{Is: true, Pool: pool, BaselineBusBW: baseline}
	if rep == nil {
		return v
	}
	v.Collective, v.Rows, v.BusBW, v.AvgBusBW = rep.Collective, rep.Rows, rep.MaxSizeBusBWOOP, rep.AvgBusBW
	if rep.MaxBytes != nil {
		n := int(*rep.MaxBytes)
		v.MaxBytes = &n
	}
	return v
}

func seriesView(r *pipeline.TrainingReport) SeriesView {
	v := SeriesView{Framework: r.Framework, Steps: r.Steps, MedianStepTime: r.MedianStepTime, Network: r.Network,
		PreviousNetwork: r.PreviousNetwork, NetworkChanged: r.PreviousNetwork != nil,
		PreviousMedianStepTime: r.PreviousMedian, SegmentMedianStepTime: r.SegmentMedian, SegmentSteps: r.SegmentSteps,
		StepTimeRegression: r.StepTimeRegress}
	if r.NetworkChangedAt != nil {
		n := int(*r.NetworkChangedAt)
		v.NetworkChangedAtStep = &n
	}
	return v
}

func expectView(e pipeline.Expectation) ExpectView {
	v := ExpectView{Network: e.Network, GDR: e.GDR == nil || *e.GDR, HCAs: e.HCAs}
	if v.Network == "" {
		v.Network = pipeline.ClassRDMA
	}
	return v
}

func nodeView(name string, f pipeline.NodeFacts, ok bool) NodeView {
	if !ok {
		return NodeView{Name: name}
	}
	return NodeView{Name: name, Known: true, Pool: f.Pool, Zone: f.Zone, Rack: f.Rack, RDMACapable: f.RDMACapable,
		HCAs: f.HCAs, GDRExpected: f.GDRExpected}
}

// poolOf sums up nodes: the pool facts of a job's nodes, or of one pool's.
func poolOf(name string, nodes []NodeView) PoolView {
	p := PoolView{Name: name, Zones: []string{}}
	pools := map[string]bool{}
	for _, n := range nodes {
		if !n.Known {
			continue
		}
		p.Nodes++
		pools[n.Pool] = true
		if n.RDMACapable != nil && *n.RDMACapable {
			p.RDMACapable = true
		}
		if n.HCAs > 0 && (p.HCAs == 0 || n.HCAs < p.HCAs) {
			p.HCAs = n.HCAs
		}
		if n.Zone != "" && !slices.Contains(p.Zones, n.Zone) {
			p.Zones = append(p.Zones, n.Zone)
		}
	}
	sort.Strings(p.Zones)
	if name == "" {
		switch len(pools) {
		case 0:
		case 1:
			for k := range pools {
				p.Name = k
			}
		default:
			p.Name = "mixed"
		}
	}
	return p
}

// distinct returns the sorted distinct non-empty values of f over nodes.
func distinct(nodes []NodeView, f func(NodeView) string) []string {
	out := []string{}
	for _, n := range nodes {
		if v := f(n); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
