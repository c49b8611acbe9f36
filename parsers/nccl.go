// Package parsers turns raw log bytes into ncclwatch events: record envelopes
// (raw text, Fluent Bit JSON, Docker json-file, CRI), launcher prefixes
// (torchrun, srun -l, mpirun, pdsh, Ray, timestamps, ANSI codes) and NCCL
// debug lines of every format generation from 2.2 to 2.29.
//
// Parsers are hand-written byte scanners: no regexp, no reflection and no
// allocation on the hot path. Slices they return alias their input and are
// valid until the next call, as each function's doc says.
package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

var (
	nameIB       = []byte("IB")
	tokNCCL      = []byte("NCCL ")
	tokInfoOld   = []byte("] INFO ")
	tokWarnOld   = []byte(" WARN ")
	tokVia       = []byte(" via ")
	tokArrow     = []byte("->")
	tokOOB       = []byte("OOB ")
	tokSideband  = []byte("for sideband")
	tokGDREnable = []byte("GPU Direct RDMA Enabled")
	tokGDRDisabl = []byte("GPU Direct RDMA Disabled")
	tokOpCount   = []byte(": opCount ")
	tokCommPtr   = []byte(" comm 0x")
	tokNRanksEq  = []byte("[nranks=")
)

// NCCL parses NCCL debug lines into events. The zero value is ready to use
// and it keeps no state between lines, so one value may parse any number of
// interleaved streams; it is not safe for concurrent use only because Parse
// writes into the caller's Event.
type NCCL struct{}

// Parse classifies line, which should already have its envelope and
// launcher prefix removed (a leftover prefix is tolerated: the NCCL marker is
// searched anywhere in the line). It reports whether line is an NCCL line;
// when it is, ev holds the facts, with byte slices aliasing line.
func (NCCL) Parse(line []byte, ev *pipeline.Event) bool {
	ev.Reset()
	line = trimRightSpace(line)
	m, level := findMarker(line)
	switch level {
	case markerNone:
		return parseTestRank(line, ev)
	case markerBanner:
		// Un-prefixed "NCCL version 2.18.5+cuda11.8" (≤ 2.21, corpus 016).
		msg := line[m+len("NCCL "):]
		return parseVersion(msg, ev)
	}
	parseHeader(line[:m], ev)
	var msg []byte
	if level == markerWarn || level == markerWarnOld {
		ev.Flags |= pipeline.FlagWarnLevel
	}
	start := m + len("NCCL INFO ")
	switch level {
	case markerInfoOld:
		start = m + len("] INFO ") // m points at ']'
	case markerWarnOld:
		start = m + len(" WARN ")
	}
	if start < len(line) {
		msg = line[start:]
	}
	parseMessage(msg, ev)
	return true
}

// NextMessage returns where a second NCCL message starts in line: the
// "host:pid:tid [dev] NCCL INFO|WARN " header of a message glued behind the
// first (a terminal-wrapped paste joins several on one physical line,
// corpus 210), or -1. Only a complete header after a space, with a plain
// hostname and numeric pid, tid and device, splits a line.
func NextMessage(line []byte) int {
	m, level := findMarker(line)
	if level != markerInfo && level != markerWarn {
		return -1
	}
	off := m + len(tokNCCL)
	for {
		i := bytes.Index(line[off:], tokNCCL)
		if i < 0 {
			return -1
		}
		i += off
		if rest := line[i+len(tokNCCL):]; hasPrefix(rest, "INFO ") || hasPrefix(rest, "WARN ") {
			if s := headerStart(line[:i]); s > 0 {
				if bytes.Contains(line[:s], trimRightSpace(line[s:])) {
					// The rest repeats the first message: a console table's
					// second column (CloudWatch "… | message", corpus 013),
					// not another message.
					return -1
				}
				return s
			}
		}
		off = i + len(tokNCCL)
	}
}

// headerStart returns where the "host:pid:tid [dev] " that ends b begins,
// after a space, or -1.
func headerStart(b []byte) int {
	n := len(b)
	if n < 4 || b[n-1] != ' ' || b[n-2] != ']' {
		return -1
	}
	open := bytes.LastIndexByte(b[:n-2], '[')
	if open < 2 || b[open-1] != ' ' || !isNumber(b[open+1:n-2]) {
		return -1
	}
	tok := b[:open-1]
	start := bytes.LastIndexByte(tok, ' ') + 1
	if start == 0 {
		return -1
	}
	t := tok[start:]
	c2 := bytes.LastIndexByte(t, ':')
	if c2 < 0 || !isNumber(t[c2+1:]) {
		return -1
	}
	c1 := bytes.LastIndexByte(t[:c2], ':')
	if c1 < 0 || !isNumber(t[c1+1:c2]) {
		return -1
	}
	for _, c := range t[:c1] {
		// A hostname (or none, "::pid:tid"); anything else is not a header.
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c == '-' || c == '.' || c == '_' || c == ':') {
			return -1
		}
	}
	return start
}

const (
	markerNone = iota
	markerInfo
	markerWarn
	markerInfoOld
	markerWarnOld
	markerBanner
)

