package parsers

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// telCase is one real telemetry line (from the testdata/telemetry file its
// name gives) and what Parse must make of it: want sets the expected fields
// on a reset line; nil means the line is not a telemetry line.
type telCase struct {
	name string
	in   string
	want func(l *pipeline.TelemetryLine)
}

var telCases = []telCase{
	{"026 megatron core iteration", ` [2024-10-24 09:51:57] iteration      100/   40000 | consumed samples:         6400 | elapsed time per iteration (ms): 1623.0 | throughput per GPU (TFLOP/s/GPU): 12.0 | learning rate: 6.000000E-05 | global batch size:    64 | lm loss: 9.109857E+00 | load_balancing_loss: 1.036356E+00 | loss scale: 1.0`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkMegatron, 100)
			l.StepTime, l.TFLOPs, l.Loss = 1.623, 12.0, 9.109857
		}},
	{"105 megatron-llm 2023", ` iteration      185/  250000 | consumed samples:       189440 | elapsed time per iteration (ms): 130554.9 | learning rate: 1.387E-05 | global batch size:  1024 | lm loss: 2.435094E+00 | loss scale: 1.0 | grad norm: 0.450 | number of skipped iterations:   0 | number of nan iterations:   0 |`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkMegatron, 185)
			l.StepTime, l.Loss = 130.5549, 2.435094
		}},
	// deepspeedai/DeepSpeed issue 3742, turn 3 by zhangir-azerbayev: GPT-NeoX
	// style Megatron-DeepSpeed with samples/sec first and approx flops.
	{"ds3742 neox megatron", ` samples/sec: 7.799 | iteration       34/   10000 | elapsed time per iteration (ms): 4103.1 | learning rate: 2.111E-06 | approx flops per GPU: 112.9TFLOPS | lm_loss: 1.118665E+01 | number of skipped iterations:   0 | number of nan iterations:   0 |`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkMegatron, 34)
			l.StepTime, l.SamplesPerS, l.TFLOPs, l.Loss = 4.1031, 7.799, 112.9, 11.18665
		}},
	{"032 torchtitan thousands separator", `[titan] 2026-02-24 19:46:19,145 - root - INFO - step:  5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps: 10,007  tflops: 313.36  mfu: 13.93%`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkTorchtitan, 5)
			l.Loss, l.TokensPerS, l.TFLOPs, l.MFU = 7.07623, 10007, 313.36, 13.93
		}},
	{"106 torchtitan rank prefix two blanks", `[rank0]:[titan] 2026-05-18 16:04:54,191 - root - INFO - step: 21  loss:  3.00867  grad_norm:  0.6348  memory:  9.46GiB(64.99%)  tps: 7,304  tflops: 0.52  mfu: 0.17%`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkTorchtitan, 21)
			l.Rank, l.Loss, l.TokensPerS, l.TFLOPs, l.MFU = 0, 3.00867, 7304, 0.52, 0.17
		}},
	{"042 hf step dict padded", `{'loss': 0.3818, 'grad_norm': 0.1455276608467102, 'learning_rate': 0.0, 'epoch': 1.0, 'step': 10000}                                                         `,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkHF, 10000)
			l.Loss = 0.3818
		}},
	{"042 hf summary dict", `{'train_runtime': 8754.1218, 'train_samples_per_second': 36.554, 'train_steps_per_second': 1.142, 'train_loss': 2.159679998397827, 'epoch': 1.0, 'step': 10000}`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.Framework, l.Runtime, l.SamplesPerS = pipeline.TelemetrySummary, pipeline.FrameworkHF, 8754.1218, 36.554
		}},
	{"042 hf eval dict", `{'eval_loss': 0.3461727797985077, 'eval_runtime': 9.144, 'eval_samples_per_second': 10.936, 'eval_steps_per_second': 1.422, 'epoch': 1.0, 'step': 10000}     `, nil},
	{"114 hf quoted summary", `{'train_runtime': '2219', 'train_samples_per_second': '1.474', 'train_steps_per_second': '0.185', 'train_loss': '0.7228', 'epoch': '3'}`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.Framework, l.Runtime, l.SamplesPerS = pipeline.TelemetrySummary, pipeline.FrameworkHF, 2219, 1.474
		}},
	{"114 hf metrics block runtime", `  train_runtime            = 0:36:58.55`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.Framework, l.Runtime = pipeline.TelemetrySummary, pipeline.FrameworkHF, 2218.55
		}},
	{"114 hf metrics block loss", `  train_loss               =     0.7228`, nil},
	{"108 ms-swift dict", `2025-05-21T03:51:30.185426376Z {'loss': 0.35028491, 'token_acc': 0.87245841, 'grad_norm': 2.94855862, 'learning_rate': 9.99e-06, 'memory(GiB)': 76.72, 'train_speed(iter/s)': 0.194736, 'epoch': 0.21, 'global_step/max_steps': '310/4491', 'percentage': '6.90%', 'elapsed_time': '26m 26s', 'remaining_time': '5h 56m 37s'}`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkHF, 310)
			l.Loss, l.ItPerS = 0.35028491, 0.194736
		}},
	{"050 lightning bar trailing blank", "Epoch 0:  25%|\u2588\u2588\u258c       | 8/32 [00:00<00:00, 49.28it/s, loss=0.87, v_num=15] ",
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkLightning, 8)
			l.ItPerS, l.Loss = 49.28, 0.87
		}},
	{"107 nemo1 bar s/it", `Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, reduced_train_loss=3.090, global_step=794.0, consumed_samples=1.63e+6]`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkLightning, 795)
			sPerIt := 41.36 // a float64 division, as the parser does, not an exact constant one
			l.ItPerS, l.Loss = 1/sPerIt, 3.1
		}},
	{"042 hf tqdm bar is not a step", " 53%|\u2588\u2588\u2588\u2588\u2588\u258e    | 50/97 [05:21<05:00,  6.39s/it]", nil},
	{"110 deepspeed timer", `stdout: [2022-12-20 08:27:27,159] [INFO] [timer.py:197:stop] 0/22, RunningAvgSamplesPerSec=157.0806611496739, CurrSamplesPerSec=155.14401867030702, MemAllocated=1.75GB, MaxMemAllocated=2.62GB`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkDeepSpeed, 22)
			l.SamplesPerS = 155.14401867030702
		}},
	{"109 deepspeed timer 2022", `[2022-03-11 02:07:14,130] [INFO] [timer.py:189:stop] 0/50, SamplesPerSec=83.73838805358588, MemAllocated=0.26GB, MaxMemAllocated=9.02GB`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkDeepSpeed, 50)
			l.SamplesPerS = 83.73838805358588
		}},
	{"109 deepspeed log_dist is not a step", `[2022-03-11 02:07:29,274] [INFO] [logging.py:69:log_dist] [Rank 0] step=60, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]`, nil},
	{"111 deepspeed 2020 glued quote", `>[INFO 2020-06-08 05:26:19] 0/2650, SamplesPerSec=13.19749106827976`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkDeepSpeed, 2650)
			l.SamplesPerS = 13.19749106827976
		}},
	{"112 nemo2 step", `Training epoch 0, iteration 125/149 | lr: 3e-05 | consumed_samples: 126 | global_batch_size: 1 | global_step: 125 | reduced_train_loss: 1.34 | train_step_timing in s: 0.03147 | val_loss: 4.106`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkNeMo, 125)
			l.StepTime, l.Loss = 0.03147, 1.34
		}},
	{"054 composer step header", `[epoch=1][batch=5/5]:`,
		func(l *pipeline.TelemetryLine) { step(l, pipeline.FrameworkComposer, 5) }},
	{"054 composer tokens", `         Train throughput/tokens_per_sec: 20082.8418`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.Framework, l.TokensPerS = pipeline.TelemetryAmend, pipeline.FrameworkComposer, 20082.8418
		}},
	{"054 composer device tokens are not the job's", `         Train throughput/device/tokens_per_sec: 1255.1776`, nil},
	{"103 nanogpt placeholder mfu", `iter 0: loss 4.2648, time 9371.81ms, mfu -100.00%`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkNanoGPT, 0)
			l.Loss, l.StepTime = 4.2648, 9.37181
		}},
	{"104 nanogpt quoted nan loss", `> 2023-03-22 09:33:43 iter 3060: loss nan, time 1018.23ms, mfu 15.11%`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkNanoGPT, 3060)
			l.StepTime, l.MFU = 1.01823, 15.11
		}},
	{"103 nanogpt eval line", `step 250: train loss 1.5440, val loss 1.7220`, nil},
	// Lines the named readers decline for want of their finder token hold
	// "loss", a token of the generic reader (docs/telemetry.md): it reads
	// them by the generic rules (MaxText's "seconds" is no step-time key).
	{"nanogpt before mfu", `iter 10: loss 3.2202, time 893.76ms`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 10)
			l.Loss, l.StepTime = 3.2202, 0.89376
		}},
	{"torchtitan without memory", `[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  tps: 10,050`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 4)
			l.Loss, l.TokensPerS = 7.62585, 10050
		}},
	{"maxtext without tflops", `completed step: 3, seconds: 10.344, loss: 12.979`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkProgress, 3)
			l.Loss = 12.979
		}},
	// Lines the finder would not hand on are no telemetry lines
	// (FuzzFinderCovers): nccl-tests lines without their Pid, minBytes or
	// a type name.
	{"nccl-tests device without pid", `#  Rank  0 Group  0 on gpu01 device  0 [0x00] Tesla T4`, nil},
	{"nccl-tests params without bytes", `# nThread 1 nGpus 1 warmup iters: 5`, nil},
	{"nccl-tests row of no type", `           4             1     f    none       0    27.06    0.00    0.00    N/A    27.03    0.00    0.00    N/A`, nil},
	{"composer step header in batches", `[batch=16/100]:`,
		func(l *pipeline.TelemetryLine) { step(l, pipeline.FrameworkComposer, 16) }},
	{"113 maxtext", `I0811 21:55:16.704861 138304841739136 metric_logger.py:226] completed step: 3, seconds: 10.344, TFLOP/s/device: 346.932, Tokens/s/device: 19006.461, total_weights: 1572864, loss: 12.979, lm_loss: 12.979, perplexity: 433110.281`,
		func(l *pipeline.TelemetryLine) {
			step(l, pipeline.FrameworkMaxText, 3)
			l.StepTime, l.TFLOPs, l.TokensPerS, l.Loss = 10.344, 346.932, 19006.461, 12.979
		}},

	// nccl-tests
	{"014 command line", `$ srun --gres=gpu:1 -N3 --export="OMPI_MCA_btl_tcp_if_include=ens5,OMPI_MCA_pml=^ucx,NCCL_SOCKET_IFNAME=ens" --container-image=./pytorch-nccl-tests.sqsh all_reduce_perf -b 100M -e 110M -c 0 -n 1`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.Collective = pipeline.TelemetryTestCommand, []byte("all_reduce_perf")
		}},
	{"014 params", `# nThread 1 nGpus 1 minBytes 104857600 maxBytes 115343360 step: 1048576(bytes) warmup iters: 5 iters: 1 validation: 0`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.MinBytes, l.MaxBytes = pipeline.TelemetryTestParams, 104857600, 115343360
		}},
	{"014 device without group", `#   Rank  2 Pid  16393 on      gpu03 device  0 [0x00] Tesla T4`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.TestRank, l.Host, l.Dev, l.GPU = pipeline.TelemetryTestDevice, 2, []byte("gpu03"), 0, []byte("Tesla T4")
		}},
	{"017 device with group", `#  Rank 15 Group  0 Pid    380 on inst-yyyyy-gpu4-ol89 device  7 [0xda] NVIDIA A100-SXM4-40GB`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.TestRank, l.Host, l.Dev, l.GPU = pipeline.TelemetryTestDevice, 15, []byte("inst-yyyyy-gpu4-ol89"), 7, []byte("NVIDIA A100-SXM4-40GB")
		}},
	{"102 version", `# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=23102 nccl-library=23102`,
		func(l *pipeline.TelemetryLine) { l.Kind, l.Version = pipeline.TelemetryTestVersion, []byte("2.20.0") }},
	{"102 start", `# Collective test starting: all_reduce_perf`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.Collective = pipeline.TelemetryTestStart, []byte("all_reduce_perf")
		}},
	{"015 header", `#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong`,
		func(l *pipeline.TelemetryLine) { l.Kind, l.Format = pipeline.TelemetryTestHeader, FormatRedopRootWrong }},
	{"100 header root no redop", `#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error`,
		func(l *pipeline.TelemetryLine) { l.Kind, l.Format = pipeline.TelemetryTestHeader, FormatRootError }},
	{"015 units line", `#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       `, nil},
	{"017 row", ` 10737418240    2684354560     float     sum      -1    90330  118.87  222.88      0    91945  116.78  218.96      0`,
		func(l *pipeline.TelemetryLine) {
			row(l, FormatRedopRootWrong, 10737418240, 2684354560, "float", "sum", -1,
				pipeline.NCCLTestResult{TimeUS: 90330, AlgBW: 118.87, BusBW: 222.88, Wrong: 0},
				pipeline.NCCLTestResult{TimeUS: 91945, AlgBW: 116.78, BusBW: 218.96, Wrong: 0})
		}},
	{"014 row old format N/A", `   115343360      28835840     float     sum   305408    0.38    0.50    N/A   307126    0.38    0.50    N/A`,
		func(l *pipeline.TelemetryLine) {
			row(l, FormatRedopError, 115343360, 28835840, "float", "sum", -1,
				pipeline.NCCLTestResult{TimeUS: 305408, AlgBW: 0.38, BusBW: 0.50, Wrong: math.NaN()},
				pipeline.NCCLTestResult{TimeUS: 307126, AlgBW: 0.38, BusBW: 0.50, Wrong: math.NaN()})
		}},
	{"018 row pre-redop", `    37748744      37748744     uint8    11732    3.22    3.22  0e+00    11698    3.23    3.23  3e+02`,
		func(l *pipeline.TelemetryLine) {
			row(l, FormatError, 37748744, 37748744, "uint8", "", -1,
				pipeline.NCCLTestResult{TimeUS: 11732, AlgBW: 3.22, BusBW: 3.22, Wrong: 0},
				pipeline.NCCLTestResult{TimeUS: 11698, AlgBW: 3.23, BusBW: 3.23, Wrong: 300})
		}},
	{"100 row root no redop", `           8             2   float       0    45.82    0.00    0.00    N/A    38.17    0.00    0.00    N/A`,
		func(l *pipeline.TelemetryLine) {
			row(l, FormatRootError, 8, 2, "float", "", 0,
				pipeline.NCCLTestResult{TimeUS: 45.82, AlgBW: 0, BusBW: 0, Wrong: math.NaN()},
				pipeline.NCCLTestResult{TimeUS: 38.17, AlgBW: 0, BusBW: 0, Wrong: math.NaN()})
		}},
	{"101 row bfloat16 none", `   117440512      29360128  bfloat16    none      -1    490.8  239.27  119.64      0    418.7  280.48  140.24      0`,
		func(l *pipeline.TelemetryLine) {
			row(l, FormatRedopRootWrong, 117440512, 29360128, "bfloat16", "none", -1,
				pipeline.NCCLTestResult{TimeUS: 490.8, AlgBW: 239.27, BusBW: 119.64, Wrong: 0},
				pipeline.NCCLTestResult{TimeUS: 418.7, AlgBW: 280.48, BusBW: 140.24, Wrong: 0})
		}},
	{"rccl-tests fp8 row", `        1024           256  fp8_e4m3     sum      -1    27.06    0.04    0.07      0    27.03    0.04    0.07      0`,
		func(l *pipeline.TelemetryLine) {
			row(l, FormatRedopRootWrong, 1024, 256, "fp8_e4m3", "sum", -1,
				pipeline.NCCLTestResult{TimeUS: 27.06, AlgBW: 0.04, BusBW: 0.07, Wrong: 0},
				pipeline.NCCLTestResult{TimeUS: 27.03, AlgBW: 0.04, BusBW: 0.07, Wrong: 0})
		}},
	{"NCCL 1 char row (not read: no finder token)", `        1024           256      char     sum      -1    27.06    0.04    0.07      0    27.03    0.04    0.07      0`, nil},
	{"megatron (s) with a blank before the colon", ` iteration       10/    1000 | elapsed time per iteration (s) : 1.5 |`, nil},
	{"015 avg trailing blank", `# Avg bus bandwidth    : 179.465 `,
		func(l *pipeline.TelemetryLine) { l.Kind, l.Avg = pipeline.TelemetryTestAvg, 179.465 }},
	{"014 out of bounds", `# Out of bounds values : 0 OK`, nil},
	{"015 nccl comm line", `3767c65d25c4:880:888 [1] NCCL INFO comm 0x55ba65ac2bd0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId a9000 commId 0xab55a18c6f2a4343 - Init COMPLETE`,
		func(l *pipeline.TelemetryLine) {
			l.Kind, l.NRanks, l.Host = pipeline.TelemetryNCCLComm, 2, []byte("3767c65d25c4")
		}},
	{"corpus 062 nccl network line", `slurm-train-compute-0-0:2139:2139 [0] NCCL INFO Using network Socket`,
		func(l *pipeline.TelemetryLine) { l.Kind, l.Name = pipeline.TelemetryNCCLNetwork, []byte("Socket") }},
	{"015 other nccl line", `3767c65d25c4:880:887 [0] NCCL INFO Connected all trees`, nil},
	{"026 python warning", `  return func(*args, **kwargs)`, nil},
	{"054 composer config", `num_nodes: 2`, nil},
}

