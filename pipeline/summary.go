package pipeline

import (
	"strings"
	"time"
)

// Verdict is the classification of a communicator or a job, as
// ARCHITECTURE.md defines it.
type Verdict string

// Verdicts, from best to worst (see Worse).
const (
	VerdictOK             Verdict = "ok"
	VerdictUnknown        Verdict = "unknown"
	VerdictNoEvidence     Verdict = "no_evidence"
	VerdictDegraded       Verdict = "degraded"
	VerdictGDROff         Verdict = "gdr_off"
	VerdictSocketFallback Verdict = "socket_fallback"
)

var verdictRank = map[Verdict]int{
	VerdictOK: 0, VerdictUnknown: 1, VerdictNoEvidence: 2, VerdictDegraded: 3, VerdictGDROff: 4, VerdictSocketFallback: 5,
}

// Worse returns the worse of two verdicts: a job's verdict is the worst of
// its communicators'.
func Worse(a, b Verdict) Verdict {
	if verdictRank[b] > verdictRank[a] {
		return b
	}
	return a
}

// Finding reports whether v is one that scan's exit status and the alert
// rules treat as a problem.
func (v Verdict) Finding() bool {
	return v == VerdictSocketFallback || v == VerdictGDROff || v == VerdictDegraded
}

// Network classes.
const (
	ClassRDMA    = "rdma"
	ClassTCP     = "tcp"
	ClassTCPX    = "tcpx"
	ClassNone    = "none"
	ClassUnknown = "unknown"
	ClassMixed   = "mixed"
)

// HCA is one device/port NCCL's IB transport uses.
type HCA struct {
	Device    string `json:"device"`
	Port      int    `json:"port"`
	LinkLayer string `json:"link_layer"` // IB or RoCE
	SHARP     bool   `json:"sharp,omitempty"`
}

// Expectation is what fleet policy expects of a communicator. Zero values
// mean "no policy": multi-node communicators expect RDMA and GDR.
type Expectation struct {
	// Network is the class the pool should use: "rdma" (the default), "tcp"
	// or "tcpx". A TCP-only pool never reports socket_fallback.
	Network string `json:"network,omitempty" yaml:"network"`
	// GDR says whether GPUDirect RDMA is expected on RDMA; nil means yes.
	GDR *bool `json:"gdr,omitempty" yaml:"gdr"`
	// HCAs is the number of HCAs a node of the pool provides; 0 = unknown.
	HCAs int `json:"hcas,omitempty" yaml:"hcas"`
	// GDREveryGPU says the nodes should have GDR on every GPU (each GPU
	// near a NIC): partial receive-side GDR is then degraded, not just a
	// reason.
	GDREveryGPU bool `json:"gdr_every_gpu,omitempty" yaml:"gdr_every_gpu"`
}