// findMarker finds the first "NCCL INFO " / "NCCL WARN " / "NCCL version "
// token in line, or the ≤ 2.2 "] INFO " form.
func findMarker(line []byte) (int, int) {
	off := 0
	for {
		i := bytes.Index(line[off:], tokNCCL)
		if i < 0 {
			break
		}
		i += off
		rest := line[i+len(tokNCCL):]
		switch {
		case bytes.HasPrefix(rest, []byte("INFO")) && (len(rest) == 4 || rest[4] == ' '):
			return i, markerInfo
		case bytes.HasPrefix(rest, []byte("WARN")) && (len(rest) == 4 || rest[4] == ' '):
			return i, markerWarn
		case bytes.HasPrefix(rest, []byte("version ")) && len(rest) > 8 && isDigit(rest[8]):
			return i, markerBanner
		}
		off = i + len(tokNCCL)
	}
	if i := bytes.Index(line, tokInfoOld); i >= 0 && headerBefore(line[:i+1]) {
		return i, markerInfoOld
	}
	// ≤ 2.2 WARN lines put file:line between the header and WARN:
	// "host:pid:tid [0] include/socket.h:360 WARN Call to connect failed".
	if i := bytes.Index(line, tokWarnOld); i >= 0 && headerBefore(line[:i+1]) {
		return i, markerWarnOld
	}
	return -1, markerNone
}

// headerBefore reports whether b ends with a "host:pid:tid [dev]" prefix, the
// only evidence that a line without the NCCL token is an NCCL ≤ 2.2 line.
func headerBefore(b []byte) bool {
	var ev pipeline.Event
	ev.Reset()
	parseHeader(b, &ev)
	return ev.Dev >= 0 && ev.PID != nil
}

// parseHeader reads "host:pid:tid [dev] " (and, for WARN lines, the
// "file.cc:line " that follows it) from the text before the marker.
func parseHeader(h []byte, ev *pipeline.Event) {
	// Walk back to the "[dev]" bracket: the last "[digits]" in h.
	end := len(h)
	for end > 0 {
		close := bytes.LastIndexByte(h[:end], ']')
		if close < 0 {
			return
		}
		open := bytes.LastIndexByte(h[:close], '[')
		if open < 0 {
			return
		}
		if d, ok := atoi(h[open+1 : close]); ok {
			ev.Dev = d
			parseHostPidTid(h[:open], ev)
			return
		}
		end = open
	}
}

// parseHostPidTid splits the "host:pid:tid " token that ends b. The host may
// be empty ("::16674:16674", corpus 065) or redacted ("pod-id:num:num",
// corpus 059), so pid and tid are kept as text.
func parseHostPidTid(b []byte, ev *pipeline.Event) {
	b = trimRightSpace(b)
	if len(b) == 0 {
		return
	}
	start := bytes.LastIndexByte(b, ' ') + 1
	tok := b[start:]
	c2 := bytes.LastIndexByte(tok, ':')
	if c2 < 0 {
		return
	}
	c1 := bytes.LastIndexByte(tok[:c2], ':')
	if c1 < 0 {
		return
	}
	// An empty hostname prints as "::pid:tid" (corpus 065).
	ev.Host, ev.PID, ev.TID = bytes.TrimLeft(tok[:c1], ":"), tok[c1+1:c2], tok[c2+1:]
	if i := lastIndexEither(ev.Host, ':', ']'); i >= 0 {
		// A launcher tag glued to the host: Ray's
		// "[nccl-e9ef-7d4f-0:2]:nccl-e9ef-7d4f-0:11171:11240" (corpus 254).
		// Hostnames hold neither ':' nor ']'.
		ev.Host = ev.Host[i+1:]
	}
	if i := lastNonHostByte(ev.Host); i >= 0 && i < len(ev.Host)-1 {
		// Text glued to the header without a blank ("…<0>host-a:12:12",
		// a torn previous line) is not part of the host: hostnames hold
		// letters, digits, '-', '.' and '_' only. A name that ends in
		// another byte ("<cluster_name>", corpus 952's redaction) is kept.
		ev.Host = ev.Host[i+1:]
	}
	if c1 == 0 && start > 0 {
		// A redaction that left a space before the colon: "NAME :70918:70928"
		// beside "NAME:70918:70927" (corpus 253) is host NAME.
		prev := trimRightSpace(b[:start])
		ev.Host = prev[bytes.LastIndexByte(prev, ' ')+1:]
	}
}

// lastNonHostByte returns the index of the last byte of b that no hostname
// holds, or -1.
func lastNonHostByte(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c == '-' || c == '.' || c == '_') {
			return i
		}
	}
	return -1
}

