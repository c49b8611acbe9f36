package parsers_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
	"github.com/ncclwatch/ncclwatch/parsers"
)

// holdsMarkerSpec is what parsers.HoldsProgressMarker stands for: the line
// holds one of the generic reader's markers.
func holdsMarkerSpec(b []byte) bool {
	for _, m := range parsers.ProgressMarkers {
		if bytes.Contains(b, m) {
			return true
		}
	}
	return false
}

// gateFiller is noise of the kind the gate mostly sees (the load
// generator's torch warning) with pieces of markers and no marker.
const gateFiller = "/usr/lib/python3.10/dist-packages/torch/utils/checkpoint.py:464: UserWarning: the use_reentrant " +
	"parameter should be passed explicitly; use_reentrant=False is recommended - from mf_u at 5 m/s 5m, (m) tflop TFLOP f"

// gateNearMisses are each marker with one byte replaced by every byte
// value, and with its first or last byte cut.
func gateNearMisses() [][]byte {
	var out [][]byte
	for _, m := range parsers.ProgressMarkers {
		out = append(out, m[1:], m[:len(m)-1])
		for i := range m {
			for c := range 256 {
				v := bytes.Clone(m)
				v[i] = byte(c)
				out = append(out, v)
			}
		}
	}
	return out
}

// TestHoldsProgressMarker checks the gate against a search of each marker:
// each marker alone and at every place of a noise line (a marker the gate
// misses fails here, whatever its place in a scan step), the markers' near
// misses alone and in noise, every line of testdata and of each stream
// shape's log.
func TestHoldsProgressMarker(t *testing.T) {
	check := func(what string, b []byte) bool {
		t.Helper()
		if got, want := parsers.HoldsProgressMarker(b), holdsMarkerSpec(b); got != want {
			t.Errorf("%s: HoldsProgressMarker(%q) = %v; it holds a marker: %v", what, b, got, want)
			return false
		}
		return true
	}
	fill := []byte(gateFiller)
	if holdsMarkerSpec(fill) {
		t.Fatalf("the filler holds a marker")
	}
	check("filler", fill)
	for _, m := range parsers.ProgressMarkers {
		if !parsers.HoldsProgressMarker(m) {
			t.Errorf("marker %q alone is not accepted", m)
			continue
		}
		for k := 0; k <= len(fill); k++ {
			line := append(append(append([]byte(nil), fill[:k]...), m...), fill[k:]...)
			if !parsers.HoldsProgressMarker(line) {
				t.Errorf("marker %q at %d of the filler is not accepted", m, k)
				break
			}
		}
	}
	for _, v := range gateNearMisses() {
		if !check("near miss", v) || !check("near miss at the start", append(bytes.Clone(v), fill...)) ||
			!check("near miss at the end", append(bytes.Clone(fill), v...)) {
			break
		}
	}

	// Every line of every file under testdata.
	lines, hits := 0, 0
	err := filepath.WalkDir(filepath.Join("..", "testdata"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for l := range bytes.SplitSeq(data, []byte("\n")) {
			lines++
			if holdsMarkerSpec(l) {
				hits++
			}
			if !check(path, l) {
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lines < 10000 || hits < 500 {
		t.Fatalf("testdata: %d lines, %d with a marker; want more", lines, hits)
	}

	// Every line of each stream shape's log (1 MiB).
	for _, s := range []loadtest.Shape{loadtest.ShapeDefault, loadtest.ShapeRandomSteps, loadtest.ShapeCluster, loadtest.ShapeClusterInspector} {
		cfg := loadtest.DefaultGenConfig()
		cfg.Shape, cfg.Bytes = s, 1<<20
		var buf bytes.Buffer
		if _, err := loadtest.Generate(&buf, cfg); err != nil {
			t.Fatal(err)
		}
		n := 0
		for l := range bytes.Lines(buf.Bytes()) {
			if !check(string(s), bytes.TrimSuffix(l, []byte("\n"))) {
				break
			}
			n++
		}
		if n < 1000 {
			t.Fatalf("%s: %d lines", s, n)
		}
	}
}

// FuzzHoldsProgressMarker compares the gate with a search of each marker
// on any line.
func FuzzHoldsProgressMarker(f *testing.F) {
	f.Add([]byte(gateFiller))
	for _, m := range parsers.ProgressMarkers {
		f.Add(bytes.Clone(m))
		f.Add(append([]byte(gateFiller), m...))
	}
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "telemetry", "*.log"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for l := range bytes.SplitSeq(data, []byte("\n")) {
			if len(l) < 512 {
				f.Add(bytes.Clone(l))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := parsers.HoldsProgressMarker(b), holdsMarkerSpec(b); got != want {
			t.Fatalf("HoldsProgressMarker(%q) = %v; it holds a marker: %v", b, got, want)
		}
	})
}
