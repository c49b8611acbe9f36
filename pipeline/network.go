package pipeline

import "strings"

// NormalizeNetwork maps the names NCCL and its plugins print to the names
// the summary uses. Names are kept as printed except for two spellings of
// one plugin: versioned names lose their suffix ("IBext_v8" → "IBext",
// "GPUDirectTCPX_v7" → "GPUDirectTCPX"), and aws-ofi-nccl's "Libfabric"
// (≥ 1.18 under NVIDIA NCCL) and "OFI" are "AWS Libfabric".
func NormalizeNetwork(name string) string {
	name = strings.TrimSpace(name)
	if i := strings.LastIndex(name, "_v"); i > 0 && digits(name[i+2:]) {
		name = name[:i]
	}
	switch name {
	case "Libfabric", "OFI":
		return "AWS Libfabric"
	}
	return name
}

// networkClasses is the class table of every net NCCL and the public net
// plugins name (pipeline/CLASSIFICATION.md, "network_class"). Keys are
// normalized names (NormalizeNetwork).
var networkClasses = map[string]string{
	// NCCL's internal nets.
	"IB":     ClassRDMA, // InfiniBand and RoCE through verbs
	"Socket": ClassTCP,
	// aws-ofi-nccl (EFA; also HPE Slingshot/cxi and other libfabric
	// providers): "AWS Libfabric", "Libfabric", "OFI".
	"AWS Libfabric": ClassRDMA,
	// Mellanox/NVIDIA nccl-rdma-sharp-plugins (HPC-X; Azure and OCI images
	// ship it): "IBext_v6".."IBext_v11" once initialized, "NCCL RDMA
	// Plugin vN" before its init names the transport, "UCX", "UCX-RMA".
	"IBext":   ClassRDMA,
	"UCX":     ClassRDMA,
	"UCX-RMA": ClassRDMA,
	// Google: gIB (A3 Ultra / A4, RoCE), GPUDirectTCPX (A3 High),
	// FasTrak (TCPXO, A3 Mega), FastSocket (an intended TCP plugin).
	"gIB":           ClassRDMA,
	"GPUDirectTCPX": ClassTCPX,
	"FasTrak":       ClassTCPX,
	"FastSocket":    ClassTCP,
	// A link layer named as a network by hand-edited logs.
	"RoCE":  ClassRDMA,
	"mixed": ClassMixed,
}

// NetworkClass returns the class of a network name: rdma, tcp, tcpx, mixed,
// "" for no name, or unknown for a name outside the table (never guessed).
func NetworkClass(name string) string {
	name = NormalizeNetwork(name)
	if name == "" {
		return ""
	}
	if c, ok := networkClasses[name]; ok {
		return c
	}
	// nccl-rdma-sharp-plugins' "NCCL RDMA Plugin v8" (the HPC-X RDMA
	// plugin before it picked its IB or UCX layer).
	if strings.HasPrefix(name, "NCCL RDMA Plugin") {
		return ClassRDMA
	}
	return ClassUnknown
}

// digits reports whether s is a non-empty run of decimal digits.
func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
