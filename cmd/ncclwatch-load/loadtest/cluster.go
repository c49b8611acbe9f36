package loadtest

import (
	"bufio"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
)

// The cluster shape: the log stream of a GPU cluster rather than of one
// job. Jobs of 1-8 nodes of 8 GPUs start and end, Concurrent of them
// running at once; each runs one trainer (Megatron-LM, torchtitan,
// Hugging Face Trainer, DeepSpeed, Lightning, nanoGPT) that prints its
// progress where that trainer does: torchtitan on every rank, Megatron on
// the last rank (print_rank_last), the others on rank 0; per-job step
// counters count up by the job's log interval. Every job starts with
// torchrun's banner on each node and an NCCL init on each of its ranks
// (IB, RoCE, AWS EFA or a silent Socket fallback, on its own pods), then
// start-up warnings, then its steps with periodic lines (evaluation, GC)
// and warnings and data-loader noise between them. A job prints about
// 1/share times as many lines as its NCCL init, so the stream's NCCL share
// is about share whatever the job mix. The progress lines keep the formats
// of the trainers' real output in testdata/telemetry, so the project's
// parsers read them as they read real logs.

// ClusterNCCLShare is the cluster shape's share of NCCL lines: the NCCL
// init of a job against all it prints, as in the clusters this shape
// stands for.
const ClusterNCCLShare = 0.058

// DefaultConcurrent is how many jobs the cluster shape runs at once.
const DefaultConcurrent = 24

// clusterGPUs is the GPUs of a node.
const clusterGPUs = 8

// noShareLines is a job's mean length in lines when the share of NCCL
// lines is 0 (no NCCL init to size the job by).
const noShareLines = 7000

// clusterTrainer is how one trainer prints: its progress line(s), where,
// and its periodic and one-off lines. Templates are filled by fillLine.
type clusterTrainer struct {
	name string
	// every: every rank prints the progress lines; last: the last rank
	// does; otherwise rank 0.
	every, last bool
	progress    []string // one logged step's lines, in order
	// first is printed once after the first progress line; periodic
	// every period logged steps (on every rank when every); end once
	// when the job ends.
	first, end string
	periodic   []string
	period     int
	intervals  []int64 // log intervals to draw from (steps between progress lines)
}

// clusterTrainers are the trainers of the cluster shape. Formats: Megatron
// 026 and 105, torchtitan 106 and its GC line 034, Hugging Face 042 (with
// and without the step key) and its summary, DeepSpeed's log_dist and
// timer lines 109 and the global_step form of its timer, Lightning 050,
// nanoGPT 103 and 104 (testdata/telemetry).
var clusterTrainers = []clusterTrainer{
	{name: "megatron", last: true, intervals: []int64{1, 5, 10, 20},
		progress: []string{" [%U] iteration %8S/%8N | consumed samples: %12C | elapsed time per iteration (ms): %4d.%1d | throughput per GPU (TFLOP/s/GPU): %3d.%1d | learning rate: %1d.%06dE-05 | global batch size: %5B | lm loss: %1d.%06dE+00 | loss scale: 1.0 | grad norm: %1d.%03d | number of skipped iterations:   0 | number of nan iterations:   0 |"},
		first:    "[Rank %R] (after %S iterations) memory (MB) | allocated: %5d.%04d | max allocated: %5d.%04d | reserved: %5d.0 | max reserved: %5d.0"},
	{name: "torchtitan", every: true, intervals: []int64{1, 10}, period: 5,
		progress: []string{"[rank%R]:[titan] %T - root - INFO - step: %S  loss: %1d.%05d  grad_norm: %1d.%04d  memory: %2d.%02dGiB(%2d.%02d%%)  tps: %1d,%03d  tflops: %3d.%02d  mfu: %2d.%02d%%"},
		periodic: []string{"[rank%R]:[titan] %T - root - INFO - [GC] Peforming periodical GC collection. 0.%02d seconds."}},
	{name: "hf", intervals: []int64{1, 5, 10, 25}, period: 20,
		progress: []string{"{'loss': %1d.%04d, 'grad_norm': %1d.%04d, 'learning_rate': %1d.%04de-05, 'epoch': %F}"},
		periodic: []string{"{'eval_loss': %1d.%04d, 'eval_runtime': %2d.%04d, 'eval_samples_per_second': %2d.%03d, 'eval_steps_per_second': %1d.%03d, 'epoch': %F}"},
		end:      "{'train_runtime': %4d.%04d, 'train_samples_per_second': %2d.%03d, 'train_steps_per_second': %1d.%03d, 'train_loss': %1d.%04d, 'epoch': %F}"},
	{name: "hf-step", intervals: []int64{1, 5, 10, 25}, period: 20,
		progress: []string{"{'loss': %1d.%04d, 'grad_norm': %1d.%04d, 'learning_rate': %1d.%04de-05, 'epoch': %F, 'step': %S}"},
		periodic: []string{"{'eval_loss': %1d.%04d, 'eval_runtime': %2d.%04d, 'eval_samples_per_second': %2d.%03d, 'eval_steps_per_second': %1d.%03d, 'epoch': %F, 'step': %S}"},
		end:      "{'train_runtime': %4d.%04d, 'train_samples_per_second': %2d.%03d, 'train_steps_per_second': %1d.%03d, 'train_loss': %1d.%04d, 'epoch': %F, 'step': %S}"},
	{name: "deepspeed", intervals: []int64{1, 10},
		progress: []string{"[%T] [INFO] [logging.py:96:log_dist] [Rank 0] step=%S, skipped=0, lr=[%1d.%04de-05], mom=[(0.9, 0.95)]",
			"[%T] [INFO] [timer.py:260:stop] epoch=0/micro_step=%S/global_step=%S, RunningAvgSamplesPerSec=%2d.%03d, CurrSamplesPerSec=%2d.%03d, MemAllocated=%2d.%02dGB, MaxMemAllocated=%2d.%02dGB"}},
	{name: "lightning", intervals: []int64{1, 5, 10},
		progress: []string{"Epoch %E: %P%%|%K| %I/%N [%02d:%s<%02d:%s, %2d.%02dit/s, loss=%1d.%03d, v_num=%V]"}},
	{name: "nanogpt", intervals: []int64{1, 10}, period: 25,
		progress: []string{"iter %S: loss %1d.%04d, time %3d.%02dms, mfu %2d.%02d%%"},
		periodic: []string{"step %S: train loss %1d.%04d, val loss %1d.%04d", "saving checkpoint to out"}},
}

