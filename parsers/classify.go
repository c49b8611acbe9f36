package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Lines is the one line parser: the prefilter first, then the ANSI colours
// and the launcher prefix are stripped once, and the stripped text goes to
// the NCCL line parser and, when telemetry is on (NewLines), to the
// telemetry sub-parsers, which take "Using network" and communicator
// figures from the NCCL event instead of parsing the line again. It is the
// pipeline's Classifier. The zero value parses NCCL lines only. It is not
// safe for concurrent use.
type Lines struct {
	nccl NCCL
	ansi []byte
	tel  *Telemetry // nil: no telemetry
}

// NewLines returns a line parser that also parses telemetry with tel.
func NewLines(tel *Telemetry) *Lines { return &Lines{tel: tel} }

// Line parses one line, once: into ev, reporting whether it is an NCCL
// line, and, when tl is not nil and l parses telemetry, into tl, reporting
// whether it is a telemetry line (Telemetry.Parse). A line that is not an
// NCCL line may still carry a launcher host (a Ray worker's "ip=…"): then
// ev.LauncherHost is set. The slices of ev and tl alias text or internal
// buffers, valid until the next call.
func (l *Lines) Line(text []byte, ev *pipeline.Event, tl *pipeline.TelemetryLine) (nccl, telemetry bool) {
	if l.tel == nil || tl == nil {
		return l.classify(text, ev), false
	}
	if len(text) > 0 && text[0] == '{' && IsInspector(text) {
		// An NCCL Inspector record (inspector.go): a line of its own in
		// the dump files, no prefix, up to MaxInspectorRecord bytes
		// (verbose records outgrow maxTelemetryLine).
		if inspectorLine(trimRightSpace(text), tl) {
			ev.LauncherHost = nil
			return false, true
		}
	}
	if len(text) > maxTelemetryLine {
		return l.lineCR(text, ev, tl)
	}
	if len(text) > 0 && text[0] == '{' {
		// The Hugging Face step dict (hfStep): no prefix to strip, no
		// prefilter token, no marker but its own, read in one pass. It
		// holds no '\r' but in the blanks trimmed after it (hfStep reads
		// every byte before them), so the search for one is only there.
		if b := trimRightSpace(text); hfStep(b, tl) && bytes.IndexByte(text[len(b):], '\r') < 0 {
			ev.LauncherHost = nil
			return false, true
		}
	}
	if bytes.IndexByte(text, '\r') >= 0 {
		return l.lineCR(text, ev, tl)
	}
	return l.lineFull(text, ev, tl)
}

// lineCR is Line of a line with '\r' or longer than maxTelemetryLine: a
// progress bar redrawn in place is read by its last update, the NCCL
// parser reads the whole line: two texts, two strips.
func (l *Lines) lineCR(text []byte, ev *pipeline.Event, tl *pipeline.TelemetryLine) (nccl, telemetry bool) {
	telemetry = l.tel.Parse(text, tl) && rawToken(text)
	return l.classify(text, ev), telemetry
}

// rawToken reports whether text holds a finder token before its ANSI
// colours are stripped, as the finder searches it: a colour code inside
// a token ("TFLOP\x1b[0m/s") makes a line the finder passes over, so it is
// no telemetry line (FuzzFinderCovers). Lines without an escape need no
// second look: their stripped text is a part of them.
func rawToken(text []byte) bool {
	return bytes.IndexByte(text, 0x1b) < 0 || allSet.contains(text)
}

// lineFull is Line of a line without '\r', of at most maxTelemetryLine
// bytes, without the Hugging Face fast path: the marker search, then the
// parsers the markers name.
func (l *Lines) lineFull(text []byte, ev *pipeline.Event, tl *pipeline.TelemetryLine) (nccl, telemetry bool) {
	var cand bool
	var rest, body []byte
	var p Prefix
	marks, marked := uint64(0), false
	if bytes.IndexByte(text, 0x1b) >= 0 {
		cand = Candidate(text)
		l.ansi = StripANSI(l.ansi[:0], text)
		rest, p = StripPrefix(l.ansi)
	} else {
		// One pass over the line finds the prefilter's tokens in all of
		// it and the telemetry markers in its stripped text, which lies
		// inside it (Candidate and lineSet.mask would be two passes).
		rest, p = StripPrefix(text)
		body = trimRightSpace(rest)
		if lo, ok := offsetIn(text, body); ok {
			m := lineMarkSet.maskWithin(text, len(finderTokens), lo, lo+len(body))
			cand = m&(1<<len(finderTokens)-1) != 0
			marks, marked = m>>len(finderTokens), true
		} else {
			cand = Candidate(text)
		}
	}
	nccl = cand && l.nccl.Parse(rest, ev)
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
	if marked {
		return nccl, l.tel.parseMarked(body, p, pre, tl, marks)
	}
	return nccl, l.tel.parseStripped(rest, p, pre, tl) && rawToken(text)
}

// lineMarkSet is the prefilter's tokens (finderSpecs, the first
// len(finderTokens) bits of its masks) followed by lineSet's markers.
var lineMarkSet = newTokenSet2(append(finderSpecs(), lineSpecs()...)...)

// offsetIn returns where sub, a subslice of b (or empty), starts in b.
func offsetIn(b, sub []byte) (int, bool) {
	if len(sub) == 0 {
		return 0, true
	}
	lo := cap(b) - cap(sub)
	if lo < 0 || lo+len(sub) > len(b) || &b[lo] != &sub[0] {
		return 0, false
	}
	return lo, true
}

// Classify is Line without telemetry: it parses one line into ev and
// reports whether it is an NCCL line.
func (l *Lines) Classify(text []byte, ev *pipeline.Event) bool {
	return l.classify(text, ev)
}

// classify is Line without telemetry.
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
