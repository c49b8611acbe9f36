package parsers

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// eachMember calls fn for each member of the valid JSON object obj, with the
// unescaped key (valid only during fn), the raw value and whether a string
// value holds escapes.
func (d *Decoder) eachMember(obj []byte, fn func(key, val []byte, esc bool)) {
	i := skipWS(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		ke, kesc, ok := scanString(obj, i)
		if !ok {
			return
		}
		key := obj[i+1 : ke-1]
		i = skipWS(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipWS(obj, i+1)
		vs := i
		ve, vesc, err := d.skipValue(obj, i)
		if err != nil {
			return
		}
		if kesc {
			d.key, _ = unescape(d.key[:0], key)
			key = d.key
		}
		fn(key, obj[vs:ve], vesc)
		i = skipWS(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i = skipWS(obj, i+1)
	}
}

// skipValue validates the JSON value starting at b[i] and returns the index
// just past it; for a string value esc says whether it holds escapes.
// Nesting is tracked in d.stack, not on the Go stack.
func (d *Decoder) skipValue(b []byte, i int) (end int, esc bool, err error) {
	stack := d.stack[:0]
	defer func() { d.stack = stack[:0] }()
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return 0, false, malformed(ReasonJSONTruncated, "value expected", i)
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(stack) >= maxJSONDepth {
				return 0, false, malformed(ReasonJSONSyntax, "nested too deep", i)
			}
			stack = append(stack, c)
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' and ']' are two past '{' and '['
				i++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' {
				if i, err = d.objectKey(b, i); err != nil {
					return 0, false, err
				}
			}
			continue
		case '"':
			e, sesc, ok := scanStringCtl(b, i, d.ctl)
			if !ok {
				return 0, false, badString(b, i)
			}
			i, esc = e, sesc
		case 't':
			if !bytes.HasPrefix(b[i:], []byte("true")) {
				return 0, false, badLiteral(b, i, "true")
			}
			i += 4
		case 'f':
			if !bytes.HasPrefix(b[i:], []byte("false")) {
				return 0, false, badLiteral(b, i, "false")
			}
			i += 5
		case 'n':
			if !bytes.HasPrefix(b[i:], []byte("null")) {
				return 0, false, badLiteral(b, i, "null")
			}
			i += 4
		default:
			n := scanNumber(b[i:])
			if n == 0 {
				return 0, false, badNumber(b, i)
			}
			i += n
		}
		// A value ended at b[i]: close containers, or go on to the next
		// element.
		for {
			if len(stack) == 0 {
				return i, esc, nil
			}
			esc = false
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, false, malformed(ReasonJSONTruncated, "unterminated container", i)
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return 0, false, malformed(ReasonJSONSyntax, "',' expected", i)
			}
			i = skipWS(b, i+1)
			if top == '{' {
				if i, err = d.objectKey(b, i); err != nil {
					return 0, false, err
				}
			}
			break
		}
	}
}

// objectKey scans `"key" :` at b[i] and returns the index of the value.
func (d *Decoder) objectKey(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, malformed(syntaxOrEnd(b, i), "object key expected", i)
	}
	e, _, ok := scanStringCtl(b, i, d.ctl)
	if !ok {
		return 0, badString(b, i)
	}
	i = skipWS(b, e)
	if i >= len(b) || b[i] != ':' {
		return 0, malformed(syntaxOrEnd(b, i), "':' expected", i)
	}
	return skipWS(b, i+1), nil
}

func malformed(reason, what string, at int) error {
	return &MalformedError{Reason: reason, What: what, Offset: at}
}

// syntaxOrEnd is the reason for a token missing at b[i]: the record was cut
// off when it ended there.
func syntaxOrEnd(b []byte, i int) string {
	if i >= len(b) {
		return ReasonJSONTruncated
	}
	return ReasonJSONSyntax
}

