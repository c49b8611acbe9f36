package parsers

import (
	"bytes"
	"encoding/binary"
)

// tokenSet finds where any of a fixed set of substrings occurs in a text,
// in one pass: each token is anchored on its rarest pair of adjacent bytes,
// a bit set of the anchor pairs is tested at every position of the text, and
// only where a pair is an anchor are the tokens anchored on it compared.
// Searching each token with bytes.Index instead costs one pass per token
// (over 40 with telemetry), each slowed by the first byte's frequency
// ("float", "half", "_time" start with common bytes); the one pass costs
// about a nanosecond per byte whatever the number of tokens
// (BenchmarkPrefilterMixed, BenchmarkFinderMixed).
//
// A set built by newTokenSet2 anchors each token twice, on its rarest pair
// at an even offset and its rarest at an odd one: an occurrence has one of
// them at an even position, so only the even positions are tested, four
// per load instead of eight. Its false hits are more (short tokens of
// common letters have only common pairs at one of the parities): that
// pays for the line markers, which are searched through whole lines
// (lineMarkSet: fewer CPU-ns a line on the load stream's lines, in A/B
// runs of the line benchmarks), and
// not for the prefilter, which stops at its first hit (no gain measured;
// so Prefilter's and the finders' sets test every position).
//
// A tokenSet is immutable once built and safe for concurrent use.
type tokenSet struct {
	// toks are the anchors, one per token or (two) two; id is the token's
	// index, its bit in masks.
	toks []setToken
	n    int  // tokens
	two  bool // newTokenSet2: anchors at even positions only
	// bits has the bit of every anchor pair (b[i] | b[i+1]<<8) set.
	bits [1 << 10]uint64
	// slots maps an anchor pair to its first token (open addressing on
	// pairHash); chained through setToken.next.
	slots [tokenSlots]struct {
		pair uint16
		tok  int16 // -1: empty
	}
	maxOff int // largest anchor offset
}

const tokenSlots = 256

// setToken is one anchor of a token of a tokenSet.
type setToken struct {
	tok   []byte
	off   int    // offset of the anchor pair in tok
	pair  uint16 // the anchor pair
	check func(b []byte, at int) bool
	id    int   // the token's index in the set
	next  int16 // next anchor with the same pair, -1: none
}

// tokenSpec is a token and, optionally, a check of the bytes around a hit
// (at is where the token starts in b); nil accepts every occurrence.
type tokenSpec struct {
	tok   []byte
	check func(b []byte, at int) bool
}

func pairHash(p uint16) int { return int((uint32(p) * 0x9E3779B1) >> 24) } // 0..255

// newTokenSet builds the set of specs, testing every position. Every token
// must be at least two bytes long.
func newTokenSet(specs ...tokenSpec) *tokenSet { return buildTokenSet(false, specs) }

// newTokenSet2 builds the set of specs, testing every other position.
// Every token must be at least three bytes long.
func newTokenSet2(specs ...tokenSpec) *tokenSet { return buildTokenSet(true, specs) }

func buildTokenSet(two bool, specs []tokenSpec) *tokenSet {
	s := &tokenSet{n: len(specs), two: two}
	for i := range s.slots {
		s.slots[i].tok = -1
	}
	minLen := 2
	if two {
		minLen = 3
	}
	for id, sp := range specs {
		if len(sp.tok) < minLen || id == 64 {
			panic("parsers: token too short, or over 64 tokens")
		}
		t := setToken{tok: sp.tok, check: sp.check, id: id}
		if !two {
			t.off = anchorOffset(sp.tok, 0, 1)
			s.add(t)
			continue
		}
		t.off = anchorOffset(sp.tok, 0, 2)
		s.add(t)
		t.off = anchorOffset(sp.tok, 1, 2)
		s.add(t)
	}
	return s
}

// add adds an anchor.
func (s *tokenSet) add(t setToken) {
	p := binary.LittleEndian.Uint16(t.tok[t.off:])
	t.pair, t.next = p, -1
	idx := int16(len(s.toks))
	s.toks = append(s.toks, t)
	s.bits[p>>6] |= 1 << (p & 63)
	s.maxOff = max(s.maxOff, t.off)
	for h := pairHash(p); ; h = (h + 1) % tokenSlots {
		sl := &s.slots[h]
		if sl.tok < 0 {
			sl.pair, sl.tok = p, idx
			return
		}
		if sl.pair == p {
			// Chain behind the last anchor of this pair.
			j := sl.tok
			for s.toks[j].next >= 0 {
				j = s.toks[j].next
			}
			s.toks[j].next = idx
			return
		}
	}
}

