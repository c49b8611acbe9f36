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

// Finder finds candidate lines in a block of log text without looking at
// the lines between them: the prefilter of the file and Kafka paths. It
// keeps the next position of each token, so a block is searched once per
// token whatever the number of hits. Not safe for concurrent use.
type Finder struct {
	block  []byte
	tokens [][]byte // nil: finderTokens
	next   [len(finderTokens) + len(TelemetryTokens) + len(telemetrySlowTokens)]int
}

// NewTelemetryFinder returns a Finder that also finds training-progress and
// nccl-tests lines (TelemetryTokens and the slower rest): what scan uses
// when it reports telemetry. Trainer output is mostly such lines, so this
// finder hands far more lines on than the NCCL-only one.
func NewTelemetryFinder() *Finder {
	toks := make([][]byte, 0, len(finderTokens)+len(TelemetryTokens)+len(telemetrySlowTokens))
	toks = append(toks, finderTokens[:]...)
	toks = append(toks, TelemetryTokens[:]...)
	toks = append(toks, telemetrySlowTokens[:]...)
	return &Finder{tokens: toks}
}

func (f *Finder) toks() [][]byte {
	if f.tokens == nil {
		return finderTokens[:]
	}
	return f.tokens
}

// Clone returns a finder with the same tokens, for another goroutine.
func (f *Finder) Clone() pipeline.Finder { return &Finder{tokens: f.tokens} }

// Reset starts a new block.
func (f *Finder) Reset(block []byte) {
	f.block = block
	for i := range f.toks() {
		f.next[i] = -2 // not searched yet
	}
}

// Next returns the index of the first candidate token at or after from, or
// -1 when the rest of the block holds none.
func (f *Finder) Next(from int) int {
	best := -1
	for i := range f.toks() {
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

// search finds the next plausible hit of token i at or after from.
func (f *Finder) search(i, from int) int {
	for from < len(f.block) {
		j := bytes.Index(f.block[from:], f.toks()[i])
		if j < 0 {
			return -1
		}
		at := from + j
		if f.plausible(i, at) {
			return at
		}
		// Trainer text says INFO and WARN often ("root - INFO -"); only
		// the ≤ 2.2 NCCL forms are worth a line.
		from = at + 1
	}
	return -1
}

// plausible checks the bytes before a hit of token i.
func (f *Finder) plausible(i, at int) bool {
	switch i {
	case 1: // "INFO ": NCCL ≤ 2.2 writes "[dev] INFO "
		return at >= 2 && f.block[at-1] == ' ' && f.block[at-2] == ']'
	case 2: // "WARN ": "[dev] WARN " or "file.cc:123 WARN "
		return at >= 2 && f.block[at-1] == ' ' && (f.block[at-2] == ']' || isDigit(f.block[at-2]))
	case 3: // "Pid ": nccl-tests "… Group  0 Pid  78499 on host"; searching
		// "Pid " rather than " Pid " is twice as fast (rare first byte).
		return at >= 1 && f.block[at-1] == ' '
	}
	return true
}

// Candidate reports whether line may hold an NCCL line, an NCCL banner, an
// nccl-tests rank line or a Ray worker prefix: the cheap prefilter run on
// every record before any other parsing (Kafka records are checked in their
// envelope, since none of the tokens is changed by JSON escaping). It never
// allocates and errs on the side of yes; Parse decides.
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
// with telemetry Candidate or TelemetryCandidate.
func Prefilter(telemetry bool) func([]byte) bool {
	if !telemetry {
		return Candidate
	}
	return func(v []byte) bool { return Candidate(v) || TelemetryCandidate(v) }
}