// Start-up lines: torchrun's banner on every node (its glog form), and
// warnings each rank's Python process prints once (026's FutureWarning;
// PyTorch's DataLoader warning as public logs show it).
var (
	torchrunBanner = []string{
		"W%G %p torch/distributed/run.py:792] ",
		"W%G %p torch/distributed/run.py:792] *****************************************",
		"W%G %p torch/distributed/run.py:792] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. ",
		"W%G %p torch/distributed/run.py:792] *****************************************",
	}
	futureWarning = []string{
		"/usr/local/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py:79: FutureWarning: `torch.distributed._all_gather_base` is a private function and will be deprecated. Please use `torch.distributed.all_gather_into_tensor` instead.",
		"  return func(*args, **kwargs)",
	}
	loaderWarning = []string{
		"/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:617: UserWarning: This DataLoader will create 16 worker processes in total. Our suggested max number of worker in current system is %1d, which is smaller than what this DataLoader is going to create. Please be aware that excessive worker creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential slowness/freeze if necessary.",
		"  warnings.warn(",
	}
	// noise are lines printed between steps on any rank: PyTorch's
	// activation checkpointing warning (as public logs show it), and the
	// tokenizer's warning a data loader's worker prints for an over-long
	// sample.
	noise = [][]string{
		{"/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:464: UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. In version 2.4 we will raise an exception if use_reentrant is not passed. use_reentrant=False is recommended, but if you need to preserve the current default behavior, you can pass use_reentrant=True. Refer to docs for more details on the differences between the two variants.",
			"  warnings.warn("},
		{"Token indices sequence length is longer than the specified maximum sequence length for this model (%4d > 2048). Running this sequence through the model will result in indexing errors"},
	}
)

// noiseShare is the chance that a progress line is followed by a noise
// line of the same rank.
const noiseShare = 0.04

// clusterNetworks are the jobs' networks with their weights: RDMA for most,
// a tenth silent Socket fallbacks.
var clusterNetworks = []struct {
	name   string
	weight int
}{{"IB", 40}, {"RoCE", 25}, {"EFA", 25}, {"Socket", 10}}

// lineSpec is one line of a job still to print.
type lineSpec struct {
	tpl  string
	rank int32
	nccl bool
	step int64
}