// parseMessage dispatches on the message text after "NCCL INFO ".
func parseMessage(msg []byte, ev *pipeline.Event) {
	if len(msg) == 0 {
		ev.Kind = pipeline.EventOther
		return
	}
	warn := ev.IsWarn()
	switch msg[0] {
	case 'N':
		switch {
		case hasPrefix(msg, "NCCL version "):
			parseVersion(msg[len("NCCL "):], ev)
			return
		case hasPrefix(msg, "NCCL_"):
			if parseEnv(msg, ev) {
				return
			}
		case hasPrefix(msg, "NET/IB : ") || hasPrefix(msg, "NET/IB: ") || hasPrefix(msg, "Net/IB: "):
			if parseNetIB(msg[bytes.IndexByte(msg, ':')+1:], ev) {
				return
			}
		case hasPrefix(msg, "NET/Plugin"):
			parsePlugin(msg, ev)
			return
		case hasPrefix(msg, "NET : Using interface "):
			// ≤ 2.3 bootstrap interface (corpus 102, 001).
			ev.Kind = pipeline.EventBootstrap
			parseIfaceIP(msg[len("NET : Using interface "):], ev)
			return
		case hasPrefix(msg, "NET/"):
			if parseNetOther(msg[len("NET/"):], ev) {
				return
			}
		case hasPrefix(msg, "NVLS multicast support is "):
			ev.Kind = pipeline.EventNVLS
			if hasPrefix(msg[len("NVLS multicast support is "):], "available") {
				ev.Flags |= pipeline.FlagEnabled
			}
			return
		case hasPrefix(msg, "NVLS comm "), hasPrefix(msg, "NVLS Trees "):
			ev.Kind = pipeline.EventNVLS
			ev.Flags |= pipeline.FlagEnabled | pipeline.FlagNVLSTree
			return
		case hasPrefix(msg, "No network plugin found"):
			ev.Kind = pipeline.EventOther
			return
		}
	case 'U':
		switch {
		case hasPrefix(msg, "Using network "):
			ev.Kind = pipeline.EventNetwork
			ev.Name = trimSpace(msg[len("Using network "):])
			return
		case hasPrefix(msg, "Using non-device net plugin") || hasPrefix(msg, "Using NCCL_NET_DEVICE_UNPACK net plugin"):
			// 2.19–2.26 print it for the net just selected, without its
			// name: the plugin that loaded before it is in use.
			ev.Kind = pipeline.EventPluginLoaded
			ev.Flags |= pipeline.FlagAssigned
			return
		case hasPrefix(msg, "Using internal Network "), hasPrefix(msg, "Using external Network "):
			// 2.2/2.3 wording (corpus 101, 102); "external" is a net plugin.
			ev.Kind = pipeline.EventNetwork
			ev.Name = trimSpace(msg[len("Using internal Network "):])
			return
		}
	case 'B':
		if hasPrefix(msg, "Bootstrap : Using ") || hasPrefix(msg, "Bootstrap: Using ") {
			ev.Kind = pipeline.EventBootstrap
			b := trimSpace(msg[bytes.Index(msg, []byte("Using "))+len("Using "):])
			if c := bytes.IndexByte(b, ':'); c > 0 && bytes.IndexByte(b, '<') < 0 && isNumber(b[c+1:]) {
				// ≥ 2.24 with NCCL_OOB_NET_ENABLE: "Bootstrap: Using mlx5_0:1"
				// names a net device and port, not an interface and address.
				ev.Name = b[:c]
				return
			}
			parseIfaceIP(b, ev)
			return
		}
	case 'C':
		switch {
		case hasPrefix(msg, "Channel "):
			parseChannel(msg[len("Channel "):], ev)
			return
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
			return
		case hasPrefix(msg, "Connected all trees"):
			ev.Kind = pipeline.EventConnected
			ev.Flags |= pipeline.FlagTreesDone
			return
		case hasPrefix(msg, "Connected NVLS tree"):
			ev.Kind = pipeline.EventConnected
			ev.Flags |= pipeline.FlagNVLSTree
			return
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
			return
		case hasPrefix(msg, "Collnet Chains"), hasPrefix(msg, "Connected Collnet Chains"), hasPrefix(msg, "Connected collnet"):
			// CollNet chains set up (2.14–2.21 "Collnet Chains …", "Connected
			// collnet + chain"; 2.22+ "Connected Collnet Chains …").
			ev.Kind = pipeline.EventCollNet
			return
		case hasPrefix(msg, "CommRevokeAsync "):
			// 2.28.7+: "CommRevokeAsync START comm 0x… rank 3 nRanks 16 nNodes 2 …".
			if parseComm(msg, ev) {
				return
			}
		case hasPrefix(msg, "Count not open "):
			// 2.30.3+ prints "Count not open <lib>" (sic) for each verbs
			// library it tries; libibverbs.so.1 is the last one, so failing it
			// means no verbs (2.11–2.29 said "Failed to open libibverbs.so[.1]").
			if bytes.HasSuffix(msg, []byte("libibverbs.so.1")) && bytes.IndexByte(msg[len("Count not open "):], '/') < 0 {
				ev.Kind = pipeline.EventNoVerbs
				return
			}
		}
	case 'R':
		if hasPrefix(msg, "Ring ") {
			parseRing(msg[len("Ring "):], ev)
			return
		}
	case 'T':
		switch {
		case hasPrefix(msg, "Trees"):
			ev.Kind = pipeline.EventTrees
			ev.Rank = middleRank(msg)
			return
		case hasPrefix(msg, "Tree "):
			// GRAPH subsystem "Tree 0 : -1 -> 0 -> 1/-1/-1" (corpus 049).
			ev.Kind = pipeline.EventTrees
			ev.Rank = middleRank(msg)
			return
		}
	case 'S':
		if hasPrefix(msg, "SHARP rank ") || hasPrefix(msg, "Sharp rank ") {
			// nccl-rdma-sharp-plugins: "Sharp rank" up to v2.1, "SHARP rank" after.
			ev.Kind = pipeline.EventCollNet
			return
		}
		if hasPrefix(msg, "Successfully loaded external plugin ") || hasPrefix(msg, "Successfully loaded external network plugin ") {
			// 2.27 "external plugin", 2.28+ "external network plugin"; the
			// tuner, profiler, env and GIN plugins (2.28+) print "external
			// tuner plugin …" — aws-ofi-nccl's library is also a tuner
			// (corpus 080) — and are no net plugin.
			ev.Kind = pipeline.EventPluginLoaded
			return
		}
	case 'P':
		// HPC-X: "P2P plugin IBext", "P2P plugin IBext_v8", "P2P plugin v8 IBext_v8".
		if hasPrefix(msg, "P2P plugin ") {
			ev.Kind = pipeline.EventPluginLoaded
			ev.Name = lastWord(msg)
			return
		}
	case 'I':
		switch {
		case hasPrefix(msg, "Init timings"):
			ev.Kind = pipeline.EventInitTimings
			parseKV(msg, ev)
			return
		case hasPrefix(msg, "Initialized NET plugin "):
			// 2.27+: the last one a process prints is the one assigned
			// (corpus 069).
			ev.Kind = pipeline.EventPluginLoaded
			ev.Flags |= pipeline.FlagInitOK
			ev.Name = trimSpace(msg[len("Initialized NET plugin "):])
			return
		}
	case 'A':
		if hasPrefix(msg, "Assigned NET plugin ") {
			// 2.27+ "Assigned NET plugin IB to comm" (corpus 069).
			ev.Kind = pipeline.EventPluginLoaded
			ev.Flags |= pipeline.FlagAssigned
			n := msg[len("Assigned NET plugin "):]
			if i := bytes.LastIndex(n, []byte(" to comm")); i >= 0 {
				n = n[:i]
			}
			ev.Name = trimSpace(n)
			return
		}
	case 'F':
		switch {
		case hasPrefix(msg, "Failed to open libibverbs"):
			ev.Kind = pipeline.EventNoVerbs
			return
		case hasPrefix(msg, "Failed to initialize NET plugin"):
			ev.Kind = pipeline.EventPluginFailed
			ev.Name = trimSpace(msg[len("Failed to initialize NET plugin"):])
			return
		}
	case 'G':
		if hasPrefix(msg, "GPU Direct RDMA ") {
			parseGDR(msg, ev)
			return
		}
	case 'c', 'n', '[', 'b':
		if parseComm(msg, ev) {
			return
		}
	case 'r':
		// 2.2/2.3 "rank 0 nranks 4" (corpus 101).
		if hasPrefix(msg, "rank ") && bytes.HasSuffix(msg, []byte(" Connected CollNet")) {
			// 2.9+: "rank 3 Connected CollNet".
			ev.Kind = pipeline.EventCollNet
			ev.Rank = leadingInt(msg[len("rank "):])
			return
		}
		if hasPrefix(msg, "rank ") && bytes.Contains(msg, []byte(" nranks ")) {
			ev.Kind = pipeline.EventComm
			parseKV(msg, ev)
			return
		}
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

func parseVersion(msg []byte, ev *pipeline.Event) bool {
	// msg starts with "version ".
	v := msg[len("version "):]
	end := 0
	for end < len(v) && (isDigit(v[end]) || v[end] == '.') {
		end++
	}
	if end == 0 {
		return false
	}
	ev.Kind = pipeline.EventVersion
	ev.Name = v[:end]
	return true
}

// parseEnv reads "NCCL_X set by environment to V." and "NCCL_X set to V".
// Integer parameters end with a period, string ones do not (NCCL-FORMATS §9).
func parseEnv(msg []byte, ev *pipeline.Event) bool {
	sp := bytes.IndexByte(msg, ' ')
	if sp < 0 {
		return false
	}
	rest := msg[sp:]
	var v []byte
	switch {
	case hasPrefix(rest, " set by environment to "):
		v = rest[len(" set by environment to "):]
	case hasPrefix(rest, " set to "):
		v = rest[len(" set to "):]
	case hasPrefix(rest, " set from environment to "):
		// 2.6.4's wording for string parameters.
		v = rest[len(" set from environment to "):]
	default:
		return false
	}
	v = trimSpace(v)
	if n := len(v); n > 1 && v[n-1] == '.' && isNumber(v[:n-1]) {
		v = v[:n-1]
	}
	ev.Kind = pipeline.EventEnv
	ev.Name = msg[:sp]
	ev.Value = v
	return true
}

// parseNetIB reads the text after "NET/IB :".
func parseNetIB(rest []byte, ev *pipeline.Event) bool {
	rest = trimSpace(rest)
	switch {
	case hasPrefix(rest, "No device found"), hasPrefix(rest, "call to devices() returned 0"):
		ev.Kind = pipeline.EventIBNoDevice
		return true
	case hasPrefix(rest, "Using"):
		if bytes.Contains(rest, tokSideband) {
			// ≤ 2.3: "NET/IB : Using interface enp3s0 for sideband communication"
			// names the bootstrap NIC; it is not IB use (corpus README traps).
			ev.Kind = pipeline.EventIBSideband
			return true
		}
		ev.Kind = pipeline.EventIBDevices
		list := rest[len("Using"):]
		if i := bytes.Index(list, tokOOB); i >= 0 {
			parseIfaceIP(list[i+len(tokOOB):], ev)
			list = list[:i]
		}
		list = bytes.TrimRight(trimSpace(list), ";")
		ev.Value = trimSpace(list)
		ev.Name = nameIB
		return true
	case hasPrefix(rest, "GPU Direct RDMA "):
		parseGDR(rest, ev)
		return true
	case len(rest) > 3 && rest[0] == '[' && isDigit(rest[1]):
		// ≤ 2.3 prints one line per device it found, as the ≥ 2.4 list does
		// in one: "NET/IB: [0] mlx5_1:1/IB" (corpus 264).
		if e := bytes.IndexByte(rest, ']'); e > 1 && isNumber(rest[1:e]) && bytes.IndexByte(rest[e:], ':') > 0 {
			ev.Kind = pipeline.EventIBDevices
			ev.Value = rest
			ev.Name = nameIB
			return true
		}
	}
	return false
}

// parseCollTrace reads the COLL subsystem's trace of each collective call,
// "AllReduce: opCount 0 sendbuff 0x… recvbuff 0x… count 8 datatype 7 op 0
// root 0 comm 0x7fc030000d00 [nranks=2] stream 0x…" (every release; corpus
// 261): the communicator pointer and its size, without a rank.
func parseCollTrace(msg []byte, ev *pipeline.Event) bool {
	head := msg
	if len(head) > 32 {
		head = head[:32]
	}
	i := bytes.Index(head, tokOpCount)
	if i <= 0 {
		return false
	}
	for _, c := range msg[:i] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || isDigit(c)) {
			return false
		}
	}
	rest := msg[i+len(tokOpCount):]
	c := bytes.Index(rest, tokCommPtr)
	if c < 0 {
		return false
	}
	ptr := rest[c+len(" comm "):]
	sp := bytes.IndexByte(ptr, ' ')
	if sp < 0 {
		return false
	}
	ptr, rest = ptr[:sp], ptr[sp:]
	n := bytes.Index(rest, tokNRanksEq)
	if n < 0 {
		return false
	}
	num := rest[n+len(tokNRanksEq):]
	e := bytes.IndexByte(num, ']')
	if e < 0 {
		return false
	}
	v, ok := atoi(num[:e])
	if !ok || v <= 0 {
		return false
	}
	ev.Kind = pipeline.EventComm
	ev.CommPtr = ptr
	ev.NRanks = v
	return true
}

