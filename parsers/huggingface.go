package parsers

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// parseHFDict reads a Hugging Face Trainer log dict: "{'loss': 0.392,
// 'grad_norm': …, 'learning_rate': …, 'epoch': 0.85, 'step': 8500}" (042,
// with a step key only where the script adds one), newer releases' quoted
// values ("'loss': '0.392'"), and the summary "{'train_runtime': 8754.1218,
// 'train_samples_per_second': 36.554, …}", also inside "TrainOutput(…,
// metrics={…})". Evaluation dicts are not training steps.
func parseHFDict(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, []byte("{'"))
	if i < 0 {
		return false
	}
	summary, loss, eval := false, false, false
	eachDictPair(b[i+1:], func(key, val []byte) {
		switch {
		case string(key) == "loss":
			tl.Loss, loss = parseNumber(val)
		case string(key) == "step":
			tl.Step, _ = atoi64(val)
		case string(key) == "train_runtime":
			tl.Runtime, summary = parseNumber(val)
		case string(key) == "train_samples_per_second":
			tl.SamplesPerS, _ = parseNumber(val)
		case string(key) == "train_tokens_per_second":
			tl.TokensPerS, _ = parseNumber(val)
		case string(key) == "global_step/max_steps":
			// ms-swift's dicts (Hugging Face Trainer underneath) count
			// steps as '295/4491' (ms-swift issue 4291).
			tl.Step = lastCounter(val)
		case string(key) == "train_speed(iter/s)":
			tl.ItPerS, _ = parseNumber(val)
		case hasPrefix(key, "eval_"):
			eval = true
		}
	})
	tl.Framework = pipeline.FrameworkHF
	switch {
	case summary:
		tl.Kind = pipeline.TelemetrySummary
		tl.Step, tl.Loss = -1, math.NaN()
	case loss && !eval:
		tl.Kind = pipeline.TelemetryStep
	default:
		return false
	}
	return true
}

// hfStep reads b, a stripped line, when it is a Hugging Face Trainer step
// dict in the plain form the Trainer prints on every rank at every logging
// step, "{'loss': 0.392, 'grad_norm': 0.644, 'learning_rate': 1.96e-05,
// 'epoch': 0.9}" (telemetry/hf-*.log; the trainer of about a fifth of
// the load benchmark's jobs): only the keys loss, grad_norm, learning_rate, epoch and
// step, each "'key': " then a plain number ([0-9.e+-]), ", " between
// pairs, '}' last. It gives what parseHFDict gives and reports whether b
// had that form and a loss it could read; for anything else the caller
// takes the full path (marker search, checkpoint parser, parseProgress).
//
// Such a line holds no marker but "'loss'" and no prefilter token: the
// others hold an upper-case letter or a byte outside the form's alphabet
// ("/", "=", "+"), a blank not after ':' or ',' ("elapsed time",
// "iter latency:"), "p:" (the form has "p':"), or letters no allowed key
// holds ("checkpoint", "_perf", "'train_runtime'"); TestHFStepMarkers
// checks this against the token sets, TestLineFastPath and FuzzLine
// compare Lines.Line with and without this path.
func hfStep(b []byte, tl *pipeline.TelemetryLine) bool {
	n := len(b)
	if n < 2 || b[0] != '{' || b[1] != '\'' || b[n-1] != '}' {
		return false
	}
	var loss, step []byte
	for i := 1; ; {
		// b[i] is the key's opening quote; the key with its closing
		// quote and ": " is one of hfStepKeys.
		k := hfStepKey(b[i+1:])
		if k < 0 {
			return false
		}
		v := i + 1 + len(hfStepKeys[k])
		e := v
		for e < n && numberByte[b[e]] {
			e++
		}
		if e == v || e == n {
			return false
		}
		switch k {
		case hfLoss:
			loss = b[v:e]
		case hfStepNo:
			step = b[v:e]
		}
		if b[e] == '}' {
			if e != n-1 {
				return false
			}
			break
		}
		if b[e] != ',' || e+2 >= n || b[e+1] != ' ' || b[e+2] != '\'' {
			return false
		}
		i = e + 2
	}
	v, ok := parseNumber(loss)
	if !ok {
		return false
	}
	tl.Reset()
	if step != nil {
		tl.Step, _ = atoi64(step)
	}
	tl.Kind, tl.Framework, tl.Loss = pipeline.TelemetryStep, pipeline.FrameworkHF, v
	return true
}

// numberByte holds the bytes of a number as Python prints it: digits, '.',
// 'e', '-', '+'.
var numberByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789.e-+") {
		t[c] = true
	}
	return t
}()

