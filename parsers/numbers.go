package parsers

import (
	"bytes"
	"math"
	"strconv"
)

// trimStepCounter returns the step of "20/   40000" or "7/999".
func trimStepCounter(b []byte) []byte {
	for i, c := range b {
		if !isDigit(c) {
			return b[:i]
		}
	}
	return b
}

// eachPair calls fn with the trimmed key and value of every "key: value"
// part of b, parts separated by sep.
func eachPair(b []byte, sep byte, fn func(key, val []byte)) {
	for len(b) > 0 {
		part := b
		if i := bytes.IndexByte(b, sep); i >= 0 {
			part, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		c := lastColonBlank(part)
		if c < 0 {
			continue
		}
		fn(bytes.TrimSpace(part[:c]), bytes.TrimSpace(part[c+2:]))
	}
}

// trimAt returns b up to its first a or c, without surrounding blanks
// (indexEither: bytes.IndexAny builds a byte set on every call).
func trimAt(b []byte, a, c byte) []byte {
	if i := indexEither(b, a, c); i >= 0 {
		return bytes.TrimSpace(b[:i])
	}
	return bytes.TrimSpace(b)
}

// cutAt splits b at the first sep: the part before it and the rest after
// it (nil when there is no sep).
func cutAt(b []byte, sep byte) (part, rest []byte) {
	if i := bytes.IndexByte(b, sep); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// --- small scanners ------------------------------------------------------

// fields splits b at blanks into dst and returns the number of fields,
// which may exceed len(dst) (only len(dst) are stored).
func fields(b []byte, dst [][]byte) int {
	n := 0
	for {
		b = trimBlank(b)
		if len(b) == 0 {
			return n
		}
		e := 0
		for e < len(b) && b[e] != ' ' && b[e] != '\t' {
			e++
		}
		if n < len(dst) {
			dst[n] = b[:e]
		}
		n++
		b = b[e:]
	}
}

// nextField returns the first blank-separated field of b and the rest.
func nextField(b []byte) (field, rest []byte) {
	b = trimBlank(b)
	e := 0
	for e < len(b) && b[e] != ' ' && b[e] != '\t' {
		e++
	}
	return b[:e], b[e:]
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func firstField(b []byte) []byte {
	f, _ := nextField(b)
	return f
}

// isWord reports whether b is a name: a letter, then letters, digits or
// '_' (nccl-tests types and reduction ops).
func isWord(b []byte) bool {
	if len(b) == 0 || !isLetter(b[0]) {
		return false
	}
	for _, c := range b[1:] {
		if !isLetter(c) && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// atoi64 parses an optionally negative decimal integer; it returns -1 and
// false for anything else, so that a count or step assigned from a failed
// parse stays absent.
func atoi64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return -1, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return -1, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// maxNumberLen bounds a number's text: longer runs of digits are not
// figures (and would not fit the stack buffer parseScaled uses).
const maxNumberLen = 40

// parseNumber reads a decimal number as trainers print it: optional sign,
// digits with optional thousands separators ("10,050", "1,017.04"), a
// fraction and exponent, an optional trailing '%'. "N/A", "nan" and the
// empty string are not numbers: it returns NaN and false for them, so
// that a figure assigned from a failed parse stays absent.
func parseNumber(b []byte) (float64, bool) { return parseScaled(b, 0) }

// parseScaled reads a number like parseNumber and multiplies it by
// 10^exp10 exactly as if the digits had been printed that way, so that
// 3367.6 ms is 3.3676 s to the last bit.
func parseScaled(b []byte, exp10 int) (float64, bool) {
	if n := len(b); n > 0 && b[n-1] == '%' {
		b = b[:n-1]
	}
	if len(b) == 0 || len(b) > maxNumberLen {
		return math.NaN(), false
	}
	if v, ok := exactDecimal(b, exp10); ok {
		return v, true
	}
	var buf [maxNumberLen + 8]byte
	n := 0
	digits, exp := false, false
	for i, c := range b {
		switch {
		case isDigit(c):
			digits = true
		case c == ',':
			// A thousands separator sits between digits, three before the
			// next separator or point.
			if !thousands(b, i) {
				return math.NaN(), false
			}
			continue
		case c == '.':
		case c == 'e' || c == 'E':
			exp = true
		case c == '+' || c == '-':
		default:
			return math.NaN(), false
		}
		buf[n] = c
		n++
	}
	if !digits {
		return math.NaN(), false
	}
	if n < len(b) {
		// Without its thousands separators it may take the fast path.
		if v, ok := exactDecimal(buf[:n], exp10); ok {
			return v, true
		}
	}
	return parseDecimal(buf[:n], exp, exp10)
}

// parseDecimal is parseScaled of b, the number's text without separators
// or '%' (exp: it has an exponent), by strconv.ParseFloat. b has room for
// an exponent behind it.
func parseDecimal(b []byte, exp bool, exp10 int) (float64, bool) {
	if exp10 != 0 {
		if exp {
			v, err := strconv.ParseFloat(string(b), 64)
			if err != nil {
				return math.NaN(), false
			}
			return v * math.Pow10(exp10), true
		}
		b = append(b, 'e')
		b = strconv.AppendInt(b, int64(exp10), 10)
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return math.NaN(), false
	}
	return v, true
}

// exactPow10 are the powers of ten a float64 holds exactly.
var exactPow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// decimalDigits reads the digits of b from i on into mant, returning
// where they end, or false when a 20th significant digit might overflow
// mant (19 digits: mant at least 1e18).
func decimalDigits(b []byte, i int, mant uint64) (int, uint64, bool) {
	for ; i < len(b); i++ {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		if mant >= 1e18 {
			return i, mant, false
		}
		mant = mant*10 + uint64(d)
	}
	return i, mant, true
}

// exactDecimal returns the value of the decimal number b ([sign] digits
// [. digits] [e|E [sign] digits], the exponent only when exp10 is 0)
// times 10^exp10 when float64 arithmetic gives it exactly, as
// strconv.ParseFloat would: a mantissa below 2^53 and
// a power of ten up to 10^22 are exact, and one multiply or divide rounds
// their product or quotient correctly (Clinger's fast path, which
// strconv takes too, but after a slower general scan that is most of its
// time on a trainer figure). ok is false for any other text or value: then
// parseDecimal decides. TestExactDecimal and FuzzExactDecimal compare the
// two.
func exactDecimal(b []byte, exp10 int) (v float64, ok bool) {
	i, neg := 0, false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	// The digits before the point, then those after it, one loop each
	// (one loop testing for the point at every digit measured slower).
	// A mantissa of 19 significant digits (at least 1e18) takes no more:
	// a 20th might overflow it.
	start := i
	i, mant, ok := decimalDigits(b, i, 0)
	if !ok {
		return 0, false
	}
	digit := i > start
	frac := 0 // digits after the point
	if i < len(b) && b[i] == '.' {
		start = i + 1
		if i, mant, ok = decimalDigits(b, start, mant); !ok {
			return 0, false
		}
		frac = i - start
		digit = digit || frac > 0
	}
	if !digit {
		return 0, false
	}
	e := 0
	if i < len(b) {
		if b[i] != 'e' && b[i] != 'E' || exp10 != 0 {
			return 0, false // parseDecimal scales such a number after reading it
		}
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		if i == len(b) || len(b)-i > 4 {
			return 0, false
		}
		for ; i < len(b); i++ {
			c := b[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			e = e*10 + int(c-'0')
		}
		if eneg {
			e = -e
		}
	}
	e += exp10 - frac
	if mant >= 1<<53 || e < -22 || e > 22 {
		return 0, false
	}
	v = float64(mant)
	if e > 0 {
		v *= exactPow10[e]
	} else if e < 0 {
		v /= exactPow10[-e]
	}
	if neg {
		v = -v
	}
	return v, true
}

// thousands reports whether the comma at b[i] separates thousands: a digit
// before it, exactly three digits after it, then the end, another
// separator or the fraction.
func thousands(b []byte, i int) bool {
	if i == 0 || !isDigit(b[i-1]) || i+3 >= len(b) {
		return false
	}
	for _, c := range b[i+1 : i+4] {
		if !isDigit(c) {
			return false
		}
	}
	return i+4 == len(b) || b[i+4] == ',' || b[i+4] == '.'
}
