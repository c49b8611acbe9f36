package parsers

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The prefilters as they were written before tokenSet, one bytes.Index
// search per token: the reference the one-pass sets must agree with.
func naiveSearch(line, tok []byte, i int) bool {
	for from := 0; from < len(line); {
		j := bytes.Index(line[from:], tok)
		if j < 0 {
			return false
		}
		if plausibleAt(i, line, from+j) {
			return true
		}
		from += j + 1
	}
	return false
}

func naiveCandidate(line []byte) bool {
	for i, tok := range finderTokens {
		if naiveSearch(line, tok, i) {
			return true
		}
	}
	return false
}

func naiveTelemetryCandidate(line []byte) bool {
	for _, t := range TelemetryTokens {
		if bytes.Contains(line, t) {
			return true
		}
	}
	for _, t := range telemetrySlowTokens {
		if bytes.Contains(line, t) {
			return true
		}
	}
	return bytes.Contains(line, []byte(" Pid "))
}

// naiveIndex is the first start at or after from of any finder token
// (with telemetry: and of the telemetry tokens) that is plausible.
func naiveIndex(b []byte, from int, telemetry bool) int {
	toks := finderTokens[:]
	if telemetry {
		toks = append(append(append([][]byte(nil), toks...), TelemetryTokens[:]...), telemetrySlowTokens[:]...)
	}
	best := -1
	for i, tok := range toks {
		for f := from; f < len(b); {
			j := bytes.Index(b[f:], tok)
			if j < 0 {
				break
			}
			at := f + j
			if i >= len(finderTokens) || plausibleAt(i, b, at) {
				if best < 0 || at < best {
					best = at
				}
				break
			}
			f = at + 1
		}
	}
	return best
}

var tokenCases = []string{
	"",
	"N",
	"NCCL",
	"xNCCL",
	"host:1:1 [0] NCCL INFO Using network IB",
	"host:1:1 [0] INFO NET/IB : Using",
	"root - INFO - step 1",
	"[0] INFO x",
	"]INFO ",
	"file.cc:123 WARN oops",
	"x WARN y",
	"Pid  1 on host",
	"#  Rank  0 Group  0 Pid  78499 on h device  0",
	"worker pid=123, ip=10.0.0.1",
	" iteration 10/ 500 | elapsed time per iteration (ms): 6070.3",
	"{'loss': 0.4, 'epoch': 1}",
	"train_step_timing in s: 1.2",
	"     8388608       2097152     float     sum      -1    123.4   68.0  127.5      0",
	"int8 int32 int64",
	"iter latency",
	"saving model to /x",
	"Saving checkpoint",
	"half double f8e4m3",
	"_tim_time",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa(ms)",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa(ms",
	"Tera FlopsTera Flops",
}

func TestTokenSetsAgree(t *testing.T) {
	for _, c := range tokenCases {
		checkTokenSets(t, []byte(c), true)
	}
}

// testPairTables are the pair tables of the sets checkTokenSets checks.
var testPairTables = map[*tokenSet]*pairTable{ncclSet: newPairTable(ncclSet), allSet: newPairTable(allSet)}

// TestPairTableEdges: a pair table's scan, eight positions a step and the
// last nine bytes at once, finds each token of allSet at every offset of
// texts of every length up to three steps, alone and after a token that
// holds its anchor pair but fails its check.
func TestPairTableEdges(t *testing.T) {
	pt := testPairTables[allSet]
	for _, tk := range allSet.toks {
		for n := len(tk.tok); n <= 27; n++ {
			for at := 0; at+len(tk.tok) <= n; at++ {
				b := bytes.Repeat([]byte{'~'}, n)
				copy(b[at:], tk.tok)
				// A token with a check may need more around it ("Pid ").
				if got := pt.contains(allSet, b); got != allSet.contains(b) || !got && tk.check == nil {
					t.Errorf("%q: pairTable.contains %v, tokenSet.contains %v", b, got, allSet.contains(b))
				}
				// Only the anchor pair: the scan finds it, match rejects it.
				c := bytes.Repeat([]byte{'~'}, n)
				copy(c[at+tk.off:], tk.tok[tk.off:tk.off+2])
				if got, want := pt.contains(allSet, c), allSet.contains(c); got != want {
					t.Errorf("%q: pairTable.contains %v; tokenSet.contains %v", c, got, want)
				}
			}
		}
	}
}

