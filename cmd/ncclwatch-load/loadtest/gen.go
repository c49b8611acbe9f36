// Package loadtest is the project's load benchmark and its input
// generator, kept out of the product's command package: a seeded synthetic
// training log (trainer output with NCCL init lines of multi-node jobs) as
// raw text or Fluent Bit records, in shapes (shapes.go: one job's log whose
// every rank prints each step, every line a step of its own, or a
// cluster's stream of many jobs, cluster.go), and a harness that produces
// it into a real Kafka topic and times ncclwatch run, and ClickHouse's own
// Kafka engine as a peer, consuming it. cmd/ncclwatch-load is its command
// line and deploy/local/load.sh its entry.
package loadtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
)

// GenConfig describes a synthetic training log: trainer output with NCCL
// init lines of a multi-node job mixed in, as a seeded, reproducible stream.
type GenConfig struct {
	Seed      uint64
	Bytes     int64   // stop after about this many bytes
	NCCLShare float64 // fraction of lines that are NCCL lines (0.05 = 5 %)
	Format    string  // "raw" or "fluentbit"
	Nodes     int
	GPUs      int
	Network   string // "IB" or "Socket": the fabric the synthetic job uses
	// RandomSteps gives every trainer line random numbers, its step too,
	// and draws each line's trainer anew: the random-steps shape, kept to
	// compare with. Otherwise the job runs one trainer whose every rank
	// prints each step's progress line in turn, steps counting up.
	// Shape ShapeRandomSteps sets it too.
	RandomSteps bool
	// Shape is the stream's shape (ShapeDefault when empty): the one job
	// above, or ShapeCluster, many jobs of many trainers (cluster.go),
	// for which Nodes, GPUs and Network do not apply.
	Shape Shape
	// Concurrent is the number of jobs the cluster shape runs at once
	// (DefaultConcurrent when 0).
	Concurrent int
	// InspectorRate is the NCCL Inspector records per second of stream
	// time of the cluster-inspector shape (DefaultInspectorRate when 0);
	// other shapes carry none.
	InspectorRate float64
}

// DefaultGenConfig is a 64 MB raw log of a 2-node, 8-GPU IB job with 5 %
// NCCL lines (the share seen in real trainer logs with NCCL_DEBUG=INFO).
func DefaultGenConfig() GenConfig {
	return GenConfig{Seed: 1, Bytes: 64 << 20, NCCLShare: 0.05, Format: "raw", Nodes: 2, GPUs: 8, Network: "IB"}
}

// trainerLines are shapes of real trainer output (Megatron-LM, torchtitan,
// Hugging Face, DeepSpeed, tqdm, Python warnings); %d fields are filled per
// line with random numbers, %S (%NS) with the step (random as %d (%Nd) in
// RandomSteps streams).
var trainerLines = []string{
	" iteration %7S/  500000 | consumed samples: %10d | elapsed time per iteration (ms): %d.%d | learning rate: 1.499E-04 | global batch size:    64 | lm loss: 2.%05dE+00 | loss scale: 1.0 | grad norm: 0.%03d | number of skipped iterations:   0 | number of nan iterations:   0 |",
	"[rank%d]:[titan] 2025-01-14 10:%02d:%02d,%03d - root - INFO - step: %4S  loss:  %d.%04d  memory: 38.12GiB(48.19%%)  tps: %d  tflops: 312.%02d  mfu: %d.%02d%%",
	"{'loss': %d.%04d, 'grad_norm': 0.%04d, 'learning_rate': 1.9%03de-05, 'epoch': 0.%02d}",
	"[2024-05-30 12:%02d:%02d,%03d] [INFO] [logging.py:96:log_dist] [Rank %d] step=%S, skipped=0, lr=[0.000%d], mom=[(0.9, 0.95)]",
	"Epoch %d:  %2d%%|███▍      | %S/1250 [%02d:%02d<%02d:%02d,  4.%02dit/s, loss=0.%03d, v_num=%d]",
	"/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:%d: UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. In version 2.%d we will raise an exception if use_reentrant is not passed.",
	"[2024-05-30 12:%02d:%02d,%03d] [INFO] [timer.py:%d:stop] epoch=0/micro_step=%d/global_step=%S, RunningAvgSamplesPerSec=%d.%03d, CurrSamplesPerSec=%d.%03d, MemAllocated=21.%02dGB, MaxMemAllocated=33.%02dGB",
}