// clusterJob is one job of the cluster stream. Its structure (which lines,
// in which order, how many) is drawn from rng alone and its numbers from
// fill, so that a job prints the same lines whether or not the lines of
// other jobs are formatted.
type clusterJob struct {
	id, slot     int
	name         string
	ns           string
	nodes, ranks int
	tr           *clusterTrainer
	network      string
	tpl          []string // the network's NCCL templates (no NET channel lines on one node)
	commID       string
	pid          int
	interval     int64 // steps between progress lines
	total        int64 // the trainer's configured steps
	perEpoch     int64 // Lightning's batches per epoch; HF's steps per epoch
	batch        int64
	stepMs       int64
	start        time.Time
	lines, done  int64 // lines the job prints in all (about), lines printed
	step         int64
	logged       int // progress lines (steps) logged
	queue        []lineSpec
	head         int
	order        []int32 // ranks in print order for every-rank lines
	ended        bool
	rng, fill    *rand.Rand
	pods, nodeNm []string
	collSN       int64 // the job's Inspector records so far (inspector.go)
}

// newClusterJob draws job id, running on slot's nodes.
func newClusterJob(seed uint64, prefix string, id, slot int, share float64) *clusterJob {
	rng := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908^uint64(id)))
	j := &clusterJob{id: id, slot: slot, name: JobName(prefix, id), rng: rng,
		fill: rand.New(rand.NewPCG(seed, 0xbb67ae8584caa73b^uint64(id)))}
	j.ns = [...]string{"ml-research", "llm-pretrain", "ml-platform", "vision"}[rng.IntN(4)]
	j.nodes = 1 + rng.IntN(8)
	j.ranks = j.nodes * clusterGPUs
	j.tr = &clusterTrainers[rng.IntN(len(clusterTrainers))]
	w := rng.IntN(100)
	for _, n := range clusterNetworks {
		if w -= n.weight; w < 0 {
			j.network = n.name
			break
		}
	}
	for _, t := range ncclTemplates[j.network] {
		if j.nodes == 1 && strings.Contains(t, "via NET/") {
			continue
		}
		j.tpl = append(j.tpl, t)
	}
	j.commID = "0x" + strconv.FormatUint(rng.Uint64()|1<<63, 16)
	j.pid = 1000 + rng.IntN(60000)
	j.interval = j.tr.intervals[rng.IntN(len(j.tr.intervals))]
	j.perEpoch = j.interval * int64(100+rng.IntN(1000))
	j.batch = int64(64 << rng.IntN(5))
	j.stepMs = int64(300 + rng.IntN(5000))
	j.start = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC).Add(time.Duration(id) * 97 * time.Second)
	for n := range j.nodes {
		j.pods = append(j.pods, j.name+"-worker-"+strconv.Itoa(n))
		j.nodeNm = append(j.nodeNm, "gpu-node-"+strconv.Itoa(1000 + slot*clusterGPUs + n)[1:])
	}
	init := int64(j.ranks * len(j.tpl))
	jitter := 0.5 + rng.Float64()
	if share > 0 {
		j.lines = int64(math.Round(float64(init) / share * jitter))
	} else {
		init = 0
		j.lines = int64(noShareLines * jitter)
	}
	j.lines = max(j.lines, init+16)
	// The configured steps: more than the job gets to print.
	j.total = (j.lines*j.interval*3/2/10000 + 1) * 10000
	j.startup(share > 0)
	return j
}

// push queues a line.
func (j *clusterJob) push(tpl string, rank int, step int64) {
	j.queue = append(j.queue, lineSpec{tpl: tpl, rank: int32(rank), step: step})
}

// startup queues the job's first lines: torchrun's banner per node, the
// NCCL init of every rank (ranks interleaved as their processes print at
// once), and the start-up warnings of every rank.
func (j *clusterJob) startup(nccl bool) {
	for n := range j.nodes {
		for _, t := range torchrunBanner {
			j.push(t, n*clusterGPUs, 0) // %p: the node's launcher
		}
	}
	if nccl {
		next := make([]int, j.ranks) // each rank's next template
		left := make([]int32, j.ranks)
		for r := range left {
			left[r] = int32(r)
		}
		for len(left) > 0 {
			i := j.rng.IntN(len(left))
			r := left[i]
			j.queue = append(j.queue, lineSpec{tpl: j.tpl[next[r]], rank: r, nccl: true})
			if next[r]++; next[r] == len(j.tpl) {
				left[i] = left[len(left)-1]
				left = left[:len(left)-1]
			}
		}
	}
	warn := j.rng.IntN(4) // 0: the FutureWarning, 1: the DataLoader's, else none
	for r := range j.ranks {
		switch warn {
		case 0:
			j.push(futureWarning[0], r, 0)
			j.push(futureWarning[1], r, 0)
		case 1:
			j.push(loaderWarning[0], r, 0)
			j.push(loaderWarning[1], r, 0)
		}
	}
	j.order = make([]int32, j.ranks)
	for r := range j.order {
		j.order[r] = int32(r)
	}
}