// step sets the fields of a step line.
func step(l *pipeline.TelemetryLine, fw string, n int64) {
	l.Kind, l.Framework, l.Step = pipeline.TelemetryStep, fw, n
}

func row(l *pipeline.TelemetryLine, format string, size, count int64, typ, redop string, root int, oop, ip pipeline.NCCLTestResult) {
	l.Kind, l.Format = pipeline.TelemetryTestRow, format
	l.Row = pipeline.NCCLTestRow{Bytes: size, Count: count, Type: []byte(typ), Root: root, OOP: oop, IP: ip}
	if redop != "" {
		l.Row.Redop = []byte(redop)
	}
}

// describe renders every field of l for comparison; NaN prints as NaN.
func describe(l *pipeline.TelemetryLine) string {
	return fmt.Sprintf("kind=%v fw=%q rank=%d step=%d time=%v tok=%v smp=%v it=%v tf=%v mfu=%v loss=%v rt=%v "+
		"coll=%q ver=%q min=%d max=%d trank=%d dev=%d host=%q gpu=%q fmt=%q row={%d %d %q %q %d %v %v} avg=%v nranks=%d name=%q",
		l.Kind, l.Framework, l.Rank, l.Step, l.StepTime, l.TokensPerS, l.SamplesPerS, l.ItPerS, l.TFLOPs, l.MFU, l.Loss, l.Runtime,
		l.Collective, l.Version, l.MinBytes, l.MaxBytes, l.TestRank, l.Dev, l.Host, l.GPU, l.Format,
		l.Row.Bytes, l.Row.Count, l.Row.Type, l.Row.Redop, l.Row.Root, l.Row.OOP, l.Row.IP, l.Avg, l.NRanks, l.Name)
}