// progressLines are the trainerLines a job's ranks print once per step
// (Megatron, torchtitan, Hugging Face, Lightning, DeepSpeed timer); the
// others (log_dist, a Python warning) are mixed in at otherShare.
var progressLines = [...]int{0, 1, 2, 4, 6}

var otherLines = [...]int{3, 5}

// otherShare is the share of trainer lines that are not progress lines.
const otherShare = 0.15

// ncclTemplates are NCCL init lines of current releases, by the network the
// job uses; {h} {p} {t} {d} {r} {n} {nn} {g} {ip} {peer} {next} {nd} {cid}
// are filled per rank (fillNCCL). The RoCE and EFA lines are those of
// NCCL 2.27.5 with RoCE NICs and of the AWS OFI plugin (testdata/corpus
// 068-071, 081-082).
var ncclTemplates = map[string][]string{
	"IB": {
		"{h}:{p}:{p} [{d}] NCCL INFO Bootstrap: Using eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO NCCL version 2.27.5+cuda12.9",
		"{h}:{p}:{p} [{d}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO Using network IB",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init START",
		"{h}:{p}:{p} [{d}] NCCL INFO comm 0x55a2{r}46d0 rank {r} nRanks {n} nNodes {nn} localRanks {g} localRank {d} MNNVL 0",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 00/0 : {peer}[{d}] -> {r}[{d}] [receive] via NET/IB/0/GDRDMA",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 01/0 : {r}[{d}] -> {peer}[{d}] [send] via NET/IB/0/GDRDMA",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 02/0 : {r}[{d}] -> {next}[{nd}] via P2P/CUMEM",
		"{h}:{p}:{p} [{d}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init COMPLETE",
	},
	"Socket": {
		"{h}:{p}:{p} [{d}] NCCL INFO Bootstrap: Using eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO NCCL version 2.26.2+cuda12.2",
		"{h}:{p}:{p} [{d}] NCCL INFO NET/IB : No device found.",
		"{h}:{p}:{p} [{d}] NCCL INFO NET/Socket : Using [0]eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO Using network Socket",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init START",
		"{h}:{p}:{p} [{d}] NCCL INFO comm 0x55a2{r}46d0 rank {r} nRanks {n} nNodes {nn} localRanks {g} localRank {d} MNNVL 0",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 00/0 : {peer}[{d}] -> {r}[{d}] [receive] via NET/Socket/0",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 02/0 : {r}[{d}] -> {next}[{nd}] via P2P/CUMEM",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init COMPLETE",
	},
	"RoCE": {
		"{h}:{p}:{p} [{d}] NCCL INFO Bootstrap: Using eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO NCCL version 2.27.5+cuda12.9",
		"{h}:{p}:{p} [{d}] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.",
		"{h}:{p}:{p} [{d}] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]mlx5_2:1/RoCE [3]mlx5_3:1/RoCE [RO]; OOB eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO Using network IB",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init START",
		"{h}:{p}:{p} [{d}] NCCL INFO comm 0x55a2{r}46d0 rank {r} nRanks {n} nNodes {nn} localRanks {g} localRank {d} MNNVL 0",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 00/0 : {peer}[{d}] -> {r}[{d}] [receive] via NET/IB/0/GDRDMA",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 01/0 : {r}[{d}] -> {peer}[{d}] [send] via NET/IB/0/GDRDMA",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 02/0 : {r}[{d}] -> {next}[{nd}] via P2P/IPC",
		"{h}:{p}:{p} [{d}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init COMPLETE",
	},
	"EFA": {
		"{h}:{p}:{p} [{d}] NCCL INFO Bootstrap: Using eth0:{ip}<0>",
		"{h}:{p}:{p} [{d}] NCCL INFO NCCL version 2.27.5+cuda12.9",
		"{h}:{p}:{p} [{d}] NCCL INFO NET/OFI Using aws-ofi-nccl 1.6.0",
		"{h}:{p}:{p} [{d}] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
		"{h}:{p}:{p} [{d}] NCCL INFO Using network AWS Libfabric",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init START",
		"{h}:{p}:{p} [{d}] NCCL INFO comm 0x55a2{r}46d0 rank {r} nRanks {n} nNodes {nn} localRanks {g} localRank {d} MNNVL 0",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 00/0 : {peer}[{d}] -> {r}[{d}] [receive] via NET/AWS Libfabric/0/GDRDMA",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 01/0 : {r}[{d}] -> {peer}[{d}] [send] via NET/AWS Libfabric/0/GDRDMA",
		"{h}:{p}:{t} [{d}] NCCL INFO Channel 02/0 : {r}[{d}] -> {next}[{nd}] via P2P/CUMEM",
		"{h}:{p}:{p} [{d}] NCCL INFO ncclCommInitRank comm 0x55a2{r}46d0 rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId 18000 commId {cid} - Init COMPLETE",
	},
}

