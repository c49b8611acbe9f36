package parsers

import (
	"bytes"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// parseTeraFlops reads Megatron-DeepSpeed's "Effective Tera Flops per GPU:
// 41.31 and total parameters 52.005 B", printed (2021) on the line after
// the iteration it measures (reference 024).
func parseTeraFlops(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, tokTeraFlops) + len(tokTeraFlops)
	v, ok := parseNumber(firstField(b[i:]))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.TFLOPs = pipeline.TelemetryAmend, pipeline.FrameworkMegatron, v
	return true
}

// parseMegatron reads a Megatron-LM iteration line: " iteration 20/ 40000
// | consumed samples: … | elapsed time per iteration (ms): 3367.6 |
// throughput per GPU (TFLOP/s/GPU): 5.8 | …" (026). Megatron-DeepSpeed
// prints seconds and "samples per second", "TFLOPs" (reference 022) or
// "tokens per gpu per second (tgs)" (reference 027). Timer lines
// ("time (ms) | forward-compute: …") have no "elapsed time per iteration"
// and never get here.
func parseMegatron(b []byte, tl *pipeline.TelemetryLine) bool {
	it := bytes.Index(b, []byte("iteration "))
	if it < 0 {
		return false
	}
	step, ok := atoi64(trimStepCounter(trimBlank(b[it+len("iteration "):])))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkMegatron, step
	found := false
	eachPair(b, '|', func(key, val []byte) {
		var ok bool
		switch string(key) {
		case "elapsed time per iteration (ms)":
			tl.StepTime, ok = parseScaled(val, -3)
			found = found || ok
		case "elapsed time per iteration (s)":
			if !bytes.Contains(b, []byte("(s):")) {
				break // "(s) :": not the form printed, nor the finder's token
			}
			tl.StepTime, ok = parseNumber(val)
			found = found || ok
		case "throughput per GPU (TFLOP/s/GPU)", "TFLOPs", "tflops", "TFLOPS":
			tl.TFLOPs, _ = parseNumber(val)
		case "samples per second", "samples/sec":
			tl.SamplesPerS, _ = parseNumber(val)
		case "approx flops per GPU":
			// GPT-NeoX style Megatron-DeepSpeed: "112.9TFLOPS"
			// (deepspeedai/DeepSpeed issue 3742).
			tl.TFLOPs = flopsUnit(val)
		case "tokens per gpu per second (tgs)", "tokens per second", "tokens per sec":
			tl.TokensPerS, _ = parseNumber(val)
		case "lm loss", "lm_loss":
			tl.Loss, _ = parseNumber(val)
		case "MFU", "mfu":
			tl.MFU, _ = parseNumber(val)
		}
	})
	return found
}

// flopsUnit reads "112.9TFLOPS" (or GFLOPS, PFLOPS) as TFLOP/s; NaN for
// anything else.
func flopsUnit(b []byte) float64 {
	for _, u := range [...]struct {
		suffix string
		scale  float64
	}{{"TFLOPS", 1}, {"GFLOPS", 1e-3}, {"PFLOPS", 1e3}} {
		if v, ok := bytes.CutSuffix(b, []byte(u.suffix)); ok {
			if f, ok := parseNumber(bytes.TrimSpace(v)); ok {
				return f * u.scale
			}
		}
	}
	return math.NaN()
}

// parseNeMo reads a NeMo 2 step line: "Training epoch 2, iteration 7/999
// | lr: … | global_step: 45 | reduced_train_loss: 11.02 |
// train_step_timing in s: 47.12 | …" (reference 053). The step is the
// global step; "iteration" counts within the epoch.
func parseNeMo(b []byte, tl *pipeline.TelemetryLine) bool {
	tl.Framework = pipeline.FrameworkNeMo
	eachPair(b, '|', func(key, val []byte) {
		switch string(key) {
		case "global_step":
			tl.Step, _ = atoi64(val)
		case "train_step_timing in s":
			tl.StepTime, _ = parseNumber(val)
		case "reduced_train_loss":
			tl.Loss, _ = parseNumber(val)
		case "TFLOPS_per_GPU":
			tl.TFLOPs, _ = parseNumber(val)
		}
	})
	if math.IsNaN(tl.StepTime) {
		return false
	}
	tl.Kind = pipeline.TelemetryStep
	return true
}