// badString says why the string at b[i] did not scan. It runs only on the
// error path, so it may look at every byte.
func badString(b []byte, i int) error {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return malformed(ReasonJSONSyntax, "bad escape in string", i)
		case c < 0x20:
			return malformed(ReasonJSONControl, fmt.Sprintf("control byte 0x%02x in string", c), j)
		case c == '\\':
			if j+1 >= len(b) {
				return malformed(ReasonJSONTruncated, "unterminated string", i)
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+6 > len(b) {
					return malformed(ReasonJSONTruncated, "unterminated string", i)
				}
				if !isHex4(b[j+2 : j+6]) {
					return malformed(ReasonJSONSyntax, "bad \\u escape in string", j)
				}
				j += 5
			default:
				return malformed(ReasonJSONSyntax, "bad escape in string", j)
			}
		}
	}
	return malformed(ReasonJSONTruncated, "unterminated string", i)
}

// badLiteral: a cut-off "tr" is truncation, "trve" a syntax error.
func badLiteral(b []byte, i int, lit string) error {
	if rest := b[i:]; len(rest) < len(lit) && lit[:len(rest)] == string(rest) {
		return malformed(ReasonJSONTruncated, "cut-off literal", i)
	}
	return malformed(ReasonJSONSyntax, "bad literal", i)
}

// badNumber: a number cut off at the end of the record ("12.", "-",
// "1e") is truncation.
func badNumber(b []byte, i int) error {
	j := i
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		j++
	}
	if j == len(b) && j > i {
		return malformed(ReasonJSONTruncated, "cut-off number", i)
	}
	return malformed(ReasonJSONSyntax, "value expected", i)
}

// suspectBytes reports whether b holds a byte below 0x20 (ctl) or at or
// above 0x80 (hi), eight bytes at a time. Records from Fluent Bit hold
// neither, so the exact checks for control bytes and invalid UTF-8 in
// strings run only for the few that do.
func suspectBytes(b []byte) (ctl, hi bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// First whether there is either kind at all, two operations a word:
	// a byte below 0x20 borrows in w - 0x20… and sets its high bit
	// there (a borrow it passes on can set the next byte's too, but then
	// a byte below 0x20 exists anyway), a byte at or above 0x80 sets it
	// in w. Records from Fluent Bit hold neither, so this test is all
	// most records pay (a byte-by-byte scan was a large share of the
	// decoder's CPU on the load stream; TestSuspectBytes checks it).
	var any uint64
	rest := b
	for len(rest) >= 32 {
		w0 := binary.LittleEndian.Uint64(rest)
		w1 := binary.LittleEndian.Uint64(rest[8:])
		w2 := binary.LittleEndian.Uint64(rest[16:])
		w3 := binary.LittleEndian.Uint64(rest[24:])
		any |= (w0 - ones*0x20) | w0 | (w1 - ones*0x20) | w1 | (w2 - ones*0x20) | w2 | (w3 - ones*0x20) | w3
		rest = rest[32:]
	}
	for len(rest) >= 8 {
		w := binary.LittleEndian.Uint64(rest)
		any |= (w - ones*0x20) | w
		rest = rest[8:]
	}
	if any&highs == 0 {
		for _, c := range rest {
			if c < 0x20 || c >= 0x80 {
				return suspectBytesExact(b)
			}
		}
		return false, false
	}
	return suspectBytesExact(b)
}

// suspectBytesExact is suspectBytes telling the two kinds apart.
func suspectBytesExact(b []byte) (ctl, hi bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var lo, top uint64
	i := 0
	for ; i+32 <= len(b); i += 32 {
		// Four words per round: independent chains, one loop test.
		w0 := binary.LittleEndian.Uint64(b[i:])
		w1 := binary.LittleEndian.Uint64(b[i+8:])
		w2 := binary.LittleEndian.Uint64(b[i+16:])
		w3 := binary.LittleEndian.Uint64(b[i+24:])
		top |= w0 | w1 | w2 | w3
		lo |= (w0-ones*0x20)&^w0 | (w1-ones*0x20)&^w1 | (w2-ones*0x20)&^w2 | (w3-ones*0x20)&^w3
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		top |= w
		// A byte below 0x20 leaves its high bit set in (w - 0x20…) &^ w
		// (the "has less than" trick; exact as to whether one exists).
		lo |= (w - ones*0x20) &^ w
	}
	ctl, hi = lo&highs != 0, top&highs != 0
	for ; i < len(b); i++ {
		ctl = ctl || b[i] < 0x20
		hi = hi || b[i] >= 0x80
	}
	return ctl, hi
}