// parseNetOther reads NET/<name> lines other than NET/IB and NET/Plugin:
// sockets, OFI, gIB, FastSocket, GPUDirectTCPX, FasTrak.
func parseNetOther(rest []byte, ev *pipeline.Event) bool {
	// Name up to " :", ":" or " ".
	end := 0
	for end < len(rest) && rest[end] != ' ' && rest[end] != ':' {
		end++
	}
	name := rest[:end]
	body := trimSpace(bytes.TrimLeft(rest[end:], " :"))
	switch {
	case bytes.Contains(body, tokGDREnable) || bytes.Contains(body, tokGDRDisabl):
		parseGDR(body, ev)
		return true
	case hasPrefix(body, "Using [") || (hasPrefix(body, "Using ") && bytes.IndexByte(body, '<') > 0 && !bytes.Contains(body, []byte("threads"))):
		// NET/Socket : Using [0]eth0:10.0.0.1<0> ; NET/FastSocket : Using [0]ens8:…
		ev.Kind = pipeline.EventSocketDevices
		ev.Name = name
		parseIfaceIP(body[len("Using "):], ev)
		return true
	case hasPrefix(body, "Initializing") || hasPrefix(body, "plugin initialized") || bytes.Contains(body, []byte("Initializing network ")),
		bytes.Equal(name, []byte("OFI")) && (hasPrefix(body, "Selected Provider is ") || hasPrefix(body, "Selected provider is ") || hasPrefix(body, "Using aws-ofi-nccl")):
		// aws-ofi-nccl also says it loaded with "Selected Provider is
		// efa" (v0.9–v1.13), "Selected provider is efa, fabric is efa"
		// (v1.14+) and "Using aws-ofi-nccl 1.6.0" (v1.1.4–v1.7.0). Only
		// "plugin initialized" says init completed; the others load a
		// plugin that may still be rejected (corpus 247, 250).
		// NET/gIB : Initializing gIB v1.0.6 ; NET/FastSocket plugin initialized ;
		// NET/FasTrak <ts>: Initializing network FasTrak (corpus 047, 034, 052).
		// The name is kept as printed ("OFI" for aws-ofi-nccl, which the
		// assembler maps to "AWS Libfabric"); a constant here would allocate
		// and would not alias the line.
		ev.Kind = pipeline.EventPluginLoaded
		if hasPrefix(body, "plugin initialized") {
			ev.Flags |= pipeline.FlagInitOK
		}
		ev.Name = name
		return true
	}
	return false
}

