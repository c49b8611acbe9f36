package assemble

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// verdict is rule 9, the only place the policy enters: the verdict of one
// summary with its reasons.
func verdict(d *decision, s *pipeline.CommSummary, e pipeline.Expectation, multiWhy string) pipeline.Verdict {
	net := ""
	if s.Network != nil {
		net = *s.Network
	}
	expectNet := e.Network
	if expectNet == "" {
		expectNet = pipeline.ClassRDMA
	}
	multi := s.MultiNode
	v := pipeline.VerdictOK
	switch s.NetworkClass {
	case pipeline.ClassTCP:
		switch {
		case net == "FastSocket":
			d.reason("FastSocket is an intended TCP plugin")
		case expectNet != pipeline.ClassRDMA:
			d.reason("policy expects " + expectNet + "; Socket is accepted")
			d.use("verdict", KindPolicy, "expect "+expectNet)
		case multi != nil && *multi:
			v = pipeline.VerdictSocketFallback
			d.reason("NCCL uses Socket across nodes (" + multiWhy + ") where RDMA is expected")
			for _, f := range s.RDMAFailure {
				d.reason(f)
			}
			d.use("verdict", KindPolicy, "multi-node communicators expect RDMA")
		case multi == nil && len(s.RDMAFailure) > 0:
			v = pipeline.VerdictSocketFallback
			d.reason("NCCL uses Socket after an RDMA attempt failed or was disabled: " + strings.Join(s.RDMAFailure, "; "))
			d.use("verdict", KindPolicy, "an unknown node count with a failed or disabled RDMA attempt counts as a fallback")
			d.use("verdict", KindRDMAFailure, strings.Join(s.RDMAFailure, "; "))
		case multi != nil && !*multi:
			d.reason("Socket on a single node (" + multiWhy + "): nothing crosses nodes")
		default:
			v = pipeline.VerdictUnknown
			d.reason("Socket with an unknown node count and no failed RDMA attempt")
		}
	case pipeline.ClassRDMA:
		gdrExpected := e.GDR == nil || *e.GDR
		if s.GDR != nil && !*s.GDR && gdrExpected {
			v = pipeline.VerdictGDROff
			d.reason(net + " without GPUDirect RDMA where GDR is expected")
			d.use("verdict", KindPolicy, "GDR expected")
		}
		if s.GDRPartial != nil && *s.GDRPartial && gdrExpected && e.GDREveryGPU {
			v = pipeline.Worse(v, pipeline.VerdictDegraded)
			d.reason("partial GDR where the inventory says every GPU should have it")
			d.use("verdict", KindPolicy, "gdr_every_gpu")
		}
		if e.HCAs > 0 && len(s.HCAs) > 0 && len(s.HCAs) < e.HCAs {
			v = pipeline.Worse(v, pipeline.VerdictDegraded)
			d.reason(fmt.Sprintf("%d HCAs in use, the pool provides %d", len(s.HCAs), e.HCAs))
			d.use("verdict", KindHCACount, fmt.Sprintf("%d < %d", len(s.HCAs), e.HCAs))
		}
		if v == pipeline.VerdictOK {
			d.reason(net + " (rdma)")
		}
	case pipeline.ClassTCPX:
		d.reason(net + " (GPUDirect TCPX)")
	case pipeline.ClassMixed:
		v = pipeline.VerdictDegraded
		d.reason("processes use different networks")
	case pipeline.ClassNone:
		d.reason("single node (" + multiWhy + "): no inter-node network")
	default:
		v = pipeline.VerdictUnknown
		if net != "" {
			d.reason("unrecognised network " + net)
		} else {
			d.reason("no network evidence")
		}
	}
	if len(s.NCCLVersions) > 1 {
		v = pipeline.Worse(v, pipeline.VerdictDegraded)
		d.reason("NCCL version skew: " + strings.Join(s.NCCLVersions, ", "))
		d.use("verdict", KindVersionSkew, strings.Join(s.NCCLVersions, ", "))
	}
	return v
}

// rollUp builds the job summary: whole-job facts, worst communicator
// verdict, the job-only reasons (mixed networks, version skew), and
// fallback (rule 10).
func rollUp(j *jobState, whole pipeline.CommSummary, comms []pipeline.CommSummary, e pipeline.Expectation) pipeline.JobSummary {
	js := pipeline.JobSummary{Job: j.displayName(), Namespace: j.meta.Namespace, Cluster: j.meta.Cluster,
		Network: whole.Network, Fabric: whole.Fabric, GDR: whole.GDR, GDRSend: whole.GDRSend, GDRRecv: whole.GDRRecv,
		GDRPartial: whole.GDRPartial, MultiNode: whole.MultiNode,
		NNodes: whole.NNodes, NRanks: whole.NRanks, Intra: whole.Intra, Warns: whole.Warns,
		NCCLLines: j.lines, FirstSeen: j.first, LastSeen: j.last, Reasons: []string{}, Version: uint64(j.lines)}
	js.Evidence = slices.Clone(whole.Evidence)
	if whole.Network != nil {
		js.NetworkClass = ptr(pipeline.NetworkClass(*whole.Network))
	}
	if len(whole.NCCLVersions) > 0 {
		js.NCCLVersion = ptr(whole.NCCLVersions[0])
		js.VersionSkew = len(whole.NCCLVersions) > 1
	}
	js.Verdict = pipeline.VerdictOK
	for _, c := range comms {
		js.Verdict = pipeline.Worse(js.Verdict, c.Verdict)
	}
	// The whole-job view sees hosts and skew no single communicator sees.
	js.Verdict = pipeline.Worse(js.Verdict, whole.Verdict)
	// The reasons are those of the whole job and of every communicator
	// that shares the job's verdict.
	add := func(rs []string) {
		for _, r := range rs {
			if !slices.Contains(js.Reasons, r) {
				js.Reasons = append(js.Reasons, r)
			}
		}
	}
	if whole.Verdict == js.Verdict {
		add(whole.Reasons)
	} else {
		for _, c := range comms {
			if c.Verdict == js.Verdict {
				add(c.Reasons)
			}
		}
	}
	js.Fallback = fallback(&js, whole, comms, e)
	return js
}

// fallback is rule 10: true exactly when the job's verdict is
// socket_fallback; false where no fallback is possible or the policy
// accepts the net; nil when the network is unknown or Socket's node count
// is unclear.
func fallback(js *pipeline.JobSummary, whole pipeline.CommSummary, comms []pipeline.CommSummary, e pipeline.Expectation) *bool {
	ev := func(detail string) {
		js.Evidence = append(js.Evidence, pipeline.Evidence{Field: "fallback", Kind: KindPolicy, Detail: detail})
	}
	switch {
	case js.Verdict == pipeline.VerdictSocketFallback:
		ev("a summary's verdict is socket_fallback")
		return ptr(true)
	case js.Network == nil:
		return nil
	}
	switch whole.NetworkClass {
	case pipeline.ClassUnknown:
		return nil
	case pipeline.ClassTCP:
		if *js.Network == "FastSocket" || e.Network != "" && e.Network != pipeline.ClassRDMA {
			break
		}
		if whole.Verdict == pipeline.VerdictUnknown {
			return nil
		}
		for _, c := range comms {
			if c.NetworkClass == pipeline.ClassTCP && c.Verdict == pipeline.VerdictUnknown {
				return nil
			}
		}
	}
	ev("no summary's verdict is socket_fallback")
	return ptr(false)
}
