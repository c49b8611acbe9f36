package parsers

import "bytes"

// csiLen returns the length of the ANSI CSI sequence (ESC '[' parameters
// intermediates final) at the start of b, or 0.
func csiLen(b []byte) int {
	if len(b) < 2 || b[0] != 0x1b || b[1] != '[' {
		return 0
	}
	i := 2
	for i < len(b) && b[i] >= 0x30 && b[i] <= 0x3f {
		i++
	}
	for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
		i++
	}
	if i < len(b) && b[i] >= 0x40 && b[i] <= 0x7e {
		return i + 1
	}
	return 0
}

// ansiLeftover matches "[0m", "[32m", "[1;32m": a colour code whose ESC
// byte was lost (Ray output pasted from a terminal, NCCL-FORMATS.md §12).
func ansiLeftover(b []byte) int {
	i := 1
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == ';') {
		i++
	}
	if i > 1 && i < len(b) && b[i] == 'm' {
		return i + 1
	}
	return 0
}

// StripANSI removes ANSI escape sequences (ESC '[' … final byte, colour
// codes among them) anywhere in line. It returns line itself when there are
// none, without allocating; otherwise it writes the cleaned text to dst[:0]
// and returns it (reusing dst when it is large enough).
func StripANSI(dst, line []byte) []byte {
	i := bytes.IndexByte(line, 0x1b)
	if i < 0 {
		return line
	}
	dst = dst[:0]
	for i >= 0 {
		dst = append(dst, line[:i]...)
		line = line[i:]
		n := csiLen(line)
		if n == 0 {
			// A lone ESC: keep it, it is not ours to judge.
			dst = append(dst, line[0])
			n = 1
		}
		line = line[n:]
		i = bytes.IndexByte(line, 0x1b)
	}
	return append(dst, line...)
}

// literalESC matches a colour code whose ESC byte a paste turned into the
// text "ESC" (270: "ESC[36m(RayWorkerVllm pid=4095)ESC[0m ").
func literalESC(b []byte) int {
	if !bytes.HasPrefix(b, []byte("ESC[")) {
		return 0
	}
	if n := ansiLeftover(b[3:]); n > 0 {
		return 3 + n
	}
	return 0
}
