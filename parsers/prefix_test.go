package parsers

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// prefixCase is one line and what StripPrefix must make of it. Lines are
// real ones from testdata/corpus (named by file number) unless the name
// says "synthetic": for torchrun [default0]:, srun -l and ANSI codes the
// corpus holds no sample (NCCL-FORMATS.md §12).
type prefixCase struct {
	name  string
	in    string
	want  string // rest
	kinds []PrefixKind
	rank  int
	host  string
}

var prefixCases = []prefixCase{
	{
		name:  "286 k9s pane row, both borders",
		in:    "│ task-7702-xt59c:73:73 [1] NCCL INFO Using network IB" + strings.Repeat(" ", 40) + "│",
		want:  "task-7702-xt59c:73:73 [1] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixPane}, rank: -1,
	},
	{
		name:  "285 k9s pane row, left border only, padded",
		in:    "│ task-7700-94lc9:73:73 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:172.17.80.45<0>      ",
		want:  "task-7700-94lc9:73:73 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:172.17.80.45<0>      ",
		kinds: []PrefixKind{PrefixPane}, rank: -1,
	},
	{
		name:  "pane around a Ray row with a dedup suffix",
		in:    "│ (RayWorkerWrapper pid=1, ip=10.0.0.2) gpu-a:1:1 [0] NCCL INFO Using network IB [repeated 3x across cluster]   │",
		want:  "gpu-a:1:1 [0] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixPane, PrefixRay, PrefixRayDedup}, rank: -1, host: "10.0.0.2",
	},
	{
		name: "a bar glued to a word is text",
		in:   "gpu-a:1:1 [0] NCCL INFO x│",
		want: "gpu-a:1:1 [0] NCCL INFO x│",
		rank: -1,
	},
	{
		name:  "006 rank tag",
		in:    "[155] crow-ib-new-nccl-256-info-19:5330:5330 [3] NCCL INFO Bootstrap : Using [0]eth0:10.100.62.64<0>",
		want:  "crow-ib-new-nccl-256-info-19:5330:5330 [3] NCCL INFO Bootstrap : Using [0]eth0:10.100.62.64<0>",
		kinds: []PrefixKind{PrefixRankTag}, rank: 155,
	},
	{
		name:  "013 cloudwatch row",
		in:    "  | 2025-05-16T16:39:51.208-07:00 | ip-10-36-29-253:79:79 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
		want:  "ip-10-36-29-253:79:79 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name:  "013 cloudwatch row glued to the message",
		in:    "  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>",
		want:  "ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name:  "013 cloudwatch version banner",
		in:    "  | 2025-05-16T16:39:51.208-07:00 | NCCL version 2.21.5+cuda12.8",
		want:  "NCCL version 2.21.5+cuda12.8",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name:  "016 deepspeed timestamp",
		in:    "[2023-12-20 16:35:35,473] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.11.1, git-hash=unknown, git-branch=unknown",
		want:  "[INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.11.1, git-hash=unknown, git-branch=unknown",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name: "016 unprefixed",
		in:   "ps-SYS-420GP-TNR:1697707:1697707 [0] NCCL INFO Bootstrap : Using eno1:192.168.223.11<0>",
		want: "ps-SYS-420GP-TNR:1697707:1697707 [0] NCCL INFO Bootstrap : Using eno1:192.168.223.11<0>",
		rank: -1,
	},
	{
		name: "016 unprefixed version banner",
		in:   "NCCL version 2.18.5+cuda11.8",
		want: "NCCL version 2.18.5+cuda11.8",
		rank: -1,
	},
	{
		name: "018 redacted hostname",
		in:   "<cluster_name>:1406:1406 [0] NCCL INFO PNP plugin IBext",
		want: "<cluster_name>:1406:1406 [0] NCCL INFO PNP plugin IBext",
		rank: -1,
	},
	{
		name: "033 cudaDev field after a stripped host is kept",
		in:   " [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB br0:10.137.141.16<0>",
		want: "[0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB br0:10.137.141.16<0>",
		rank: -1,
	},
	{
		name:  "038 mpirun host label",
		in:    "10.3.35.83: ip-10-3-35-83:362:362 [0] NCCL INFO Bootstrap : Using eth0:10.3.35.83<0>",
		want:  "ip-10-3-35-83:362:362 [0] NCCL INFO Bootstrap : Using eth0:10.3.35.83<0>",
		kinds: []PrefixKind{PrefixHost}, rank: -1, host: "10.3.35.83",
	},
	{
		name:  "038 mpirun host label on nccl-tests output",
		in:    "10.3.35.83: #   Rank 15 Pid     42 on ip-10-3-60-130 device  7 [0xa0] A100-SXM4-40GB",
		want:  "#   Rank 15 Pid     42 on ip-10-3-60-130 device  7 [0xa0] A100-SXM4-40GB",
		kinds: []PrefixKind{PrefixHost}, rank: -1, host: "10.3.35.83",
	},
	{
		name: "041 plugin WARN",
		in:   "node:174:4368 [3] sharp_plugin.c:354 NCCL WARN SHARP group create: Streaming Tree lock failed (-18)",
		want: "node:174:4368 [3] sharp_plugin.c:354 NCCL WARN SHARP group create: Streaming Tree lock failed (-18)",
		rank: -1,
	},
	{
		name: "041 SHARP library line",
		in:   "[node:0:174 - context.c:857][2024-05-30 12:26:47] INFO sharp_job_id:692  resv_key: tree_type:LLT tree_idx:0  treeID:8 caps:0x66 quota:(osts:167 user_data_per_ost:1024 max_groups:167 max_qps:1 max_group_channels:1)",
		want: "[node:0:174 - context.c:857][2024-05-30 12:26:47] INFO sharp_job_id:692  resv_key: tree_type:LLT tree_idx:0  treeID:8 caps:0x66 quota:(osts:167 user_data_per_ost:1024 max_groups:167 max_qps:1 max_group_channels:1)",
		rank: -1,
	},
	{
		name:  "047 ray train worker",
		in:    "(RayTrainWorker pid=3704, ip=10.52.3.7) ray-cluster-ccc-gpu-group-worker-684r7:3704:4784 [5] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PIX",
		want:  "ray-cluster-ccc-gpu-group-worker-684r7:3704:4784 [5] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PIX",
		kinds: []PrefixKind{PrefixRay}, rank: -1, host: "10.52.3.7",
	},
	{
		name:  "048 ray benchmark worker",
		in:    "(BenchmarkWorker pid=2050, ip=10.52.2.7) ray-cluster-ccc-gpu-group-worker-4wkhd:2050:3084 [0] NCCL INFO Channel 03/0 : 2[2] -> 11[3] [send] via NET/gIB/3/GDRDMA",
		want:  "ray-cluster-ccc-gpu-group-worker-4wkhd:2050:3084 [0] NCCL INFO Channel 03/0 : 2[2] -> 11[3] [send] via NET/gIB/3/GDRDMA",
		kinds: []PrefixKind{PrefixRay}, rank: -1, host: "10.52.2.7",
	},
	{
		name: "052 grep output",
		in:   "tcpxo-wb-0:319:319 [0] NCCL INFO Using network FasTrak",
		want: "tcpxo-wb-0:319:319 [0] NCCL INFO Using network FasTrak",
		rank: -1,
	},
	{
		name: "053 cudaDev field without host is kept",
		in:   "[0] NCCL INFO NET/GPUDirectTCPX : GPUDirectTCPX enable: 1",
		want: "[0] NCCL INFO NET/GPUDirectTCPX : GPUDirectTCPX enable: 1",
		rank: -1,
	},
	{
		name: "053 markdown heading",
		in:   "## plugin init banner + NIC discovery:",
		want: "## plugin init banner + NIC discovery:",
		rank: -1,
	},
	{
		name:  "055 ray worker without ip",
		in:    "(RayTrainWorker pid=355353) jamin-g2-cluster-a-0:355353:358657 [0] NCCL INFO Bootstrap : Using ens4:10.128.0.5<0>",
		want:  "jamin-g2-cluster-a-0:355353:358657 [0] NCCL INFO Bootstrap : Using ens4:10.128.0.5<0>",
		kinds: []PrefixKind{PrefixRay}, rank: -1,
	},
	{
		name:  "055 ray worker version banner",
		in:    "(RayTrainWorker pid=355353) NCCL version 2.14.3+cuda11.8",
		want:  "NCCL version 2.14.3+cuda11.8",
		kinds: []PrefixKind{PrefixRay}, rank: -1,
	},
	{
		name: "059 redacted pid and tid",
		in:   "pod-id:num:num [0] NCCL INFO PNP Chunksize set to 131072",
		want: "pod-id:num:num [0] NCCL INFO PNP Chunksize set to 131072",
		rank: -1,
	},
	{
		name:  "064 markdown quote",
		in:    "> xxx:16090:16180 [0] NCCL INFO Bootstrap : Using [0]ib0:10.10.10..2<0> [1]ib1:10.11.10.2<0>",
		want:  "xxx:16090:16180 [0] NCCL INFO Bootstrap : Using [0]ib0:10.10.10..2<0> [1]ib1:10.11.10.2<0>",
		kinds: []PrefixKind{PrefixMarkdown}, rank: -1,
	},
	{
		name: "065 empty hostname",
		in:   "::16674:16674 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.4<0>",
		want: "::16674:16674 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.4<0>",
		rank: -1,
	},
	{
		name: "065 empty hostname WARN",
		in:   "::16674:17023 [0] graph/search.cc:703 NCCL WARN XML Import Channel : dev 1 not found.",
		want: "::16674:17023 [0] graph/search.cc:703 NCCL WARN XML Import Channel : dev 1 not found.",
		rank: -1,
	},
	{
		name: "013 libfabric line",
		in:   "libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list",
		want: "libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list",
		rank: -1,
	},
	{
		name:  "075 pdsh ip label",
		in:    "104.171.201.171: lambda-scalar02:95753:96917 [3] NCCL INFO Channel 00/0 : 3[44000] -> 2[43000] via P2P/IPC",
		want:  "lambda-scalar02:95753:96917 [3] NCCL INFO Channel 00/0 : 3[44000] -> 2[43000] via P2P/IPC",
		kinds: []PrefixKind{PrefixHost}, rank: -1, host: "104.171.201.171",
	},
	{
		name:  "081 mpirun tag-output",
		in:    "[1,15]<stdout>:nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric",
		want:  "nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric",
		kinds: []PrefixKind{PrefixMPI}, rank: 15,
	},
	{
		name:  "082 mpirun tag-output rank 0",
		in:    "[1,0]<stdout>:nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Channel 00/08 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9",
		want:  "nccl-tests-efa-worker-0:26:67 [0] NCCL INFO Channel 00/08 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9",
		kinds: []PrefixKind{PrefixMPI}, rank: 0,
	},
	{
		name:  "083 bracket timestamp",
		in:    "[2026-04-28 14:14:49] t-20260428141043-cmz7n-worker-0:2338:3737 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
		want:  "t-20260428141043-cmz7n-worker-0:2338:3737 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name: "083 blank line",
		in:   "",
		want: "",
		rank: -1,
	},
	{
		name:  "089 torchrun rank",
		in:    "[rank0]:costa-671b-5-worker-1:382:675 [0] NCCL INFO NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
		want:  "costa-671b-5-worker-1:382:675 [0] NCCL INFO NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
		kinds: []PrefixKind{PrefixTorchrun}, rank: 0,
	},
	{
		name: "047 training text with a colon",
		in:   "Training started with configuration:",
		want: "Training started with configuration:",
		rank: -1,
	},
	{
		name: "067 tqdm collision",
		in:   "cs-project:2748:2748 [0] NCCL INFO cudaDriverVersion 12020                                                                                                                           | 0/100 [00:00<?, ?it/s]",
		want: "cs-project:2748:2748 [0] NCCL INFO cudaDriverVersion 12020                                                                                                                           | 0/100 [00:00<?, ?it/s]",
		rank: -1,
	},
	{
		name:  "synthetic torchrun default0 with space",
		in:    "[default3]: node-a:12:12 [3] NCCL INFO Using network IB",
		want:  "node-a:12:12 [3] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixTorchrun}, rank: 3,
	},
	{
		name:  "synthetic custom trainer tag",
		in:    "[trainer0|1]:node-a:12:12 [0] NCCL INFO Using network IB",
		want:  "node-a:12:12 [0] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixTorchrun}, rank: 0,
	},
	{
		name:  "synthetic srun label",
		in:    "12: node-a:12:12 [4] NCCL INFO Using network Socket",
		want:  "node-a:12:12 [4] NCCL INFO Using network Socket",
		kinds: []PrefixKind{PrefixSrun}, rank: 12,
	},
	{
		name:  "synthetic padded srun label",
		in:    " 3: NCCL version 2.21.5+cuda12.4",
		want:  "NCCL version 2.21.5+cuda12.4",
		kinds: []PrefixKind{PrefixSrun}, rank: 3,
	},
	{
		name:  "synthetic word host label before NCCL header",
		in:    "ubuntu: ubuntu:2201:2201 [0] NCCL INFO Using network IB",
		want:  "ubuntu:2201:2201 [0] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixHost}, rank: -1, host: "ubuntu",
	},
	{
		name:  "synthetic pdsh label with a dash",
		in:    "login-node: Tue Nov 24 10:00:01 UTC 2026",
		want:  "Tue Nov 24 10:00:01 UTC 2026",
		kinds: []PrefixKind{PrefixHost}, rank: -1, host: "login-node",
	},
	{
		name: "synthetic word with colon is not a host label",
		in:   "Warning: NCCL_IB_HCA is not set",
		want: "Warning: NCCL_IB_HCA is not set",
		rank: -1,
	},
	{
		name: "synthetic python exception is not a host label",
		in:   "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
		want: "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
		rank: -1,
	},
	{
		name:  "synthetic ANSI colour then ray",
		in:    "\x1b[36m(RayTrainWorker pid=3704, ip=10.52.3.7)\x1b[0m node-a:3704:4784 [5] NCCL INFO Using network IB",
		want:  "node-a:3704:4784 [5] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixANSI, PrefixRay}, rank: -1, host: "10.52.3.7",
	},
	{
		name:  "synthetic ANSI leftover without ESC",
		in:    "[0m [36m(RayTrainWorker pid=1)[0m node-a:1:1 [0] NCCL INFO Using network IB",
		want:  "node-a:1:1 [0] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixANSI, PrefixRay}, rank: -1,
	},
	{
		name:  "synthetic stacked timestamp, pdsh, torchrun",
		in:    "2026-04-28T14:14:49.123456Z 10.0.0.7: [rank9]:node-b:77:77 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.7<0>",
		want:  "node-b:77:77 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.7<0>",
		kinds: []PrefixKind{PrefixTimestamp, PrefixHost, PrefixTorchrun}, rank: 9, host: "10.0.0.7",
	},
	{
		name:  "synthetic rank tag before the version banner",
		in:    "[155] NCCL version 2.5.6+cuda10.1",
		want:  "NCCL version 2.5.6+cuda10.1",
		kinds: []PrefixKind{PrefixRankTag}, rank: 155,
	},
	{
		name: "synthetic cudaDev field before a WARN with file and line",
		in:   "[0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
		want: "[0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
		rank: -1,
	},
	{
		name:  "266 ray dedup suffix",
		in:    "(RayTrainWorker pid=162057, ip=192.168.0.70) master:162057:169037 [0] NCCL INFO === System : maxBw 1.2 totalBw 12.0 === [repeated 4x across cluster]",
		want:  "master:162057:169037 [0] NCCL INFO === System : maxBw 1.2 totalBw 12.0 ===",
		kinds: []PrefixKind{PrefixRay, PrefixRayDedup}, rank: -1, host: "192.168.0.70",
	},
	{
		name:  "266 ray dedup suffix after the message's own blanks",
		in:    "(RayTrainWorker pid=83500) localhost:83500:84560 [2] NCCL INFO NET/2 :GPU/31000 (3/1.250000/PHB) NET/2 (0/5000.000000/LOC)  [repeated 32x across cluster]",
		want:  "localhost:83500:84560 [2] NCCL INFO NET/2 :GPU/31000 (3/1.250000/PHB) NET/2 (0/5000.000000/LOC)",
		kinds: []PrefixKind{PrefixRay, PrefixRayDedup}, rank: -1,
	},
	{
		name:  "262 ray dedup suffix with Ray's notice",
		in:    "(RayWorkerWrapper pid=1019) INFO 01-29 07:44:20 selector.py:120] Using Flash Attention backend. [repeated 12x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html#log-deduplication for more options.)                [615/4138]",
		want:  "INFO 01-29 07:44:20 selector.py:120] Using Flash Attention backend.",
		kinds: []PrefixKind{PrefixRay, PrefixRayDedup}, rank: -1,
	},
	{
		name:  "synthetic ray dedup on the network line",
		in:    "(RayWorkerWrapper pid=4312, ip=10.0.1.7) gpu-a:4312:4312 [1] NCCL INFO Using network IB [repeated 14x across cluster]",
		want:  "gpu-a:4312:4312 [1] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixRay, PrefixRayDedup}, rank: -1, host: "10.0.1.7",
	},
	{
		name:  "270 ray colour codes pasted as literal ESC text",
		in:    "ESC[36m(RayWorkerVllm pid=4095)ESC[0m mwh-deployment-cp2nvtm93l1ljsuft5kg-0:4095:4095 [1] NCCL INFO cudaDriverVersion 12020",
		want:  "mwh-deployment-cp2nvtm93l1ljsuft5kg-0:4095:4095 [1] NCCL INFO cudaDriverVersion 12020",
		kinds: []PrefixKind{PrefixANSI, PrefixRay}, rank: -1,
	},
	{
		name:  "267 ray tag torn at its start",
		in:    "WorkerWrapper pid=2361) k8s19:2361:2361 [0] NCCL INFO Channel",
		want:  "k8s19:2361:2361 [0] NCCL INFO Channel",
		kinds: []PrefixKind{PrefixRay}, rank: -1,
	},
	{
		name: "synthetic torn ray tag without a header after it is text",
		in:   "WorkerWrapper pid=2361) Loading weights took 3.2 s",
		want: "WorkerWrapper pid=2361) Loading weights took 3.2 s",
		rank: -1,
	},
	{
		name:  "274 stacked ray tags",
		in:    "(EngineCore_DP0 pid=1088) (RayWorkerWrapper pid=285, ip=192.168.177.12) spark2:285:285 [0] NCCL INFO P2P Chunksize set to 131072",
		want:  "spark2:285:285 [0] NCCL INFO P2P Chunksize set to 131072",
		kinds: []PrefixKind{PrefixRay}, rank: -1, host: "192.168.177.12",
	},
	{
		name:  "279 indented mpirun tag",
		in:    "        [1,1]<stdout>:multi-node-nccl-test-worker-1:21:26 [0] NCCL INFO P2P Chunksize set to 131072",
		want:  "multi-node-nccl-test-worker-1:21:26 [0] NCCL INFO P2P Chunksize set to 131072",
		kinds: []PrefixKind{PrefixMPI}, rank: 1,
	},
	{
		name:  "synthetic cloudwatch console row, Z time",
		in:    "  | 2024-12-04T07:19:43.480Z | algo-1:18057:18130 [7] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
		want:  "algo-1:18057:18130 [7] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name:  "synthetic kubectl logs --prefix --timestamps",
		in:    "[pod/train-worker-1/pytorch] 2024-06-10T10:00:00.123456789Z train-worker-1:25:25 [0] NCCL INFO Using network Socket",
		want:  "train-worker-1:25:25 [0] NCCL INFO Using network Socket",
		kinds: []PrefixKind{PrefixKubectl, PrefixTimestamp}, rank: -1,
	},
	{
		name:  "synthetic kubectl logs --timestamps",
		in:    "2024-06-10T10:00:00.123456789Z train-worker-1:25:25 [0] NCCL INFO Using network Socket",
		want:  "train-worker-1:25:25 [0] NCCL INFO Using network Socket",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name:  "synthetic journald short output",
		in:    "Dec 04 07:19:43 gpu-node-3 python3[2201]: gpu-node-3:2201:2201 [0] NCCL INFO Using network IB",
		want:  "gpu-node-3:2201:2201 [0] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixJournald}, rank: -1, host: "gpu-node-3",
	},
	{
		name:  "synthetic logcli / Grafana Loki export",
		in:    "2024-12-04T07:19:43.480Z {container=\"pytorch\", pod=\"train-worker-0\"} train-worker-0:31:31 [2] NCCL INFO Using network IB",
		want:  "train-worker-0:31:31 [2] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name:  "synthetic Kibana Discover table row",
		in:    "Dec 4, 2024 @ 07:19:43.480\ttrain-worker-0:31:31 [2] NCCL INFO Using network IB",
		want:  "train-worker-0:31:31 [2] NCCL INFO Using network IB",
		kinds: []PrefixKind{PrefixTimestamp}, rank: -1,
	},
	{
		name: "synthetic repeated text that is no Ray suffix",
		in:   "host-a:1:1 [0] NCCL INFO [repeated 3x across cluster] and more",
		want: "host-a:1:1 [0] NCCL INFO [repeated 3x across cluster] and more",
		rank: -1,
	},
	{
		name: "synthetic NCCL 2.2 line without the NCCL token",
		in:   "[0] INFO NET : Using interface ib0:10.0.0.1<0>",
		want: "[0] INFO NET : Using interface ib0:10.0.0.1<0>",
		rank: -1,
	},
}