// anchorOffset returns the offset of tok's rarest adjacent pair in log text
// (byteCommonness) among the offsets from, from+step, …, the first one of
// equal rarity.
func anchorOffset(tok []byte, from, step int) int {
	best, score := from, 1<<30
	for i := from; i+1 < len(tok); i += step {
		if sc := byteCommonness(tok[i]) + byteCommonness(tok[i+1]); sc < score {
			best, score = i, sc
		}
	}
	return best
}

// byteCommonness ranks how often a byte occurs in trainer and NCCL output:
// lower-case letters, digits, blanks and the usual separators often,
// upper-case letters and brackets less, the rest seldom.
func byteCommonness(c byte) int {
	switch {
	case c == ' ':
		return 5
	case c >= 'a' && c <= 'z':
		if bytes.IndexByte([]byte("etaoinshrlcdu"), c) >= 0 {
			return 4
		}
		return 3
	case c >= '0' && c <= '9', c == '.', c == ',', c == ':', c == '-', c == '=', c == '|', c == '/':
		return 3
	case c >= 'A' && c <= 'Z', c == '[', c == ']', c == '_':
		return 2
	}
	return 1
}

// index returns where the first token of the set that occurs in b at or
// after from starts (its check accepting it), or -1.
func (s *tokenSet) index(b []byte, from int) int {
	if from < 0 {
		from = 0
	}
	// Anchors of tokens starting at or after from are at from or later.
	for i := from; i+1 < len(b); i++ {
		p := binary.LittleEndian.Uint16(b[i:])
		if s.bits[p>>6]&(1<<(p&63)) == 0 {
			continue
		}
		at := s.match(b, i, p, from)
		if at < 0 {
			continue
		}
		// A token anchored further in may start before this one: look at
		// the anchors up to maxOff bytes on.
		end := min(i+s.maxOff, len(b)-2)
		for j := i + 1; j <= end; j++ {
			q := binary.LittleEndian.Uint16(b[j:])
			if s.bits[q>>6]&(1<<(q&63)) == 0 {
				continue
			}
			if a := s.match(b, j, q, from); a >= 0 && a < at {
				at = a
			}
		}
		return at
	}
	return -1
}

// contains reports whether any token of the set occurs in b.
func (s *tokenSet) contains(b []byte) bool {
	for i := 0; ; {
		i = s.nextAnchor(b, i)
		if i < 0 {
			return false
		}
		if s.match(b, i, binary.LittleEndian.Uint16(b[i:]), 0) >= 0 {
			return true
		}
		i++
	}
}

// has reports whether pair p is an anchor.
func (s *tokenSet) has(p uint16) bool { return s.bits[p>>6]&(1<<(p&63)) != 0 }

// nextAnchor returns the first position at or after i (of a newTokenSet2
// set: the first even one) where an anchor pair starts, or -1. Eight
// positions are tested per 64-bit load (four: nextAnchor2), branch-free,
// before one branch: most of a text holds no anchor.
func (s *tokenSet) nextAnchor(b []byte, i int) int {
	if s.two {
		return s.nextAnchor2(b, i)
	}
	for ; i+9 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		w2 := uint64(b[i+8])<<56 | w>>8 // b[i+1 : i+9]
		bits := &s.bits
		p0, p1 := uint16(w), uint16(w2)
		p2, p3 := uint16(w>>16), uint16(w2>>16)
		p4, p5 := uint16(w>>32), uint16(w2>>32)
		p6, p7 := uint16(w>>48), uint16(w2>>48)
		// p0 is the pair at b[i], p1 at b[i+1] (w2's low bytes), p2 at
		// b[i+2], and so on.
		any := bits[p0>>6]>>(p0&63) | bits[p1>>6]>>(p1&63) | bits[p2>>6]>>(p2&63) | bits[p3>>6]>>(p3&63) |
			bits[p4>>6]>>(p4&63) | bits[p5>>6]>>(p5&63) | bits[p6>>6]>>(p6&63) | bits[p7>>6]>>(p7&63)
		if any&1 != 0 {
			break
		}
	}
	for ; i+1 < len(b); i++ {
		if s.has(binary.LittleEndian.Uint16(b[i:])) {
			return i
		}
	}
	return -1
}

func (s *tokenSet) nextAnchor2(b []byte, i int) int {
	i += i & 1
	bits := &s.bits
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		p0, p2, p4, p6 := uint16(w), uint16(w>>16), uint16(w>>32), uint16(w>>48)
		if (bits[p0>>6]>>(p0&63)|bits[p2>>6]>>(p2&63)|bits[p4>>6]>>(p4&63)|bits[p6>>6]>>(p6&63))&1 != 0 {
			break
		}
	}
	for ; i+1 < len(b); i += 2 {
		if s.has(binary.LittleEndian.Uint16(b[i:])) {
			return i
		}
	}
	return -1
}