func TestParseTelemetry(t *testing.T) {
	p := NewTelemetry(DefaultTelemetryConfig())
	for _, c := range telCases {
		var want pipeline.TelemetryLine
		want.Reset()
		if c.want != nil {
			c.want(&want)
		}
		// Twice with the same parser: no state may leak between lines.
		for pass := 0; pass < 2; pass++ {
			var got pipeline.TelemetryLine
			ok := p.Parse([]byte(c.in), &got)
			if ok != (c.want != nil) {
				t.Errorf("%s (pass %d): Parse(%q) = %v; want %v (%s)", c.name, pass, c.in, ok, c.want != nil, describe(&got))
				continue
			}
			if g, w := describe(&got), describe(&want); g != w {
				t.Errorf("%s (pass %d): Parse(%q) =\n\t%s\nwant\n\t%s", c.name, pass, c.in, g, w)
			}
		}
	}
}

func TestParseNumber(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"10,050", 10050, true},
		{"1,017.04", 1017.04, true},
		{"13.99%", 13.99, true},
		{"1.2E-05", 1.2e-05, true},
		{"-1", -1, true},
		{"N/A", 0, false},
		{"nan", 0, false},
		{"", 0, false},
		{"1,00", 0, false},
		{"10,0500", 0, false},
		{",100", 0, false},
		{"2:25", 0, false},
		{strings.Repeat("9", 50), 0, false},
	}
	for _, tc := range tests {
		got, ok := parseNumber([]byte(tc.in))
		if ok != tc.ok || ok && got != tc.want || !ok && !math.IsNaN(got) {
			t.Errorf("parseNumber(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// Scaling is exact: the digits shift, nothing is divided.
	if got, _ := parseScaled([]byte("3367.6"), -3); got != 3.3676 {
		t.Errorf("parseScaled(3367.6, -3) = %v; want 3.3676", got)
	}
	if got, ok := parseDuration([]byte("2:25:54.12")); !ok || math.Abs(got-8754.12) > 1e-9 {
		t.Errorf("parseDuration(2:25:54.12) = %v, %v; want 8754.12", got, ok)
	}
}

func TestParseTelemetryJSON(t *testing.T) {
	cfg := DefaultTelemetryConfig()
	cfg.JSON.MFUFraction = true
	p := NewTelemetry(cfg)
	tests := []struct {
		in   string
		want func(l *pipeline.TelemetryLine)
	}{
		{`{"step": 12, "step_time_ms": 1523.4, "tokens_per_sec": "48231", "mfu": 0.41, "meta": {"x": [1, {"y": "}"}]}}`,
			func(l *pipeline.TelemetryLine) {
				step(l, pipeline.FrameworkJSON, 12)
				l.StepTime, l.TokensPerS, l.MFU = 1.5234, 48231, 41
			}},
		// The first configured name wins over a later one.
		{`{"iteration": 7, "global_step": 3, "step": 5, "iter_time": 2.5}`,
			func(l *pipeline.TelemetryLine) {
				step(l, pipeline.FrameworkJSON, 5)
				l.StepTime = 2.5
			}},
		{`{"step": 5}`, nil},                   // no figures
		{`{"level": "info", "msg": "x"}`, nil}, // not progress
		{`{"step": 5, "step_time": 1.0`, nil},  // cut
		{`{"step": -1, "step_time": 1.0}`, nil},
	}
	for _, tc := range tests {
		var got, want pipeline.TelemetryLine
		want.Reset()
		if tc.want != nil {
			tc.want(&want)
		}
		ok := p.Parse([]byte(tc.in), &got)
		if ok != (tc.want != nil) || describe(&got) != describe(&want) {
			t.Errorf("Parse(%q) = %v %s; want %v %s", tc.in, ok, describe(&got), tc.want != nil, describe(&want))
		}
	}
}

func TestTelemetryConfigValidate(t *testing.T) {
	if err := DefaultTelemetryConfig().Validate(); err != nil {
		t.Fatalf("DefaultTelemetryConfig().Validate() = %v", err)
	}
	cfg := DefaultTelemetryConfig()
	cfg.JSON.TFLOPs = []string{"ok", `bad"name`}
	cfg.JSON.Step = nil
	err := cfg.Validate()
	for _, want := range []string{"telemetry.json.tflops[1]", "telemetry.json.step: must name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want %q", err, want)
		}
	}
}