// Evidence is one fact a summary field was decided from: the field, the
// evidence kind (pipeline/CLASSIFICATION.md names them all) and what it
// showed. Every decided field has at least one entry; policy decisions
// (fallback, verdict) name the policy as their evidence.
type Evidence struct {
	Field  string `json:"field"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// Unattributed is the CommID of the summary of a job's processes that no
// communicator line claimed (see Batch.Unnamed).
const Unattributed = "unattributed"

// Named reports whether the summary is of a communicator NCCL named with
// its commId (printed since 2.16), not of processes grouped by the
// communicator size older versions print, nor of the unattributed ones.
func (s *CommSummary) Named() bool { return strings.HasPrefix(s.CommID, "0x") }

// CommSummary is what ncclwatch knows about one communicator (or, for logs
// that print no communicator lines, about the processes it cannot attribute
// to one). Pointer fields are null when the log holds no evidence.
type CommSummary struct {
	Job          string            `json:"job,omitempty"`
	Namespace    string            `json:"namespace,omitempty"`
	Cluster      string            `json:"cluster,omitempty"`
	CommID       string            `json:"comm_id"`
	NCCLVersions []string          `json:"nccl_versions"`
	Network      *string           `json:"network"`
	NetworkClass string            `json:"network_class"`
	Fabric       *string           `json:"fabric"`
	HCAs         []HCA             `json:"hcas"`
	OOBIface     *string           `json:"oob_iface"`
	GDR          *bool             `json:"gdr"`
	GDRSend      *bool             `json:"gdr_send"`
	GDRRecv      *bool             `json:"gdr_recv"`
	GDRPartial   *bool             `json:"gdr_partial"`
	MultiNode    *bool             `json:"multi_node"`
	NRanks       *int              `json:"nranks"`
	NNodes       *int              `json:"nnodes"`
	LocalRanks   *int              `json:"local_ranks"`
	RanksSeen    int               `json:"ranks_seen"`
	Hosts        []string          `json:"hosts"`
	Processes    int               `json:"processes"`
	Channels     *int              `json:"channels"`
	Rings        bool              `json:"rings_connected"`
	Trees        bool              `json:"trees_connected"`
	NVLS         bool              `json:"nvls"`
	CollNet      bool              `json:"collnet"`
	Intra        []string          `json:"intra"`
	Env          map[string]string `json:"env"`
	Plugin       *string           `json:"plugin"`
	RDMAFailure  []string          `json:"rdma_failures"`
	Warns        int               `json:"warns"`
	Warnings     []string          `json:"warnings"`
	InitComplete bool              `json:"init_complete"`
	Expect       Expectation       `json:"expect"`
	Verdict      Verdict           `json:"verdict"`
	Reasons      []string          `json:"reasons"`
	Evidence     []Evidence        `json:"evidence"`
	FirstSeen    time.Time         `json:"first_seen"`
	LastSeen     time.Time         `json:"last_seen"`
	// Version orders the states of one summary: the number of NCCL events
	// folded into the job when it was computed. It is deterministic for a
	// given set of events, so a replay after a crash writes the same
	// version and storage (ReplacingMergeTree) keeps one row.
	Version uint64 `json:"version"`
}

// JobSummary rolls up a job's communicators. It is the one job summary
// type: the other forms are derived from it where they are used, each for
// a documented contract of its own, and none is converted back.
//   - Its JSON form is the `summary` object of `ncclwatch scan --json`
//     (docs/scan.md; scan writes an unknown first or last seen as null)
//     and a job_summaries row of the JSONL sink.
//   - The job_summaries table's columns (sinks/clickhouse_tables.go);
//     sinks.ClickHouse.JobVerdicts reads the job_verdicts view back into
//     a JobSummary.
//   - The read API's job, a subset (cmd/ncclwatch/api.go,
//     docs/read-api.md).
//   - The rule language's `job` (rules.JobView, rules/README.md), which
//     adds facts summed over the communicators; a test there keeps it
//     covering every field.
type JobSummary struct {
	Job          string     `json:"job,omitempty"`
	Namespace    string     `json:"namespace,omitempty"`
	Cluster      string     `json:"cluster,omitempty"`
	NCCLVersion  *string    `json:"nccl_version"`
	VersionSkew  bool       `json:"version_skew"`
	Network      *string    `json:"network"`
	NetworkClass *string    `json:"network_class"`
	Fabric       *string    `json:"fabric"`
	GDR          *bool      `json:"gdr"`
	GDRSend      *bool      `json:"gdr_send"`
	GDRRecv      *bool      `json:"gdr_recv"`
	GDRPartial   *bool      `json:"gdr_partial"`
	MultiNode    *bool      `json:"multi_node"`
	NNodes       *int       `json:"nnodes"`
	NRanks       *int       `json:"nranks"`
	Intra        []string   `json:"intra"`
	Fallback     *bool      `json:"fallback"`
	Warns        int        `json:"warns"`
	Verdict      Verdict    `json:"verdict"`
	Reasons      []string   `json:"reasons"`
	Evidence     []Evidence `json:"evidence"`
	NCCLLines    int64      `json:"nccl_lines"`
	FirstSeen    time.Time  `json:"first_seen"`
	LastSeen     time.Time  `json:"last_seen"`
	Version      uint64     `json:"version"` // as CommSummary.Version
	// Topology is where the job's nodes sit and whether it spans more
	// than its pools allow (Inventory.Topology); null without a node
	// inventory or Kubernetes nodes.
	Topology *Topology `json:"topology"`
}
