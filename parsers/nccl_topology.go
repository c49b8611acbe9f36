package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

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
