package parsers

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The fast paths of the line parsers are compared here with the plain
// code they stand for, on every line of testdata (corpus, telemetry,
// checkpoints) and on hand-made edge cases; the fuzz targets compare them on random lines too.

// testdataLines returns every line of the test logs, plus extra.
func testdataLines(t *testing.T, extra ...string) [][]byte {
	t.Helper()
	var lines [][]byte
	for _, dir := range []string{"corpus", "telemetry", "checkpoints"} {
		files, err := filepath.Glob(filepath.Join("..", "testdata", dir, "*.log"))
		if err != nil || len(files) == 0 {
			t.Fatalf("testdata/%s: %v, %d files", dir, err, len(files))
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for l := range bytes.SplitSeq(data, []byte("\n")) {
				lines = append(lines, l)
			}
		}
	}
	for _, e := range extra {
		lines = append(lines, []byte(e))
	}
	return lines
}

// checkpointEdgeCases have "checkpoint" where the dispatch of
// parseCheckpointLower could go wrong: many times, overlapping a marker's
// start, at the line's ends.
var checkpointEdgeCases = []string{
	"checkpoint",
	"save-checkpoint",
	"save-checkpoint ....: (1.0, 2.0)",
	"checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint Saving model checkpoint to /a",
	"checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint checkpoint Saving model checkpoint to /a",
	"Saving model checkpoint to Saving model checkpoint to /b",
	"successfully saved checkpoint xx successfully saved checkpoint at iteration 5 to /p",
	"loading checkpoint from /x at iteration 7 and save-checkpoint: 3.0",
	"Saved checkpoint checkpoint_1.pt (epoch 1 @ 10 updates) (writing took 1.5 seconds)",
	"Finished saving the checkpointFinished saving the checkpoint in 2.84 seconds.",
}

// TestCheckpointLowerDispatch: parseCheckpointLower, which looks for each
// form's marker around the line's "checkpoint"s, reads every line as
// the search of the line once per form (parseCheckpointForms) does.
func TestCheckpointLowerDispatch(t *testing.T) {
	var fast, slow pipeline.CheckpointLine
	hits := 0
	for _, l := range testdataLines(t, checkpointEdgeCases...) {
		if !bytes.Contains(l, tokCheckpointLower) {
			continue
		}
		fast.Reset()
		slow.Reset()
		okF, okS := parseCheckpointLower(l, &fast), parseCheckpointForms(l, &slow)
		if okF != okS || !sameParse(fast, slow) {
			t.Errorf("parseCheckpointLower(%q) = %v %+v; parseCheckpointForms = %v %+v", l, okF, fast, okS, slow)
		}
		if okF {
			hits++
		}
	}
	if hits < 20 {
		t.Fatalf("%d checkpoint lines read; want the testdata's", hits)
	}
}

// sameParse compares two parse results field by field, NaN equal to NaN
// (the parsers' "absent").
func sameParse(a, b any) bool { return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) }

// scales are the exponents parseScaled is called with (ms, µs, ns to s;
// GB; none).
var scales = []int{0, -3, -6, -9, 3, 9}

// checkExactDecimal fails when exactDecimal gives a value for b that
// parseDecimal (strconv) does not give bit for bit.
func checkExactDecimal(t *testing.T, b []byte) {
	t.Helper()
	exp := bytes.ContainsAny(b, "eE")
	for _, e := range scales {
		v, ok := exactDecimal(b, e)
		if !ok {
			continue
		}
		if exp && e != 0 {
			t.Fatalf("exactDecimal(%q, %d) = %v, true: a number with an exponent is scaled after reading", b, e, v)
		}
		buf := append(make([]byte, 0, len(b)+8), b...)
		w, wok := parseDecimal(buf, exp, e)
		if !wok || math.Float64bits(v) != math.Float64bits(w) {
			t.Fatalf("exactDecimal(%q, %d) = %v (%#x); parseDecimal = %v %v (%#x)", b, e, v, math.Float64bits(v), w, wok, math.Float64bits(w))
		}
	}
}

var numberRE = regexp.MustCompile(`[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?`)

