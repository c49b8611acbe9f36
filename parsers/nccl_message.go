package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// parseMessage dispatches on the message text after "NCCL INFO ": on its
// first byte to the parser of the messages that start with it, then to
// the forms keyed by no first byte (error traces, channel counts,
// collective traces); an unrecognised WARN keeps its text.
func parseMessage(msg []byte, ev *pipeline.Event) {
	if len(msg) == 0 {
		ev.Kind = pipeline.EventOther
		return
	}
	warn := ev.IsWarn()
	if parseByInitial(msg, ev) {
		return
	}
	if hasPrefix(msg, "transport/net") && bytes.Contains(msg, []byte(" -> ")) {
		// Error traces through transport/net.cc or net_socket.cc show a NET
		// transport was in use even when no connection line is in view
		// (corpus 097).
		ev.Kind = pipeline.EventNetTrace
		return
	}
	if msg[0] >= '0' && msg[0] <= '9' && bytes.Contains(msg, []byte(" coll channels")) {
		parseChannelCounts(msg, ev)
		return
	}
	if msg[0] >= 'A' && msg[0] <= 'Z' && parseCollTrace(msg, ev) {
		return
	}
	if warn {
		ev.Kind = pipeline.EventWarn
		ev.Value = msg
		return
	}
	ev.Kind = pipeline.EventOther
}

// parseByInitial parses msg (not empty) by its first byte and reports
// whether it recognised it. A false return may leave ev partly written;
// parseMessage then tries the forms without a key byte, each of which
// sets Kind.
func parseByInitial(msg []byte, ev *pipeline.Event) bool {
	switch msg[0] {
	case 'N':
		return parseN(msg, ev)
	case 'U':
		return parseUsing(msg, ev)
	case 'B':
		return parseBootstrap(msg, ev)
	case 'C':
		return parseC(msg, ev)
	case 'R':
		if hasPrefix(msg, "Ring ") {
			parseRing(msg[len("Ring "):], ev)
			return true
		}
	case 'T':
		return parseTree(msg, ev)
	case 'S':
		return parseS(msg, ev)
	case 'P':
		// HPC-X: "P2P plugin IBext", "P2P plugin IBext_v8", "P2P plugin v8 IBext_v8".
		if hasPrefix(msg, "P2P plugin ") {
			ev.Kind = pipeline.EventPluginLoaded
			ev.Name = lastWord(msg)
			return true
		}
	case 'I':
		return parseI(msg, ev)
	case 'A':
		return parseAssigned(msg, ev)
	case 'F':
		return parseFailed(msg, ev)
	case 'G':
		if hasPrefix(msg, "GPU Direct RDMA ") {
			parseGDR(msg, ev)
			return true
		}
	case 'c', 'n', '[', 'b':
		return parseComm(msg, ev)
	case 'r':
		return parseRankLine(msg, ev)
	}
	return false
}

// parseN parses the messages that start with 'N': the version banner,
// NCCL_ variables, the NET/ transports and plugins, and NVLS.
func parseN(msg []byte, ev *pipeline.Event) bool {
	switch {
	case hasPrefix(msg, "NCCL version "):
		parseVersion(msg[len("NCCL "):], ev)
		return true
	case hasPrefix(msg, "NCCL_"):
		return parseEnv(msg, ev)
	case hasPrefix(msg, "NET/IB : ") || hasPrefix(msg, "NET/IB: ") || hasPrefix(msg, "Net/IB: "):
		return parseNetIB(msg[bytes.IndexByte(msg, ':')+1:], ev)
	case hasPrefix(msg, "NET/Plugin"):
		parsePlugin(msg, ev)
		return true
	case hasPrefix(msg, "NET : Using interface "):
		// ≤ 2.3 bootstrap interface (corpus 102, 001).
		ev.Kind = pipeline.EventBootstrap
		parseIfaceIP(msg[len("NET : Using interface "):], ev)
		return true
	case hasPrefix(msg, "NET/"):
		return parseNetOther(msg[len("NET/"):], ev)
	case hasPrefix(msg, "NVLS multicast support is "):
		ev.Kind = pipeline.EventNVLS
		if hasPrefix(msg[len("NVLS multicast support is "):], "available") {
			ev.Flags |= pipeline.FlagEnabled
		}
		return true
	case hasPrefix(msg, "NVLS comm "), hasPrefix(msg, "NVLS Trees "):
		ev.Kind = pipeline.EventNVLS
		ev.Flags |= pipeline.FlagEnabled | pipeline.FlagNVLSTree
		return true
	case hasPrefix(msg, "No network plugin found"):
		ev.Kind = pipeline.EventOther
		return true
	}
	return false
}

