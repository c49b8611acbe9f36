package rules

// CollectiveView is a job's NCCL Inspector bandwidth (pipeline.
// CollectiveReport) against its pool's nccl-tests baseline
// (CanaryBaselines): of the job's communicators' collectives with large
// messages, the one furthest below the baseline of its collective (or,
// where no baseline is known, the one with the most large records). Its
// network, class and GDR are those NCCL's init lines negotiated for the
// communicator (joined by comm_id: the Inspector's header.id is the
// commId of the init line), the job's where the communicator's init was
// not seen (ncclCommSplit communicators print no commId). A job without
// Inspector records has Known false and every other field empty.
type CollectiveView struct {
	Known  bool   `expr:"known"`
	CommID string `expr:"comm_id"`
	Op     string `expr:"op"` // AllReduce, AllGather, …
	// Test is the nccl-tests binary that measures Op (all_reduce_perf):
	// the collective of the pool's baseline.
	Test         *string `expr:"nccl_test"`
	Pool         string  `expr:"pool"`
	NNodes       *int    `expr:"nnodes"`
	Records      int     `expr:"records"`
	LargeRecords int     `expr:"large_records"`
	LargeBytes   int64   `expr:"large_bytes"`
	// BusBW is the median bus bandwidth of the large records, GB/s;
	// BaselineBusBW the pool's canary baseline for Test; Ratio their
	// quotient.
	BusBW         *float64 `expr:"busbw"`
	BaselineBusBW *float64 `expr:"baseline_busbw"`
	Ratio         *float64 `expr:"ratio"`
	Network       *string  `expr:"network"`
	NetworkClass  *string  `expr:"network_class"`
	GDR           *bool    `expr:"gdr"`
}

// ncclTests names the nccl-tests binary of each collective Inspector
// reports (nccl-tests src/*.cu: all_reduce_perf, …).
var ncclTests = map[string]string{
	"AllReduce": "all_reduce_perf", "AllGather": "all_gather_perf", "ReduceScatter": "reduce_scatter_perf",
	"Broadcast": "broadcast_perf", "Reduce": "reduce_perf", "All2All": "alltoall_perf", "SendRecv": "sendrecv_perf",
}

// collectiveView picks the job's collective for the view; pool is the
// job's pool (its pool label, else its nodes' pool in the inventory).
func (e *Engine) collectiveView(s *subject, pool string) CollectiveView {
	if s.tel == nil || len(s.tel.collectives) == 0 {
		return CollectiveView{}
	}
	var best CollectiveView
	for i := range s.tel.collectives {
		r := &s.tel.collectives[i]
		if r.P2P || r.LargeRecords == 0 || r.LargeBusBWP50 == nil {
			continue
		}
		v := CollectiveView{Known: true, CommID: r.CommID, Op: r.Op, Pool: pool, NNodes: r.NNodes, Records: r.Records,
			LargeRecords: r.LargeRecords, LargeBytes: r.LargeBytes, BusBW: r.LargeBusBWP50}
		if t, ok := ncclTests[r.Op]; ok {
			v.Test = &t
			if b, ok := e.baselines.Baseline(pool, t); ok && pool != "" && b > 0 {
				ratio := *r.LargeBusBWP50 / b
				v.BaselineBusBW, v.Ratio = &b, &ratio
			}
		}
		if better(v, best) {
			best = v
		}
	}
	if !best.Known {
		return CollectiveView{}
	}
	best.Network, best.NetworkClass, best.GDR = e.fabricOf(s, best.CommID)
	return best
}

// better reports whether v is a worse collective than best, the one the
// view shows: one with a ratio before one without, the lower ratio, else
// the more large records.
func better(v, best CollectiveView) bool {
	switch {
	case !best.Known:
		return true
	case (v.Ratio != nil) != (best.Ratio != nil):
		return v.Ratio != nil
	case v.Ratio != nil && *v.Ratio != *best.Ratio:
		return *v.Ratio < *best.Ratio
	}
	return v.LargeRecords > best.LargeRecords
}

// fabricOf returns the network, class and GDR of the job's communicator
// id, the job's where no communicator has it.
func (e *Engine) fabricOf(s *subject, id string) (*string, *string, *bool) {
	for i := range s.comms {
		if c := &s.comms[i]; c.CommID == id {
			class := c.NetworkClass
			return c.Network, &class, c.GDR
		}
	}
	if s.sum != nil {
		return s.sum.Network, s.sum.NetworkClass, s.sum.GDR
	}
	return nil, nil, nil
}

// jobPool is the pool of a job's collective view: its pool label, else
// the pool of its nodes.
func jobPool(label string, p PoolView) string {
	if label != "" {
		return label
	}
	if p.Name == "mixed" {
		return ""
	}
	return p.Name
}