// parsePlugin reads NET/Plugin lines. A loaded plugin is not necessarily the
// one used (2.27.5 loads aws-ofi-nccl, then falls back to internal IB,
// corpus 068–069); the assembler decides from "Using network".
func parsePlugin(msg []byte, ev *pipeline.Event) {
	switch {
	case bytes.Contains(msg, []byte("Loaded net plugin ")):
		ev.Kind = pipeline.EventPluginLoaded
		n := msg[bytes.Index(msg, []byte("Loaded net plugin "))+len("Loaded net plugin "):]
		if i := bytes.Index(n, []byte(" (v")); i >= 0 {
			n = n[:i]
		}
		ev.Name = trimSpace(n)
	case bytes.Contains(msg, []byte("Failed to find ncclNetPlugin symbol")),
		bytes.Contains(msg, []byte("returned")) && !bytes.Contains(msg, []byte("cannot open shared object")):
		// A plugin was found and rejected (2.19.3, corpus 058), or failed to
		// load for another reason than being absent.
		ev.Kind = pipeline.EventPluginFailed
	case pluginLibError(msg):
		// ≥ 2.28: "NET/Plugin: libnccl-net.so: <dlerror>" when the library
		// exists but does not load (absent libraries are listed as "Could not
		// find: …" instead).
		ev.Kind = pipeline.EventPluginFailed
	default:
		ev.Kind = pipeline.EventOther
	}
}

// pluginLibError reports whether msg is "NET/Plugin: <lib>.so…: <error>".
func pluginLibError(msg []byte) bool {
	rest := msg[len("NET/Plugin"):]
	if !hasPrefix(rest, ": ") {
		return false
	}
	rest = rest[2:]
	c := bytes.Index(rest, []byte(": "))
	if c <= 0 {
		return false
	}
	lib := rest[:c]
	return bytes.IndexByte(lib, ' ') < 0 && bytes.Contains(lib, []byte(".so"))
}