// printer is the rank that prints a one-rank trainer's lines.
func (j *clusterJob) printer() int {
	if j.tr.last {
		return j.ranks - 1
	}
	return 0
}

// refill queues the job's next logged step: its progress lines on the
// ranks that print them, noise after some, and the periodic lines; or the
// trainer's end line once the job has printed its lines.
func (j *clusterJob) refill() {
	j.queue, j.head = j.queue[:0], 0
	if j.done >= j.lines {
		if j.tr.end != "" && !j.ended {
			j.push(j.tr.end, j.printer(), j.step)
		}
		j.ended = true
		return
	}
	j.step += j.interval
	j.logged++
	one := [1]int32{int32(j.printer())}
	ranks := one[:]
	if j.tr.every {
		// Ranks print a step at about the same time, in any order.
		j.rng.Shuffle(len(j.order), func(a, b int) { j.order[a], j.order[b] = j.order[b], j.order[a] })
		ranks = j.order
	}
	for _, r := range ranks {
		for _, t := range j.tr.progress {
			j.push(t, int(r), j.step)
		}
		if j.rng.Float64() < noiseShare {
			for _, t := range noise[j.rng.IntN(len(noise))] {
				j.push(t, int(r), j.step)
			}
		}
	}
	if j.logged == 1 && j.tr.first != "" {
		j.push(j.tr.first, 0, j.step) // Megatron's memory report comes from rank 0
	}
	if j.tr.period > 0 && j.logged%j.tr.period == 0 {
		for _, r := range ranks {
			for _, t := range j.tr.periodic {
				j.push(t, int(r), j.step)
			}
		}
	}
}

// finished reports whether the job has printed all its lines.
func (j *clusterJob) finished() bool {
	return j.head == len(j.queue) && j.ended
}

// next pops the job's next line; when format, it is appended to dst.
func (j *clusterJob) next(dst []byte, format bool) ([]byte, lineSpec) {
	for j.head == len(j.queue) {
		j.refill()
		if j.ended && j.head == len(j.queue) {
			return dst, lineSpec{rank: -1}
		}
	}
	s := j.queue[j.head]
	j.head++
	j.done++
	if format {
		if s.nccl {
			dst = fillNCCL(dst, s.tpl, j.ncclRank(int(s.rank)))
		} else {
			dst = j.fillLine(dst, s)
		}
	}
	return dst, s
}

// ncclRank is rank r of the job as its NCCL lines show it.
func (j *clusterJob) ncclRank(r int) ncclRank {
	node, d := r/clusterGPUs, r%clusterGPUs
	return ncclRank{host: j.pods[node], pid: j.pid + d, tid: j.pid + 100 + d, dev: d, rank: r,
		nranks: j.ranks, nodes: j.nodes, gpus: clusterGPUs,
		ip:   "10." + strconv.Itoa(j.slot) + "." + strconv.Itoa(node) + ".10",
		peer: (r + clusterGPUs) % j.ranks, next: node*clusterGPUs + (d+1)%clusterGPUs, commID: j.commID}
}

