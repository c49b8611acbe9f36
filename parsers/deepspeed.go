package parsers

import (
	"bytes"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// parseProfileStep reads the DeepSpeed flops profiler's "Profile Summary at
// step 10:" (reference 060), whose figures follow on later lines.
func parseProfileStep(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, tokProfile) + len(tokProfile)
	n, ok := atoi64(bytes.TrimRight(firstField(b[i:]), ":"))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkDeepSpeed, n
	return true
}

// parseDeepSpeedTimer reads DeepSpeed's throughput timer: "[timer.py:260:
// stop] epoch=0/micro_step=199/global_step=199, RunningAvgSamplesPerSec=
// 58.73, CurrSamplesPerSec=61.35, …" (reference 027), the 2022 form
// "0/20, RunningAvgSamplesPerSec=…, CurrSamplesPerSec=…" (reference 062)
// and the 2020 form "0/50, SamplesPerSec=1292.64" (reference 061), where
// 0/50 is epoch/step.
func parseDeepSpeedTimer(b []byte, tl *pipeline.TelemetryLine) bool {
	if i := bytes.Index(b, []byte("global_step=")); i >= 0 {
		tl.Step, _ = atoi64(trimAt(b[i+len("global_step="):], ',', ' '))
	} else {
		// The epoch/step pair is the field before the first rate; the
		// timestamp before it may hold a comma too ("08:26:26,101").
		k := bytes.Index(b, []byte("SamplesPerSec="))
		if r := bytes.Index(b, []byte("RunningAvgSamplesPerSec=")); r >= 0 && r < k {
			k = r
		}
		c := bytes.LastIndexByte(b[:k], ',')
		if c < 0 {
			return false
		}
		tok := b[bytes.LastIndexByte(b[:c], ' ')+1 : c]
		if s := bytes.IndexByte(tok, '/'); s >= 0 {
			tl.Step, _ = atoi64(tok[s+1:])
		}
	}
	v := math.NaN()
	if i := bytes.Index(b, []byte("CurrSamplesPerSec=")); i >= 0 {
		v, _ = parseNumber(trimAt(b[i+len("CurrSamplesPerSec="):], ',', ' '))
	} else if i := bytes.Index(b, []byte(" SamplesPerSec=")); i >= 0 {
		v, _ = parseNumber(trimAt(b[i+len(" SamplesPerSec="):], ',', ' '))
	} else if i := bytes.Index(b, []byte("RunningAvgSamplesPerSec=")); i >= 0 {
		v, _ = parseNumber(trimAt(b[i+len("RunningAvgSamplesPerSec="):], ',', ' '))
	}
	if math.IsNaN(v) || tl.Step < 0 {
		return false
	}
	tl.Kind, tl.Framework, tl.SamplesPerS = pipeline.TelemetryStep, pipeline.FrameworkDeepSpeed, v
	return true
}

// parseProfilerLine reads the DeepSpeed flops profiler's "iter latency:
// 184.73 ms", "samples/second: 433.07" and "fwd+bwd FLOPS per GPU = …:
// 102.0 TFLOPS" (reference 060), figures of the step its "Profile Summary
// at step N" names. "step latency" is the optimizer step, not a step time.
func parseProfilerLine(b []byte, tl *pipeline.TelemetryLine) bool {
	if !hasPrefix(b, "iter latency:") && !hasPrefix(b, "samples/second:") && !hasPrefix(b, "fwd+bwd FLOPS per GPU") {
		return false
	}
	c := bytes.LastIndexByte(b, ':')
	val, unit := nextField(b[c+1:])
	unit = trimBlank(unit)
	v, ok := parseNumber(val)
	if !ok {
		return false
	}
	switch {
	case hasPrefix(b, "iter latency:"):
		scale, ok := timeScale(unit)
		if !ok {
			return false
		}
		tl.StepTime = v * scale
		if scale == 1e-3 {
			tl.StepTime, _ = parseScaled(val, -3)
		}
	case hasPrefix(b, "samples/second:"):
		tl.SamplesPerS = v
	default:
		switch string(unit) {
		case "TFLOPS":
			tl.TFLOPs = v
		case "GFLOPS":
			tl.TFLOPs = v / 1e3
		case "PFLOPS":
			tl.TFLOPs = v * 1e3
		default:
			return false
		}
	}
	tl.Kind, tl.Framework = pipeline.TelemetryAmend, pipeline.FrameworkDeepSpeed
	return true
}

func timeScale(unit []byte) (float64, bool) {
	switch string(unit) {
	case "s":
		return 1, true
	case "ms":
		return 1e-3, true
	case "us":
		return 1e-6, true
	}
	return 0, false
}