// checkTokenSets compares the sets with the searches per token; index is
// checked from every position (every) or, as the block finder calls it,
// from 0 and from one past each hit.
func checkTokenSets(t *testing.T, b []byte, every bool) {
	t.Helper()
	if got, want := Candidate(b), naiveCandidate(b); got != want {
		t.Errorf("Candidate(%q) = %v; want %v", b, got, want)
	}
	if got, want := TelemetryCandidate(b), naiveTelemetryCandidate(b); got != want {
		t.Errorf("TelemetryCandidate(%q) = %v; want %v", b, got, want)
	}
	if got, want := Prefilter(true)(b), naiveCandidate(b) || naiveTelemetryCandidate(b); got != want {
		t.Errorf("Prefilter(true)(%q) = %v; want %v", b, got, want)
	}
	if got, want := lineSet.mask(b), naiveLineMask(b); got != want {
		t.Errorf("lineSet.mask(%q) = %b; want %b", b, got, want)
	}
	// Lines.Line's one pass: the prefilter on the whole line, the markers
	// of its stripped, right-trimmed text.
	rest, _ := StripPrefix(b)
	body := trimRightSpace(rest)
	if lo, ok := offsetIn(b, body); !ok {
		t.Errorf("offsetIn(%q, %q) = false; want the stripped text's start", b, body)
	} else {
		m := lineMarkSet.maskWithin(b, len(finderTokens), lo, lo+len(body))
		if got, want := m&(1<<len(finderTokens)-1) != 0, naiveCandidate(b); got != want {
			t.Errorf("lineMarkSet candidate of %q = %v; want %v", b, got, want)
		}
		if got, want := m>>len(finderTokens), lineSet.mask(body); got != want {
			t.Errorf("lineMarkSet markers of %q = %b; want lineSet.mask(%q) = %b", b, got, body, want)
		}
	}
	for _, set := range []*tokenSet{ncclSet, allSet} {
		if got, want := testPairTables[set].contains(set, b), set.contains(b); got != want {
			t.Errorf("pairTable.contains(%q) = %v; tokenSet.contains %v", b, got, want)
		}
	}
	var f Finder
	f.Reset(b)
	for from := 0; from <= len(b); from++ {
		if got, want := f.Next(from), naiveIndex(b, from, false); got != want {
			t.Errorf("Finder.Next(%d) of %q = %d; want %d", from, b, got, want)
			break
		}
	}
	for _, set := range []struct {
		s         *tokenSet
		telemetry bool
	}{{ncclSet, false}, {allSet, true}} {
		for from := 0; from <= len(b); from++ {
			got, want := set.s.index(b, from), naiveIndex(b, from, set.telemetry)
			if got != want {
				t.Errorf("index(%q, %d) with telemetry %v = %d; want %d", b, from, set.telemetry, got, want)
				break
			}
			if !every {
				if got < 0 {
					break
				}
				from = got
			}
		}
	}
}

// FuzzTokenSets checks the one-pass token sets against one search per
// token.
func FuzzTokenSets(f *testing.F) {
	for _, c := range tokenCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		checkTokenSets(t, b, false)
		checkIndexBy(t, b)
	})
}

// checkIndexBy compares the searches by a rare byte (indexBy,
// ncclTelemetryText) with bytes.Index and
// bytes.Contains.
func checkIndexBy(t *testing.T, b []byte) {
	t.Helper()
	for _, c := range []struct {
		tok string
		at  int
	}{{"checkpoint", 4}, {"Using network ", 0}, {"anks ", 2}, {"ab", 1}, {"aa", 0}} {
		if got, want := indexBy(b, c.tok, c.at), bytes.Index(b, []byte(c.tok)); got != want {
			t.Fatalf("indexBy(%q, %q, %d) = %d; bytes.Index finds %d", b, c.tok, c.at, got, want)
		}
	}
	want := false
	for _, tok := range []string{"Using network ", "Using internal Network ", "nranks ", "nRanks "} {
		want = want || bytes.Contains(b, []byte(tok))
	}
	if got := ncclTelemetryText(b); got != want {
		t.Fatalf("ncclTelemetryText(%q) = %v; want %v", b, got, want)
	}
}