func kindsOf(ks []PrefixKind) uint16 {
	var k uint16
	for _, x := range ks {
		k |= 1 << x
	}
	return k
}

func TestStripPrefix(t *testing.T) {
	for _, tc := range prefixCases {
		t.Run(tc.name, func(t *testing.T) {
			// Twice, to show the result does not depend on earlier calls.
			for range 2 {
				rest, p := StripPrefix([]byte(tc.in))
				if string(rest) != tc.want {
					t.Errorf("StripPrefix(%q) rest = %q; want %q", tc.in, rest, tc.want)
				}
				if p.Kinds != kindsOf(tc.kinds) || p.Rank != tc.rank || string(p.Host) != tc.host {
					t.Errorf("StripPrefix(%q) = {Kinds %b Rank %d Host %q}; want {Kinds %b Rank %d Host %q}",
						tc.in, p.Kinds, p.Rank, p.Host, kindsOf(tc.kinds), tc.rank, tc.host)
				}
				for _, k := range tc.kinds {
					if !p.Has(k) {
						t.Errorf("StripPrefix(%q).Has(%v) = false", tc.in, k)
					}
				}
			}
		})
	}
}

// ncclHeader finds an NCCL line header anywhere in a line; the tests use it
// to check where StripPrefix left the line, not how it works.
var ncclHeader = regexp.MustCompile(`\S*:\S+:\S+ \[\d+\] (NCCL )?(INFO|WARN)`)

