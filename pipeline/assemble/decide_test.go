package assemble_test

import (
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestDecisionTable runs the false alerts and misses named in issue 10 (and
// the rules of CLASSIFICATION.md they exercise) through the decision table.
// Lines follow the formats of the NCCL and plugin sources they cite.
func TestDecisionTable(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    string
		meta  *pipeline.Meta
		want  map[string]string // JSON of the job summary's field
		kinds []string          // evidence kinds that must be listed ("field:kind")
	}{
		{
			name: "send without GDRDMA beside receive with it is healthy GDR (pre-Ampere PCIe)",
			in: `node1:100:100 [0] NCCL INFO Using network IB
node1:100:100 [0] NCCL INFO comm 0x55d1 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init START
node2:200:200 [0] NCCL INFO comm 0x66d1 rank 1 nranks 2 cudaDev 0 busId 1b000 commId 0xabc - Init START
node1:100:100 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
node1:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
node2:200:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA
node2:200:200 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0`,
			want:  map[string]string{"gdr": "true", "gdr_send": "false", "gdr_recv": "true", "gdr_partial": "false", "verdict": `"ok"`},
			kinds: []string{"gdr:net_connection_gdrdma", "gdr_send:directed_net_connections"},
		},
		{
			name: "some receive paths without GDR: partial, still gdr true and ok without gdr_every_gpu",
			in: `n1:1:1 [0] NCCL INFO Using network IB
n1:1:1 [0] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:2:2 [1] NCCL INFO Channel 00/0 : 8[0] -> 1[1] [receive] via NET/IB/1`,
			want:  map[string]string{"gdr": "true", "gdr_partial": "true", "verdict": `"ok"`},
			kinds: []string{"gdr_partial:receive_paths_mixed"},
		},
		{
			name: "no NET connection used GDR: gdr_off",
			in: `n1:1:1 [0] NCCL INFO Using network IB
n1:1:1 [0] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [receive] via NET/IB/0
n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 9[1] [send] via NET/IB/0`,
			want: map[string]string{"gdr": "false", "gdr_send": "false", "gdr_recv": "false", "verdict": `"gdr_off"`},
		},
		{
			name: "nccl-tests devices in one pid on one host with NCCL_IB_DISABLE=1: single node, no fallback",
			in: `# Using devices
#  Rank  0 Group  0 Pid  12345 on  gpubox device  0 [0x1b] Tesla V100-PCIE-32GB
#  Rank  1 Group  0 Pid  12345 on  gpubox device  1 [0x1c] Tesla V100-PCIE-32GB
gpubox:12345:12345 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
gpubox:12345:12345 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>
gpubox:12345:12345 [0] NCCL INFO Using network Socket`,
			want:  map[string]string{"multi_node": "false", "nnodes": "1", "nranks": "2", "fallback": "false", "verdict": `"ok"`},
			kinds: []string{"multi_node:nccl_tests_devices", "nranks:nccl_tests_devices"},
		},
		{
			name: "every printed rank on one host: single node, Socket is no fallback",
			in: `h:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
h:1:1 [0] NCCL INFO Using network Socket
h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b000 commId 0xfeed - Init COMPLETE
h:2:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC
h:2:2 [1] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0`,
			want:  map[string]string{"multi_node": "false", "fallback": "false", "verdict": `"ok"`},
			kinds: []string{"multi_node:all_ranks_one_host"},
		},
		{
			name: "unknown node count with a failed RDMA attempt: fallback by policy, multi_node stays null",
			in: `h:1:1 [0] NCCL INFO NET/IB : No device found.
h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>
h:1:1 [0] NCCL INFO Using network Socket`,
			want:  map[string]string{"multi_node": "null", "fallback": "true", "verdict": `"socket_fallback"`},
			kinds: []string{"verdict:policy", "verdict:rdma_failure"},
		},
		{
			name: "OFI provider selected, then the selected net is named only as non-device plugin (2.19–2.26)",
			in: `ip-10-0-0-1:300:300 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
ip-10-0-0-1:300:300 [0] NCCL INFO Using non-device net plugin version 0`,
			want:  map[string]string{"network": `"AWS Libfabric"`, "network_class": `"rdma"`},
			kinds: []string{"network:plugin_selected"},
		},
		{
			name: "OFI provider line alone selects nothing (corpus 247)",
			in:   `nid000019:51404:52019 [0] NCCL INFO NET/OFI Selected Provider is cxi`,
			want: map[string]string{"network": "null", "fallback": "null"},
		},
		{
			name: "FastSocket device list and plugin initialized, no Using network line",
			in: `gke-a:400:400 [0] NCCL INFO NET/FastSocket : Using [0]ens8:10.128.0.2<0>
gke-a:400:400 [0] NCCL INFO NET/FastSocket plugin initialized`,
			want:  map[string]string{"network": `"FastSocket"`, "network_class": `"tcp"`, "fallback": "false", "verdict": `"ok"`},
			kinds: []string{"network:plugin_initialized"},
		},
		{
			name: "empty IB list then Failed to initialize NET plugin IB: IB not selected",
			in: `box:500:500 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:10.0.0.9<0>
box:500:500 [0] NCCL INFO Failed to initialize NET plugin IB`,
			want: map[string]string{"network": "null"},
		},
		{
			name: "IB device list cancelled by Failed to initialize NET plugin IB, Socket initialized after it",
			in: `box:500:500 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.9<0>
box:500:500 [0] NCCL INFO Failed to initialize NET plugin IB
box:500:500 [0] NCCL INFO Initialized NET plugin Socket`,
			want: map[string]string{"network": `"Socket"`},
		},
		{
			name: "2.27+: the last initialized plugin is the assigned one (corpus 069)",
			in: `h:1:1 [0] NCCL INFO Initialized NET plugin AWS Libfabric
h:1:1 [0] NCCL INFO Initialized NET plugin IB`,
			want:  map[string]string{"network": `"IB"`},
			kinds: []string{"network:plugin_initialized"},
		},
		{
			name: "HPC-X RDMA plugin name kept as printed, class rdma",
			in: `az1:600:600 [0] NCCL INFO Using network NCCL RDMA Plugin v8
az1:600:600 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/NCCL RDMA Plugin v8/1/GDRDMA`,
			want: map[string]string{"network": `"NCCL RDMA Plugin v8"`, "network_class": `"rdma"`, "gdr": "true"},
		},
		{
			name: "a name outside the class table stays unknown",
			in:   `x1:700:700 [0] NCCL INFO Using network Frobnicator`,
			want: map[string]string{"network": `"Frobnicator"`, "network_class": `"unknown"`, "fallback": "null", "verdict": `"unknown"`},
		},
		{
			name: "two pods on one Kubernetes node: distinct hostnames prove nothing",
			meta: &pipeline.Meta{Job: "j", Namespace: "ml", Pod: "p", Node: "gpu-node-1"},
			in: `pod-a:1:1 [0] NCCL INFO Using network Socket
pod-b:1:1 [0] NCCL INFO Using network Socket`,
			want: map[string]string{"multi_node": "null"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := strings.Split(c.in, "\n")
			_, sum := run(t, lines, c.meta, pipeline.Expectation{})
			var got map[string]any
			if err := jsonRoundTrip(sum, &got); err != nil {
				t.Fatal(err)
			}
			for k, want := range c.want {
				if g := show(got[k]); g != want {
					t.Errorf("%s = %s; want %s (reasons %v)", k, g, want, sum.Reasons)
				}
			}
			for _, fk := range c.kinds {
				field, kind, _ := strings.Cut(fk, ":")
				found := false
				for _, e := range sum.Evidence {
					found = found || e.Field == field && e.Kind == kind
				}
				if !found {
					t.Errorf("evidence %s missing: %v", fk, sum.Evidence)
				}
			}
			// Every decided fact names its evidence.
			for _, f := range []struct {
				field string
				set   bool
			}{{"network", sum.Network != nil}, {"gdr", sum.GDR != nil}, {"multi_node", sum.MultiNode != nil}, {"nranks", sum.NRanks != nil}} {
				if !f.set {
					continue
				}
				found := false
				for _, e := range sum.Evidence {
					found = found || e.Field == f.field
				}
				if !found {
					t.Errorf("%s decided without evidence: %v", f.field, sum.Evidence)
				}
			}
		})
	}
}

// TestMultiNodeOfParts checks rules 9-11 of multi_node on the parts of a
// job (CLASSIFICATION.md section 6): the processes no communicator line
// claimed, and a node whose ranks sit only partly above its GPU count.
func TestMultiNodeOfParts(t *testing.T) {
	for _, c := range []struct {
		name       string
		in         string
		meta       *pipeline.Meta
		job, unatt string // multi_node of the whole job and of the unattributed processes
		unattKind  string
		comm       string // multi_node of communicator 0xabc, when named
	}{
		{
			name: "a communicator of a multi-node job, members seen on one node with intra-node connections: unknown",
			in: `node1:100:100 [0] NCCL INFO comm 0x11 rank 0 nranks 16 cudaDev 0 busId 1b000 commId 0xabc - Init START
node1:100:101 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM
node2:200:200 [0] NCCL INFO NET/IB : No device found.`,
			job: "true", unatt: "true", unattKind: "job_multi_node", comm: "null",
		},
		{
			name: "the same communicator in a job not known to span nodes: one node",
			in: `node1:100:100 [0] NCCL INFO comm 0x11 rank 0 nranks 16 cudaDev 0 busId 1b000 commId 0xabc - Init START
node1:100:101 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM
node1:300:300 [1] NCCL INFO NET/IB : No device found.`,
			job: "false", unatt: "false", unattKind: "job_single_node", comm: "false",
		},
		{
			name: "unclaimed processes of a multi-node job with only intra-node connections so far span nodes",
			in: `node2:200:200 [0] NCCL INFO comm 0x66d1 rank 8 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
node1:100:100 [0] NCCL INFO NET/IB : No device found.
node1:100:101 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM`,
			job: "true", unatt: "true", unattKind: "job_multi_node",
		},
		{
			name: "unclaimed processes of a one-node job are on one node by the whole job (rule 10)",
			in: `node1:100:100 [0] NCCL INFO NET/IB : No device found.
node1:100:101 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM`,
			job: "false", unatt: "false", unattKind: "job_single_node",
		},
		{
			name: "a rank above the node's GPU count beside lower ranks: intra-node connections prove nothing",
			in: `host-a:100:101 [5] NCCL INFO Channel 02/0 : 13[5] -> 14[6] via P2P/CUMEM
host-b:200:201 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM`,
			meta: &pipeline.Meta{Node: "k8s-node-a"},
			job:  "null", unatt: "null",
		},
		{
			name: "ranks at their device indexes with intra-node connections only: one node",
			in: `host-a:100:101 [5] NCCL INFO Channel 02/0 : 5[5] -> 6[6] via P2P/CUMEM
host-b:200:201 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM`,
			meta: &pipeline.Meta{Node: "k8s-node-a"},
			job:  "false", unatt: "false", unattKind: "job_single_node",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			comms, sum := run(t, strings.Split(c.in, "\n"), c.meta, pipeline.Expectation{Network: "rdma"})
			if got := show(sum.MultiNode); got != c.job {
				t.Errorf("job multi_node %s, want %s", got, c.job)
			}
			var un *pipeline.CommSummary
			for i := range comms {
				if comms[i].CommID == pipeline.Unattributed {
					un = &comms[i]
				}
			}
			if un == nil {
				t.Fatalf("no unattributed summary in %d", len(comms))
			}
			if c.comm != "" {
				got := "missing"
				for _, cs := range comms {
					if cs.CommID == "0xabc" {
						got = show(cs.MultiNode)
					}
				}
				if got != c.comm {
					t.Errorf("communicator 0xabc multi_node %s, want %s", got, c.comm)
				}
			}
			if got := show(un.MultiNode); got != c.unatt {
				t.Errorf("unattributed multi_node %s, want %s", got, c.unatt)
			}
			kind := ""
			for _, e := range un.Evidence {
				if e.Field == "multi_node" {
					kind = e.Kind
				}
			}
			if kind != c.unattKind {
				t.Errorf("unattributed multi_node evidence %q, want %q", kind, c.unattKind)
			}
		})
	}
}