// parseUsing parses the "Using …" lines that name the network selected.
func parseUsing(msg []byte, ev *pipeline.Event) bool {
	switch {
	case hasPrefix(msg, "Using network "):
		ev.Kind = pipeline.EventNetwork
		ev.Name = trimSpace(msg[len("Using network "):])
		return true
	case hasPrefix(msg, "Using non-device net plugin") || hasPrefix(msg, "Using NCCL_NET_DEVICE_UNPACK net plugin"):
		// 2.19–2.26 print it for the net just selected, without its
		// name: the plugin that loaded before it is in use.
		ev.Kind = pipeline.EventPluginLoaded
		ev.Flags |= pipeline.FlagAssigned
		return true
	case hasPrefix(msg, "Using internal Network "), hasPrefix(msg, "Using external Network "):
		// 2.2/2.3 wording (corpus 101, 102); "external" is a net plugin.
		ev.Kind = pipeline.EventNetwork
		ev.Name = trimSpace(msg[len("Using internal Network "):])
		return true
	}
	return false
}

// parseBootstrap parses "Bootstrap : Using <iface>:<ip>" (or a net device
// and port).
func parseBootstrap(msg []byte, ev *pipeline.Event) bool {
	if !hasPrefix(msg, "Bootstrap : Using ") && !hasPrefix(msg, "Bootstrap: Using ") {
		return false
	}
	ev.Kind = pipeline.EventBootstrap
	b := trimSpace(msg[bytes.Index(msg, []byte("Using "))+len("Using "):])
	if c := bytes.IndexByte(b, ':'); c > 0 && bytes.IndexByte(b, '<') < 0 && isNumber(b[c+1:]) {
		// ≥ 2.24 with NCCL_OOB_NET_ENABLE: "Bootstrap: Using mlx5_0:1"
		// names a net device and port, not an interface and address.
		ev.Name = b[:c]
		return true
	}
	parseIfaceIP(b, ev)
	return true
}

// parseC parses the messages that start with 'C': channel connections,
// "Connected all rings/trees", CollNet, communicator revocation and the
// verbs library probe.
func parseC(msg []byte, ev *pipeline.Event) bool {
	switch {
	case hasPrefix(msg, "Channel "):
		parseChannel(msg[len("Channel "):], ev)
		return true
	case hasPrefix(msg, "Connected all rings"):
		ev.Kind = pipeline.EventConnected
		ev.Flags |= pipeline.FlagRings
		if i := bytes.Index(msg, []byte(" GDR ")); i >= 0 {
			if v, ok := atoi(trimSpace(msg[i+5:])); ok {
				if v > 0 {
					ev.Flags |= pipeline.FlagGDR
				} else {
					ev.Flags |= pipeline.FlagNoGDR
				}
			}
		}
		return true
	case hasPrefix(msg, "Connected all trees"):
		ev.Kind = pipeline.EventConnected
		ev.Flags |= pipeline.FlagTreesDone
		return true
	case hasPrefix(msg, "Connected NVLS tree"):
		ev.Kind = pipeline.EventConnected
		ev.Flags |= pipeline.FlagNVLSTree
		return true
	case hasPrefix(msg, "CollNet ") && len(msg) > 8 && (isDigit(msg[8]) || msg[8] == '['), hasPrefix(msg, "CollNet Channel "),
		hasPrefix(msg, "Coll ") && len(msg) > 5 && isDigit(msg[5]):
		// "CollNet 05/0 : 5 [receive] via COLLNET/SHARP/5/GDRDMA" (corpus
		// 041); "Coll 05 : 5 [send] via COLLNET/…", "CollNet [send] : rank
		// …" and "CollNet Channel 0 rank 3 up …" in 2.6–2.8. Other "CollNet
		// …" lines say why CollNet is off ("CollNet currently only supports
		// up to 8 GPUs per node, disabling CollNet", 2.9–2.22).
		ev.Kind = pipeline.EventCollNet
		if bytes.Contains(msg, []byte("/GDRDMA")) {
			ev.Flags |= pipeline.FlagGDR
		}
		return true
	case hasPrefix(msg, "Collnet Chains"), hasPrefix(msg, "Connected Collnet Chains"), hasPrefix(msg, "Connected collnet"):
		// CollNet chains set up (2.14–2.21 "Collnet Chains …", "Connected
		// collnet + chain"; 2.22+ "Connected Collnet Chains …").
		ev.Kind = pipeline.EventCollNet
		return true
	case hasPrefix(msg, "CommRevokeAsync "):
		// 2.28.7+: "CommRevokeAsync START comm 0x… rank 3 nRanks 16 nNodes 2 …".
		return parseComm(msg, ev)
	case hasPrefix(msg, "Count not open "):
		// 2.30.3+ prints "Count not open <lib>" (sic) for each verbs
		// library it tries; libibverbs.so.1 is the last one, so failing it
		// means no verbs (2.11–2.29 said "Failed to open libibverbs.so[.1]").
		if bytes.HasSuffix(msg, []byte("libibverbs.so.1")) && bytes.IndexByte(msg[len("Count not open "):], '/') < 0 {
			ev.Kind = pipeline.EventNoVerbs
			return true
		}
	}
	return false
}