// TestExactDecimal: the float fast path gives what strconv gives, bit for
// bit, for every number in testdata, the trainer lines of the load
// generator's shapes and edge cases; and it does take the common figures.
func TestExactDecimal(t *testing.T) {
	taken, seen := 0, 0
	for _, l := range testdataLines(t) {
		for _, m := range numberRE.FindAll(l, -1) {
			seen++
			checkExactDecimal(t, m)
			if _, ok := exactDecimal(m, 0); ok {
				taken++
			}
		}
	}
	if seen < 10000 || taken < seen*9/10 {
		t.Fatalf("fast path took %d of %d numbers of testdata; want most", taken, seen)
	}
	for _, s := range []string{"0", "-0", "+0", "0.0", "-0.0", ".5", "5.", ".", "-", "+", "e5", "1e", "1e+", "1e-0",
		"9007199254740991", "9007199254740992", "9007199254740993", "1e22", "1e23", "1e-22", "1e-23",
		"123456789012345678", "1234567890123456789", "12345678901234567890", "0.000000000000000000001",
		"00000000000000000000000000001", "1.5e10000", "1.5e-10000", "1..2", "1-2", "1e2e3", "4.9e-324",
		"1.7976931348623157e308", "2.399630E+00", "1.500E-04", "0.0009547"} {
		checkExactDecimal(t, []byte(s))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		checkExactDecimal(t, randomDecimal(rng))
	}
}

// randomDecimal is a number as trainers print them: up to 20 digits, a
// point anywhere, sometimes a sign and an exponent.
func randomDecimal(rng *rand.Rand) []byte {
	var b []byte
	if rng.IntN(4) == 0 {
		b = append(b, "+-"[rng.IntN(2)])
	}
	n := 1 + rng.IntN(20)
	dot := rng.IntN(n + 2)
	for i := range n {
		if i == dot {
			b = append(b, '.')
		}
		b = append(b, byte('0'+rng.IntN(10)))
	}
	if rng.IntN(3) == 0 {
		b = append(b, "eE"[rng.IntN(2)])
		if rng.IntN(2) == 0 {
			b = append(b, "+-"[rng.IntN(2)])
		}
		b = strconv.AppendInt(b, int64(rng.IntN(40)), 10)
	}
	return b
}

func FuzzExactDecimal(f *testing.F) {
	for _, s := range []string{"0", "-0.5", "1.500E-04", "2.399630E+00", "9007199254740993", "1e22", ".5", "5."} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxNumberLen {
			return
		}
		checkExactDecimal(t, b)
		// On digits, points, exponents and signs (no separators, no '%'),
		// parseScaled is parseDecimal.
		if len(bytes.Trim(b, "0123456789.eE+-")) > 0 || !bytes.ContainsAny(b, "0123456789") {
			return
		}
		for _, e := range scales {
			v, ok := parseScaled(b, e)
			buf := append(make([]byte, 0, len(b)+8), b...)
			w, wok := parseDecimal(buf, bytes.ContainsAny(b, "eE"), e)
			if ok != wok || ok && math.Float64bits(v) != math.Float64bits(w) {
				t.Fatalf("parseScaled(%q, %d) = %v %v; parseDecimal = %v %v", b, e, v, ok, w, wok)
			}
		}
	})
}

// scanStringRef is scanString one byte at a time: the reference of its
// word-at-a-time first 24 bytes.
func scanStringRef(b []byte, i int) (end int, esc, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, esc, true
		case '\\':
			esc = true
			if j+1 >= len(b) {
				return 0, false, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+6 > len(b) || !isHex4(b[j+2:j+6]) {
					return 0, false, false
				}
				j += 5
			default:
				return 0, false, false
			}
		}
	}
	return 0, false, false
}

func checkScanString(t *testing.T, b []byte) {
	t.Helper()
	for i := range b {
		if b[i] != '"' {
			continue
		}
		e, esc, ok := scanString(b, i)
		we, wesc, wok := scanStringRef(b, i)
		if e != we || esc != wesc || ok != wok {
			t.Fatalf("scanString(%q, %d) = %d %v %v; want %d %v %v", b, i, e, esc, ok, we, wesc, wok)
		}
	}
}

