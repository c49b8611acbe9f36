package assemble

import (
	"slices"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Evidence kinds, as CLASSIFICATION.md names them.
const (
	// network
	KindUsingNetwork        = "using_network"
	KindPluginAssigned      = "plugin_assigned"
	KindNetChannel          = "net_channel"
	KindPluginInitialized   = "plugin_initialized"
	KindDeviceList          = "device_list"
	KindPluginDeviceList    = "plugin_device_list"
	KindPluginSelected      = "plugin_selected"
	KindSocketAfterFailure  = "socket_after_rdma_failure"
	KindProcessesDisagree   = "processes_disagree"
	KindNoNetworkEvidence   = "no_network_evidence"
	KindCancelledCandidates = "cancelled"
	// network_class
	KindClassTable = "class_table"
	// fabric
	KindHCALinkLayer = "hca_link_layer"
	// gdr, gdr_send, gdr_recv, gdr_partial
	KindNetConnGDR    = "net_connection_gdrdma"
	KindCollNetGDR    = "collnet_gdrdma"
	KindConnectedGDR  = "connected_gdr_flag"
	KindNetConnPlain  = "net_connection_plain"
	KindGDRCapability = "gdr_capability"
	KindDirectedConn  = "directed_net_connections"
	KindPartialRecv   = "receive_paths_mixed"
	// multi_node, nnodes
	KindPrintedNNodes  = "printed_nnodes"
	KindDistinctNodes  = "distinct_nodes"
	KindSameGPUOverNet = "net_peer_same_gpu"
	KindRankOffset     = "rank_offset"
	KindTestDevices    = "nccl_tests_devices"
	KindRanksOneHost   = "all_ranks_one_host"
	KindOneRank        = "nranks_1"
	KindLoopback       = "loopback_bootstrap"
	KindIntraOnly      = "intra_only"
	KindRingOrder      = "ring_order"
	KindHostsTimesGPUs = "hosts_times_gpus"
	KindSingleNode     = "single_node"
	KindJobSingleNode  = "job_single_node"
	KindJobMultiNode   = "job_multi_node"
	// nranks, intra
	KindPrintedNRanks = "printed_nranks"
	KindTransports    = "intra_transports"
	// fallback, verdict (policy)
	KindPolicy      = "policy"
	KindRDMAFailure = "rdma_failure"
	KindVersionSkew = "version_skew"
	KindHCACount    = "hca_count"
)

// decision collects the reasons and evidence of one summary.
type decision struct {
	reasons  []string
	evidence []pipeline.Evidence
}

func (d *decision) use(field, kind, detail string) {
	if len(d.evidence) < 64 {
		d.evidence = append(d.evidence, pipeline.Evidence{Field: field, Kind: kind, Detail: detail})
	}
}

func (d *decision) reason(r string) {
	if !slices.Contains(d.reasons, r) {
		d.reasons = append(d.reasons, r)
	}
}
