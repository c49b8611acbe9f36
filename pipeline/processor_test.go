package pipeline

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// tokenFinder finds the substring tok (the real one is parsers.Finder).
type tokenFinder struct {
	block []byte
	tok   []byte
}

func (f *tokenFinder) Reset(b []byte) { f.block = b }
func (f *tokenFinder) Clone() Finder  { return &tokenFinder{tok: f.tok} }
func (f *tokenFinder) Next(from int) int {
	if from >= len(f.block) {
		return -1
	}
	i := bytes.Index(f.block[from:], f.tok)
	if i < 0 {
		return -1
	}
	return from + i
}

// linesWithToken is the line-by-line reference of the block scanner with
// tokenFinder{"NCCL"}: the lines of text holding the token and at most max
// bytes long ("offset:line"), the number of longer ones holding it, and
// every line of at most max bytes by its offset.
func linesWithToken(text string, max int) (want []string, over int64, all map[int64]string) {
	all = map[int64]string{}
	off := 0
	for _, l := range strings.SplitAfter(text, "\n") {
		line := strings.TrimSuffix(l, "\n")
		if len(line) <= max {
			all[int64(off)] = line
		}
		if strings.Contains(line, "NCCL") {
			if len(line) > max {
				over++
			} else {
				want = append(want, fmt.Sprintf("%d:%s", off, line))
			}
		}
		off += len(l)
	}
	return want, over, all
}

// TestBlockScannerMatchesLineByLine compares the block scanner with a
// line-by-line reference on random inputs, with block sizes small enough
// that lines straddle blocks, over a reader that returns one byte at a time
// now and then.
func TestBlockScannerMatchesLineByLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 200; iter++ {
		var in strings.Builder
		nlines := rng.IntN(60)
		for i := 0; i < nlines; i++ {
			n := rng.IntN(90)
			for j := 0; j < n; j++ {
				if rng.IntN(40) == 0 {
					in.WriteString("NCCL")
				} else {
					in.WriteByte(byte('a' + rng.IntN(26)))
				}
			}
			if i < nlines-1 || rng.IntN(2) == 0 {
				in.WriteByte('\n')
			}
		}
		text := in.String()
		max := 40 + rng.IntN(40)
		want, wantOver, _ := linesWithToken(text, max)
		size := 4*max + rng.IntN(64)
		var r = iotest.HalfReader(strings.NewReader(text))
		bs := &BlockScanner{r: r, find: &tokenFinder{tok: []byte("NCCL")}, max: max, size: size}
		var got []string
		if err := bs.Scan(func(line []byte, off int64) { got = append(got, fmt.Sprintf("%d:%s", off, line)) }); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("iteration %d (max %d, size %d):\ngot  %q\nwant %q", iter, max, size, got, want)
		}
		// Lines longer than the buffer are counted when they are skipped
		// whole; shorter oversized candidate lines are counted when found.
		if bs.Oversized < wantOver {
			t.Fatalf("iteration %d: oversized = %d; want at least %d", iter, bs.Oversized, wantOver)
		}
		if bs.Bytes != int64(len(text)) {
			t.Fatalf("iteration %d: bytes = %d; want %d", iter, bs.Bytes, len(text))
		}
	}
}

func TestBlockScannerSkipsLineLongerThanBuffer(t *testing.T) {
	text := "NCCL short\n" + strings.Repeat("NCCL", 100) + "\nNCCL after\n"
	bs := &BlockScanner{r: strings.NewReader(text), find: &tokenFinder{tok: []byte("NCCL")}, max: 16, size: 64}
	var got []string
	if err := bs.Scan(func(line []byte, _ int64) { got = append(got, string(line)) }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "NCCL short|NCCL after" || bs.Oversized != 1 {
		t.Fatalf("got %q, oversized %d; want the two short lines and 1 oversized", got, bs.Oversized)
	}
}

// TestBlockScannerDenseStretch runs the block scanner over inputs whose
// share of candidate lines goes from none to all, with a small sample so
// that blocks go dense: every candidate line is handed on once, in order,
// with its offset; Lines[:Searched] hold the token; from Searched on a
// chunk holds every line of the rest of its block; only candidate lines
// over the cap are counted. Sparse inputs never go dense, dense ones do.
func TestBlockScannerDenseStretch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dense := map[int]int{} // chunks with a dense stretch, by share of candidate lines
	for iter := 0; iter < 300; iter++ {
		share := []int{0, 5, 40, 60, 90, 100}[iter%6]
		var in strings.Builder
		nlines := 20 + rng.IntN(200)
		for i := 0; i < nlines; i++ {
			n := rng.IntN(60)
			if rng.IntN(30) == 0 {
				n += 80 // over the cap
			}
			line := make([]byte, n)
			for j := range line {
				line[j] = byte('a' + rng.IntN(26))
			}
			if rng.IntN(100) < share {
				at := rng.IntN(n + 1)
				line = append(line[:at:at], append([]byte("NCCL"), line[at:]...)...)
			}
			in.Write(line)
			if i < nlines-1 || rng.IntN(2) == 0 {
				in.WriteByte('\n')
			}
		}
		text := in.String()
		max := 70
		want, wantOver, all := linesWithToken(text, max)
		bs := &BlockScanner{r: strings.NewReader(text), find: &tokenFinder{tok: []byte("NCCL")}, max: max,
			size: 4*max + rng.IntN(2048), sample: 200 + rng.IntN(300)}
		var got []string
		err := bs.ScanParsed(nil, func(c *Chunk, _ *ParsedChunk) {
			for i, l := range c.Lines {
				if line, ok := all[c.Offs[i]]; !ok || line != string(l) {
					t.Fatalf("iteration %d: line %q at %d is not a line of the input", iter, l, c.Offs[i])
				}
				if i < c.Searched && !bytes.Contains(l, []byte("NCCL")) {
					t.Fatalf("iteration %d: searched line %q holds no token", iter, l)
				}
				if i > c.Searched && c.Offs[i] != c.Offs[i-1]+int64(len(c.Lines[i-1]))+1 {
					// Only lines over the cap lie between two of a dense stretch.
					gap := text[c.Offs[i-1]+int64(len(c.Lines[i-1]))+1 : c.Offs[i]]
					for _, l := range strings.SplitAfter(gap, "\n") {
						if l != "" && len(l) <= max+1 {
							t.Fatalf("iteration %d: dense stretch skips %q", iter, l)
						}
					}
				}
				if bytes.Contains(l, []byte("NCCL")) {
					got = append(got, fmt.Sprintf("%d:%s", c.Offs[i], l))
				}
			}
			if c.Searched < len(c.Lines) {
				dense[share]++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("iteration %d:\ngot  %q\nwant %q", iter, got, want)
		}
		if bs.Oversized != wantOver {
			t.Fatalf("iteration %d: oversized = %d; want %d", iter, bs.Oversized, wantOver)
		}
	}
	if dense[0] != 0 || dense[5] != 0 || dense[90] == 0 || dense[100] == 0 {
		t.Fatalf("chunks with a dense stretch by percent of candidate lines: %v; want none at 0 and 5, some at 90 and 100", dense)
	}
}
