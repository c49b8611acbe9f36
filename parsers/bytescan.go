package parsers

import (
	"bytes"
)

// --- small byte helpers, none of which allocate ---

// lastColonBlank returns the index of the last ": " in b, or -1: what
// bytes.LastIndex(b, []byte(": ")) returns, through bytes.LastIndexByte
// (bytes.LastIndex runs Rabin-Karp over the whole part: a fifth of a
// Megatron line's CPU, BenchmarkLineTrainers).
func lastColonBlank(b []byte) int {
	for n := len(b) - 1; n > 0; {
		i := bytes.LastIndexByte(b[:n], ':')
		if i < 0 {
			return -1
		}
		if b[i+1] == ' ' {
			return i
		}
		n = i
	}
	return -1
}

// indexBy is bytes.Index(b, tok), searching b for tok[at], a byte of tok
// rarer in log text than its first: bytes.Index stops at every occurrence
// of tok's first two bytes, and lower-case ones are everywhere.
func indexBy(b []byte, tok string, at int) int {
	for i := at; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], tok[at])
		if j < 0 {
			return -1
		}
		i += j
		if s := i - at; s+len(tok) <= len(b) && string(b[s:s+len(tok)]) == tok {
			return s
		}
	}
	return -1
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isNumber(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// atoi parses a small optionally negative decimal integer.
func atoi(b []byte) (int, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func intOr(b []byte, def int) int {
	if v, ok := atoi(b); ok {
		return v
	}
	return def
}

func leadingInt(b []byte) int {
	n := 0
	for n < len(b) && isDigit(b[n]) {
		n++
	}
	v, ok := atoi(b[:n])
	if !ok {
		return -1
	}
	return v
}

func atohex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func lastWord(b []byte) []byte {
	b = trimSpace(b)
	return b[bytes.LastIndexByte(b, ' ')+1:]
}

func trimSpace(b []byte) []byte { return trimRightSpace(trimLeftSpace(b)) }

// indexEither is bytes.IndexAny(b, string([]byte{c1, c2})) without the
// byte set IndexAny builds on every call: every NCCL line's header takes
// one, a visible share of scan's CPU with telemetry off.
func indexEither(b []byte, c1, c2 byte) int {
	for i, c := range b {
		if c == c1 || c == c2 {
			return i
		}
	}
	return -1
}

// lastIndexEither is indexEither from the end.
func lastIndexEither(b []byte, c1, c2 byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c1 || b[i] == c2 {
			return i
		}
	}
	return -1
}

func trimLeftSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func trimRightSpace(b []byte) []byte {
	for len(b) > 0 {
		c := b[len(b)-1]
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}
