package parsers

import (
	"bytes"
	"time"
)

// parseCRI parses a CRI log line: "<RFC3339Nano> <stream> <tag> <text>",
// where tag is "F" (full) or "P" (partial), possibly followed by further
// ':'-separated tags.
func parseCRI(b []byte) (t time.Time, stream string, partial bool, text []byte, ok bool) {
	t, n, ok := parseDateTime(b, false)
	if !ok || n >= len(b) || b[n] != ' ' {
		return time.Time{}, "", false, nil, false
	}
	b = b[n+1:]
	switch {
	case bytes.HasPrefix(b, []byte("stdout ")):
		stream = "stdout"
	case bytes.HasPrefix(b, []byte("stderr ")):
		stream = "stderr"
	default:
		return time.Time{}, "", false, nil, false
	}
	b = b[7:]
	tag := b
	if sp := bytes.IndexByte(b, ' '); sp >= 0 {
		tag, text = b[:sp], b[sp+1:]
	} else {
		text = b[len(b):]
	}
	if len(tag) == 0 || tag[0] != 'F' && tag[0] != 'P' || len(tag) > 1 && tag[1] != ':' {
		return time.Time{}, "", false, nil, false
	}
	return t, stream, tag[0] == 'P', text, true
}