// TestScanString compares scanString with the byte loop on strings of
// quotes, backslashes and escapes at every place in and around its first
// 24 bytes.
func TestScanString(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = `aaaaaaaa"\nu0f/`
	for range 200000 {
		b := make([]byte, 1+rng.IntN(48))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		b[0] = '"'
		checkScanString(t, b)
	}
}

func FuzzScanString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"0123456789012345678901234\n"`, `"\u00e9"`, `"\u12"`, `"abc\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 256 {
			return
		}
		checkScanString(t, b)
	})
}

// hfStepCases are Hugging Face step dicts at the edges of hfStep's form:
// what it takes, and what it leaves to the full path.
var hfStepCases = []string{
	"{'loss': 0.392, 'grad_norm': 0.6444, 'learning_rate': 1.9656e-05, 'epoch': 0.9}",
	"{'loss': 9138.1671, 'grad_norm': 0.6444, 'learning_rate': 1.9656e-05, 'epoch': 0.90}",
	"{'loss': 1.2, 'grad_norm': 3.4, 'learning_rate': 5e-05, 'epoch': 0.01, 'step': 10}",
	"{'loss': 1.2, 'step': 10.5}",
	"{'loss': 1.2, 'step': -3}",
	"{'step': 7, 'loss': 2.5}",
	"{'loss': 1.2, 'loss': 3.4}",
	"{'loss': 1.2, 'loss': -}",
	"{'loss': -, 'loss': 3.4}",
	"{'loss': 1,017.04}",
	"{'loss': 1.2}",
	"{'loss': 1.2}  ",
	"{'loss': 1.2}\t",
	"{'loss': 1.2}\r ", // a '\r' in the blanks hfStep does not read: the progress-bar path
	"{'loss': 1.2} \r\r",
	"{'loss':\r 1.2}",
	" {'loss': 1.2}",
	"{'loss': 1.2} ",
	"{'loss': 1.2}}",
	"{'loss': 1.2} x",
	"{'loss': .}",
	"{'loss': e}",
	"{'loss': 1e+400}",
	"{'loss': 1.5E-05}",
	"{'loss': nan}",
	"{'loss': 'x'}",
	"{'loss':1.2}",
	"{'loss' : 1.2}",
	"{'loss': 1.2,'epoch': 1}",
	"{'loss': 1.2,  'epoch': 1}",
	"{'loss': 1.2, 'eval_loss': 1}",
	"{'loss': 1.2, 'train_runtime': 1}",
	"{'train_runtime': 116.19, 'train_samples_per_second': 69.7, 'epoch': 3.0}",
	"{'grad_norm': 0.5}",
	"{'loss': }",
	"{'loss': 1.2",
	"{'loss': 1.2,",
	"{'loss': 1.2, }",
	"{'loss': 1.2, '",
	"{'",
	"{'}",
	"{}",
	"{",
	"{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.5, 'step': 100}",
}

// lineWithout is Lines.Line without the Hugging Face fast path (hfStep).
func lineWithout(l *Lines, text []byte, ev *pipeline.Event, tl *pipeline.TelemetryLine) (bool, bool) {
	if bytes.IndexByte(text, '\r') >= 0 || len(text) > maxTelemetryLine {
		return l.lineCR(text, ev, tl)
	}
	return l.lineFull(text, ev, tl)
}

// checkLineFastPath fails when Lines.Line reads text otherwise than
// lineWithout does.
func checkLineFastPath(t *testing.T, fast, full *Lines, text []byte) {
	t.Helper()
	var evF, evS pipeline.Event
	var tlF, tlS pipeline.TelemetryLine
	evF.Reset()
	evS.Reset()
	nF, tF := fast.Line(text, &evF, &tlF)
	nS, tS := lineWithout(full, text, &evS, &tlS)
	if nF != nS || tF != tS || !sameParse(evF, evS) || !sameParse(tlF, tlS) {
		t.Errorf("Line(%q) = %v %v %+v %+v; without the fast path %v %v %+v %+v", text, nF, tF, evF, tlF, nS, tS, evS, tlS)
	}
}