// parseGDR reads "GPU Direct RDMA Enabled|Disabled for HCA n 'dev'" and the
// per-GPU "… for GPU 81000 / HCA 1 (distance 6 <= 7), read 0" forms.
func parseGDR(msg []byte, ev *pipeline.Event) {
	ev.Kind = pipeline.EventGDR
	if bytes.Contains(msg, tokGDREnable) || bytes.Contains(msg, []byte(") enabled for ")) {
		// nccl-rdma-sharp-plugins: "GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0".
		ev.Flags |= pipeline.FlagEnabled
	}
	if i := bytes.Index(msg, []byte(" for HCA ")); i >= 0 {
		ev.Flags |= pipeline.FlagHCA
		ev.NetDev = leadingInt(msg[i+len(" for HCA "):])
		if q := bytes.IndexByte(msg[i:], '\''); q >= 0 {
			n := msg[i+q+1:]
			if e := bytes.IndexByte(n, '\''); e >= 0 {
				ev.Name = n[:e]
			} else {
				// The sharp plugin's format lacks the closing quote.
				ev.Name = n
			}
		}
	}
}

// parseIfaceIP reads the first "[0]eth0:10.0.0.1<0>" or "eth0:10.0.0.1<0>"
// entry of an interface list. IPv6 addresses keep their colons.
func parseIfaceIP(b []byte, ev *pipeline.Event) {
	b = trimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		if i := bytes.IndexByte(b, ']'); i >= 0 {
			b = b[i+1:]
		}
	}
	c := bytes.IndexByte(b, ':')
	if c <= 0 {
		return
	}
	ev.Iface = b[:c]
	ip := b[c+1:]
	if e := indexEither(ip, '<', ' '); e >= 0 {
		ip = ip[:e]
	}
	ev.IP = ip
}

// parseChannel reads the text after "Channel ": a connection line
// ("00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA", 2.7+) or a ring-order
// line ("00/02 :    0   1   2", rank 0 only).
func parseChannel(rest []byte, ev *pipeline.Event) {
	colon := bytes.Index(rest, []byte(" :"))
	if colon < 0 {
		ev.Kind = pipeline.EventOther
		return
	}
	head, body := rest[:colon], trimSpace(rest[colon+2:])
	if bytes.Contains(body, tokArrow) {
		parseConnection(body, ev)
		return
	}
	ev.Kind = pipeline.EventRingOrder
	if s := bytes.IndexByte(head, '/'); s >= 0 {
		if n, ok := atoi(head[s+1:]); ok {
			ev.Channels = n
		}
	}
	// 2.4 appends "; CUDA Dev 6[6], Socket NIC distance : PHB ; …" (corpus 096).
	if i := bytes.IndexByte(body, ';'); i >= 0 {
		body = trimSpace(body[:i])
	}
	ev.Value = body
}

// parseRing reads the text after "Ring ": the 2.4/2.5 connection forms
// ("00 : 26[2] -> 24[0] via P2P/IPC", "00 : 34 -> 33 [send] via NET/Socket/0")
// and the GRAPH subsystem's "00 : 1 -> 0 -> 1" (prev -> me -> next).
func parseRing(rest []byte, ev *pipeline.Event) {
	colon := bytes.Index(rest, []byte(" :"))
	if colon < 0 {
		ev.Kind = pipeline.EventOther
		return
	}
	body := trimSpace(rest[colon+2:])
	if bytes.Contains(body, tokVia) {
		parseConnection(body, ev)
		return
	}
	ev.Kind = pipeline.EventTrees
	ev.Rank = middleRank(body)
}

// parseConnection reads "A[x] -> B[y] [send|receive] via TRANSPORT".
func parseConnection(b []byte, ev *pipeline.Event) {
	ev.Kind = pipeline.EventConnection
	arrow := bytes.Index(b, tokArrow)
	via := bytes.Index(b, tokVia)
	if arrow < 0 || via < arrow {
		ev.Kind = pipeline.EventOther
		return
	}
	busID := false
	ev.From, ev.FromDev, busID = parseRankRef(trimSpace(b[:arrow]))
	to := trimSpace(b[arrow+2 : via])
	if i := bytes.Index(to, []byte("[send]")); i >= 0 {
		ev.Flags |= pipeline.FlagSend
		to = trimSpace(to[:i])
	} else if i := bytes.Index(to, []byte("[receive]")); i >= 0 {
		ev.Flags |= pipeline.FlagReceive
		to = trimSpace(to[:i])
	}
	var toBus bool
	ev.To, ev.ToDev, toBus = parseRankRef(to)
	if busID || toBus {
		ev.Flags |= pipeline.FlagBusID
	}
	t := trimSpace(b[via+len(tokVia):])
	switch {
	case hasPrefix(t, "NET/"):
		ev.Transport = pipeline.TransportNet
		parseNetPath(t[len("NET/"):], ev)
	case hasPrefix(t, "P2P/IPC"):
		ev.Transport = pipeline.TransportP2PIPC
	case hasPrefix(t, "P2P/CUMEM"):
		ev.Transport = pipeline.TransportP2PCUMEM
	case hasPrefix(t, "P2P/direct pointer"), hasPrefix(t, "P2P/direct"), hasPrefix(t, "P2P/common device"):
		// "common device" (≤ 2.7): two ranks on one GPU.
		ev.Transport = pipeline.TransportP2PDirect
	case hasPrefix(t, "P2P/MNNVL"):
		// ≥ 2.20: P2P over a multi-node NVLink domain (the peer may be on
		// another node).
		ev.Transport = pipeline.TransportP2PMNNVL
	case hasPrefix(t, "P2P/indirect"):
		// ≥ 2.8: "P2P/indirect/4[4]", relayed through another GPU.
		ev.Transport = pipeline.TransportP2PIndirect
	case hasPrefix(t, "SHM"), hasPrefix(t, "direct shared memory"):
		ev.Transport = pipeline.TransportSHM
	case hasPrefix(t, "NVLS"):
		ev.Transport = pipeline.TransportNVLS
	case hasPrefix(t, "COLLNET"):
		ev.Transport = pipeline.TransportCollNet
		if bytes.Contains(t, []byte("/GDRDMA")) {
			ev.Flags |= pipeline.FlagGDR
		}
	default:
		ev.Transport = pipeline.TransportUnknown
	}
}