// fillLine appends s's template filled in: %d a random number (%Nd of N
// digits, %0Nd zero-padded), %S the step, %N the configured steps (per
// epoch for Lightning), %C samples consumed, %B the batch, %R the rank,
// %E the epoch, %F Hugging Face's fractional epoch, %I the batch in the
// epoch, %P its percentage, %K the progress bar, %V the run's version, %s
// random seconds (00-59), %T
// %U %G the step's time as Python logging, Megatron and glog print it, %p
// the launcher's pid; a number after % (%8S) right-aligns in that width.
func (j *clusterJob) fillLine(dst []byte, s lineSpec) []byte {
	tpl := s.tpl
	t := j.start.Add(time.Duration(s.step*j.stepMs) * time.Millisecond)
	inEpoch := (s.step-1)%j.perEpoch + 1
	if s.step == 0 {
		inEpoch = 0
	}
	for i := 0; i < len(tpl); i++ {
		c := tpl[i]
		if c != '%' || i+1 >= len(tpl) {
			dst = append(dst, c)
			continue
		}
		pct, k := i, i+1
		zero := tpl[k] == '0'
		for k < len(tpl) && tpl[k] >= '0' && tpl[k] <= '9' {
			k++
		}
		width, _ := strconv.Atoi(tpl[i+1 : k])
		i = k
		if k >= len(tpl) {
			break
		}
		var n int64
		switch tpl[k] {
		case '%':
			dst = append(dst, '%')
			continue
		case 'd':
			dst = j.appendRandom(dst, width, zero)
			continue
		case 'S':
			n = s.step
		case 'N':
			n = j.total
			if j.tr.name == "lightning" {
				n = j.perEpoch
			}
		case 'C':
			n = s.step * j.batch
		case 'B':
			n = j.batch
		case 'R':
			n = int64(s.rank)
		case 'E':
			n = max(s.step-1, 0) / j.perEpoch
		case 'I':
			n = inEpoch
		case 'P':
			n = inEpoch * 100 / j.perEpoch
			width = 3
		case 'V':
			n = int64(j.id % 100)
		case 'p':
			n = int64(j.pid - 17 + 31*(int(s.rank)/clusterGPUs))
		case 'F':
			e := math.Round(float64(s.step)/float64(j.perEpoch)*100) / 100
			dst = strconv.AppendFloat(dst, e, 'f', -1, 64)
			if e == math.Trunc(e) {
				dst = append(dst, ".0"...)
			}
			continue
		case 's':
			n := j.fill.IntN(60)
			dst = append(dst, byte('0'+n/10), byte('0'+n%10))
			continue
		case 'K':
			full := int(inEpoch * 10 / j.perEpoch)
			dst = append(dst, strings.Repeat("█", full)...)
			dst = append(dst, strings.Repeat(" ", 10-full)...)
			continue
		case 'T':
			dst = t.AppendFormat(dst, "2006-01-02 15:04:05,000")
			continue
		case 'U':
			dst = t.AppendFormat(dst, "2006-01-02 15:04:05")
			continue
		case 'G':
			dst = t.AppendFormat(dst, "0102 15:04:05.000000")
			continue
		default:
			dst = append(dst, tpl[pct:k+1]...)
			continue
		}
		if d := width - digits(n); d > 0 {
			dst = append(dst, strings.Repeat(" ", d)...)
		}
		dst = strconv.AppendInt(dst, n, 10)
	}
	return dst
}

// appendRandom appends a random number of width digits (zero-padded when
// zero, else without a leading zero), or below 10 000 when width is 0.
func (j *clusterJob) appendRandom(dst []byte, width int, zero bool) []byte {
	if width <= 0 || width > 9 {
		return strconv.AppendInt(dst, int64(j.fill.IntN(10000)), 10)
	}
	limit := int64(1)
	for range width {
		limit *= 10
	}
	if zero {
		n := j.fill.Int64N(limit)
		for d := width - digits(n); d > 0; d-- {
			dst = append(dst, '0')
		}
		return strconv.AppendInt(dst, n, 10)
	}
	lo := limit / 10
	if width == 1 {
		lo = 1
	}
	return strconv.AppendInt(dst, lo+j.fill.Int64N(limit-lo), 10)
}

// digits is the number of decimal digits of n >= 0.
func digits(n int64) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// clusterStream is the cluster shape's stream: Concurrent slots, each
// running jobs one after another; each line comes from a slot drawn at
// random. Only the lines of jobs keep accepts are formatted (nil: all):
// the others advance the stream as cheaply as possible, so that producers
// that each take a part of the jobs walk the same stream.
type clusterStream struct {
	seed   uint64
	prefix string
	share  float64
	sched  *rand.Rand
	slots  []*clusterJob
	jobs   int // jobs started
	keep   func(id int) bool
}

func newClusterStream(seed uint64, prefix string, share float64, concurrent int, keep func(int) bool) *clusterStream {
	if concurrent <= 0 {
		concurrent = DefaultConcurrent
	}
	s := &clusterStream{seed: seed, prefix: prefix, share: share, keep: keep,
		sched: rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b)), slots: make([]*clusterJob, concurrent)}
	for i := range s.slots {
		s.slots[i] = s.newJob(i)
	}
	return s
}

func (s *clusterStream) newJob(slot int) *clusterJob {
	j := newClusterJob(s.seed, s.prefix, s.jobs, slot, s.share)
	s.jobs++
	return j
}

