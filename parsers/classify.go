package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Lines classifies decoded log lines: the prefilter first, then the launcher
// prefix, then the NCCL line parser. It implements the pipeline's
// Classifier. The zero value is ready to use; it is not safe for concurrent
// use.
type Lines struct {
	nccl NCCL
	ansi []byte
}

// Classify parses one line into ev and reports whether it is an NCCL line.
// A line that is not one may still carry a launcher host (a Ray worker's
// "ip=…"): then ev.LauncherHost is set and Classify returns false. ev's
// slices alias text or an internal buffer, valid until the next call.
func (l *Lines) Classify(text []byte, ev *pipeline.Event) bool {
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
