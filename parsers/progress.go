package parsers

import (
	"bytes"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The generic progress-line reader: a step counter and figures in the
// common spellings of trainers no named reader covers. docs/telemetry.md
// ("Generic progress lines") is its specification; every form here cites
// the sample in testdata/telemetry (115–144, SOURCES.md) that shows it.

// progressMarkers gate the generic reader: it runs only on a line holding
// one of them. They are searched (holdsProgressMarker) only on the lines
// every named reader declined, after the pass that finds the named
// readers' markers (lineSet): as markers of that pass they cost every line
// of a job their anchor hits, named trainers' lines included (Lightning
// bars hold "loss=", DeepSpeed lines "/sec"), where the second pass costs
// only the declined lines, mostly noise. Each holds a finder token
// (TelemetryTokens), so a line the reader reads is one the finder hands on
// (FuzzFinderCovers). They are chosen so that the named trainers' lines,
// most of a job's output, hold few of their anchor pairs:
//
// "loss" alone is not one: it is in every Hugging Face dict ("'loss'"),
// and would add an anchor hit to each; "loss:", "loss=", "_loss",
// "Loss:" and "Loss=" anchor on pairs rare in trainer output, and a
// duration glued to its digits ("561.94ms") stands for the "loss 4.08,
// time 561.94ms" lines that have no colon.
var progressMarkers = [...][]byte{
	[]byte("loss:"), []byte("loss="), []byte("_loss"), []byte("Loss:"), []byte("Loss="), []byte("/sec"), []byte("sec/"),
	[]byte("tok/s"), []byte("-second"), []byte("0ms"), []byte("1ms"), []byte("2ms"), []byte("3ms"), []byte("4ms"),
	[]byte("5ms"), []byte("6ms"), []byte("7ms"), []byte("8ms"), []byte("9ms"),
	[]byte("_time"), []byte("(ms)"), []byte("_per_s"), []byte("tflops"), []byte("mfu"), []byte("TFLOP/s"),
	[]byte("/second"), []byte("[step="),
}

// maxProgressWords bounds the fields looked at in one line: progress lines
// hold a few dozen (verl's hold about a hundred, past the figures that
// matter); the words live on the stack.
const maxProgressWords = 128

// pword is one field of a line: its text and where it starts in the line;
// strong says a separator other than blanks (',', ';', '|', " - ") came
// before it, so it cannot join the word before into a two-word key.
type pword struct {
	b      []byte
	off    int
	strong bool
}

// progressLine is the state of one line's read.
type progressLine struct {
	step       int64
	hasStep    bool
	afterEpoch bool // an epoch counter was read: the next fraction is the step
	epochValue bool // … and its own value is still to come
	evidence   bool // a loss-named key (act_loss) was seen
	figures    int
	tl         *pipeline.TelemetryLine
}

// parseGenericProgress reads b (stripped, right-trimmed, not empty) by the
// generic rules, when no named reader took it. It reports whether b is a
// step line: a step counter and a figure (or a loss-named key).
func parseGenericProgress(b []byte, tl *pipeline.TelemetryLine) bool {
	if b[0] == '{' || bytes.Contains(b, []byte("NCCL")) || evaluationLine(b) {
		// JSON and Python dicts are the JSON and Hugging Face readers';
		// NCCL lines never carry steps; evaluation timings are no step's.
		return false
	}
	var ws [maxProgressWords]pword
	words := splitProgress(b, ws[:0])
	p := progressLine{step: -1, tl: tl}
	// llama2.c: a leading step number and a bar (119).
	if len(words) > 1 && bytes.IndexByte(b[len(words[0].b):words[1].off], '|') >= 0 {
		if n, ok := progressStep(words[0].b); ok {
			p.step, p.hasStep = n, true
			words = words[1:]
		}
	}
	for i := 0; i < len(words); {
		i = p.field(b, words, i)
	}
	if !p.hasStep || (p.figures == 0 && !p.evidence) {
		if p.figures > 0 || p.evidence {
			tl.Reset()
			return blockFigure(b, tl)
		}
		if n, ok := blockHeader(b); ok {
			tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkProgress, n
			return true
		}
		return blockFigure(b, tl)
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkProgress, p.step
	return true
}

// blockHeader reads the header of a step block (OLMo: "[step=2/739328]",
// "[step=1/739328,epoch=0]" as the line's last field, the step's figures
// on the lines after it): the step, from the fraction's numerator.
func blockHeader(b []byte) (int64, bool) {
	if b[len(b)-1] != ']' {
		return -1, false
	}
	k := bytes.LastIndexByte(b, '[')
	if k < 0 || !bytes.HasPrefix(b[k:], []byte("[step=")) {
		return -1, false
	}
	in := b[k+len("[step=") : len(b)-1]
	if c := bytes.IndexByte(in, ','); c >= 0 {
		in = in[:c] // ",epoch=0", ",eta=…"
	}
	num, den := cutFraction(in)
	if den == nil || !isDigits(den) {
		return -1, false
	}
	return progressStep(num)
}

// blockFigure reads a figure line of a step block (OLMo:
// "train/CrossEntropyLoss=11.31", "throughput/device/tokens_per_second=7,456"):
// the whole line one "path=number" whose path holds a '/', no blank before
// its first '/', and whose last part is a figure key. It amends the
// series' latest step.
func blockFigure(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.IndexByte(b, '=')
	if i <= 0 || !isLetter(b[0]) {
		return false
	}
	key, val := b[:i], b[i+1:]
	j := bytes.LastIndexByte(key, '/')
	if j < 0 || bytes.IndexAny(key[:bytes.IndexByte(key, '/')], " \t") >= 0 {
		return false
	}
	num, glued := splitUnit(val)
	mag, isMag := magnitude(glued)
	if len(glued) > 0 && !isMag || len(num) == 0 {
		return false
	}
	var kb [48]byte
	k, unit := keyUnit(normKey(kb[:0], key[j+1:]))
	f := progressKey(k)
	switch f {
	case keyNone, keyStep, keyEpoch:
		return false
	}
	p := progressLine{step: -1, tl: tl}
	p.setScaled(f, num, unit, mag)
	if p.figures == 0 {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryAmend, pipeline.FrameworkProgress
	return true
}

// splitProgress splits b into fields at blanks, tabs, '|', ';', a ','
// that is no thousands separator, and a lone '-' (vietocr's " - ", 130).
func splitProgress(b []byte, dst []pword) []pword {
	strong := true // the line's start
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		w := b[start:end]
		if len(w) == 1 && w[0] == '-' {
			strong = true
		} else if len(dst) < cap(dst) {
			dst = append(dst, pword{b: w, off: start, strong: strong})
			strong = false
		}
		start = -1
	}
	for i, c := range b {
		switch {
		case c == ' ' || c == '\t':
			flush(i)
		case c == '|' || c == ';' || (c == ',' && !groupComma(b, i)):
			flush(i)
			strong = true
		default:
			if start < 0 {
				start = i
			}
		}
	}
	flush(len(b))
	return dst
}

// groupComma reports whether the comma at b[i] groups a number's digits
// ("28,590 |", 141): a digit before it, three after it, then no digit.
func groupComma(b []byte, i int) bool {
	if i == 0 || !isDigit(b[i-1]) || i+4 > len(b) {
		return false
	}
	for _, c := range b[i+1 : i+4] {
		if !isDigit(c) {
			return false
		}
	}
	return i+4 == len(b) || !isDigit(b[i+4])
}

// field reads the field at words[i] (with what follows it when it is a
// key) and returns the index of the next unread field.
func (p *progressLine) field(b []byte, words []pword, i int) int {
	w := words[i].b
	if w[0] == '[' {
		end, ok := p.brackets(b, words[i].off)
		if !ok {
			end = numericBracketEnd(b, words[i].off)
		}
		if ok || end > 0 {
			for i < len(words) && words[i].off < end {
				i++
			}
			return i
		}
	}
	w = trimQuote(w)
	if len(w) == 0 {
		return i + 1
	}
	// key=value, key:value (glued or with the value next), key = value.
	if key, val, ok := splitKeyValue(w); ok {
		j := i + 1
		if len(val) == 0 {
			for j < len(words) && isAssign(words[j].b) {
				j++
			}
			if j >= len(words) || emptyKey(words[j].b) {
				// "…|ip-26-0-160-225]: iteration: 992" (148): a key
				// is no value; it is read as the next field.
				return j
			}
			val = words[j].b
			j++
		}
		return p.figure(qualifier(words, i), key, val, words, j)
	}
	if i+2 < len(words) && isAssign(words[i+1].b) && !words[i+1].strong && isKeyWord(w) {
		return p.figure(qualifier(words, i), w, words[i+2].b, words, i+3)
	}
	if startsNumber(w) {
		return p.value(words, i)
	}
	if i+1 < len(words) && words[i+1].b[0] == '[' && isEpochWord(w) {
		// "Epoch [1][100/5005]" (134): the first bracket is the epoch's.
		p.afterEpoch, p.epochValue = true, true
		return i + 1
	}
	// key value: a word, then a number in the same field.
	if i+1 < len(words) && !words[i+1].strong && startsNumber(trimQuote(words[i+1].b)) && isKeyWord(w) {
		return p.figure(qualifier(words, i), w, words[i+1].b, words, i+2)
	}
	return i + 1
}

// figure reads key's value val (the word at j-1; words[j] may be its unit).
func (p *progressLine) figure(qual, key, val []byte, words []pword, j int) int {
	var kb [48]byte
	k, unit := keyUnit(normKey(kb[:0], key))
	val = trimQuote(val)
	switch progressKey(k) {
	case keyStep:
		if qual != nil && !stepQualifier(qual) {
			return j
		}
		if p.hasStep {
			return j
		}
		num, _ := cutFraction(val)
		if n, ok := progressStep(num); ok {
			p.step, p.hasStep = n, true
		}
		return j
	case keyEpoch:
		p.afterEpoch = true
		if len(val) > 0 && val[0] == '[' {
			// Its value is a bracket ("Epoch: [2]"): brackets reads it.
			p.epochValue = true
			return j - 1
		}
		return j
	}
	f := progressKey(k)
	if qual != nil && (f == keyTime || f == keyLoss || f == keyNone) {
		// A two-word key: "step time", "train loss" are figures; "gpu
		// time", "load time" other times (130); "ctc loss" another loss.
		var qb, cb [48]byte
		q, _ := normKey(qb[:0], qual)
		if len(q)+1+len(k) <= cap(cb) {
			c := append(append(append(cb[:0], q...), '_'), k...)
			switch cf := progressKey(c); {
			case cf == keyTime || cf == keyLoss:
				k, f = c, cf
			case f == keyTime:
				return j
			case f == keyLoss:
				p.evidence = true
				return j
			}
		}
	}
	if f == keyNone {
		if bytes.HasSuffix(k, []byte("loss")) {
			p.evidence = true
		}
		// A unit may still name the figure ("ips: 3.74 samples/sec").
		if j < len(words) && !words[j].strong {
			if u := rateUnit(trimQuote(words[j].b)); u != keyNone {
				if num, glued := splitUnit(val); len(num) > 0 {
					mag, _ := magnitude(glued)
					p.setScaled(u, num, trimQuote(words[j].b), mag)
					return j + 1
				}
			}
		}
		return j
	}
	num, glued := splitUnit(val)
	mag, isMag := magnitude(glued)
	if isMag {
		glued = nil
	}
	if _, ok := parseNumber(num); !ok || len(glued) > 0 && !timeUnit(f, glued) && !(len(glued) == 1 && glued[0] == '%') {
		return j // "Time=07:29:39" is a clock (137), "12.5k" no figure
	}
	if len(glued) == 0 && j < len(words) && !words[j].strong && isUnitWord(trimQuote(words[j].b)) {
		glued = trimQuote(words[j].b)
		j++
	}
	if len(unit) == 0 {
		unit = glued
	}
	p.setScaled(f, num, unit, mag)
	return j
}

// value reads a number that no key precedes: a fraction after an epoch
// counter ("epoch 010  2000 / 8223", 117), a number and its unit ("(0.888
// sec/step)", 123; "3.7 samples/sec"), or a bare duration field ("|
// 13880.16ms", 119).
func (p *progressLine) value(words []pword, i int) int {
	w := trimQuote(words[i].b)
	if p.afterEpoch && !p.hasStep {
		if p.epochValue {
			p.epochValue = false
			return i + 1
		}
		if num, den := cutFraction(w); den != nil {
			if n, ok := progressStep(num); ok {
				p.step, p.hasStep = n, true
			}
			return i + 1
		}
		if i+2 < len(words) && bytes.Equal(words[i+1].b, []byte("/")) {
			if n, ok := progressStep(w); ok {
				p.step, p.hasStep = n, true
			}
			return i + 3
		}
	}
	num, glued := splitUnit(w)
	if _, ok := parseNumber(num); !ok {
		return i + 1
	}
	mag, isMag := magnitude(glued)
	if (len(glued) == 0 || isMag) && i+1 < len(words) && !words[i+1].strong {
		if u := rateUnit(trimQuote(words[i+1].b)); u != keyNone {
			p.setScaled(u, num, trimQuote(words[i+1].b), mag)
			return i + 2
		}
		return i + 1
	}
	if u := rateUnit(glued); u != keyNone {
		p.set(u, num, glued)
	} else if words[i].strong && durationUnit(glued) && (i+1 == len(words) || words[i+1].strong) {
		p.set(keyTime, num, glued)
	}
	return i + 1
}

// brackets reads the bracket groups at b[off] ("[2240/2502]", "[ 150/1251]",
// "[20/20][7720/7724]", "[2]"): an epoch's value, then the step. It
// reports false, reading nothing, unless every group holds a number or a
// fraction.
func (p *progressLine) brackets(b []byte, off int) (end int, ok bool) {
	type group struct {
		num      int64
		fraction bool
	}
	var gs [3]group
	n := 0
	i := off
	for n < len(gs) && i < len(b) && b[i] == '[' {
		j := bytes.IndexByte(b[i:], ']')
		if j < 0 {
			break
		}
		in := bytes.TrimSpace(b[i+1 : i+j])
		num, den := cutFraction(in)
		v, ok := progressStep(bytes.TrimSpace(num))
		if !ok || (den != nil && !isDigits(bytes.TrimSpace(den))) {
			break
		}
		gs[n] = group{v, den != nil}
		n++
		i += j + 1
	}
	if n == 0 {
		return 0, false
	}
	for _, g := range gs[:n] {
		switch {
		case p.hasStep:
		case p.epochValue:
			p.epochValue = false
		case g.fraction:
			p.step, p.hasStep = g.num, true
		}
	}
	return i, true
}

// numericBracketEnd returns the end of the bracket at b[off] when it opens
// with a number but is no group brackets reads: open_clip's "[    64/109468
// (0%)]" (samples and a percentage, 150), "[00:04/1:05:18]". Such a bracket
// is neither a counter nor a figure, and no number in it is read. It
// returns 0 for any other bracket.
func numericBracketEnd(b []byte, off int) int {
	j := bytes.IndexByte(b[off:], ']')
	if j < 0 || !startsNumber(bytes.TrimLeft(b[off+1:off+j], " \t")) {
		return 0
	}
	return off + j + 1
}

// emptyKey reports whether w is a key with no value after it ("iteration:").
func emptyKey(w []byte) bool {
	_, val, ok := splitKeyValue(w)
	return ok && len(val) == 0 && w[len(w)-1] == ':'
}

// set records a figure of field f, the number num in unit, the first of
// each field winning.
func (p *progressLine) set(f progressField, num, unit []byte) { p.setScaled(f, num, unit, 0) }

// setScaled is set of num × 10^mag (a magnitude letter glued to it).
func (p *progressLine) setScaled(f progressField, num, unit []byte, mag int) {
	tl := p.tl
	if f == keyTimeRate { // a time per step: "sec/step", "ms/iter"
		f, unit = keyTime, unit[:bytes.IndexByte(unit, '/')]
	}
	if f == keyTime {
		exp, ok := secondsExp(unit)
		if !ok || !math.IsNaN(tl.StepTime) {
			return
		}
		// Scaled in decimal: 561.94 ms is 0.56194 s to the last bit.
		if v, ok := parseScaled(num, exp+mag); ok && v >= 0 {
			tl.StepTime = v
			p.figures++
		}
		return
	}
	v, ok := parseScaled(num, mag)
	if !ok || (v < 0 && f != keyLoss && f != keyMFU) {
		return
	}
	switch f {
	case keyTokens:
		if !math.IsNaN(tl.TokensPerS) {
			return
		}
		tl.TokensPerS = v
	case keySamples:
		if !math.IsNaN(tl.SamplesPerS) {
			return
		}
		tl.SamplesPerS = v
	case keyItPerS, keySPerIt:
		if !math.IsNaN(tl.ItPerS) {
			return
		}
		if f == keySPerIt || bytes.HasPrefix(unit, []byte("s/")) {
			if v <= 0 {
				return
			}
			v = 1 / v
		}
		tl.ItPerS = v
	case keyTFLOPs:
		if !math.IsNaN(tl.TFLOPs) {
			return
		}
		tl.TFLOPs = v
	case keyMFU:
		if !math.IsNaN(tl.MFU) || v < 0 {
			return // nanoGPT's -100 placeholder is no figure
		}
		if len(unit) == 0 && v < 1 {
			v *= 100 // a fraction
		}
		tl.MFU = v
	case keyLoss:
		if !math.IsNaN(tl.Loss) {
			return
		}
		tl.Loss = v
	default:
		return
	}
	p.figures++
}

// progressField names what a key or unit measures.
type progressField uint8

const (
	keyNone progressField = iota
	keyStep
	keyEpoch
	keyTime
	keyTimeRate
	keyTokens
	keySamples
	keyItPerS
	keySPerIt
	keyTFLOPs
	keyMFU
	keyLoss
)

// progressKey classifies a normalized key (lower case, '_' for '-', '/'
// and blanks). docs/telemetry.md lists the keys.
func progressKey(k []byte) progressField {
	switch string(k) {
	case "step", "iter", "iteration", "global_step", "globalstep":
		return keyStep
	case "epoch", "ep":
		return keyEpoch
	case "time", "dt", "step_time", "steptime", "iter_time", "iteration_time", "batch_time", "btime",
		"batch_cost", "elapsed", "elapsed_time", "time_per_step", "time_per_iter", "time_per_iteration",
		"elapsed_time_per_iteration", "step_avg", "step_latency":
		return keyTime
	case "tokens_s", "tokens_sec", "tok_s", "tok_sec", "tps", "tgs", "wps", "tokens_per_s", "tokens_per_sec",
		"tokens_per_second", "tokens_per_second_per_gpu", "tokens_per_sec_per_gpu", "tokens_gpu_sec", "tokens_s_gpu":
		return keyTokens
	case "samples_s", "samples_sec", "samples_per_s", "samples_per_sec", "samples_per_second", "samples_second",
		"examples_sec", "examples_s":
		return keySamples
	case "it_s", "it_sec", "iter_s", "iters_s", "steps_s", "steps_sec", "batches_per_second", "batches_per_sec":
		return keyItPerS
	case "tflops", "tflop_s", "tflops_per_gpu", "tflops_gpu", "tflop_s_gpu", "model_tflops_per_gpu":
		return keyTFLOPs
	case "mfu":
		return keyMFU
	case "loss", "train_loss", "training_loss", "lm_loss", "total_loss", "step_loss", "avg_loss", "mean_loss",
		"ce_loss", "cross_entropy_loss", "crossentropyloss", "train_crossentropyloss":
		return keyLoss
	}
	return keyNone
}

// keyUnit cuts a unit written as the last part of a step-time key
// ("time_ms", "elapsed_time_per_iteration_ms") off k, when unit (one in
// parentheses) is empty.
func keyUnit(k, unit []byte) ([]byte, []byte) {
	if len(unit) > 0 {
		return k, unit
	}
	i := bytes.LastIndexByte(k, '_')
	if i <= 0 {
		return k, nil
	}
	switch string(k[i+1:]) {
	case "ms", "s", "sec", "us":
		if progressKey(k[:i]) == keyTime {
			return k[:i], k[i+1:]
		}
	}
	return k, nil
}

// timeUnit reports whether u, glued to a step time's number, is a unit of
// time.
func timeUnit(f progressField, u []byte) bool {
	_, ok := secondsExp(u)
	return f == keyTime && ok
}

// magnitude returns the power of ten of a magnitude letter glued to a
// number: nanotron's human_format ("22.8K", "85.8G"; "B", billions, in
// its later versions).
func magnitude(u []byte) (int, bool) {
	if len(u) != 1 {
		return 0, false
	}
	switch u[0] {
	case 'K':
		return 3, true
	case 'M':
		return 6, true
	case 'G', 'B':
		return 9, true
	case 'T':
		return 12, true
	}
	return 0, false
}

// rateUnit classifies a unit written after a number that names its figure
// by itself.
func rateUnit(u []byte) progressField {
	switch string(u) {
	case "sec/step", "s/step", "ms/step", "sec/batch", "s/batch", "ms/batch", "sec/iter", "s/iter", "ms/iter":
		return keyTimeRate
	case "tokens/s", "tok/s", "tokens/sec", "tok/sec":
		return keyTokens
	case "samples/s", "samples/sec", "examples/s", "examples/sec":
		return keySamples
	case "it/s", "it/sec":
		return keyItPerS
	case "s/it":
		return keySPerIt
	}
	return keyNone
}

// durationUnit reports whether u is a time unit a bare duration field may
// carry ("13880.16ms").
func durationUnit(u []byte) bool {
	switch string(u) {
	case "ms", "s", "sec", "us":
		return true
	}
	return false
}

// isUnitWord reports whether u, a word after a keyed number, is its unit.
func isUnitWord(u []byte) bool {
	if len(u) == 0 {
		return false
	}
	if _, ok := secondsExp(u); ok {
		return true
	}
	return len(u) == 1 && u[0] == '%'
}

// secondsExp returns the power of ten of seconds in one unit of time u
// ("" is seconds).
func secondsExp(u []byte) (int, bool) {
	switch string(u) {
	case "", "s", "sec", "secs", "second", "seconds":
		return 0, true
	case "ms", "msec":
		return -3, true
	case "us":
		return -6, true
	}
	return 0, false
}

// normKey lowers key into dst, '-', '/' and blanks read as '_', the text
// after the last ':' only ("INFO:tensorflow:global"), and cuts a unit in
// parentheses at its end ("btime(ms)") into unit. Keys longer than dst are
// returned empty: no known key is that long.
func normKey(dst, key []byte) (k, unit []byte) {
	if i := bytes.LastIndexByte(key, ':'); i >= 0 {
		key = key[i+1:]
	}
	key = bytes.TrimLeft(key, "[(<`'\"")
	if n := len(key); n > 2 && key[n-1] == ')' {
		if i := bytes.LastIndexByte(key, '('); i > 0 {
			unit, key = key[i+1:n-1], key[:i]
		}
	}
	if len(key) > cap(dst) {
		return dst[:0], unit
	}
	for _, c := range key {
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '-' || c == '/' || c == ' ':
			c = '_'
		}
		dst = append(dst, c)
	}
	return dst, unit
}

// splitKeyValue splits "key=value", "key:value" and "key:" (value empty);
// false when w has no such separator after a word ("19:56:20.6:",
// "mem_usage:cuda:0" split and value checked by the caller).
func splitKeyValue(w []byte) (key, val []byte, ok bool) {
	if i := bytes.IndexByte(w, '='); i > 0 {
		return w[:i], w[i+1:], isKeyWord(w[:i])
	}
	if w[len(w)-1] == ':' {
		key = w[:len(w)-1]
		return key, nil, len(key) > 0 && isKeyWord(key)
	}
	if i := bytes.IndexByte(w, ':'); i > 0 && i+1 < len(w) && startsNumber(w[i+1:]) {
		return w[:i], w[i+1:], isKeyWord(w[:i])
	}
	return nil, nil, false
}

// isKeyWord reports whether w may be a key: it holds a letter and its
// last ':'-part starts with a letter, bracket or quote.
func isKeyWord(w []byte) bool {
	if i := bytes.LastIndexByte(w, ':'); i >= 0 {
		w = w[i+1:]
	}
	w = bytes.TrimLeft(w, "[(<`'\"")
	return len(w) > 0 && isLetter(w[0])
}

// qualifier returns the word before words[i] when it may make a two-word
// key with it ("train loss", "gpu time", "global step"): a word of
// letters in the same field.
func qualifier(words []pword, i int) []byte {
	if i == 0 || words[i].strong {
		return nil
	}
	q := words[i-1].b
	if j := bytes.LastIndexByte(q, ':'); j >= 0 && j+1 < len(q) {
		q = q[j+1:] // "INFO:tensorflow:global"
	}
	if !isWord(q) {
		return nil
	}
	return q
}

// stepQualifier reports whether q may stand before a step word: "global
// step", "Training Iteration", and words that only label the line (log
// levels: "INFO step 0", 138); "at", "max", "warmup" … make it another
// count.
func stepQualifier(q []byte) bool {
	var b [16]byte
	k, _ := normKey(b[:0], q)
	switch string(k) {
	case "at", "max", "total", "num", "warmup", "every", "per", "last", "next", "save", "saving", "eval", "of":
		return false
	}
	return true
}

// isEpochWord reports whether w is "epoch" or "ep" in any case.
func isEpochWord(w []byte) bool {
	var b [8]byte
	k, _ := normKey(b[:0], w)
	return progressKey(k) == keyEpoch
}

// isAssign reports whether w is a lone '=' or ':' between a key and its
// value ("loss = 79.35", 122; "step_loss : 0.69", 139).
func isAssign(w []byte) bool { return len(w) == 1 && (w[0] == '=' || w[0] == ':') }

// trimQuote strips the quotes, backticks, parentheses and brackets around
// a field and a sentence's full stop after it.
func trimQuote(w []byte) []byte {
	w = bytes.TrimLeft(w, "`'\"(")
	return bytes.TrimRight(w, "`'\")].")
}

// startsNumber reports whether w starts like a number.
func startsNumber(w []byte) bool {
	w = bytes.TrimLeft(w, "(")
	if len(w) > 1 && (w[0] == '-' || w[0] == '+') {
		w = w[1:]
	}
	return len(w) > 0 && (isDigit(w[0]) || (w[0] == '.' && len(w) > 1 && isDigit(w[1])))
}

// splitUnit splits a number from a unit glued behind it ("561.94ms",
// "1.90it/s", "16.68%").
func splitUnit(w []byte) (num, unit []byte) {
	i := 0
	if i < len(w) && (w[i] == '-' || w[i] == '+') {
		i++
	}
	for i < len(w) {
		c := w[i]
		switch {
		case isDigit(c), c == '.':
		case c == ',' && groupComma(w, i):
		case (c == 'e' || c == 'E') && i > 0 && i+1 < len(w) && (isDigit(w[i+1]) ||
			((w[i+1] == '-' || w[i+1] == '+') && i+2 < len(w) && isDigit(w[i+2]))):
			i++
		default:
			return w[:i], w[i:]
		}
		i++
	}
	return w, nil
}

// cutFraction splits "N/M" at its slash; den is nil without one.
func cutFraction(w []byte) (num, den []byte) {
	if i := bytes.IndexByte(w, '/'); i >= 0 {
		return w[:i], w[i+1:]
	}
	return w, nil
}

// progressStep parses a step: digits (leading zeros allowed), a trailing
// ':' or '.' tolerated.
func progressStep(w []byte) (int64, bool) {
	w = bytes.TrimRight(w, ":.")
	if !isDigits(w) {
		return -1, false
	}
	return atoi64(w)
}

func isDigits(w []byte) bool {
	if len(w) == 0 {
		return false
	}
	for _, c := range w {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// evaluationLine reports whether b holds an evaluation word (val, valid,
// validation, eval, evaluation, test, testing) bounded by non-letters.
func evaluationLine(b []byte) bool {
	for i := 0; i < len(b); {
		if !isLetter(b[i]) {
			i++
			continue
		}
		j := i
		for j < len(b) && isLetter(b[j]) {
			j++
		}
		if n := j - i; n >= 3 && n <= 10 {
			var lb [10]byte
			for k := range n {
				lb[k] = b[i+k] | 0x20
			}
			switch string(lb[:n]) {
			case "val", "valid", "validation", "eval", "evaluation", "test", "testing":
				return true
			}
		}
		i = j
	}
	return false
}

// genericSet finds progressMarkers in a line; genericPairs is its pair
// table.
var genericSet = func() *tokenSet {
	specs := make([]tokenSpec, len(progressMarkers))
	for i, t := range progressMarkers {
		specs[i] = tokenSpec{tok: t}
	}
	return newTokenSet(specs...)
}()

var genericPairs = newPairTable(genericSet)

// holdsProgressMarker reports whether b holds one of progressMarkers. It
// runs on every line the named readers declined, mostly noise (long Python
// warnings, DeepSpeed's lr lines) that holds none, so what it costs is the
// scan of the whole line for the markers' anchor pairs: it looks them up
// in a pair table (pairTable), not in the set's bit set.
func holdsProgressMarker(b []byte) bool { return genericPairs.contains(genericSet, b) }
