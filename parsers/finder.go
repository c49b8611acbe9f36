package parsers

import (
	"bytes"
	"encoding/binary"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// finderTokens are the substrings a line must hold to be worth parsing:
// "NCCL" (every NCCL line since 2.3 and every version banner), "INFO " and
// "WARN " (NCCL ≤ 2.2 prints no NCCL token: "host:pid:tid [0] INFO …",
// checked further by Parse), " Pid " (nccl-tests device table lines, "#  Rank  0 Group  0 Pid  78499 on …") and
// " pid=" (Ray worker prefixes, whose ip= tells a job's nodes). They are
// found through three rare bytes (finderAnchors), one bytes.IndexByte pass
// over a whole block each, at several GB/s (BenchmarkFinderMixed).
var finderTokens = [...][]byte{[]byte("NCCL"), []byte("INFO "), []byte("WARN "), []byte("Pid "), []byte(" pid=")}

// Finder finds candidate lines in a block of log text without looking at
// the lines between them: the prefilter of the file and Kafka paths. The
// NCCL finder keeps the next hit of each anchor byte, so a block is
// searched once per anchor whatever the number of hits; the telemetry finder's forty
// tokens are searched in one pass (tokenSet). Not safe for concurrent use.
type Finder struct {
	block []byte
	set   *tokenSet // nil: finderTokens, one search per anchor byte
	next  [len(finderAnchors)]int
}

// finderAnchors are the bytes the NCCL finder searches with
// bytes.IndexByte, one pass each, and the finder tokens that hold them: a
// hit of the byte is checked against each token at the byte's offset in
// it. 'N' is in "NCCL", "INFO " and "WARN "; 'P' starts "Pid "; '=' ends
// " pid=". Each is rare in trainer output (per mille of a mixed stream of
// `ncclwatch-load gen`: N 2.1, P 0.2, = 2.8), and three IndexByte passes
// cost less than five bytes.Index passes, of which "Pid " and "pid="
// (lower-case 'p' is every 55th byte) ran at half the speed of the others
// (BenchmarkFinderMixed).
var finderAnchors = [...]struct {
	c    byte
	toks []anchorTok
}{
	{'N', []anchorTok{{0, 0}, {1, 1}, {2, 3}}},
	{'P', []anchorTok{{3, 0}}},
	{'=', []anchorTok{{4, 4}}},
}

// finderHeads are the first four bytes of each finder token, as
// binary.LittleEndian.Uint32 reads them.
var finderHeads = func() (h [len(finderTokens)]uint32) {
	for i, t := range finderTokens {
		if len(t) != 4 && len(t) != 5 {
			panic("parsers: a finder token must be four or five bytes long")
		}
		h[i] = binary.LittleEndian.Uint32(t)
	}
	return h
}()

// anchorTok is finder token tok with its anchor byte at offset off.
type anchorTok struct{ tok, off int }

// maxAnchorOff is the largest anchorTok.off.
const maxAnchorOff = 4

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
	for i := range finderAnchors {
		n := f.next[i]
		if n == -1 {
			continue // no token of this anchor left in this block
		}
		if n < from {
			n = anchorSearch(f.block, i, from)
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

// anchorSearch returns the first start at or after from of a plausible
// hit of a token of finderAnchors[a] in b, or -1.
func anchorSearch(b []byte, a, from int) int {
	an := &finderAnchors[a]
	best := -1
	for h := from; h < len(b); h++ {
		j := bytes.IndexByte(b[h:], an.c)
		if j < 0 {
			break
		}
		h += j
		if best >= 0 && h-maxAnchorOff > best {
			break // every later hit starts after best
		}
		for _, t := range an.toks {
			at := h - t.off
			tok := finderTokens[t.tok]
			// A token is four or five bytes: its first four are compared
			// in one load, the fifth on its own, before the call of the
			// plausibility check (bytes.Equal's call cost more than the
			// comparison on the many hits that are no token).
			if at < from || at+len(tok) > len(b) || (best >= 0 && at >= best) ||
				binary.LittleEndian.Uint32(b[at:]) != finderHeads[t.tok] ||
				len(tok) == 5 && b[at+4] != tok[4] || !plausibleAt(t.tok, b, at) {
				continue
			}
			best = at
		}
	}
	return best
}

// Candidate reports whether line may hold an NCCL line, an NCCL banner, an
// nccl-tests rank line or a Ray worker prefix: the cheap prefilter run on
// every record before any other parsing (Kafka records are checked in their
// envelope, since none of the tokens is changed by JSON escaping). It never
// allocates and errs on the side of yes; Parse decides. Three anchor bytes
// (finderAnchors), one bytes.IndexByte pass each, beat one pass of a
// tokenSet (BenchmarkCandidateNaive, BenchmarkCandidateSet).
func Candidate(line []byte) bool {
	// Any token will do: no need to find the first one (Finder.Next).
	for i := range finderAnchors {
		if anchorSearch(line, i, 0) >= 0 {
			return true
		}
	}
	return false
}

// Prefilter returns the one prefilter of a record or line: Candidate, or
// with telemetry Candidate or TelemetryCandidate, in one pass over the
// record (tokenSet: one pass instead of one per token, shown by
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
	case 4: // " pid=" (its blank is part of the token)
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