// redactedHeader is a header whose host was redacted to a word and a blank
// (253: "NAME :70918:70918 [0] NCCL INFO …").
var redactedHeader = regexp.MustCompile(`^\S+ :\S+:\S+ \[\d+\] (NCCL )?(INFO|WARN)`)

// corpusLines returns every line of testdata/corpus/*.log with its origin.
func corpusLines(t testing.TB) (lines []string, where []string) {
	t.Helper()
	files, err := filepath.Glob("../testdata/corpus/*.log")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			lines = append(lines, sc.Text())
			where = append(where, filepath.Base(f)[:3]+":"+itoa(n))
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return lines, where
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestStripPrefixCorpus checks every real line: an NCCL header found in it
// must start the rest (the launcher prefix is gone) unless the line starts
// with the bare "[cudaDev]" of a paste that lost its host (033, 053), and
// stripping again changes nothing.
func TestStripPrefixCorpus(t *testing.T) {
	lines, where := corpusLines(t)
	headers := 0
	for i, l := range lines {
		rest, _ := StripPrefix([]byte(l))
		if loc := ncclHeader.FindStringIndex(l); loc != nil {
			headers++
			// Exempt: a host redacted to "NAME :pid:tid" (253: the header
			// starts at the name, before the blank), and several NCCL
			// messages glued on one physical line by a terminal paste (210:
			// the header found is not the line's first NCCL message, or
			// follows the tail of a wrapped one and the paste's padding).
			before := l[:loc[0]]
			// Also a line that starts with a message torn right after its
			// "NCCL" (281: "g183:1:2 [1] NCCL g183:1:3 [3] NCCL INFO …").
			if redactedHeader.MatchString(string(rest)) || strings.Contains(before, "NCCL INFO") ||
				strings.Contains(before, "        ") || strings.HasSuffix(before, "] NCCL ") {
				continue
			}
			if got := ncclHeader.FindIndex(rest); got == nil || got[0] != 0 {
				t.Errorf("%s: StripPrefix(%q) = %q; want it to start with the NCCL header", where[i], l, rest)
			}
		}
		if again, p := StripPrefix(rest); !bytes.Equal(again, rest) || p.Kinds != 0 {
			t.Errorf("%s: StripPrefix(%q) = %q, %b; want it unchanged", where[i], rest, again, p.Kinds)
		}
		if !strings.HasSuffix(string(undecorated(l)), string(rest)) {
			t.Errorf("%s: rest %q is not a suffix of %q", where[i], rest, l)
		}
	}
	if headers < 500 {
		t.Errorf("only %d corpus lines with an NCCL header; corpus missing?", headers)
	}
}

func TestPrefixKindString(t *testing.T) {
	want := []string{"none", "torchrun", "srun", "mpi", "host", "ray", "rank-tag", "timestamp", "ansi", "markdown"}
	for k, w := range want {
		if got := PrefixKind(k).String(); got != w {
			t.Errorf("PrefixKind(%d).String() = %q; want %q", k, got, w)
		}
	}
	if got := PrefixKind(200).String(); got != "prefix(200)" {
		t.Errorf("PrefixKind(200).String() = %q", got)
	}
}

func TestStripANSI(t *testing.T) {
	cases := []struct{ in, want string }{
		{"node-a:1:1 [0] NCCL INFO Using network IB", "node-a:1:1 [0] NCCL INFO Using network IB"},
		{"\x1b[32mnode-a:1:1 [0] NCCL INFO\x1b[0m Using network \x1b[1;31mSocket\x1b[0m", "node-a:1:1 [0] NCCL INFO Using network Socket"},
		{"progress\x1b[K\x1b[2A done", "progress done"},
		{"lone \x1b escape", "lone \x1b escape"},
		{"cut \x1b[3", "cut \x1b[3"},
		{"\x1b[0m", ""},
	}
	var buf []byte
	for _, tc := range cases {
		got := StripANSI(buf[:0], []byte(tc.in))
		if string(got) != tc.want {
			t.Errorf("StripANSI(%q) = %q; want %q", tc.in, got, tc.want)
		}
		buf = got
	}
	line := []byte("no escapes here")
	if got := StripANSI(nil, line); &got[0] != &line[0] {
		t.Errorf("StripANSI without escapes did not return line itself")
	}
}

func TestStripPrefixAllocs(t *testing.T) {
	lines := make([][]byte, len(prefixCases))
	for i, tc := range prefixCases {
		lines[i] = []byte(tc.in)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, l := range lines {
			StripPrefix(l)
		}
	})
	if allocs != 0 {
		t.Errorf("StripPrefix allocates %.1f times per table run; want 0", allocs)
	}
	dst := make([]byte, 0, 256)
	in := []byte("\x1b[32mnode-a:1:1 [0] NCCL INFO\x1b[0m Using network IB")
	if allocs := testing.AllocsPerRun(100, func() { StripANSI(dst, in) }); allocs != 0 {
		t.Errorf("StripANSI into a large enough dst allocates %.1f times; want 0", allocs)
	}
}

