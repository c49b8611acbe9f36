package parsers

import (
	"bytes"
	"math"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// progressCases are real lines of testdata/telemetry 115–144 and the
// traps docs/telemetry.md names, with what the rules read from them.
var progressCases = []struct {
	name, in string
	want     func(*pipeline.TelemetryLine) // nil: no telemetry line
}{
	{"115 key:value glued", `Step 3 | loss:1.1732845306396484 lr:2e-05 tokens_per_second_per_gpu:655.9372371931469`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 3)
			l.Loss, l.TokensPerS = 1.1732845306396484, 655.9372371931469
		}},
	{"125 unit in the key", `INFO 2021-12-02 18:52:20,806 log_hooks.py: 277: Rank: 0; [ep: 0] iter: 57; lr: 0.71785; loss: 2.94718; btime(ms): 192; eta: 0:00:08; peak_mem(M): 4176;`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 57)
			l.Loss, l.StepTime = 2.94718, 0.192
		}},
	{"129 samples by unit, tab", "2021-03-30 06:55:57 [INFO]\t[TRAIN] epoch: 1, iter: 20/500, loss: 2.0859, lr: 0.009657, batch_cost: 0.5344, reader_cost: 0.07273, ips: 3.7425 samples/sec | ETA 00:04:16",
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 20)
			l.Loss, l.StepTime, l.SamplesPerS = 2.0859, 0.5344, 3.7425
		}},
	{"123 key = value, number unit", `INFO:tensorflow:global step 2130: loss = 6.8195 (0.888 sec/step)`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 2130)
			l.Loss, l.StepTime = 6.8195, 0.888
		}},
	{"118 key value, rates", `Iter 36: Train loss 4.040, Learning Rate 2.000e-08, It/sec 1.472, Tokens/sec 67.707, Trained Tokens 1656, Peak mem 5.094 GB`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 36)
			l.Loss, l.ItPerS, l.TokensPerS = 4.04, 1.472, 67.707
		}},
	{"137 key=value, clock is no time", `| Training Device=xla:0/3 Epoch=1 Step=280 Loss=0.01022 Rate=1760.91 GlobalRate=257.10 Time=07:29:39`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 280)
			l.Loss = 0.01022
		}},
	{"141 hyphen keys, thousands", `2026-04-01 14:07:05 | INFO | step 00000002/00000015 | step-time 28.823 sec | cross-entropy-loss 2.5949 | load-balance-loss 0.001803 | learning-rate 1.000000e-06 | gradient-norm 20.0672 | tokens-per-second 72,759 | peak-gpu-memory 63.84 GB`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 2)
			l.StepTime, l.Loss, l.TokensPerS = 28.823, 2.5949, 72759
		}},
	{"119 leading step, bare duration", `1220 | loss 3.2969 | lr 2.640000e-04 | 13880.16ms`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 1220)
			l.Loss, l.StepTime = 3.2969, 13.88016
		}},
	{"134 epoch brackets", "2021-08-04 21:31:12,672 - mmaction - INFO - Epoch [1][10000/62577]\tlr: 1.000e-02, eta: 46 days, 19:39:55, time: 0.444, data_time: 0.099, memory: 5068, top1_acc: 0.0187, top5_acc: 0.0688, loss_cls: 5.7112, loss: 5.7112, grad_norm: 4.5613",
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 10000)
			l.StepTime, l.Loss = 0.444, 5.7112
		}},
	{"127 epoch fraction then step fraction", "`2022-05-15 08:12:46,743 - INFO - Epoch [20/20][7720/7724] lr: 0.00000, eta: 0:00:06, time: 1.556, data_time: 0.030, transfer_time: 0.017, forward_time: 0.593, loss_parse_time: 0.000 memory: 20244,",
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 7720)
			l.StepTime = 1.556
		}},
	{"132 bracket with a blank", `2021-03-10T13:17:11.883Z: [1,0]<stdout>:Epoch: [2]  [ 150/1251]  eta: 0:20:52  lr: 0.000201  loss: 6.8610 (6.8841)  time: 1.0552  data: 0.0035  max mem: 8249`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 150)
			l.Loss, l.StepTime = 6.861, 1.0552
		}},
	{"117 spaced fraction after epoch", `| epoch 011  3000 / 8223 loss=0.75 (1.35), wps=963, wpb=916, bsz=32, lr=0.001, clip=100%, gnorm=2.0545`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 3000)
			l.Loss, l.TokensPerS = 0.75, 963
		}},
	{"136 first counter wins", `iter 77 step 39: loss 10.8259, iter time: 214.40ms (optimizer.step)`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 77)
			l.Loss, l.StepTime = 10.8259, 0.2144
		}},
	{"121 loss evidence only", "`epoch: 0|step: 259|ppo_ep: 1|act_loss: 0.0253753662109375|cri_loss: 0.2144775390625|unsuper_loss: 0.0",
		func(l *pipeline.TelemetryLine) { step(l, pipeline.FrameworkProgress, 259) }},
	{"130 qualified times are not step times", `iter: 000200 - train loss: 3.432 - lr: 4.09e-05 - load time: 0.39 - gpu time: 38.92`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 200)
			l.Loss = 3.432
		}},
	{"mfu fraction", `step 12 | dt 410ms | mfu 0.41`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 12)
			l.StepTime, l.MFU = 0.41, 41
		}},
	{"s/it is inverted", `step 5, loss: 2.0, 2.5 s/it`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 5)
			l.Loss, l.ItPerS = 2, 0.4
		}},
	{"130 evaluation line", `iter: 003000 - valid loss: 0.729 - acc full seq: 0.8856 - acc per char: 0.9896`, nil},
	{"117 evaluation subset", `| epoch 010 | valid on 'valid' subset  1000 / 1311 loss=1.60`, nil},
	{"133 test line", `loss_test:  tensor(0.2120, device='cuda:0', grad_fn=<RsubBackward1>)`, nil},
	{"133 total time has no step", `Epoch: [2] Total time: 0:00:26 (0.1271 s / it)`, nil},
	{"140 block header", `2024-08-06 10:00:05.520 intern-studio-160750:0  olmo.train:908  INFO    [step=2/739328,epoch=0]`,
		func(l *pipeline.TelemetryLine) { step(l, pipeline.FrameworkProgress, 2) }},
	{"145 block header behind a rich prefix", `[2024-04-18 14:24:46] INFO     [olmo.train:729, rank=0] [step=2/739328]`,
		func(l *pipeline.TelemetryLine) { step(l, pipeline.FrameworkProgress, 2) }},
	{"block header with eta", "2025-01-01 00:00:00.000\tnode:0\tolmo_core.train:100\tINFO\t[step=15000/30000, eta=1 hour, 2 minutes]",
		func(l *pipeline.TelemetryLine) { step(l, pipeline.FrameworkProgress, 15000) }},
	{"block header not last", `[step=2/739328] starting`, nil},
	{"block header without a fraction", `INFO [step=2]`, nil},
	{"block header of an eval loop", `INFO [eval_step=3/16]`, nil},
	{"140 block tokens/s", `    throughput/device/tokens_per_second=26,668`,
		func(l *pipeline.TelemetryLine) { amend(l, pipeline.FrameworkProgress); l.TokensPerS = 26668 }},
	{"145 block batches/s is it/s", `    throughput/device/batches_per_second=0.0284`,
		func(l *pipeline.TelemetryLine) { amend(l, pipeline.FrameworkProgress); l.ItPerS = 0.0284 }},
	{"145 block loss", `    train/CrossEntropyLoss=10.88`,
		func(l *pipeline.TelemetryLine) { amend(l, pipeline.FrameworkProgress); l.Loss = 10.88 }},
	{"block perplexity is no figure", `    train/Perplexity=53,153`, nil},
	{"block memory is no figure", `    System/Peak GPU Memory (MB)=57,144`, nil},
	{"block eval loss", `    eval/c4_en-validation/CrossEntropyLoss=3.14`, nil},
	{"block loss nan", `    train/CrossEntropyLoss=nan`, nil},
	{"block figure with more text", `    throughput/device/tokens_per_second=26,668 at step 2`, nil},
	{"block path without a slash", `    tokens_per_second=26,668`, nil},
	{"122 rate key is no step", `INFO:tensorflow:global_step/sec: 0.0339311`, nil},
	{"step at a checkpoint", `saving checkpoint at step 1000, loss 2.3, time 1.2s`, nil},
	{"train_time is a running total", `step:1400/1555 train_time:79183ms`, nil},
	{"NCCL line", `host:1:1 [0] NCCL INFO step 5 loss 2.0 time 1.0s`, nil},
	{"JSON is the JSON reader's", `{"iter": 5, "loss": 2.0, "time": 1.0}`, nil},
	{"a step and no figure", `step 5 of 100 done, lr 0.1, Loss scale 1024`, nil},
	{"no finder token: not read", `step 5, loss 2.0, time 1.5s`, nil},
	{"148 a key is no value; magnitudes, a unit in the key", `01/17/2024 13:47:27 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 992 / 1000 | consumed_tokens: 635K | elapsed_time_per_iteration_ms: 41.2 | tokens_per_sec: 15.5K | lm_loss: 10.6 | model_tflops_per_gpu: 0.0095`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 992)
			l.Loss, l.StepTime, l.TokensPerS, l.TFLOPs = 10.6, 0.0412, 15500, 0.0095
		}},
	{"147 reordered: magnitudes; the job's tokens/s first; hardware TFLOP/s qualified", `10/17/2025 16:31:56 [INFO|DP=0|PP=0|TP=0]: iteration: 327281 / 378950 | consumed_tokens: 85.8G | elapsed_time_per_iteration_ms: 11.5K | tokens_per_sec: 22.8K | tokens_per_sec_per_gpu: 11.4K | global_batch_size: 64 | lm_loss: 2.38 | lr: 1e-05 | hardware_tflops_per_gpu: 40.1 | model_tflops_per_gpu: 38.3 | grad_norm: 1.25`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 327281)
			l.Loss, l.StepTime, l.TokensPerS, l.TFLOPs = 2.38, 11.5, 22800, 38.3
		}},
	{"magnitudes B, T, K; per-GPU tokens alone; lower case no magnitude", `iteration: 7 / 9 | tokens_per_sec_per_gpu: 1.2B | samples_per_sec: 0.003T | model_tflops_per_gpu: 0.5K | time_per_iteration_s: 2k`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 7)
			l.TokensPerS, l.SamplesPerS, l.TFLOPs = 1.2e9, 3e9, 500
		}},
	{"time_ms carries its unit", `step 3 | time_ms: 40 | loss: 1.5`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 3)
			l.StepTime, l.Loss = 0.04, 1.5
		}},
	{"a unit in the key after a step-time key only", `step 3 | data_time_ms: 40 | elapsed_time_per_iteration_sec: 1.5`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 3)
			l.StepTime = 1.5
		}},
	{"151 bracketed fraction after Iter(train)", `2024/05/07 12:12:48 - mmengine - INFO - Iter(train) [1020/2046]  lr: 1.0546e-04  eta: 0:56:17  time: 2.8955  data_time: 0.0172  memory: 15266  loss: 0.8473  grad_norm: 0.0009`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 1020)
			l.Loss, l.StepTime = 0.8473, 2.8955
		}},
	{"150 samples and a percentage in a bracket are no counter", `2023-06-29,15:45:36 | INFO | Train Epoch: 0 [  6464/109468 (3%)] Loss: 0.97884 (1.023) Data (t): 0.158 Batch (t): 0.559, 36.0876/s LR: 0.000001 Logit Scale: 99.995 - V4`, nil},
	{"torchtune bar: its bracket is no figure", `1|1625|Loss: 1.5839784145355225: 100%|██████████| 1625/1625 [22:01<00:00,  1.23it/s]`, nil},
}