// TestIndexBy runs checkIndexBy on every testdata line and on texts where
// the searched byte lies before, in or after a token, or too near an end.
func TestIndexBy(t *testing.T) {
	cases := []string{"", "k", "aab", "aaa", "ab", "b", "nRanks 8", "x nranks 8 nRanks", "anks ranks nr anks ", "Rnranks ",
		"NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2", "Using internal Network Socket", "Using network IB",
		"kcheckpoint", "checkpoin", "heckpoint", "checkcheckpoint", "checkpoincheckpoint", "kkkk checkpoint kk",
		"chek checkpoint", "checkpoint-checkpoint", "CHECKPOINT checkpoint"}
	for _, l := range testdataLines(t, cases...) {
		checkIndexBy(t, l)
	}
}

// BenchmarkCandidateNaive and BenchmarkCandidateSet compare one search
// per token with one tokenSet pass for Candidate's five tokens.
func BenchmarkCandidateNaive(b *testing.B) {
	in := []byte(" iteration       10/  500000 | consumed samples:          640 | elapsed time per iteration (ms): 6070.3 | learning rate: 1.500E-04 | lm loss: 1.0E+01")
	loopCPU(b, func() { naiveCandidate(in) })
}

func BenchmarkCandidateSet(b *testing.B) {
	in := []byte(" iteration       10/  500000 | consumed samples:          640 | elapsed time per iteration (ms): 6070.3 | learning rate: 1.500E-04 | lm loss: 1.0E+01")
	loopCPU(b, func() { ncclSet.contains(in) })
}

// TestFinderAgrees checks both finders against one search per token, over
// a block of many lines.
func TestFinderAgrees(t *testing.T) {
	block := []byte(strings.Join(tokenCases, "\n"))
	for _, telemetry := range []bool{false, true} {
		f := &Finder{}
		if telemetry {
			f = NewTelemetryFinder()
		}
		f.Reset(block)
		for from := 0; from <= len(block); from++ {
			if got, want := f.Next(from), naiveIndex(block, from, telemetry); got != want {
				t.Fatalf("telemetry %v: Next(%d) = %d; want %d", telemetry, from, got, want)
			}
		}
	}
}

// TestLineSetMask checks lineSet's mask against one bytes.Contains per
// marker.
func TestLineSetMask(t *testing.T) {
	lines := append([]string(nil), tokenCases...)
	for _, c := range telCases {
		lines = append(lines, c.in)
	}
	for _, l := range lines {
		b := []byte(l)
		if got, want := lineSet.mask(b), naiveLineMask(b); got != want {
			t.Errorf("lineSet.mask(%q) = %b; want %b", b, got, want)
		}
	}
}

// naiveLineMask is lineSet.mask by one bytes.Contains per marker.
func naiveLineMask(b []byte) uint64 {
	var m uint64
	for i, sp := range lineSpecs() {
		if bytes.Contains(b, sp.tok) {
			m |= 1 << i
		}
	}
	return m
}

// checkFinderCovers checks what the block scanner's dense stretch rests on
// (pipeline.BlockScanner hands every line of a stretch where most lines
// hold a token to the line parser): a line in which the finder finds no
// token gives the line parser nothing — no NCCL line, no telemetry line,
// no launcher host — with telemetry on and off, so handing it on changes no
// result.
func checkFinderCovers(t *testing.T, line []byte) {
	t.Helper()
	for _, telemetry := range []bool{false, true} {
		f, l := &Finder{}, &Lines{}
		if telemetry {
			f, l = NewTelemetryFinder(), NewLines(NewTelemetry(DefaultTelemetryConfig()))
		}
		f.Reset(line)
		if f.Next(0) >= 0 {
			continue
		}
		ev := pipeline.Event{LauncherHost: []byte("stale")}
		var tl pipeline.TelemetryLine
		if nccl, tel := l.Line(line, &ev, &tl); nccl || tel || ev.LauncherHost != nil {
			t.Fatalf("telemetry %v: no finder token in %q, but the line parser says nccl %v, telemetry %v (%s), launcher host %q",
				telemetry, line, nccl, tel, tl.Kind, ev.LauncherHost)
		}
	}
}