// TestLineFastPath: Lines.Line reads every test line, and the edge cases
// of hfStep, as it does without the Hugging Face fast path.
func TestLineFastPath(t *testing.T) {
	fast := NewLines(NewTelemetry(DefaultTelemetryConfig()))
	full := NewLines(NewTelemetry(DefaultTelemetryConfig()))
	taken := 0
	var tl pipeline.TelemetryLine
	for _, l := range testdataLines(t, hfStepCases...) {
		checkLineFastPath(t, fast, full, l)
		if len(l) > 0 && l[0] == '{' && hfStep(trimRightSpace(l), &tl) {
			taken++
		}
	}
	if taken < 10 {
		t.Errorf("hfStep took %d lines; want the Hugging Face step dicts of testdata and the edge cases", taken)
	}
}

// TestHFStepMarkers: a line hfStep takes holds no prefilter token and no
// line marker but "'loss'", whatever its keys' order and its numbers, so
// the full path would find just that marker (hfStep's comment says why).
func TestHFStepMarkers(t *testing.T) {
	keys := []string{"loss", "grad_norm", "learning_rate", "epoch", "step"}
	nums := []string{"0", "1.5", "-2", "1e-05", "9138.1671", "+3", "e", "1-", "..", "ee", "1e+e", "-e.", "64", "32", "8e8"}
	lossBit := uint64(0)
	for i, sp := range lineSpecs() {
		if bytes.Equal(sp.tok, tokHFLoss) {
			lossBit = 1 << (len(finderTokens) + i)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var tl pipeline.TelemetryLine
	checked := 0
	for range 20000 {
		var b bytes.Buffer
		b.WriteString("{")
		for j := range 1 + rng.IntN(7) {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "'%s': %s", keys[rng.IntN(len(keys))], nums[rng.IntN(len(nums))])
		}
		b.WriteString("}")
		line := b.Bytes()
		if !hfStep(line, &tl) {
			continue
		}
		checked++
		if m := lineMarkSet.maskWithin(line, len(finderTokens), 0, len(line)); m != lossBit {
			t.Fatalf("hfStep takes %q, whose marks are %b; want only 'loss' (%b)", line, m, lossBit)
		}
	}
	if checked < 1000 {
		t.Fatalf("hfStep took %d generated lines; want many", checked)
	}
}

// FuzzLine compares Lines.Line with and without the Hugging Face fast
// path on random lines.
func FuzzLine(f *testing.F) {
	for _, c := range hfStepCases {
		f.Add(c)
	}
	telemetryLines(f, func(_ string, line []byte) {
		if bytes.Contains(line, []byte("{'")) {
			f.Add(string(line))
		}
	})
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 4096 {
			return
		}
		fast := NewLines(NewTelemetry(DefaultTelemetryConfig()))
		full := NewLines(NewTelemetry(DefaultTelemetryConfig()))
		checkLineFastPath(t, fast, full, []byte(in))
	})
}

// TestSuspectBytes compares suspectBytes with a byte loop: every byte
// value at every position of short texts of plain, blank and DEL
// backgrounds (a byte below 0x20 borrows from the one above it), and
// every testdata line.
func TestSuspectBytes(t *testing.T) {
	naive := func(b []byte) (ctl, hi bool) {
		for _, c := range b {
			ctl = ctl || c < 0x20
			hi = hi || c >= 0x80
		}
		return ctl, hi
	}
	check := func(b []byte) {
		c, h := suspectBytes(b)
		if cw, hw := naive(b); c != cw || h != hw {
			t.Fatalf("suspectBytes(%q) = %v, %v; want %v, %v", b, c, h, cw, hw)
		}
	}
	for _, bg := range []byte{'a', ' ', 0x7f} {
		for n := 0; n <= 80; n++ {
			b := bytes.Repeat([]byte{bg}, n)
			check(b)
			for i := range n {
				for v := range 256 {
					b[i] = byte(v)
					check(b)
				}
				b[i] = bg
			}
		}
	}
	for _, l := range testdataLines(t) {
		check(l)
	}
}