// mask returns the set of tokens (bit i: the set's i-th token; at most
// 64) that occur in b, each accepted by its check, from one pass over b.
func (s *tokenSet) mask(b []byte) uint64 { return s.maskWithin(b, s.n, 0, len(b)) }

// maskWithin is mask of b for its first k tokens and, for the others, of
// b[lo:hi] (only occurrences that lie wholly inside it count; their checks,
// if any, see b): one pass answering two questions, the prefilter's of a
// whole line and the markers of its stripped text.
func (s *tokenSet) maskWithin(b []byte, k, lo, hi int) (m uint64) {
	for i := 0; ; i++ {
		i = s.nextAnchor(b, i)
		if i < 0 {
			return m
		}
		p := binary.LittleEndian.Uint16(b[i:])
		for t := s.first(p); t >= 0; t = s.toks[t].next {
			tk := &s.toks[t]
			at := i - tk.off
			if at < 0 || at+len(tk.tok) > len(b) {
				continue
			}
			if tk.id >= k && (at < lo || at+len(tk.tok) > hi) {
				continue
			}
			if bytes.Equal(b[at:at+len(tk.tok)], tk.tok) && (tk.check == nil || tk.check(b, at)) {
				m |= 1 << tk.id
			}
		}
	}
}

// first returns the first anchor on pair p, or -1.
func (s *tokenSet) first(p uint16) int16 {
	for h := pairHash(p); ; h = (h + 1) % tokenSlots {
		sl := &s.slots[h]
		if sl.tok < 0 || sl.pair == p {
			return sl.tok
		}
	}
}

// match returns the smallest start at or after from of a token anchored on
// pair p at b[i], or -1.
func (s *tokenSet) match(b []byte, i int, p uint16, from int) int {
	best := -1
	for t := s.first(p); t >= 0; t = s.toks[t].next {
		tk := &s.toks[t]
		at := i - tk.off
		if at < from || at+len(tk.tok) > len(b) || !bytes.Equal(b[at:at+len(tk.tok)], tk.tok) {
			continue
		}
		if tk.check != nil && !tk.check(b, at) {
			continue
		}
		if best < 0 || at < best {
			best = at
		}
	}
	return best
}

// pairTable is a tokenSet's anchor pairs as a table of bytes indexed by
// the pair (b[i] | b[i+1]<<8), for a set searched through long stretches
// that hold no token: testing a position costs two loads (the pair, its
// entry) and an OR, where the set's bit set costs shifts to find the
// word and the bit. It takes 64 KiB; text that is mostly ASCII touches
// about a fifth of it.
type pairTable [1 << 16]uint8

// newPairTable returns the anchor pairs of s, a set of newTokenSet (one
// that tests every position).
func newPairTable(s *tokenSet) *pairTable {
	if s.two {
		panic("parsers: a pair table is for a set that tests every position")
	}
	t := new(pairTable)
	for _, tk := range s.toks {
		t[tk.pair] = 1
	}
	return t
}

// contains is s.contains(b), t being s's pair table.
func (t *pairTable) contains(s *tokenSet, b []byte) bool {
	for i := 0; ; i++ {
		if i = t.next(b, i); i < 0 {
			return false
		}
		if s.match(b, i, binary.LittleEndian.Uint16(b[i:]), 0) >= 0 {
			return true
		}
	}
}

// next returns the first position at or after i where an anchor pair
// starts, or -1. Eight positions are tested a step, branch-free; the last
// step is the text's last nine bytes (it may test positions again); the
// positions of a step that holds an anchor are tested one by one.
func (t *pairTable) next(b []byte, i int) int {
	r := b[i:]
	for ; len(r) >= 9; r = r[8:] {
		if t.any((*[9]byte)(r)) {
			break
		}
	}
	if len(r) < 9 && len(b) >= 9 && !t.any((*[9]byte)(b[len(b)-9:])) {
		return -1
	}
	for i = len(b) - len(r); i+1 < len(b); i++ {
		if t[binary.LittleEndian.Uint16(b[i:])] != 0 {
			return i
		}
	}
	return -1
}

// any reports whether an anchor pair starts in a[:8].
func (t *pairTable) any(a *[9]byte) bool {
	le := binary.LittleEndian
	return t[le.Uint16(a[0:])]|t[le.Uint16(a[1:])]|t[le.Uint16(a[2:])]|t[le.Uint16(a[3:])]|
		t[le.Uint16(a[4:])]|t[le.Uint16(a[5:])]|t[le.Uint16(a[6:])]|t[le.Uint16(a[7:])] != 0
}