// genCommID is the commId of Generate's one job, by network.
var genCommID = map[string]string{"IB": "0xde4443395863ef4a", "Socket": "0x0b3f2a17c90e4d21",
	"RoCE": "0x7c1e90a45b2d3f86", "EFA": "0x3a9d51e7c20b4f18"}

// Generate writes a synthetic mixed stream to w and returns the bytes
// written.
func Generate(w io.Writer, cfg GenConfig) (int64, error) {
	switch cfg.Shape {
	case "", ShapeDefault:
	case ShapeRandomSteps:
		cfg.RandomSteps = true
	case ShapeCluster:
		cfg.InspectorRate = 0
		return generateCluster(w, cfg)
	case ShapeClusterInspector:
		if cfg.InspectorRate <= 0 {
			cfg.InspectorRate = DefaultInspectorRate
		}
		return generateCluster(w, cfg)
	default:
		return 0, fmt.Errorf("gen: shape %q: want one of %s", cfg.Shape, strings.Join(ShapeNames(), ", "))
	}
	tpl, ok := ncclTemplates[cfg.Network]
	if !ok {
		return 0, fmt.Errorf("gen: network %q: want IB, RoCE, EFA or Socket", cfg.Network)
	}
	if cfg.Nodes < 1 || cfg.GPUs < 1 || cfg.NCCLShare < 0 || cfg.NCCLShare > 1 {
		return 0, errors.New("gen: nodes and gpus must be >= 1, nccl share in [0,1]")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	bw := bufio.NewWriterSize(w, 1<<20)
	nranks := cfg.Nodes * cfg.GPUs
	var written int64
	var line []byte
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var jsonBuf []byte
	var trainer string
	if !cfg.RandomSteps {
		trainer = trainerLines[progressLines[rng.IntN(len(progressLines))]]
	}
	step, printed := int64(1), 0
	for i := int64(0); written < cfg.Bytes; i++ {
		line = line[:0]
		r := rng.IntN(nranks)
		if rng.Float64() < cfg.NCCLShare {
			line = fillNCCL(line, tpl[rng.IntN(len(tpl))], genRank(r, cfg))
		} else if cfg.RandomSteps {
			line = fillTrainer(line, trainerLines[rng.IntN(len(trainerLines))], rng, -1)
		} else if rng.Float64() < otherShare {
			line = fillTrainer(line, trainerLines[otherLines[rng.IntN(len(otherLines))]], rng, step)
		} else {
			line = fillTrainer(line, trainer, rng, step)
			if printed++; printed == nranks {
				step, printed = step+1, 0
			}
		}
		out := line
		if cfg.Format == "fluentbit" {
			node := strconv.Itoa(r / cfg.GPUs)
			t := base.Add(time.Duration(i) * time.Millisecond)
			jsonBuf = parsers.AppendFluentBit(jsonBuf[:0], line, t, parsers.FluentBitMeta{Job: "train-llm-7b", Namespace: "ml-research",
				Pod: "train-llm-7b-worker-" + node, Node: "gpu-node-" + node, Container: "pytorch"})
			out = jsonBuf
		}
		n, err := bw.Write(out)
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

// genRank is rank r of Generate's one job.
func genRank(r int, cfg GenConfig) ncclRank {
	node, d := r/cfg.GPUs, r%cfg.GPUs
	next := node*cfg.GPUs + (d+1)%cfg.GPUs
	return ncclRank{host: "train-llm-7b-worker-" + strconv.Itoa(node), pid: 4000 + d, tid: 4100 + d, dev: d, rank: r,
		nranks: cfg.Nodes * cfg.GPUs, nodes: cfg.Nodes, gpus: cfg.GPUs, ip: "10.0." + strconv.Itoa(node) + ".10",
		peer: (r + cfg.GPUs) % (cfg.Nodes * cfg.GPUs), next: next, commID: genCommID[cfg.Network]}
}

// ncclRank holds what an NCCL line template is filled with for one rank.
type ncclRank struct {
	host                                     string
	pid, tid, dev, rank, nranks, nodes, gpus int
	ip                                       string
	peer, next                               int
	commID                                   string
}

// fillNCCL appends tpl with its {…} fields filled for rank r.
func fillNCCL(dst []byte, tpl string, r ncclRank) []byte {
	for {
		i := strings.IndexByte(tpl, '{')
		if i < 0 {
			return append(dst, tpl...)
		}
		dst = append(dst, tpl[:i]...)
		tpl = tpl[i:]
		j := strings.IndexByte(tpl, '}')
		if j < 0 {
			return append(dst, tpl...)
		}
		switch tpl[1:j] {
		case "h":
			dst = append(dst, r.host...)
		case "p":
			dst = strconv.AppendInt(dst, int64(r.pid), 10)
		case "t":
			dst = strconv.AppendInt(dst, int64(r.tid), 10)
		case "d":
			dst = strconv.AppendInt(dst, int64(r.dev), 10)
		case "r":
			dst = strconv.AppendInt(dst, int64(r.rank), 10)
		case "n":
			dst = strconv.AppendInt(dst, int64(r.nranks), 10)
		case "nn":
			dst = strconv.AppendInt(dst, int64(r.nodes), 10)
		case "g":
			dst = strconv.AppendInt(dst, int64(r.gpus), 10)
		case "ip":
			dst = append(dst, r.ip...)
		case "peer":
			dst = strconv.AppendInt(dst, int64(r.peer), 10)
		case "next":
			dst = strconv.AppendInt(dst, int64(r.next), 10)
		case "nd":
			dst = strconv.AppendInt(dst, int64(r.next%r.gpus), 10)
		case "cid":
			dst = append(dst, r.commID...)
		default:
			dst = append(dst, tpl[:j+1]...)
		}
		tpl = tpl[j+1:]
	}
}

func fillTrainer(dst []byte, tpl string, rng *rand.Rand, step int64) []byte {
	// Replace each %d / %0Nd with a random number, %S with step (random
	// when step < 0); %% stays %.
	for i := 0; i < len(tpl); i++ {
		c := tpl[i]
		if c != '%' || i+1 >= len(tpl) {
			dst = append(dst, c)
			continue
		}
		j := i + 1
		for j < len(tpl) && tpl[j] >= '0' && tpl[j] <= '9' {
			j++
		}
		if j < len(tpl) && tpl[j] == 'S' && step >= 0 {
			dst = strconv.AppendInt(dst, step, 10)
			i = j
			continue
		}
		if j < len(tpl) && (tpl[j] == 'd' || tpl[j] == 'S') {
			// %0Nd: N digits; %d: up to four.
			limit := 10000
			if w, err := strconv.Atoi(tpl[i+1 : j]); err == nil && w > 0 && w < 9 {
				limit = 1
				for k := 0; k < w; k++ {
					limit *= 10
				}
				dst = fmt.Appendf(dst, "%0*d", w, rng.IntN(limit))
			} else {
				dst = strconv.AppendInt(dst, int64(rng.IntN(limit)), 10)
			}
			i = j
			continue
		}
		if tpl[i+1] == '%' {
			dst = append(dst, '%')
			i++
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// ParseSize reads "64MB", "1GB", "512KB" or a plain byte count (powers of 1024).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			mult, s = u.m, strings.TrimSuffix(s, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n * mult, nil
}
