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
		// Ray tags every worker line with its node address; the lines that
		// are not NCCL lines still tell which nodes a job runs on (corpus 047).
		if len(text) > 0 && text[0] == '(' {
			if _, p := StripPrefix(text); p.Host != nil {
				ev.LauncherHost = p.Host
			}
		}
		return false
	}
	if bytes.IndexByte(text, 0x1b) >= 0 {
		l.ansi = StripANSI(l.ansi[:0], text)
		text = l.ansi
	}
	rest, p := StripPrefix(text)
	if !l.nccl.Parse(rest, ev) {
		ev.LauncherHost = nil
		return false
	}
	ev.LauncherRank = p.Rank
	ev.LauncherHost = p.Host
	return true
}