// telemetryLines calls fn with every line of every testdata/telemetry log.
func telemetryLines(t testing.TB, fn func(file string, line []byte)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "telemetry", "*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no telemetry samples: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			fn(filepath.Base(f), sc.Bytes())
		}
	}
}

// Every line Parse accepts passes the per-line prefilter, and every one
// but the documented exceptions contains a block-finder token.
func TestTelemetryCandidate(t *testing.T) {
	p := NewTelemetry(DefaultTelemetryConfig())
	var tl pipeline.TelemetryLine
	telemetryLines(t, func(file string, line []byte) {
		if !p.Parse(line, &tl) {
			return
		}
		if !TelemetryCandidate(line) && !Candidate(line) {
			t.Errorf("%s: %s line fails TelemetryCandidate: %q", file, tl.Kind, line)
		}
		fast := Candidate(line)
		for _, tok := range TelemetryTokens {
			fast = fast || bytes.Contains(line, tok)
		}
		intRow := tl.Kind == pipeline.TelemetryTestRow && bytes.Contains(tl.Row.Type, []byte("int"))
		if tl.Kind == pipeline.TelemetryCheckpoint {
			// Checkpoint lines are found by the slow tokens
			// (CheckpointTokens), like nanoGPT's "saving checkpoint to out".
			ck := false
			for _, tok := range CheckpointTokens {
				ck = ck || bytes.Contains(line, tok)
			}
			if !ck {
				t.Errorf("%s: checkpoint line has no CheckpointTokens token: %q", file, line)
			}
			return
		}
		if !fast && !intRow && tl.Framework != pipeline.FrameworkNanoGPT && tl.Kind != pipeline.TelemetryTestVersion {
			t.Errorf("%s: %s line has no TelemetryTokens token: %q", file, tl.Kind, line)
		}
	})
	for _, c := range telCases {
		if c.want != nil && !TelemetryCandidate([]byte(c.in)) && !Candidate([]byte(c.in)) {
			t.Errorf("%s: fails TelemetryCandidate: %q", c.name, c.in)
		}
	}
}

