package assemble

import (
	"slices"
	"sort"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// procNetwork decides the network one process selected, in the order of
// CLASSIFICATION.md: "Using network" (2.7+), "Assigned NET plugin" (2.27+),
// NET channel lines, then the last plugin or device list that initialized
// and was not cancelled ("Failed to initialize NET plugin X", an empty IB
// list, "No device found"). A NET/Socket device list alone decides Socket
// only next to a failed or disabled RDMA attempt: in 2.4 every rank prints
// it before IB (corpus README traps).
func procNetwork(p *proc) (name, kind string) {
	switch {
	case p.usingNet != "":
		return p.usingNet, KindUsingNetwork
	case p.assigned != "":
		return p.assigned, KindPluginAssigned
	case len(p.netChan) > 0:
		return p.netChan[0], KindNetChannel
	case len(p.netCands) > 0:
		c := p.netCands[len(p.netCands)-1]
		return c.name, c.kind
	case p.socketName != "" && len(rdmaFailures(p)) > 0:
		return p.socketName, KindSocketAfterFailure
	}
	return "", ""
}

// decideNetwork is rule 1: one network per process, "mixed" when processes
// disagree, nil without evidence.
func decideNetwork(d *decision, procs []*proc) *string {
	var networks []string
	kinds := map[string]string{}
	for _, p := range procs {
		n, k := procNetwork(p)
		if n == "" {
			continue
		}
		if !slices.Contains(networks, n) {
			networks = append(networks, n)
			kinds[n] = k
		}
	}
	switch len(networks) {
	case 0:
		for _, p := range procs {
			if p.ibEmpty || len(p.failedPlugins) > 0 {
				d.use("network", KindCancelledCandidates, "every net that initialized was cancelled: "+strings.Join(cancelled(p), ", "))
				break
			}
		}
		return nil
	case 1:
		d.use("network", kinds[networks[0]], networks[0])
		return ptr(networks[0])
	}
	sort.Strings(networks)
	for _, n := range networks {
		d.use("network", kinds[n], n)
	}
	d.use("network", KindProcessesDisagree, strings.Join(networks, ", "))
	return ptr(pipeline.ClassMixed)
}

func cancelled(p *proc) []string {
	var out []string
	if p.ibEmpty {
		out = append(out, "IB (empty device list)")
	}
	if p.ibNoDevice {
		out = append(out, "IB (no device found)")
	}
	for _, f := range p.failedPlugins {
		out = append(out, f+" (failed to initialize)")
	}
	return out
}

// classOf is rule 2: the class table (pipeline.NetworkClass); "none" for a
// single node without a network, "unknown" otherwise.
func classOf(d *decision, network *string, multi *bool) string {
	if network != nil {
		c := pipeline.NetworkClass(*network)
		d.use("network_class", KindClassTable, *network+" → "+c)
		if c == pipeline.ClassUnknown {
			d.reason("network " + *network + " is not in the class table: class unknown")
		}
		return c
	}
	if multi != nil && !*multi {
		d.use("network_class", KindSingleNode, "no network on a single node")
		return pipeline.ClassNone
	}
	return pipeline.ClassUnknown
}

// decideFabric is rule 3: the link layers of the HCA lists.
func decideFabric(d *decision, fabric map[string]bool) *string {
	var f *string
	switch {
	case fabric["IB"] && fabric["RoCE"]:
		f = ptr("mixed")
	case fabric["IB"]:
		f = ptr("IB")
	case fabric["RoCE"]:
		f = ptr("RoCE")
	}
	if f != nil {
		d.use("fabric", KindHCALinkLayer, *f)
	}
	return f
}

func (p *proc) ibDisabled() bool { return p.env["NCCL_IB_DISABLE"] == "1" }

// rdmaFailures lists the evidence that an RDMA attempt failed or was
// disabled in process p.
func rdmaFailures(p *proc) []string {
	var out []string
	if p.ibNoDevice {
		out = append(out, "NET/IB: no device found")
	}
	if p.ibEmpty {
		out = append(out, "NET/IB: empty device list")
	}
	if p.noVerbs {
		out = append(out, "libibverbs could not be opened")
	}
	if p.pluginFailed {
		out = append(out, "a net plugin failed to load or initialise")
	}
	if p.ibDisabled() {
		out = append(out, "NCCL_IB_DISABLE=1")
	}
	if v := p.env["NCCL_NET"]; strings.EqualFold(v, "Socket") {
		out = append(out, "NCCL_NET=Socket")
	}
	if p.sideband {
		out = append(out, "IB used only for sideband (NCCL ≤ 2.3)")
	}
	return out
}