// appendValidUTF8 appends s to dst with each byte that is not part of a
// valid UTF-8 sequence replaced by U+FFFD, as encoding/json does.
func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString scans the JSON string whose opening quote is b[i] and returns
// the index just past its closing quote and whether it holds escapes. Escapes
// are validated; raw control bytes are rejected when ctl is set (the caller
// knows the record holds one somewhere).
func scanStringCtl(b []byte, i int, ctl bool) (end int, esc, ok bool) {
	if ctl {
		end, esc, ok = scanString(b, i)
		if ok {
			for _, c := range b[i+1 : end-1] {
				if c < 0x20 {
					return 0, false, false
				}
			}
		}
		return end, esc, ok
	}
	return scanString(b, i)
}

// scanString scans the JSON string whose opening quote is b[i] and returns
// the index just past its closing quote and whether it holds escapes. Escapes
// are validated; raw control bytes are let through.
func scanString(b []byte, i int) (end int, esc, ok bool) {
	i++
	// Keys and metadata values are short: eight bytes at a time, the first
	// quote or backslash of the first 24 bytes ends them before two
	// bytes.IndexByte calls would have started.
	for j := i; j+8 <= len(b) && j < i+24; j += 8 {
		w := binary.LittleEndian.Uint64(b[j:])
		if m := hasByte(w, '"') | hasByte(w, '\\'); m != 0 {
			if k := j + bits.TrailingZeros64(m)/8; b[k] == '"' {
				return k + 1, false, true
			}
			break // an escape: the general path below
		}
	}
	q := -1 // index of the next '"' at or after i, not yet known to be escaped
	for {
		if q < i {
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				return 0, false, false
			}
			q = i + j
		}
		k := bytes.IndexByte(b[i:q], '\\')
		if k < 0 {
			return q + 1, esc, true
		}
		esc = true
		p := i + k + 1 // the byte after the backslash
		if p >= len(b) {
			return 0, false, false
		}
		switch b[p] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = p + 1
		case 'u':
			if p+5 > len(b) || !isHex4(b[p+1:p+5]) {
				return 0, false, false
			}
			i = p + 5
		default:
			return 0, false, false
		}
	}
}

// hasByte returns a word whose high bit is set in each byte of w that
// equals c, and possibly in bytes above such a byte (a borrow): its lowest
// set bit is exact, which is all scanString uses.
func hasByte(w uint64, c byte) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ ones*uint64(c)
	return (x - ones) &^ x & highs
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func hex4(b []byte) rune {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

// unescape appends the unescaped content of a JSON string (without quotes)
// to dst. Like encoding/json it turns an unpaired surrogate into U+FFFD.
// ok is false on an invalid escape.
func unescape(dst, s []byte) ([]byte, bool) {
	for {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			return append(dst, s...), true
		}
		dst = append(dst, s[:k]...)
		s = s[k:]
		if len(s) < 2 {
			return dst, false
		}
		switch s[1] {
		case '"', '\\', '/':
			dst = append(dst, s[1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			if len(s) < 6 || !isHex4(s[2:6]) {
				return dst, false
			}
			r := hex4(s[2:6])
			s = s[6:]
			if r >= 0xD800 && r < 0xDC00 && len(s) >= 6 && s[0] == '\\' && s[1] == 'u' && isHex4(s[2:6]) {
				if r2 := hex4(s[2:6]); r2 >= 0xDC00 && r2 < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
					s = s[6:]
				}
			}
			dst = utf8.AppendRune(dst, r) // a lone surrogate becomes U+FFFD
			continue
		default:
			return dst, false
		}
		s = s[2:]
	}
}

// scanNumber returns the length of the JSON number at the start of b, or 0.
func scanNumber(b []byte) int {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0
		}
		i = j
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