func TestParseTelemetryAllocs(t *testing.T) {
	p := NewTelemetry(DefaultTelemetryConfig())
	var tl pipeline.TelemetryLine
	for _, c := range telCases {
		in := []byte(c.in)
		if n := testing.AllocsPerRun(20, func() { p.Parse(in, &tl) }); n > 0 {
			t.Errorf("%s: Parse allocates %.0f times per line", c.name, n)
		}
	}
}

// FuzzParseTelemetry checks that Parse never panics, that it gives the same
// answer twice and with trailing blanks, that the slices it returns are
// parts of the input, and that no figure is infinite.
func FuzzParseTelemetry(f *testing.F) {
	for _, c := range telCases {
		f.Add(c.in)
	}
	telemetryLines(f, func(_ string, line []byte) { f.Add(string(line)) })
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 4096 {
			return
		}
		p := NewTelemetry(DefaultTelemetryConfig())
		var a, b, c pipeline.TelemetryLine
		okA := p.Parse([]byte(in), &a)
		da := describe(&a)
		okB := p.Parse([]byte(in), &b)
		if okA != okB || da != describe(&b) {
			t.Fatalf("Parse(%q) differs on a second call: %s vs %s", in, da, describe(&b))
		}
		if okC := p.Parse([]byte(in+"  "), &c); okA != okC || okA && da != describe(&c) {
			t.Fatalf("Parse(%q) differs with trailing blanks: %s vs %s", in, da, describe(&c))
		}
		if !okA {
			if a.Kind != pipeline.TelemetryNone {
				t.Fatalf("Parse(%q) = false with kind %v", in, a.Kind)
			}
			return
		}
		if a.Kind == pipeline.TelemetryNone {
			t.Fatalf("Parse(%q) = true with kind none", in)
		}
		for _, s := range [][]byte{a.Collective, a.Version, a.Host, a.GPU, a.Row.Type, a.Row.Redop, a.Name} {
			if len(s) > 0 && !strings.Contains(in, string(s)) {
				t.Fatalf("Parse(%q) produced %q, not part of the input", in, s)
			}
		}
		for _, v := range []float64{a.StepTime, a.TokensPerS, a.SamplesPerS, a.ItPerS, a.TFLOPs, a.MFU, a.Runtime, a.Avg,
			a.Row.OOP.BusBW, a.Row.IP.BusBW} {
			if math.IsInf(v, 0) {
				t.Fatalf("Parse(%q) produced an infinite figure: %s", in, da)
			}
		}
	})
}