// finderCoverCases are lines a review found the property failing on, or
// near it: JSON figures by their default names, colour codes inside a
// token, a Megatron step time with a blank before its colon, rows of
// rccl-tests' and NCCL 1's types.
var finderCoverCases = []string{
	`{"step": 5, "tflops": 100.5}`, `{"step": 5, "mfu": 40.1}`, `{"step": 5, "tokens_per_s": 1000}`,
	`{"iteration": 5, "samples_per_s": 1000, "loss": 2.1}`, `[rank0]: {"step": 5, "mfu": 40.1}`,
	`2024-01-01T00:00:00Z stdout F {"step": 5, "mfu": 40.1}`,
	` iteration       10/    1000 | elapsed time per iteration (s) : 1.5 |`,
	"iter 10: loss 3.2202, time 893.76ms,\x1b[0m mfu 16.68%",
	"iter 10: loss 3.2202, time 893.76ms, mfu\x1b[0m 16.68%",
	"I0811 21:55:16.704861 1 metric_logger.py:226] completed step: 3, seconds: 10.344, TFLOP\x1b[0m/s/device: 346.932, loss: 12.979",
	"[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  memory: 66.91GiB\x1b[0m(37.51%)  tps: 10,050",
	"\x1b[32m[titan] 2026-02-24 19:46:17,508 - root - INFO - \x1b[31mstep:  4  \x1b[33mmemory: 66.91Gi\x1b[0mB(37.51%)  \x1b[34mtps: 10,050",
	"{'lo\x1b[0mss': 0.39, 'epoch': 1.0}", "# nThread 1 nGpus 1 minBytes 8 max\x1b[0mBytes 134217728 step: 2(factor)",
	"#  Rank  0 Group  0 Pid\x1b[0m  78499 on gpu01 device  0 [0x00] Tesla T4",
	"           4             1     flo\x1b[0mat    sum      -1    27.06    0.00    0.00      0    27.03    0.00    0.00      0",
	"host:1:1 [0] NC\x1b[0mCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2", "[ba\x1b[0mtch=16/100]:",
	"Saving model chec\x1b[0mkpoint to /x/checkpoint-500", "epoch 1 | loss 0.5 | 3.2 it/s\r{'lo\x1b[0mss': 0.39}",
	`        1024           256  fp8_e4m3     sum      -1    27.06    0.04    0.07      0    27.03    0.04    0.07      0`,
	`        1024           256      char     sum      -1    27.06    0.04    0.07      0    27.03    0.04    0.07      0`,
}

// TestFinderCoversLines runs checkFinderCovers on every testdata line, the
// cases above, and each with its finder tokens cut out.
func TestFinderCoversLines(t *testing.T) {
	n := 0
	for _, l := range testdataLines(t, append(append([]string(nil), hfStepCases...), finderCoverCases...)...) {
		checkFinderCovers(t, l)
		f := NewTelemetryFinder()
		f.Reset(l)
		if f.Next(0) < 0 {
			continue
		}
		cut := append([]byte(nil), l...)
		for _, sp := range allSet.toks {
			cut = bytes.ReplaceAll(cut, sp.tok, sp.tok[:1])
		}
		checkFinderCovers(t, cut)
		n++
	}
	if n < 1000 {
		t.Fatalf("only %d testdata lines hold a finder token", n)
	}
}

// FuzzFinderCovers is checkFinderCovers on any line.
func FuzzFinderCovers(f *testing.F) {
	for _, c := range append(append(append([]string(nil), tokenCases...), hfStepCases...), finderCoverCases...) {
		f.Add([]byte(c))
	}
	telemetryLines(f, func(_ string, line []byte) { f.Add(append([]byte(nil), line...)) })
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 || bytes.IndexByte(b, '\n') >= 0 {
			return
		}
		checkFinderCovers(t, b)
	})
}

// TestJSONNamesHoldTokens: a JSON line with a step and one figure by any
// default name is a telemetry line the finder finds.
func TestJSONNamesHoldTokens(t *testing.T) {
	c := DefaultTelemetryConfig().JSON
	p := NewTelemetry(DefaultTelemetryConfig())
	for _, names := range [][]string{c.StepTime, c.StepTimeMS, c.TokensPerS, c.SamplesPerS, c.TFLOPs, c.MFU} {
		for _, name := range names {
			line := []byte(`{"step": 5, "` + name + `": 2.5}`)
			var tl pipeline.TelemetryLine
			if !p.Parse(line, &tl) {
				t.Errorf("%s: not a telemetry line", line)
			}
			if !allSet.contains(line) {
				t.Errorf("%s: no finder token", line)
			}
		}
	}
}