// hfStepKeys are the keys hfStep reads, each with its closing quote and
// ": ".
var hfStepKeys = [...]string{hfLoss: "loss': ", hfStepNo: "step': ", hfGradNorm: "grad_norm': ",
	hfLearningRate: "learning_rate': ", hfEpoch: "epoch': "}

const (
	hfLoss = iota
	hfStepNo
	hfGradNorm
	hfLearningRate
	hfEpoch
)

// hfStepKey returns the index in hfStepKeys of the key b starts with, or -1.
func hfStepKey(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	k := -1
	switch b[0] {
	case 'l':
		k = hfLoss
		if len(b) > 1 && b[1] == 'e' {
			k = hfLearningRate
		}
	case 's':
		k = hfStepNo
	case 'g':
		k = hfGradNorm
	case 'e':
		k = hfEpoch
	}
	if k < 0 {
		return -1
	}
	if len(b) >= 16 {
		// Two masked 8-byte compares instead of a call to compare
		// strings of a length the compiler does not know: that call was
		// a large share of the step dict's cost.
		w := &hfKeyWords[k]
		if binary.LittleEndian.Uint64(b)&w.mask[0] != w.word[0] || binary.LittleEndian.Uint64(b[8:])&w.mask[1] != w.word[1] {
			return -1
		}
		return k
	}
	if !hasPrefix(b, hfStepKeys[k]) {
		return -1
	}
	return k
}

// hfKeyWords are hfStepKeys as two little-endian words and the masks of
// their bytes (keys are at most 16 bytes).
var hfKeyWords = func() (ws [len(hfStepKeys)]struct{ word, mask [2]uint64 }) {
	for k, key := range hfStepKeys {
		if len(key) > 16 {
			panic("parsers: Hugging Face key over 16 bytes: " + key)
		}
		for i := 0; i < len(key); i++ {
			ws[k].word[i/8] |= uint64(key[i]) << (8 * (i % 8))
			ws[k].mask[i/8] |= 0xff << (8 * (i % 8))
		}
	}
	return ws
}()

// eachDictPair calls fn for every "'key': value" of a Python dict repr,
// b being the text after '{'; quotes around a value are removed.
func eachDictPair(b []byte, fn func(key, val []byte)) {
	for {
		b = trimBlank(b)
		if len(b) == 0 || b[0] != '\'' {
			return
		}
		e := bytes.IndexByte(b[1:], '\'')
		if e < 0 {
			return
		}
		key := b[1 : e+1]
		b = trimBlank(b[e+2:])
		if len(b) == 0 || b[0] != ':' {
			return
		}
		b = trimBlank(b[1:])
		var val []byte
		if len(b) > 0 && b[0] == '\'' {
			e := bytes.IndexByte(b[1:], '\'')
			if e < 0 {
				return
			}
			val, b = b[1:e+1], b[e+2:]
		} else {
			e := 0 // the value ends at ',' or '}' (bytes.IndexAny builds a set per call)
			for e < len(b) && b[e] != ',' && b[e] != '}' {
				e++
			}
			val, b = bytes.TrimSpace(b[:e]), b[e:]
		}
		fn(key, val)
		b = trimBlank(b)
		if len(b) == 0 || b[0] != ',' {
			return
		}
		b = b[1:]
	}
}

// parseHFMetric reads a line of the Hugging Face Trainer's metrics block
// ("***** train metrics *****", then "  train_runtime            =
// 0:02:23.45", "  train_samples_per_second =     69.711", …), the
// summary the example scripts print with log_metrics.
func parseHFMetric(b []byte, tl *pipeline.TelemetryLine) bool {
	key, val, ok := bytes.Cut(b, []byte(" = "))
	if !ok {
		return false
	}
	key, val = bytes.TrimSpace(key), bytes.TrimSpace(val)
	switch string(key) {
	case "train_runtime":
		tl.Runtime, ok = parseDuration(val)
	case "train_samples_per_second":
		tl.SamplesPerS, ok = parseNumber(val)
	case "train_tokens_per_second":
		tl.TokensPerS, ok = parseNumber(val)
	default:
		return false
	}
	if !ok {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetrySummary, pipeline.FrameworkHF
	return true
}

// parseDuration reads seconds ("116.1914") or the metrics block's
// "h:mm:ss.ff" ("2:25:54.12").
func parseDuration(b []byte) (float64, bool) {
	total := 0.0
	for n := 0; len(b) > 0; n++ {
		var p []byte
		p, b = cutAt(b, ':')
		v, ok := parseNumber(p)
		if !ok || v < 0 || n == 3 {
			return math.NaN(), false
		}
		total = total*60 + v
	}
	return total, true
}