// parseNetPath reads "<name>/<dev>[/GDRDMA][/Shared][(PCI)]" where name may
// hold spaces ("AWS Libfabric").
func parseNetPath(p []byte, ev *pipeline.Event) {
	for i := 0; i+1 < len(p); i++ {
		if p[i] == '/' && isDigit(p[i+1]) {
			ev.Name = p[:i]
			ev.NetDev = leadingInt(p[i+1:])
			suffix := p[i+1:]
			if bytes.Contains(suffix, []byte("/GDRDMA")) {
				ev.Flags |= pipeline.FlagGDR
			}
			if bytes.Contains(suffix, []byte("/Shared")) {
				ev.Flags |= pipeline.FlagShared
			}
			return
		}
	}
	ev.Name = p
}

// parseRankRef reads "3[3]" (rank[cudaDev], ≥ 2.19 and 2.4), "2[201c0]"
// (rank[busId], 2.5–2.18) or a bare "34" (2.4 net ring hops). A bus id is
// returned as its hexadecimal value with busID set.
func parseRankRef(b []byte) (rank, dev int, busID bool) {
	rank, dev = -1, -1
	open := bytes.IndexByte(b, '[')
	num := b
	if open >= 0 {
		num = b[:open]
	}
	if r, ok := atoi(trimSpace(num)); ok {
		rank = r
	}
	if open < 0 {
		return rank, dev, false
	}
	close := bytes.IndexByte(b[open:], ']')
	if close < 0 {
		return rank, dev, false
	}
	x := b[open+1 : open+close]
	if d, ok := atoi(x); ok && len(x) <= 2 {
		return rank, d, false
	}
	if h, ok := atohex(x); ok {
		return rank, h, true
	}
	return rank, dev, false
}

// middleRank returns "me" from tree and GRAPH ring lines: the number between
// the first two "->" in every generation ("Trees [0] 1/-1/-1->0->-1",
// "Trees [0] 26->25->-1/-1/-1", "Tree 0 : -1 -> 0 -> 1/-1/-1").
func middleRank(b []byte) int {
	a := bytes.Index(b, tokArrow)
	if a < 0 {
		return -1
	}
	rest := b[a+2:]
	c := bytes.Index(rest, tokArrow)
	if c < 0 {
		return -1
	}
	if r, ok := atoi(trimSpace(rest[:c])); ok {
		return r
	}
	return -1
}

// parseComm reads communicator lines in all their generations:
// "comm 0x… rank R nranks N cudaDev D [nvmlDev D] [busId B] [commId 0x…] - Init START|COMPLETE",
// "ncclCommInitRank[Config] comm …", "[Rank 1] ncclCommInitRank comm …",
// "comm 0x… rank R nRanks N nNodes M localRanks L localRank l MNNVL x",
// "bootstrapSplit: comm …" and "… - Destroy COMPLETE".
func parseComm(msg []byte, ev *pipeline.Event) bool {
	i := bytes.Index(msg, []byte("comm 0x"))
	if i < 0 || i > 40 {
		return false
	}
	if i > 0 && msg[i-1] != ' ' {
		return false
	}
	rest := msg[i+len("comm "):]
	sp := bytes.IndexByte(rest, ' ')
	if sp < 0 {
		return false
	}
	ev.CommPtr = rest[:sp]
	parseKV(rest[sp:], ev)
	if i > 0 && hasPrefix(msg, "bootstrapSplit:") {
		// "bootstrapSplit: comm %p parent %p rank %d nranks %d color %d …"
		// (2.20-2.22): every rank of one split prints the same color, so
		// it names the new communicator before any commId does; Value
		// carries it (census comm-4dfdef58).
		if c := bytes.Index(rest, []byte(" color ")); c >= 0 {
			v := rest[c+len(" color "):]
			if e := bytes.IndexByte(v, ' '); e >= 0 {
				v = v[:e]
			}
			if isNumber(v) || len(v) > 1 && v[0] == '-' && isNumber(v[1:]) {
				ev.Value = v
			}
		}
	}
	if ev.Rank < 0 && ev.NRanks < 0 {
		return false
	}
	if ev.NNodes >= 0 {
		ev.Kind = pipeline.EventCommNodes
	} else {
		ev.Kind = pipeline.EventComm
	}
	switch {
	case bytes.Contains(msg, []byte("Init START")):
		ev.Flags |= pipeline.FlagStart
	case bytes.Contains(msg, []byte("Init COMPLETE")):
		ev.Flags |= pipeline.FlagComplete
	case bytes.Contains(msg, []byte("Destroy COMPLETE")):
		ev.Flags |= pipeline.FlagDestroy
	}
	return true
}

