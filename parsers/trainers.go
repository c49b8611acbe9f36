package parsers

import (
	"bytes"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// parseTorchtitan reads "step:  4  loss:  7.62585  grad_norm: 26.6250
// memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%"
// (032). Older releases print wps for tps (and no grad_norm, 034), newer
// ones tflops with a thousands separator and mfu N/A (reference 031).
func parseTorchtitan(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte("GiB(")) {
		// Every release prints "memory: 66.91GiB(37.51%)", the finder's
		// token for these lines (FuzzFinderCovers).
		return false
	}
	b = b[bytes.Index(b, tokTitanStep):]
	rate := false
	var f [24][]byte
	n := fields(b, f[:])
	if n > len(f) {
		n = len(f)
	}
	for i := 0; i+1 < n; i++ {
		key := f[i]
		if len(key) < 2 || key[len(key)-1] != ':' {
			continue
		}
		val := f[i+1]
		switch string(key[:len(key)-1]) {
		case "step":
			var ok bool
			if tl.Step, ok = atoi64(val); !ok {
				return false
			}
		case "loss":
			tl.Loss, _ = parseNumber(val)
		case "tps", "wps":
			tl.TokensPerS, _ = parseNumber(val)
			rate = true
		case "tflops":
			tl.TFLOPs, _ = parseNumber(val)
		case "mfu":
			tl.MFU, _ = parseNumber(val)
			rate = true
		}
		i++
	}
	if tl.Step < 0 || !rate {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryStep, pipeline.FrameworkTorchtitan
	return true
}

// parseLightning reads a PyTorch Lightning progress bar: "Epoch 0:  25%|…|
// 8/32 [00:00<00:00, 49.28it/s, loss=0.87, v_num=15]" (050, 051; NeMo 1
// bars, reference 052) or the rich bar "Epoch 0/9 ━━ 8/32 0:00:01 •
// 0:00:03 49.28it/s". The step is the bar's counter; a bar with no rate yet
// ("?it/s") is not a step. Slow bars print s/it, inverted here.
func parseLightning(b []byte, tl *pipeline.TelemetryLine) bool {
	k := bytes.Index(b, []byte("it/s"))
	inv := false
	if k < 0 {
		if k = bytes.Index(b, []byte("s/it")); k < 0 {
			return false
		}
		inv = true
	}
	s := k
	for s > 0 && (isDigit(b[s-1]) || b[s-1] == '.') {
		s--
	}
	rate, ok := parseNumber(b[s:k])
	if !ok || rate <= 0 {
		return false
	}
	if inv {
		rate = 1 / rate
	}
	step := lastCounter(b[:s])
	if step < 0 {
		return false
	}
	tl.Kind, tl.Framework, tl.Step, tl.ItPerS = pipeline.TelemetryStep, pipeline.FrameworkLightning, step, rate
	if i := bytes.Index(b[k:], []byte("loss=")); i >= 0 {
		tl.Loss, _ = parseNumber(trimAt(b[k+i+len("loss="):], ',', ']'))
	}
	// NeMo 1 bars carry the trainer's own step timing.
	if i := bytes.Index(b[k:], []byte("train_step_timing in s=")); i >= 0 {
		tl.StepTime, _ = parseNumber(trimAt(b[k+i+len("train_step_timing in s="):], ',', ']'))
	}
	return true
}

// lastCounter returns N of the last "N/M" in b (digits on both sides of a
// slash), or -1.
func lastCounter(b []byte) int64 {
	for i := len(b) - 1; i > 0; i-- {
		if b[i] != '/' || i+1 >= len(b) || !isDigit(b[i+1]) || !isDigit(b[i-1]) {
			continue
		}
		s := i
		for s > 0 && isDigit(b[s-1]) {
			s--
		}
		n, ok := atoi64(b[s:i])
		if ok {
			return n
		}
	}
	return -1
}

// parseComposerStep reads the Composer console logger's step header
// "[epoch=1][batch=5/5]:" (054); the figures follow on "Train …" lines.
func parseComposerStep(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, []byte("[batch="))
	if i < 0 || !bytes.HasSuffix(b, []byte("]:")) {
		return false
	}
	n, ok := atoi64(trimStepCounter(b[i+len("[batch="):]))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkComposer, n
	return true
}