// next returns the job of the stream's next line, the line (appended to
// dst when the job is kept) and its spec.
func (s *clusterStream) next(dst []byte) (*clusterJob, []byte, lineSpec, bool) {
	slot := s.sched.IntN(len(s.slots))
	j := s.slots[slot]
	for {
		kept := s.keep == nil || s.keep(j.id)
		out, spec := j.next(dst, kept)
		if spec.rank >= 0 {
			return j, out, spec, kept
		}
		j = s.newJob(slot)
		s.slots[slot] = j
	}
}

// fluentBit appends the line of rank r of job j as a Fluent Bit record of
// its pod at t.
func (j *clusterJob) fluentBit(dst, line []byte, r int, t time.Time) []byte {
	node := r / clusterGPUs
	return parsers.AppendFluentBit(dst, line, t, parsers.FluentBitMeta{Job: j.name, Namespace: j.ns,
		Pod: j.pods[node], Node: j.nodeNm[node], Container: "pytorch"})
}

// generateCluster is Generate for the cluster shape.
// With cfg.InspectorRate > 0 (the cluster-inspector shape) Inspector
// records are mixed in: their dump lines in a raw log, their Fluent Bit
// records in a "fluentbit" one.
func generateCluster(w io.Writer, cfg GenConfig) (int64, error) {
	s := newClusterStream(cfg.Seed, "train", cfg.NCCLShare, cfg.Concurrent, nil)
	bw := bufio.NewWriterSize(w, 1<<20)
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var line, jsonBuf []byte
	var written int64
	var mix *inspectorMix
	if cfg.InspectorRate > 0 {
		mix = newInspectorMix(cfg.Seed, cfg.InspectorRate)
	}
	for i := int64(0); written < cfg.Bytes; i++ {
		if mix != nil {
			for k := mix.due(); k > 0 && written < cfg.Bytes; k-- {
				var rec []byte
				_, jsonBuf, _ = mix.next(jsonBuf[:0], s.slots, nil, mix.at(base))
				rec = jsonBuf
				if cfg.Format != "fluentbit" {
					rec = mix.msg
				}
				n, err := bw.Write(rec)
				if err == nil {
					err = bw.WriteByte('\n')
				}
				if err != nil {
					return written, err
				}
				written += int64(n + 1)
			}
			mix.lines++
		}
		j, l, spec, _ := s.next(line[:0])
		line = l
		rec := line
		if cfg.Format == "fluentbit" {
			jsonBuf = j.fluentBit(jsonBuf[:0], line, int(spec.rank), base.Add(time.Duration(i)*time.Millisecond))
			rec = jsonBuf
		}
		n, err := bw.Write(rec)
		if err != nil {
			return written, err
		}
		if err := bw.WriteByte('\n'); err != nil {
			return written, err
		}
		written += int64(n + 1)
	}
	return written, bw.Flush()
}

// clusterRecords calls fn with the Fluent Bit records of the first n lines
// of the cluster stream that keep accepts (nil: all), in stream order,
// each with its job, stamped by stamp (nil: 1 ms apart), and returns the
// number of jobs those n lines hold. rec is valid only during the call.
// With rate > 0, Inspector records come at rate per second of stream
// time among the n (inspector.go).
func clusterRecords(seed uint64, prefix string, share float64, concurrent int, rate float64, n int64, keep func(int) bool,
	stamp func() time.Time, fn func(job string, rec []byte) error) (int, error) {
	s := newClusterStream(seed, prefix, share, concurrent, keep)
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var line, rec []byte
	var mix *inspectorMix
	if rate > 0 {
		mix = newInspectorMix(seed, rate)
	}
	for i := int64(0); i < n; i++ {
		if mix != nil {
			if mix.due() > 0 {
				t := mix.at(base)
				if stamp != nil {
					t = stamp()
				}
				j, r, kept := mix.next(rec[:0], s.slots, keep, t)
				rec = r
				if kept {
					if err := fn(j.name, rec); err != nil {
						return s.jobs, err
					}
				}
				continue
			}
			mix.lines++
		}
		j, l, spec, kept := s.next(line[:0])
		line = l
		if !kept {
			continue
		}
		var t time.Time
		switch {
		case stamp != nil:
			t = stamp()
		case mix != nil:
			t = base.Add(time.Duration(mix.lines-1) * clusterLineInterval)
		default:
			t = base.Add(time.Duration(i) * clusterLineInterval)
		}
		rec = j.fluentBit(rec[:0], line, int(spec.rank), t)
		if err := fn(j.name, rec); err != nil {
			return s.jobs, err
		}
	}
	return s.jobs, nil
}
