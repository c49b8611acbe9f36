package parsers

import "bytes"

// suffixLen returns how many bytes at the end of msg (a line without its
// prefixes) are decorations, and their kinds: a pane's right border (drawn
// last, around what Ray wrote), then Ray's dedup suffix, then a border
// again (a pane row whose tail was copied after the suffix). One dedup
// suffix at most: a second one is message text, as Ray wrote it.
func suffixLen(msg []byte) (n int, kinds uint16) {
	borders := func() {
		for {
			m := paneBorderSuffix(msg[:len(msg)-n])
			if m == 0 {
				return
			}
			n += m
			kinds |= 1 << PrefixPane
		}
	}
	borders()
	if m := rayDedupSuffix(msg[:len(msg)-n]); m > 0 {
		n += m
		kinds |= 1 << PrefixRayDedup
		borders()
	}
	return n, kinds
}

// paneBorder is the box-drawing bar a terminal pane draws at its sides.
var paneBorder = []byte("\u2502")

// paneBorderSuffix returns the length of a pane's right border at the end
// of line: blanks, "│", maybe blanks — after some text — or 0. The blanks
// before the bar are the row's padding.
func paneBorderSuffix(line []byte) int {
	end := trimRightSpace(line)
	if !bytes.HasSuffix(end, paneBorder) {
		return 0
	}
	i := len(end) - len(paneBorder)
	if i == 0 || line[i-1] != ' ' && line[i-1] != '\t' {
		return 0
	}
	if len(trimRightSpace(line[:i])) == 0 {
		return 0 // no message before it
	}
	return len(line) - len(trimRightSpace(line[:i]))
}

// tokRepeated and tokAcross bound Ray's dedup suffix " [repeated Nx across
// cluster]"; tokRayNotice starts the notice Ray prints after the first one.
var (
	tokRepeated  = []byte(" [repeated ")
	tokAcross    = []byte("x across cluster]")
	tokRayNotice = []byte("(Ray deduplicates logs")
)

// maxRayNotice bounds the dedup notice and what a terminal put after it
// (its URL, padding and a pager's "[615/4138]").
const maxRayNotice = 512

// rayDedupSuffix returns the length of Ray's dedup suffix at the end of
// line (with the blanks around it and the notice that may follow it), or 0.
func rayDedupSuffix(line []byte) int {
	end := len(trimRightSpace(line))
	from := max(0, end-len(tokRepeated)-len(tokAcross)-maxRankDigits-maxRayNotice)
	// Every line comes here, and many hold a ']' (timestamps, tqdm bars,
	// lr=[…]): one search for the suffix's "x across cluster]", which
	// bytes.Index runs by its rare first byte, rules out every line without
	// one before the walk back over the ']'s (bytes.LastIndexByte is a byte
	// loop, not a vectorised search).
	if bytes.Index(line[from:end], tokAcross) < 0 {
		return 0
	}
	i := -1
	for k := end; i < 0; {
		b := bytes.LastIndexByte(line[from:k], ']')
		if b < 0 {
			return 0
		}
		b += from
		k = b
		a := b + 1 - len(tokAcross)
		if a < from || !bytes.Equal(line[a:b+1], tokAcross) {
			continue
		}
		d := a
		for d > from && isDigit(line[d-1]) {
			d--
		}
		if r := d - len(tokRepeated) + 1; d < a && r >= from && bytes.Equal(line[r:d], tokRepeated[1:]) {
			i = r
		}
	}
	if i == 0 || line[i-1] != ' ' && line[i-1] != '\t' || len(trimRightSpace(line[:i])) == 0 {
		return 0 // no message before it, or glued to a word: message text
	}
	j := skipDigits(line, i+len(tokRepeated)-1)
	if j == i+len(tokRepeated)-1 || !bytes.HasPrefix(line[j:], tokAcross) {
		return 0
	}
	tail := trimBlank(line[j+len(tokAcross) : end])
	if len(tail) > 0 && !bytes.HasPrefix(tail, tokRayNotice) {
		return 0
	}
	// The blanks before "[repeated" go with it: the message's own trailing
	// blanks (266: "…/LOC)  [repeated 32x …]") are not part of it.
	return len(line) - len(trimRightSpace(line[:i]))
}