// parseComposerThroughput reads "Train throughput/samples_per_sec: 2.7330",
// "…/tokens_per_sec: …" and "…/device/mfu: 0.41" (a fraction) of a
// Composer step block (054); per-device rates are not the job's.
func parseComposerThroughput(b []byte, tl *pipeline.TelemetryLine) bool {
	key, val, ok := bytes.Cut(b, []byte(": "))
	if !ok {
		return false
	}
	v, ok := parseNumber(bytes.TrimSpace(val))
	if !ok {
		return false
	}
	switch string(key) {
	case "samples_per_sec":
		tl.SamplesPerS = v
	case "tokens_per_sec":
		tl.TokensPerS = v
	case "device/mfu":
		tl.MFU = v * 100
	default:
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryAmend, pipeline.FrameworkComposer
	return true
}

// parseJSON reads a generic JSON progress line with the configured field
// names: one flat object; nested values are skipped.
func (t *Telemetry) parseJSON(b []byte, tl *pipeline.TelemetryLine) bool {
	c := &t.cfg.JSON
	var prio [8]int // index of the name that set each figure, lower wins
	for i := range prio {
		prio[i] = math.MaxInt
	}
	set := func(slot int, names []string, key []byte, fn func()) {
		for i, n := range names {
			if i < prio[slot] && string(key) == n {
				prio[slot] = i
				fn()
				return
			}
		}
	}
	figures := false
	ok := eachJSONPair(b, func(key, val []byte) {
		v, isNum := parseNumber(val)
		if !isNum {
			return
		}
		set(0, c.Step, key, func() {
			if v >= 0 && v == math.Trunc(v) && v < 1<<62 {
				tl.Step = int64(v)
			}
		})
		set(1, c.StepTime, key, func() { tl.StepTime, figures = v, true })
		set(2, c.StepTimeMS, key, func() {
			if math.IsNaN(tl.StepTime) || prio[1] == math.MaxInt {
				tl.StepTime, _ = parseScaled(val, -3)
				figures = true
			}
		})
		set(3, c.TokensPerS, key, func() { tl.TokensPerS, figures = v, true })
		set(4, c.SamplesPerS, key, func() { tl.SamplesPerS, figures = v, true })
		set(5, c.TFLOPs, key, func() { tl.TFLOPs, figures = v, true })
		set(6, c.MFU, key, func() {
			tl.MFU, figures = v, true
			if c.MFUFraction {
				tl.MFU = v * 100
			}
		})
		set(7, c.Loss, key, func() { tl.Loss = v })
	})
	if !ok || tl.Step < 0 || !figures {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryStep, pipeline.FrameworkJSON
	return true
}

// eachJSONPair calls fn for every member of the top-level object b whose
// value is a number or a string (without escapes); it reports whether b is
// a well-formed object as far as it looked.
func eachJSONPair(b []byte, fn func(key, val []byte)) bool {
	i := skipWS(b, 1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		if b[i] != '"' {
			return false
		}
		end, esc, ok := scanString(b, i)
		if !ok {
			return false
		}
		key := b[i+1 : end-1]
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return false
		}
		var val []byte
		switch c := b[i]; {
		case c == '"':
			e, vesc, ok := scanString(b, i)
			if !ok {
				return false
			}
			if !vesc {
				val = b[i+1 : e-1]
			}
			i = e
		case c == '{' || c == '[':
			e, ok := skipNested(b, i)
			if !ok {
				return false
			}
			i = e
		default:
			e := i
			for e < len(b) && b[e] != ',' && b[e] != '}' && b[e] != ' ' && b[e] != '\t' {
				e++
			}
			val, i = b[i:e], e
		}
		if val != nil && !esc {
			fn(key, val)
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

// skipNested returns the index after the object or array at b[i].
func skipNested(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case '"':
			e, _, ok := scanString(b, i)
			if !ok {
				return 0, false
			}
			i = e
			continue
		}
		i++
	}
	return 0, false
}

// parseNanoGPT reads nanoGPT's "iter 10: loss 3.2202, time 893.76ms, mfu
// 16.68%" (nanoGPT issue 178). The first iterations print mfu -100.00% as
// a placeholder: not a figure. Lines from before March 2023, without mfu,
// are not read: "mfu" is the finder's token for these lines, and a line
// the finder would not hand on must not be one (FuzzFinderCovers); their
// other words ("iter", "loss", "time") are too common to search for.
func parseNanoGPT(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte(", mfu ")) {
		return false
	}
	c := bytes.IndexByte(b, ':')
	if c < 0 {
		return false
	}
	step, ok := atoi64(b[len("iter "):c])
	if !ok {
		return false
	}
	for rest := b[c+1:]; len(rest) > 0; {
		var part []byte
		part, rest = cutAt(rest, ',')
		key, val := nextField(part)
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "loss":
			tl.Loss, _ = parseNumber(val)
		case "time":
			switch {
			case bytes.HasSuffix(val, []byte("ms")):
				tl.StepTime, _ = parseScaled(val[:len(val)-2], -3)
			case bytes.HasSuffix(val, []byte("s")):
				tl.StepTime, _ = parseNumber(val[:len(val)-1])
			}
		case "mfu":
			if v, ok := parseNumber(val); ok && v >= 0 {
				tl.MFU = v
			}
		}
	}
	if math.IsNaN(tl.StepTime) {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkNanoGPT, step
	return true
}

// parseMaxText reads MaxText's "completed step: 5, seconds: 1.234,
// TFLOP/s/device: 100.5, Tokens/s/device: 1234.5, total_weights: 65536,
// loss: 10.5" (JAX; NCCL underneath on GPUs).
func parseMaxText(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte("TFLOP/s")) {
		// Every release prints TFLOP/s, the finder's token for these
		// lines (FuzzFinderCovers).
		return false
	}
	for rest := b[bytes.Index(b, []byte("completed step:")):]; len(rest) > 0; {
		var part []byte
		part, rest = cutAt(rest, ',')
		key, val, ok := bytes.Cut(part, []byte(": "))
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		switch string(bytes.TrimSpace(key)) {
		case "completed step":
			tl.Step, _ = atoi64(val)
		case "seconds":
			tl.StepTime, _ = parseNumber(val)
		case "TFLOP/s/device", "TFLOP/s": // TFLOP/s before per-device naming (2023)
			tl.TFLOPs, _ = parseNumber(val)
		case "Tokens/s/device":
			tl.TokensPerS, _ = parseNumber(val)
		case "loss":
			tl.Loss, _ = parseNumber(val)
		}
	}
	if tl.Step < 0 || math.IsNaN(tl.StepTime) {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryStep, pipeline.FrameworkMaxText
	return true
}