func TestGenericProgress(t *testing.T) {
	p := NewTelemetry(DefaultTelemetryConfig())
	var got, want pipeline.TelemetryLine
	for _, c := range progressCases {
		for pass := range 2 {
			ok := p.Parse([]byte(c.in), &got)
			want.Reset()
			if c.want != nil {
				c.want(&want)
			}
			if ok != (c.want != nil) || (ok && describe(&got) != describe(&want)) {
				t.Errorf("%s (pass %d): Parse(%q) = %v, %s; want %v, %s", c.name, pass, c.in, ok, describe(&got), c.want != nil, describe(&want))
			}
		}
	}
}

// FuzzGenericProgress checks properties of every line the generic reader
// reads: it holds a finder token, no NCCL and no evaluation word; its
// step is a count and its figures are not negative (loss apart); a
// second read gives the same.
func FuzzGenericProgress(f *testing.F) {
	for _, c := range progressCases {
		f.Add([]byte(c.in))
	}
	telemetryLines(f, func(_ string, line []byte) { f.Add(append([]byte(nil), line...)) })
	p := NewTelemetry(DefaultTelemetryConfig())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 || bytes.IndexByte(b, '\n') >= 0 {
			return
		}
		var tl pipeline.TelemetryLine
		if !p.Parse(b, &tl) || tl.Framework != pipeline.FrameworkProgress {
			return
		}
		first := describe(&tl)
		if !allSet.contains(b) {
			t.Fatalf("read %q, which holds no finder token", b)
		}
		if bytes.Contains(b, []byte("NCCL")) || evaluationLine(b) {
			t.Fatalf("read %q: an NCCL or evaluation line", b)
		}
		// Step lines have a step; amend lines (block figures) none, and
		// they are one "path=number".
		if step := tl.Kind == pipeline.TelemetryStep; step != (tl.Step >= 0) ||
			!step && (tl.Kind != pipeline.TelemetryAmend || !bytes.Contains(b, []byte("/")) || !bytes.Contains(b, []byte("="))) {
			t.Fatalf("read %q as %s step %d", b, tl.Kind, tl.Step)
		}
		for _, v := range []float64{tl.StepTime, tl.TokensPerS, tl.SamplesPerS, tl.ItPerS, tl.TFLOPs, tl.MFU} {
			if v < 0 || math.IsInf(v, 0) {
				t.Fatalf("read %q with a figure %v", b, v)
			}
		}
		if !p.Parse(b, &tl) || describe(&tl) != first {
			t.Fatalf("second read of %q = %s; first %s", b, describe(&tl), first)
		}
	})
}

// BenchmarkGenericProgress is the telemetry parser on the progress cases.
func BenchmarkGenericProgress(b *testing.B) {
	p := NewTelemetry(DefaultTelemetryConfig())
	var tl pipeline.TelemetryLine
	for _, c := range progressCases[:8] {
		b.Run(c.name[:3], func(b *testing.B) {
			line := []byte(c.in)
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				p.Parse(line, &tl)
			}
		})
	}
}

// amend sets the fields of an amend line.
func amend(l *pipeline.TelemetryLine, fw string) {
	l.Kind, l.Framework = pipeline.TelemetryAmend, fw
}
