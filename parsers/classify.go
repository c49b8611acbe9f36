package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Lines is the line parser: the prefilter first, then the ANSI colours and
// the launcher prefix are stripped once, and the stripped text goes to the
// NCCL line parser and, when telemetry is on (NewLines), to the telemetry
// sub-parsers, which take "Using network" and communicator figures from
// the NCCL event instead of parsing the line again. It implements the
// pipeline's Classifier, and its Parse the runner's telemetry parser: the
// telemetry of the line Classify just saw is returned without parsing it
// again. The zero value parses NCCL lines only. It is not safe for
// concurrent use.
type Lines struct {
	nccl NCCL
	ansi []byte
	tel  *Telemetry // nil: no telemetry

	// The last line Classify saw and its telemetry.
	last  []byte
	tl    pipeline.TelemetryLine
	telOK bool
}

// NewLines returns a line parser that also parses telemetry with tel.
func NewLines(tel *Telemetry) *Lines { return &Lines{tel: tel} }

// Classify parses one line into ev and reports whether it is an NCCL line.
// A line that is not one may still carry a launcher host (a Ray worker's
// "ip=…"): then ev.LauncherHost is set and Classify returns false. ev's
// slices alias text or an internal buffer, valid until the next call.
func (l *Lines) Classify(text []byte, ev *pipeline.Event) bool {
	if l.tel == nil {
		return l.classify(text, ev)
	}
	l.last = text
	if bytes.IndexByte(text, '\r') >= 0 || len(text) > maxTelemetryLine {
		// A progress bar redrawn in place is read by its last update,
		// the NCCL parser reads the whole line: two texts, two strips.
		l.telOK = l.tel.Parse(text, &l.tl)
		return l.classify(text, ev)
	}
	cand := Candidate(text)
	if bytes.IndexByte(text, 0x1b) >= 0 {
		l.ansi = StripANSI(l.ansi[:0], text)
		text = l.ansi
	}
	rest, p := StripPrefix(text)
	nccl := cand && l.nccl.Parse(rest, ev)
	switch {
	case !cand:
		ev.LauncherHost = nil
	case nccl:
		ev.LauncherRank = p.Rank
		ev.LauncherHost = p.Host
	default:
		ev.LauncherHost = p.Host // Ray's ip= on a line that is not NCCL (corpus 047)
	}
	var pre *pipeline.Event
	if nccl {
		pre = ev
	}
	l.telOK = l.tel.parseStripped(rest, p, pre, &l.tl)
	return nccl
}

// classify is Classify without telemetry.
func (l *Lines) classify(text []byte, ev *pipeline.Event) bool {
	if !Candidate(text) {
		ev.LauncherHost = nil
		return false
	}
	if bytes.IndexByte(text, 0x1b) >= 0 {
		l.ansi = StripANSI(l.ansi[:0], text)
		text = l.ansi
	}
	rest, p := StripPrefix(text)
	if !l.nccl.Parse(rest, ev) {
		// Ray tags every worker line with its node address; lines that are
		// not NCCL lines still tell which nodes a job runs on (corpus 047).
		ev.LauncherHost = p.Host
		return false
	}
	ev.LauncherRank = p.Rank
	ev.LauncherHost = p.Host
	return true
}

// NextMessage returns where a second NCCL message glued behind the first
// starts in text, or -1 (pipeline.MessageSplitter; see NextMessage).
func (l *Lines) NextMessage(text []byte) int { return NextMessage(text) }

// Parse reports whether line is a telemetry line and fills tl, as
// Telemetry.Parse does. For the line Classify saw last (the same slice)
// it returns what Classify found, without parsing again.
func (l *Lines) Parse(line []byte, tl *pipeline.TelemetryLine) bool {
	if l.tel == nil {
		tl.Reset()
		return false
	}
	if len(line) == len(l.last) && len(line) > 0 && &line[0] == &l.last[0] {
		*tl = l.tl
		return l.telOK
	}
	return l.tel.Parse(line, tl)
}
