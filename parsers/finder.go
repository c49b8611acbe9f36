package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// finderTokens are the substrings a line must hold to be worth parsing:
// "NCCL" (every NCCL line since 2.3 and every version banner), "INFO " and
// "WARN " (NCCL ≤ 2.2 prints no NCCL token: "host:pid:tid [0] INFO …",
// checked further by Parse), " Pid " (nccl-tests device table lines, "#  Rank  0 Group  0 Pid  78499 on …") and
// " pid=" (Ray worker prefixes, whose ip= tells a job's nodes). Each is
// searched with bytes.Index over a whole block, which runs at several GB/s
// because the first bytes of each token are rare in trainer output
// (BenchmarkFinder).
var finderTokens = [...][]byte{[]byte("NCCL"), []byte("INFO "), []byte("WARN "), []byte("Pid "), []byte(" pid=")}

// tokPid is finderTokens[4] without its blank, which plausibleAt checks.
var tokPid = []byte("pid=")

// Finder finds candidate lines in a block of log text without looking at
// the lines between them: the prefilter of the file and Kafka paths. The
// NCCL finder keeps the next position of each token, so a block is searched
// once per token whatever the number of hits; the telemetry finder's forty
// tokens are searched in one pass (tokenSet). Not safe for concurrent use.
type Finder struct {
	block []byte
	set   *tokenSet // nil: finderTokens, one search each
	next  [len(finderTokens)]int
}

// NewTelemetryFinder returns a Finder that also finds training-progress and
// nccl-tests lines (TelemetryTokens and the slower rest): what scan uses
// when it reports telemetry. Trainer output is mostly such lines, so this
// finder hands far more lines on than the NCCL-only one.
func NewTelemetryFinder() *Finder { return &Finder{set: allSet} }

// Clone returns a finder with the same tokens, for another goroutine.
func (f *Finder) Clone() pipeline.Finder { return &Finder{set: f.set} }

// Reset starts a new block.
func (f *Finder) Reset(block []byte) {
	f.block = block
	for i := range f.next {
		f.next[i] = -2 // not searched yet
	}
}

// Next returns the index of the first candidate token at or after from, or
// -1 when the rest of the block holds none.
func (f *Finder) Next(from int) int {
	if f.set != nil {
		return f.set.index(f.block, from)
	}
	best := -1
	for i := range finderTokens {
		n := f.next[i]
		if n == -1 {
			continue // token exhausted in this block
		}
		if n < from {
			n = f.search(i, from)
			f.next[i] = n
			if n < 0 {
				continue
			}
		}
		if best < 0 || n < best {
			best = n
		}
	}
	return best
}

// search finds the next plausible hit of finder token i at or after from.
func (f *Finder) search(i, from int) int {
	tok, shift := finderTokens[i], 0
	if i == 4 {
		// " pid=" is searched as "pid=" after a blank: bytes.Index skips
		// to a pattern's first byte, and blanks are every sixth byte of
		// trainer output (340 MB/s, against 5 GB/s or more for the others;
		// BenchmarkTelemetryTokens).
		tok, shift = tokPid, 1
	}
	for from < len(f.block) {
		j := bytes.Index(f.block[from+shift:], tok)
		if j < 0 {
			return -1
		}
		at := from + j
		if plausibleAt(i, f.block, at) {
			return at
		}
		// Trainer text says INFO and WARN often ("root - INFO -"); only
		// the ≤ 2.2 NCCL forms are worth a line.
		from = at + 1
	}
	return -1
}

// Candidate reports whether line may hold an NCCL line, an NCCL banner, an
// nccl-tests rank line or a Ray worker prefix: the cheap prefilter run on
// every record before any other parsing (Kafka records are checked in their
// envelope, since none of the tokens is changed by JSON escaping). It never
// allocates and errs on the side of yes; Parse decides. Five tokens with
// rare first bytes: one bytes.Index each beats one pass of a tokenSet
// (BenchmarkCandidateNaive, BenchmarkCandidateSet).
func Candidate(line []byte) bool {
	// Any token will do: no need to find the first one (Finder.Next).
	f := Finder{block: line}
	for i := range finderTokens {
		if f.search(i, 0) >= 0 {
			return true
		}
	}
	return false
}

// Prefilter returns the one prefilter of a record or line: Candidate, or
// with telemetry Candidate or TelemetryCandidate, in one pass over the
// record (tokenSet; 0.95 → 0.42 CPU-µs per record of the load stream,
// BenchmarkPrefilterMixed).
func Prefilter(telemetry bool) func([]byte) bool {
	if !telemetry {
		return Candidate
	}
	return allSet.contains
}

// plausibleAt checks the bytes before a hit of finder token i at b[at].
func plausibleAt(i int, b []byte, at int) bool {
	switch i {
	case 1: // "INFO ": NCCL ≤ 2.2 writes "[dev] INFO "
		return at >= 2 && b[at-1] == ' ' && b[at-2] == ']'
	case 2: // "WARN ": "[dev] WARN " or "file.cc:123 WARN "
		return at >= 2 && b[at-1] == ' ' && (b[at-2] == ']' || isDigit(b[at-2]))
	case 3: // "Pid ": nccl-tests "… Group  0 Pid  78499 on host"; searching
		// "Pid " rather than " Pid " is twice as fast (rare first byte).
		return at >= 1 && b[at-1] == ' '
	case 4: // " pid=", found by Finder.search as "pid=" one byte on
		return at+1 < len(b) && b[at] == ' '
	}
	return true
}

// finderSpecs are finderTokens with their plausibility checks.
func finderSpecs() []tokenSpec {
	specs := make([]tokenSpec, len(finderTokens))
	for i, t := range finderTokens {
		specs[i] = tokenSpec{tok: t}
		if i >= 1 && i <= 3 {
			specs[i].check = func(b []byte, at int) bool { return plausibleAt(i, b, at) }
		}
	}
	return specs
}

func telemetrySpecs() []tokenSpec {
	var specs []tokenSpec
	for _, t := range TelemetryTokens {
		specs = append(specs, tokenSpec{tok: t})
	}
	for _, t := range telemetrySlowTokens {
		specs = append(specs, tokenSpec{tok: t})
	}
	return specs
}

// The token sets of the prefilters: NCCL lines (Candidate, Finder), the
// telemetry lines (TelemetryCandidate: its tokens and nccl-tests' device
// lines, " Pid "), and both (Prefilter(true), NewTelemetryFinder).
var (
	ncclSet      = newTokenSet(finderSpecs()...)
	telemetrySet = newTokenSet(append(telemetrySpecs(), tokenSpec{tok: []byte(" Pid ")})...)
	allSet       = newTokenSet(append(finderSpecs(), telemetrySpecs()...)...)
)