func BenchmarkParseTelemetry(b *testing.B) {
	p := NewTelemetry(DefaultTelemetryConfig())
	var tl pipeline.TelemetryLine
	for _, c := range telCases {
		in := []byte(c.in)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for i := 0; i < b.N; i++ {
				p.Parse(in, &tl)
			}
		})
	}
}

// BenchmarkTelemetryTokens measures bytes.Index over a mixed stream for
// every prefilter token, as the block Finder runs it: search, skip to the
// next line, search again. The stream is `ncclwatch-load gen` output named by
// NCCLWATCH_GEN_FILE (go run ./cmd/ncclwatch-load gen --size 32MB -o
// /tmp/g.raw). Compare MB/s between tokens; hits/op is how many lines a
// token finds.
func BenchmarkTelemetryTokens(b *testing.B) {
	path := os.Getenv("NCCLWATCH_GEN_FILE")
	if path == "" {
		b.Skip("NCCLWATCH_GEN_FILE not set (go run ./cmd/ncclwatch-load gen --size 32MB -o /tmp/g.raw)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var all [][]byte
	all = append(all, finderTokens[:]...)
	all = append(all, TelemetryTokens[:]...)
	all = append(all, telemetrySlowTokens[:]...)
	for _, tok := range all {
		b.Run(strings.ReplaceAll(string(tok), " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			hits := 0
			for i := 0; i < b.N; i++ {
				hits = 0
				for off := 0; off < len(data); {
					j := bytes.Index(data[off:], tok)
					if j < 0 {
						break
					}
					hits++
					nl := bytes.IndexByte(data[off+j:], '\n')
					if nl < 0 {
						break
					}
					off += j + nl + 1
				}
			}
			b.ReportMetric(float64(hits), "hits/op")
		})
	}
}