// parseKV reads "key value" word pairs for the keys NCCL prints in comm and
// init-timing lines.
func parseKV(b []byte, ev *pipeline.Event) {
	for len(b) > 0 {
		b = trimLeftSpace(b)
		sp := bytes.IndexByte(b, ' ')
		if sp < 0 {
			return
		}
		key := b[:sp]
		b = trimLeftSpace(b[sp:])
		ve := indexEither(b, ' ', ',')
		if ve < 0 {
			ve = len(b)
		}
		val := b[:ve]
		switch string(key) { // no allocation: the compiler optimises string(b) in a switch
		case "rank", "rank:":
			ev.Rank = intOr(val, ev.Rank)
		case "nranks", "nRanks":
			ev.NRanks = intOr(val, ev.NRanks)
		case "nNodes":
			ev.NNodes = intOr(val, ev.NNodes)
		case "localRanks":
			ev.LocalRanks = intOr(val, ev.LocalRanks)
		case "cudaDev":
			ev.FromDev = intOr(val, ev.FromDev)
		case "commId":
			ev.CommID = val
		case "MNNVL":
			if v, ok := atoi(val); ok && v > 0 {
				ev.Flags |= pipeline.FlagMNNVL
			}
		default:
			// Not a key we read: step one word, not two, so that pairs stay aligned.
			continue
		}
		b = b[ve:]
	}
}

// parseChannelCounts reads "16 coll channels, 16 collnet channels, 16 nvls
// channels, 16 p2p channels, 2 p2p channels per peer" (2.12+).
func parseChannelCounts(msg []byte, ev *pipeline.Event) {
	ev.Kind = pipeline.EventChannelCounts
	for len(msg) > 0 {
		msg = trimLeftSpace(msg)
		n := 0
		for n < len(msg) && isDigit(msg[n]) {
			n++
		}
		if n == 0 {
			break
		}
		v, _ := atoi(msg[:n])
		rest := msg[n:]
		switch {
		case hasPrefix(rest, " coll channels"):
			ev.Channels = v
		case hasPrefix(rest, " nvls channels"):
			ev.NVLSChannels = v
		}
		c := bytes.IndexByte(rest, ',')
		if c < 0 {
			break
		}
		msg = rest[c+1:]
	}
}

// parseTestRank reads the nccl-tests device table line
// "#  Rank  1 Group  0 Pid  77729 on gpu-st-ml-2 device  0 [0000:30:00] NVIDIA …".
func parseTestRank(line []byte, ev *pipeline.Event) bool {
	i := bytes.Index(line, []byte("Rank "))
	if i < 0 || bytes.IndexByte(line[:i], '#') < 0 {
		return false
	}
	b := line[i:]
	var rank, dev int = -1, -1
	var host, pid []byte
	for len(b) > 0 {
		b = trimLeftSpace(b)
		sp := bytes.IndexByte(b, ' ')
		if sp < 0 {
			break
		}
		key := b[:sp]
		b = trimLeftSpace(b[sp:])
		ve := bytes.IndexByte(b, ' ')
		if ve < 0 {
			ve = len(b)
		}
		val := b[:ve]
		switch string(key) {
		case "Rank":
			rank = intOr(val, -1)
		case "Pid":
			pid = val
		case "on":
			host = val
		case "device":
			dev = intOr(val, -1)
		default:
			continue
		}
		b = b[ve:]
	}
	if rank < 0 || host == nil {
		return false
	}
	ev.Kind = pipeline.EventTestRank
	ev.Rank, ev.FromDev, ev.Host, ev.PID = rank, dev, host, pid
	return true
}

// --- small byte helpers, none of which allocate ---

// lastColonBlank returns the index of the last ": " in b, or -1: what
// bytes.LastIndex(b, []byte(": ")) returns, through bytes.LastIndexByte
// (bytes.LastIndex runs Rabin-Karp over the whole part: a fifth of a
// Megatron line's CPU, BenchmarkLineTrainers).
func lastColonBlank(b []byte) int {
	for n := len(b) - 1; n > 0; {
		i := bytes.LastIndexByte(b[:n], ':')
		if i < 0 {
			return -1
		}
		if b[i+1] == ' ' {
			return i
		}
		n = i
	}
	return -1
}

// indexBy is bytes.Index(b, tok), searching b for tok[at], a byte of tok
// rarer in log text than its first: bytes.Index stops at every occurrence
// of tok's first two bytes, and lower-case ones are everywhere.
func indexBy(b []byte, tok string, at int) int {
	for i := at; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], tok[at])
		if j < 0 {
			return -1
		}
		i += j
		if s := i - at; s+len(tok) <= len(b) && string(b[s:s+len(tok)]) == tok {
			return s
		}
	}
	return -1
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isNumber(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// atoi parses a small optionally negative decimal integer.
func atoi(b []byte) (int, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func intOr(b []byte, def int) int {
	if v, ok := atoi(b); ok {
		return v
	}
	return def
}

func leadingInt(b []byte) int {
	n := 0
	for n < len(b) && isDigit(b[n]) {
		n++
	}
	v, ok := atoi(b[:n])
	if !ok {
		return -1
	}
	return v
}

func atohex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func lastWord(b []byte) []byte {
	b = trimSpace(b)
	return b[bytes.LastIndexByte(b, ' ')+1:]
}

func trimSpace(b []byte) []byte { return trimRightSpace(trimLeftSpace(b)) }

// indexEither is bytes.IndexAny(b, string([]byte{c1, c2})) without the
// byte set IndexAny builds on every call (5 % of scan's CPU with telemetry
// off, where every NCCL line's header took one).
func indexEither(b []byte, c1, c2 byte) int {
	for i, c := range b {
		if c == c1 || c == c2 {
			return i
		}
	}
	return -1
}

// lastIndexEither is indexEither from the end.
func lastIndexEither(b []byte, c1, c2 byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c1 || b[i] == c2 {
			return i
		}
	}
	return -1
}

func trimLeftSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func trimRightSpace(b []byte) []byte {
	for len(b) > 0 {
		c := b[len(b)-1]
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}