func BenchmarkStripPrefix(b *testing.B) {
	lines := make([][]byte, len(prefixCases))
	n := 0
	for i, tc := range prefixCases {
		lines[i] = []byte(tc.in)
		n += len(tc.in)
	}
	b.ReportAllocs()
	b.SetBytes(int64(n))
	for b.Loop() {
		for _, l := range lines {
			StripPrefix(l)
		}
	}
}

// fuzzMaxLine caps fuzz inputs; StripPrefix looks at most a few hundred
// bytes ahead, longer inputs only slow the fuzzer down.
const fuzzMaxLine = 4096

func FuzzStripPrefix(f *testing.F) {
	for _, tc := range prefixCases {
		f.Add(tc.in)
	}
	lines, _ := corpusLines(f)
	for i, l := range lines {
		if i%7 == 0 { // a sample keeps the seed corpus quick to run
			f.Add(l)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > fuzzMaxLine {
			return
		}
		line := []byte(s)
		rest, p := StripPrefix(line)
		// rest lies in line, aliasing it, and ends it unless a decoration
		// at the end (Ray's dedup suffix, a pane border) was cut off.
		const suffixKinds = 1<<PrefixRayDedup | 1<<PrefixPane
		off, ok := offsetIn(line, rest)
		if !ok || len(rest) == 0 && p.Has(PrefixRayDedup) {
			t.Fatalf("StripPrefix(%q) rest %q does not alias line", s, rest)
		}
		if len(rest) > 0 {
			cut := len(line) - off - len(rest)
			n, kinds := suffixLen(line[off:])
			if cut != n || p.Kinds&kinds != kinds || p.Has(PrefixRayDedup) != (kinds&(1<<PrefixRayDedup) != 0) {
				t.Fatalf("StripPrefix(%q) rest %q, %+v: %d bytes cut from the end", s, rest, p, cut)
			}
		}
		if !aliases(line, p.Host) {
			t.Fatalf("StripPrefix(%q) Host %q does not alias line", s, p.Host)
		}
		if p.Kinds == 0 && (p.Rank != -1 || p.Host != nil) {
			t.Fatalf("StripPrefix(%q) reports a rank or host without a prefix: %+v", s, p)
		}
		// Idempotent: what is left has no prefix.
		if again, q := StripPrefix(rest); !bytes.Equal(again, rest) || q.Kinds != 0 || q.Rank != -1 {
			// The one exception: a line that ends in two dedup suffixes
			// keeps the inner one as message text, as Ray wrote it.
			if q.Kinds == 1<<PrefixRayDedup && p.Has(PrefixRayDedup) {
				return
			}
			t.Fatalf("StripPrefix(StripPrefix(%q)) = %q, %+v; want %q unchanged", s, again, q, rest)
		}
		// Compositional: a launcher prefix in front adds its kind and rank
		// and strips to the same rest.
		for _, pre := range []struct {
			s    string
			kind PrefixKind
			rank int
		}{
			{"[rank7]:", PrefixTorchrun, 7},
			{"[1,5]<stdout>:", PrefixMPI, 5},
			{"(RayTrainWorker pid=1, ip=10.0.0.1) ", PrefixRay, -1},
			{"\x1b[0m", PrefixANSI, -1},
			{"[pod/train-worker-0/pytorch] ", PrefixKubectl, -1},
			{"2024-06-10T10:00:00.123456789Z ", PrefixTimestamp, -1},
			{"Dec 04 07:19:43 gpu-node-3 python3[2201]: ", PrefixJournald, -1},
			{"Dec 4, 2024 @ 07:19:43.480\t", PrefixTimestamp, -1},
			{"ESC[36m", PrefixANSI, -1},
			{"│ ", PrefixPane, -1},
		} {
			if pre.kind == PrefixTimestamp {
				// After a time, '|' is a console table's column and a
				// label set is logcli's: both are the time's decoration.
				if b := trimBlank([]byte(s)); len(b) > 0 && (b[0] == '|' || b[0] == '{') {
					continue
				}
			}
			r2, q := StripPrefix([]byte(pre.s + s))
			if !bytes.Equal(r2, rest) || !q.Has(pre.kind) || pre.rank >= 0 && q.Rank != pre.rank {
				t.Fatalf("StripPrefix(%q) = %q, %+v; want %q with %v rank %d", pre.s+s, r2, q, rest, pre.kind, pre.rank)
			}
		}
		// An NCCL header line loses at most its decorations at the end.
		h := "node-1:12:34 [0] NCCL INFO " + s
		if r3, q := StripPrefix([]byte(h)); string(r3) != string(undecorated(h)) || q.Kinds&^suffixKinds != 0 {
			t.Fatalf("StripPrefix(%q) = %q, %+v; want it unchanged", h, r3, q)
		}
		// The dedup suffix Ray appends never changes what is left of an NCCL
		// line, under a Ray tag or not.
		if msg := trimRightSpace([]byte(h)); func() bool { n, _ := suffixLen(msg); return n == 0 }() {
			for _, suf := range []string{" [repeated 14x across cluster]", " [repeated 2x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication.)"} {
				for _, pre := range []string{"", "(RayWorkerWrapper pid=1019, ip=10.0.0.2) "} {
					r4, q := StripPrefix([]byte(pre + string(msg) + suf))
					if !bytes.Equal(r4, msg) || !q.Has(PrefixRayDedup) {
						t.Fatalf("StripPrefix(%q) = %q, %+v; want %q with the dedup suffix gone", pre+string(msg)+suf, r4, q, msg)
					}
				}
			}
		}
	})
}

// undecorated returns l without its decorations at the end (a pane border,
// Ray's dedup suffix); the tests use it to say which part of a line
// StripPrefix's rest must end.
func undecorated(l string) []byte {
	n, _ := suffixLen([]byte(l))
	return []byte(l)[:len(l)-n]
}

// aliases reports whether sub lies inside the memory of b.
func aliases(b, sub []byte) bool {
	if len(sub) == 0 {
		return true
	}
	for i := range b {
		if &b[i] == &sub[0] {
			return i+len(sub) <= len(b)
		}
	}
	return false
}
