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
