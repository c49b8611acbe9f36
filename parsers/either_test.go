package parsers

import (
	"bytes"
	"testing"
)

// FuzzIndexEither: indexEither and lastIndexEither answer as bytes.IndexAny
// and bytes.LastIndexAny with the same two bytes.
func FuzzIndexEither(f *testing.F) {
	for _, s := range []string{"", ":", "host:1:2", "[a:0]:h:1:2", "eth0:10.0.0.1<0>", "a b,c", "1.5e9", "ÿ:é"} {
		f.Add([]byte(s), byte(':'), byte(']'))
	}
	f.Fuzz(func(t *testing.T, b []byte, c1, c2 byte) {
		if c1 >= 0x80 || c2 >= 0x80 {
			return // IndexAny takes runes; the parsers search ASCII
		}
		set := string([]byte{c1, c2})
		if got, want := indexEither(b, c1, c2), bytes.IndexAny(b, set); got != want {
			t.Errorf("indexEither(%q, %q, %q) = %d; bytes.IndexAny %d", b, c1, c2, got, want)
		}
		if got, want := lastIndexEither(b, c1, c2), bytes.LastIndexAny(b, set); got != want {
			t.Errorf("lastIndexEither(%q, %q, %q) = %d; bytes.LastIndexAny %d", b, c1, c2, got, want)
		}
	})
}

// FuzzLastColonBlank: lastColonBlank answers as bytes.LastIndex with ": ".
func FuzzLastColonBlank(f *testing.F) {
	for _, s := range []string{"", ":", ": ", " :", "::", ":: ", "a: b", "a: b: c", "a:b", "x : y:", " lm loss: 2.1E+00 ", "ÿ: é:"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := lastColonBlank(b), bytes.LastIndex(b, []byte(": ")); got != want {
			t.Errorf("lastColonBlank(%q) = %d; bytes.LastIndex %d", b, got, want)
		}
	})
}