// parseTree parses the tree topology lines "Trees …" and the GRAPH
// subsystem's "Tree 0 : -1 -> 0 -> 1/-1/-1" (corpus 049).
func parseTree(msg []byte, ev *pipeline.Event) bool {
	if !hasPrefix(msg, "Trees") && !hasPrefix(msg, "Tree ") {
		return false
	}
	ev.Kind = pipeline.EventTrees
	ev.Rank = middleRank(msg)
	return true
}

// parseS parses the SHARP plugin's rank lines and the external plugin
// loads.
func parseS(msg []byte, ev *pipeline.Event) bool {
	if hasPrefix(msg, "SHARP rank ") || hasPrefix(msg, "Sharp rank ") {
		// nccl-rdma-sharp-plugins: "Sharp rank" up to v2.1, "SHARP rank" after.
		ev.Kind = pipeline.EventCollNet
		return true
	}
	if hasPrefix(msg, "Successfully loaded external plugin ") || hasPrefix(msg, "Successfully loaded external network plugin ") {
		// 2.27 "external plugin", 2.28+ "external network plugin"; the
		// tuner, profiler, env and GIN plugins (2.28+) print "external
		// tuner plugin …" — aws-ofi-nccl's library is also a tuner
		// (corpus 080) — and are no net plugin.
		ev.Kind = pipeline.EventPluginLoaded
		return true
	}
	return false
}

// parseI parses "Init timings" and "Initialized NET plugin X".
func parseI(msg []byte, ev *pipeline.Event) bool {
	switch {
	case hasPrefix(msg, "Init timings"):
		ev.Kind = pipeline.EventInitTimings
		parseKV(msg, ev)
		return true
	case hasPrefix(msg, "Initialized NET plugin "):
		// 2.27+: the last one a process prints is the one assigned
		// (corpus 069).
		ev.Kind = pipeline.EventPluginLoaded
		ev.Flags |= pipeline.FlagInitOK
		ev.Name = trimSpace(msg[len("Initialized NET plugin "):])
		return true
	}
	return false
}

// parseAssigned parses 2.27+ "Assigned NET plugin IB to comm" (corpus 069).
func parseAssigned(msg []byte, ev *pipeline.Event) bool {
	if !hasPrefix(msg, "Assigned NET plugin ") {
		return false
	}
	ev.Kind = pipeline.EventPluginLoaded
	ev.Flags |= pipeline.FlagAssigned
	n := msg[len("Assigned NET plugin "):]
	if i := bytes.LastIndex(n, []byte(" to comm")); i >= 0 {
		n = n[:i]
	}
	ev.Name = trimSpace(n)
	return true
}

// parseFailed parses the verbs library and net plugin failures.
func parseFailed(msg []byte, ev *pipeline.Event) bool {
	switch {
	case hasPrefix(msg, "Failed to open libibverbs"):
		ev.Kind = pipeline.EventNoVerbs
		return true
	case hasPrefix(msg, "Failed to initialize NET plugin"):
		ev.Kind = pipeline.EventPluginFailed
		ev.Name = trimSpace(msg[len("Failed to initialize NET plugin"):])
		return true
	}
	return false
}

// parseRankLine parses the lines that start with "rank ": 2.9+ "rank 3
// Connected CollNet" and 2.2/2.3 "rank 0 nranks 4" (corpus 101).
func parseRankLine(msg []byte, ev *pipeline.Event) bool {
	if !hasPrefix(msg, "rank ") {
		return false
	}
	if bytes.HasSuffix(msg, []byte(" Connected CollNet")) {
		ev.Kind = pipeline.EventCollNet
		ev.Rank = leadingInt(msg[len("rank "):])
		return true
	}
	if bytes.Contains(msg, []byte(" nranks ")) {
		ev.Kind = pipeline.EventComm
		parseKV(msg, ev)
		return true
	}
	return false
}
