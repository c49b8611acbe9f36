package parsers

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// ncclCase is one real NCCL line (the file it was taken from is in the name)
// and the facts Parse must find. Only the fields set in want are compared.
type ncclCase struct {
	name string
	in   string
	want pipeline.Event
	// check compares the fields this case cares about.
	check func(t *testing.T, ev *pipeline.Event)
}

func kind(k pipeline.EventKind) func(*testing.T, *pipeline.Event) {
	return func(t *testing.T, ev *pipeline.Event) {
		t.Helper()
		if ev.Kind != k {
			t.Errorf("Kind = %v; want %v", ev.Kind, k)
		}
	}
}

func all(fs ...func(*testing.T, *pipeline.Event)) func(*testing.T, *pipeline.Event) {
	return func(t *testing.T, ev *pipeline.Event) {
		t.Helper()
		for _, f := range fs {
			f(t, ev)
		}
	}
}

func field(name string, get func(*pipeline.Event) string, want string) func(*testing.T, *pipeline.Event) {
	return func(t *testing.T, ev *pipeline.Event) {
		t.Helper()
		if got := get(ev); got != want {
			t.Errorf("%s = %q; want %q", name, got, want)
		}
	}
}

func num(name string, get func(*pipeline.Event) int, want int) func(*testing.T, *pipeline.Event) {
	return func(t *testing.T, ev *pipeline.Event) {
		t.Helper()
		if got := get(ev); got != want {
			t.Errorf("%s = %d; want %d", name, got, want)
		}
	}
}

func flag(f uint32, want bool) func(*testing.T, *pipeline.Event) {
	return func(t *testing.T, ev *pipeline.Event) {
		t.Helper()
		if got := ev.Flags&f != 0; got != want {
			t.Errorf("flag %#x = %v; want %v", f, got, want)
		}
	}
}

var (
	host  = func(e *pipeline.Event) string { return string(e.Host) }
	pid   = func(e *pipeline.Event) string { return string(e.PID) }
	name  = func(e *pipeline.Event) string { return string(e.Name) }
	value = func(e *pipeline.Event) string { return string(e.Value) }
	ip    = func(e *pipeline.Event) string { return string(e.IP) }
	iface = func(e *pipeline.Event) string { return string(e.Iface) }
	dev   = func(e *pipeline.Event) int { return e.Dev }
	rank  = func(e *pipeline.Event) int { return e.Rank }
	nr    = func(e *pipeline.Event) int { return e.NRanks }
	nn    = func(e *pipeline.Event) int { return e.NNodes }
	from  = func(e *pipeline.Event) int { return e.From }
	to    = func(e *pipeline.Event) int { return e.To }
	fdev  = func(e *pipeline.Event) int { return e.FromDev }
	tdev  = func(e *pipeline.Event) int { return e.ToDev }
	trans = func(e *pipeline.Event) string { return e.Transport.String() }
	cid   = func(e *pipeline.Event) string { return string(e.CommID) }
)

// ncclCases holds real lines of every format generation (NCCL-FORMATS.md);
// TestParseNCCL and BenchmarkParseNCCL share it.
var ncclCases = []ncclCase{
	{name: "version_banner_016", in: "NCCL version 2.18.5+cuda11.8",
		check: all(kind(pipeline.EventVersion), field("Name", name, "2.18.5"))},
	{name: "version_info_every_rank_068", in: "tpgds-aihub0008:207008:207008 [1] NCCL INFO NCCL version 2.27.5+cuda12.9",
		check: all(kind(pipeline.EventVersion), field("Name", name, "2.27.5"), field("Host", host, "tpgds-aihub0008"), num("Dev", dev, 1))},
	{name: "using_network_ib_015", in: "user:5181:5232 [2] NCCL INFO Using network IB",
		check: all(kind(pipeline.EventNetwork), field("Name", name, "IB"), field("Host", host, "user"), field("PID", pid, "5181"))},
	{name: "using_network_plugin_space_081", in: "nccl-tests-efa-worker-1:32:32 [7] NCCL INFO Using network AWS Libfabric",
		check: all(kind(pipeline.EventNetwork), field("Name", name, "AWS Libfabric"))},
	{name: "using_internal_network_2.3", in: "host:1:1 [0] NCCL INFO Using internal Network Socket",
		check: all(kind(pipeline.EventNetwork), field("Name", name, "Socket"))},
	{name: "ib_devices_mixed_006", in: "crow-ib-new-nccl-256-info-19:5330:5330 [3] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_0:1/IB [3]mlx5_2:1/RoCE [4]mlx5_4:1/IB ; OOB eth0:10.100.62.64<0>",
		check: all(kind(pipeline.EventIBDevices), field("Value", value, "[0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_0:1/IB [3]mlx5_2:1/RoCE [4]mlx5_4:1/IB"),
			field("Iface", iface, "eth0"), field("IP", ip, "10.100.62.64"))},
	{name: "ib_devices_ro_069", in: "tpgds-aihub0008:207008:207008 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB enp25s0np0:10.99.91.63<0>",
		check: all(kind(pipeline.EventIBDevices), field("Iface", iface, "enp25s0np0"), field("IP", ip, "10.99.91.63"))},
	{name: "ib_device_2.3_264", in: "learnfair0536:46393:46393 [0] NCCL INFO NET/IB: [3] mlx5_2:1/IB ",
		check: all(kind(pipeline.EventIBDevices), field("Name", name, "IB"), field("Value", value, "[3] mlx5_2:1/IB"), field("Host", host, "learnfair0536"))},
	{name: "ib_alloc_not_devices_261", in: "vm1:58934:58945 [0] NCCL INFO transport/net_ib.cc:657 Ib Alloc Size 21688 pointer 0x7f15f8268000",
		check: kind(pipeline.EventOther)},
	{name: "ib_no_device_036", in: "ip-172-31-0-11:45384:45384 [0] NCCL INFO NET/IB : No device found.",
		check: kind(pipeline.EventIBNoDevice)},
	{name: "ib_sideband_2.3", in: "host:12:12 [0] NCCL INFO NET/IB : Using interface enp3s0 for sideband communication",
		check: kind(pipeline.EventIBSideband)},
	{name: "socket_devices_021", in: "26a46eb2b1d3:111329:111329 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>",
		check: all(kind(pipeline.EventSocketDevices), field("Name", name, "Socket"), field("IP", ip, "172.17.0.2"))},
	{name: "socket_threads_is_not_devices_051", in: "gke-a3:1596:2172 [0] NCCL INFO NET/Socket: Using 4 threads and 1 sockets per thread",
		check: kind(pipeline.EventOther)},
	{name: "warn_libibverbs_021", in: "26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
		check: all(kind(pipeline.EventNoVerbs), flag(pipeline.FlagWarnLevel, true), field("Host", host, "26a46eb2b1d3"), num("Dev", dev, 0))},
	{name: "info_libibverbs_022", in: "ubuntu:39964:40050 [6] NCCL INFO Failed to open libibverbs.so[.1]",
		check: all(kind(pipeline.EventNoVerbs), flag(pipeline.FlagWarnLevel, false))},
	{name: "warn_plugin_function_041", in: "node:174:4368 [3] sharp_plugin.c:354 NCCL WARN SHARP group create: Streaming Tree lock failed (-18)",
		check: all(kind(pipeline.EventWarn), flag(pipeline.FlagWarnLevel, true), field("Value", value, "SHARP group create: Streaming Tree lock failed (-18)"))},
	{name: "empty_hostname_065", in: "::16674:17023 [0] NCCL INFO Using network IB",
		check: all(kind(pipeline.EventNetwork), field("Host", host, ""), field("PID", pid, "16674"))},
	{name: "redacted_pid_059", in: "pod-id:num:num [3] NCCL INFO comm 0x56300ffd3cf0 rank 3 nRanks 4 nNodes 1 localRanks 4 localRank 3 MNNVL 0",
		check: all(kind(pipeline.EventCommNodes), field("PID", pid, "num"), num("Rank", rank, 3), num("NRanks", nr, 4), num("NNodes", nn, 1))},
	{name: "stripped_prefix_053", in: "[0] NCCL INFO Using network GPUDirectTCPX_v7",
		check: all(kind(pipeline.EventNetwork), field("Name", name, "GPUDirectTCPX_v7"), num("Dev", dev, 0))},
	{name: "bootstrap_indexed_2.4_021", in: "26a46eb2b1d3:111329:111329 [0] NCCL INFO Bootstrap : Using [0]eth0:172.17.0.2<0>",
		check: all(kind(pipeline.EventBootstrap), field("Iface", iface, "eth0"), field("IP", ip, "172.17.0.2"))},
	{name: "bootstrap_nospace_2.27_068", in: "tpgds-aihub0008:207008:207008 [1] NCCL INFO Bootstrap: Using enp25s0np0:10.99.91.63<0>",
		check: all(kind(pipeline.EventBootstrap), field("IP", ip, "10.99.91.63"))},
	{name: "channel_gdrdma_2.27_070", in: "tpgds-aihub0008:207011:207011 [4] NCCL INFO Channel 04/0 : 4[4] -> 12[4] [receive] via NET/IB/4/GDRDMA",
		check: all(kind(pipeline.EventConnection), field("Transport", trans, "NET"), field("Name", name, "IB"), num("From", from, 4), num("To", to, 12),
			num("ToDev", tdev, 4), flag(pipeline.FlagGDR, true), flag(pipeline.FlagReceive, true))},
	{name: "channel_plugin_space_082", in: "nccl-tests-efa-worker-0:33:73 [6] NCCL INFO Channel 03 : 15[a01d0] -> 6[a01c0] [receive] via NET/AWS Libfabric/3/GDRDMA",
		check: all(kind(pipeline.EventConnection), field("Name", name, "AWS Libfabric"), flag(pipeline.FlagBusID, true), num("FromDev", fdev, 0xa01d0))},
	{name: "channel_socket_no_gdr_051", in: "gke:1596:2179 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0",
		check: all(kind(pipeline.EventConnection), field("Name", name, "Socket"), flag(pipeline.FlagGDR, false))},
	{name: "channel_shared_085", in: "n013:101855:101890 [0] NCCL INFO Channel 00/1 : 1[81000] -> 0[81000] [receive] via NET/IB/1/GDRDMA/Shared",
		check: all(flag(pipeline.FlagShared, true), flag(pipeline.FlagGDR, true))},
	{name: "channel_cumem_024", in: "job-worker-0:5666:5808 [3] NCCL INFO Channel 07/0 : 3[3] -> 4[4] via P2P/CUMEM",
		check: all(kind(pipeline.EventConnection), field("Transport", trans, "P2P/CUMEM"), num("FromDev", fdev, 3))},
	{name: "channel_ipc_read_027", in: "09677202c889:6253:6644 [2] NCCL INFO Channel 23/0 : 2[201c0] -> 3[201d0] via P2P/IPC/read",
		check: all(field("Transport", trans, "P2P/IPC"), flag(pipeline.FlagBusID, true))},
	{name: "channel_direct_012", in: "myles:6742:6769 [3] NCCL INFO Channel 00/0 : 3[3] -> 2[2] via P2P/direct pointer",
		check: field("Transport", trans, "P2P/direct pointer")},
	{name: "channel_shm_086", in: "sh9:3884652:3884740 [7] NCCL INFO Channel 01 : 7[7] -> 2[2] via SHM/direct/direct",
		check: field("Transport", trans, "SHM")},
	{name: "ring_2.5_shm_033", in: " [0] NCCL INFO Ring 00 : 0[1b000] -> 7[41000] via direct shared memory",
		check: all(field("Transport", trans, "SHM"), num("To", to, 7))},
	{name: "ring_2.4_net_hop_008", in: "ip-172-31-11-92:45293:45298 [0] NCCL INFO Ring 00 : 34 -> 33 [send] via NET/Socket/0",
		check: all(field("Transport", trans, "NET"), num("From", from, 34), num("To", to, 33), flag(pipeline.FlagSend, true))},
	{name: "ring_graph_me_049", in: "gpu01:351578:352168 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1",
		check: all(kind(pipeline.EventTrees), num("Rank", rank, 0))},
	{name: "ring_order_033", in: " [0] NCCL INFO Channel 00/02 :    0   1   2   3",
		check: all(kind(pipeline.EventRingOrder), field("Value", value, "0   1   2   3"))},
	{name: "trees_2.4_008", in: "ip-172-31-14-180:45375:45380 [0] NCCL INFO Trees [0] 26->25->-1/-1/-1",
		check: all(kind(pipeline.EventTrees), num("Rank", rank, 25))},
	{name: "trees_2.5_pipe_006", in: "h:5330:5499 [3] NCCL INFO Trees [0] 154/-1/-1->155->153|153->155->154/-1/-1",
		check: num("Rank", rank, 155)},
	{name: "trees_2.10_093", in: "x:162667:162769 [0] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] 0/-1/-1->1->-1",
		check: num("Rank", rank, 1)},
	{name: "connected_gdr1_070", in: "tpgds-aihub0008:207007:207007 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
		check: all(kind(pipeline.EventConnected), flag(pipeline.FlagGDR, true), flag(pipeline.FlagRings, true))},
	{name: "connected_gdr0_080", in: "gpu-st-ml-2:77729:77729 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 0",
		check: all(flag(pipeline.FlagNoGDR, true), flag(pipeline.FlagGDR, false))},
	{name: "comm_init_2.18_045", in: "nf5688m7-1:422771:422789 [3] NCCL INFO comm 0x5598478b07c0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 5a000 commId 0xefdd95e4ad4062d9 - Init COMPLETE",
		check: all(kind(pipeline.EventComm), num("Rank", rank, 3), num("NRanks", nr, 8), num("FromDev", fdev, 3), field("CommID", cid, "0xefdd95e4ad4062d9"), flag(pipeline.FlagComplete, true))},
	{name: "comm_init_rank_2.20_010", in: "gh2:15475:15858 [0] NCCL INFO ncclCommInitRank comm 0xaaae51121510 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 901000 commId 0x6e99db63b024eb76 - Init START",
		check: all(kind(pipeline.EventComm), num("Rank", rank, 1), flag(pipeline.FlagStart, true))},
	{name: "comm_2.4_008", in: "ip-172-31-6-136:45332:45337 [0] NCCL INFO comm 0x7f145c002250 rank 17 nranks 64 cudaDev 0 nvmlDev 0 - Init COMPLETE",
		check: all(kind(pipeline.EventComm), num("Rank", rank, 17), num("NRanks", nr, 64))},
	{name: "comm_destroy_046", in: "nf5688m7-1:422771:422771 [0] NCCL INFO comm 0x5598478a4d90 rank 1 nranks 8 cudaDev 1 busId 34000 - Destroy COMPLETE",
		check: all(kind(pipeline.EventComm), flag(pipeline.FlagDestroy, true))},
	{name: "coll_trace_261", in: "vm2:15364:15364 [0] NCCL INFO AllReduce: opCount 4 sendbuff 0x7fbfac000000 recvbuff 0x7fbf2c000000 count 536870912 datatype 7 op 0 root 0 comm 0x7fc030000d00 [nranks=2] stream 0x4de7c00",
		check: all(kind(pipeline.EventComm), num("Rank", rank, -1), num("NRanks", nr, 2), field("CommPtr", func(e *pipeline.Event) string { return string(e.CommPtr) }, "0x7fc030000d00"))},
	{name: "coll_trace_lookalike", in: "h:1:1 [0] NCCL INFO Launch mode Parallel: opCount 1 comm 0x1 [nranks=2] stream 0x2",
		check: kind(pipeline.EventOther)},
	{name: "init_timings_2.27_072", in: "tpgds-aihub0008:207011:207011 [4] NCCL INFO Init timings - ncclCommInitRank: rank 12 nranks 16 total 2.13 (kernels 0.22, alloc 1.62)",
		check: all(kind(pipeline.EventInitTimings), num("Rank", rank, 12), num("NRanks", nr, 16))},
	{name: "env_int_period_035", in: "axa:3048391:3048566 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
		check: all(kind(pipeline.EventEnv), field("Name", name, "NCCL_IB_DISABLE"), field("Value", value, "1"))},
	{name: "env_string_047", in: "w:3704:4784 [5] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PIX",
		check: all(kind(pipeline.EventEnv), field("Value", value, "PIX"))},
	{name: "env_set_to_015", in: "user:5183:5236 [4] NCCL INFO NCCL_IB_HCA set to mlx5_2:1,mlx5_0:1",
		check: all(kind(pipeline.EventEnv), field("Name", name, "NCCL_IB_HCA"), field("Value", value, "mlx5_2:1,mlx5_0:1"))},
	{name: "gdr_disabled_hca_063", in: "hostname1:25668:27396 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'",
		check: all(kind(pipeline.EventGDR), flag(pipeline.FlagEnabled, false), field("Name", name, "mlx5_0"))},
	{name: "gdr_enabled_gib_047", in: "w:3704:4784 [5] NCCL INFO NET/gIB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",
		check: all(kind(pipeline.EventGDR), flag(pipeline.FlagEnabled, true))},
	{name: "gdr_enabled_gpu_085", in: "n013:101855:101890 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 81000 / HCA 1 (distance 6 <= 7), read 0",
		check: all(kind(pipeline.EventGDR), flag(pipeline.FlagEnabled, true))},
	{name: "plugin_loaded_068", in: "tpgds-aihub0008:207009:207009 [2] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)",
		check: all(kind(pipeline.EventPluginLoaded), field("Name", name, "AWS Libfabric"))},
	{name: "plugin_absent_is_not_failure_022", in: "ubuntu:9621:9621 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
		check: kind(pipeline.EventOther)},
	{name: "plugin_rejected_2.19", in: "h:1:1 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not supported.",
		check: kind(pipeline.EventPluginFailed)},
	{name: "nvls_available_089", in: "w:382:675 [0] NCCL INFO NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
		check: all(kind(pipeline.EventNVLS), flag(pipeline.FlagEnabled, true), flag(pipeline.FlagNVLSTree, false))},
	{name: "channel_counts_072", in: "t:207010:207010 [3] NCCL INFO 16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer",
		check: all(kind(pipeline.EventChannelCounts), num("Channels", func(e *pipeline.Event) int { return e.Channels }, 16),
			num("NVLSChannels", func(e *pipeline.Event) int { return e.NVLSChannels }, 0))},
	{name: "collnet_041", in: "node:176:4360 [5] NCCL INFO CollNet 05/0 : 5 [receive] via COLLNET/SHARP/5/GDRDMA",
		check: all(kind(pipeline.EventCollNet), flag(pipeline.FlagGDR, true))},
	{name: "nccl_tests_rank_080", in: "#  Rank  1 Group  0 Pid  77729 on gpu-st-ml-2 device  0 [0000:30:00] NVIDIA RTX PRO 6000 Blackwell Server Edition",
		check: all(kind(pipeline.EventTestRank), num("Rank", rank, 1), field("Host", host, "gpu-st-ml-2"), field("PID", pid, "77729"), num("FromDev", fdev, 0))},
	{name: "net_trace_097", in: "ubuntu:39964:40075 [0] NCCL INFO transport/net_socket.cc:336 -> 2",
		check: kind(pipeline.EventNetTrace)},
	{name: "cloudwatch_glued_first_copy_013", in: "ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>",
		check: all(kind(pipeline.EventBootstrap), field("IP", ip, "10.36.29.253"))},
}

func TestParseNCCL(t *testing.T) {
	var p NCCL
	var ev pipeline.Event
	for _, c := range ncclCases {
		t.Run(c.name, func(t *testing.T) {
			// Parse twice with the same parser and event to catch state
			// left over from the previous call.
			for i := 0; i < 2; i++ {
				if !p.Parse([]byte(c.in), &ev) {
					t.Fatalf("Parse(%q) = false; want true", c.in)
				}
				c.check(t, &ev)
			}
		})
	}
}

func TestParseNotNCCL(t *testing.T) {
	var p NCCL
	var ev pipeline.Event
	for _, in := range []string{
		"",
		"[2023-12-20 16:35:35,473] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.11.1",
		" iteration       10/  500000 | consumed samples:          640 | elapsed time per iteration (ms): 6070.3",
		"Train Epoch 0 Rank 9:   0%|          | 0/1250 [00:00<?, ?it/s]",
		"libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list",
	} {
		if p.Parse([]byte(in), &ev) {
			t.Errorf("Parse(%q) = true (kind %v); want false", in, ev.Kind)
		}
	}
}

// TestCandidateAcceptsCorpus checks the prefilter never rejects a line the
// parser would accept, over every corpus line.
func TestCandidateAcceptsCorpus(t *testing.T) {
	var p NCCL
	var ev pipeline.Event
	n := 0
	eachCorpusLine(t, func(line []byte) {
		rest, _ := StripPrefix(line)
		if p.Parse(rest, &ev) {
			n++
			if !Candidate(line) {
				t.Errorf("Candidate(%q) = false for an NCCL line", line)
			}
		}
	})
	if n < 500 {
		t.Fatalf("only %d NCCL lines in the corpus; want at least 500", n)
	}
}

func eachCorpusLine(t testing.TB, fn func([]byte)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			fn(sc.Bytes())
		}
	}
}

// FuzzParseNCCL checks that Parse never panics, and that whatever it
// accepts it accepts again identically when the line is re-parsed and when
// surrounding whitespace is added (the parser trims it).
func FuzzParseNCCL(f *testing.F) {
	for _, c := range ncclCases {
		f.Add(c.in)
	}
	f.Add("::1:1 [0] NCCL INFO comm 0x rank nranks")
	f.Add("h:1:1 [x] NCCL WARN")
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 4096 {
			return
		}
		var p NCCL
		var a, b pipeline.Event
		okA := p.Parse([]byte(in), &a)
		okB := p.Parse([]byte(in+" \r"), &b)
		if okA != okB {
			t.Fatalf("Parse(%q) = %v but with trailing blanks %v", in, okA, okB)
		}
		if !okA {
			return
		}
		if a.Kind != b.Kind || a.Flags != b.Flags || a.Rank != b.Rank || a.NRanks != b.NRanks || !bytes.Equal(a.Host, b.Host) {
			t.Fatalf("Parse(%q) differs with trailing blanks: %+v vs %+v", in, a, b)
		}
		// Facts alias the input: every slice must be a substring of it.
		for _, s := range [][]byte{a.Host, a.PID, a.TID, a.Name, a.Value, a.Iface, a.IP, a.CommPtr, a.CommID} {
			if len(s) > 0 && !strings.Contains(in, string(s)) {
				t.Fatalf("Parse(%q) produced %q, not part of the input", in, s)
			}
		}
	})
}

func BenchmarkParseNCCL(b *testing.B) {
	var p NCCL
	var ev pipeline.Event
	for _, c := range ncclCases {
		in := []byte(c.in)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for i := 0; i < b.N; i++ {
				p.Parse(in, &ev)
			}
		})
	}
}

func BenchmarkCandidateNonNCCL(b *testing.B) {
	in := []byte(" iteration       10/  500000 | consumed samples:          640 | elapsed time per iteration (ms): 6070.3 | learning rate: 1.500E-04 | lm loss: 1.0E+01")
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		if Candidate(in) {
			b.Fatal("candidate")
		}
	}
}

// TestNextMessage checks where a line holding several NCCL messages (a
// terminal-wrapped paste, corpus 210) is split, and that lines naming NCCL
// without a second full header are not.
func TestNextMessage(t *testing.T) {
	const a = "VM-17-82-centos:11980:12549 [2] NCCL INFO Channel 03/0 : 2[2] -> 10[2] [send] via NET/IBext/2/GDRDMA"
	for _, c := range []struct {
		name, in string
		want     []string // the messages, in order
	}{
		{"glued_210", "NCCL INFO Channel 12/0 : 13[5] -> 5[5] [receive] via NET/IBext/5/GDRDMA      " + a + "   ::1:2 [7] NCCL WARN x",
			[]string{"NCCL INFO Channel 12/0 : 13[5] -> 5[5] [receive] via NET/IBext/5/GDRDMA      ", a + "   ", "::1:2 [7] NCCL WARN x"}},
		{"one", a, []string{a}},
		{"cloudwatch_repeat_013", "  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>",
			[]string{"  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>"}},
		{"not_nccl", "nothing [0] NCCL INFO here", []string{"nothing [0] NCCL INFO here"}},
		{"quoted_no_header", "h:1:2 [0] NCCL INFO see the NCCL INFO lines of [0] NCCL INFO x", []string{"h:1:2 [0] NCCL INFO see the NCCL INFO lines of [0] NCCL INFO x"}},
		{"pid_not_number", "h:1:2 [0] NCCL INFO a h:x:2 [0] NCCL INFO b", []string{"h:1:2 [0] NCCL INFO a h:x:2 [0] NCCL INFO b"}},
		{"dev_not_number", "h:1:2 [0] NCCL INFO a h:1:2 [a] NCCL INFO b", []string{"h:1:2 [0] NCCL INFO a h:1:2 [a] NCCL INFO b"}},
		{"no_space_before", "h:1:2 [0] NCCL INFO a=h:1:2 [1] NCCL INFO b", []string{"h:1:2 [0] NCCL INFO a=h:1:2 [1] NCCL INFO b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			s := c.in
			for len(got) < 10 {
				i := NextMessage([]byte(s))
				if i <= 0 {
					got = append(got, s)
					break
				}
				got = append(got, s[:i])
				s = s[i:]
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("messages %q; want %q", got, c.want)
			}
		})
	}
	line := []byte("NCCL INFO Channel 12/0 : 13[5] -> 5[5] [receive] via NET/IBext/5/GDRDMA " + a)
	if n := testing.AllocsPerRun(100, func() { NextMessage(line) }); n != 0 {
		t.Errorf("NextMessage allocates %v times; want 0", n)
	}
}

// recordingAsm keeps the events the processor hands over; only Add is used.
type recordingAsm struct {
	pipeline.NCCLAssembler
	got []string
}

func (r *recordingAsm) Add(job string, meta *pipeline.Meta, ev *pipeline.Event, _ time.Time) {
	dir := "receive"
	if ev.Flags&pipeline.FlagSend != 0 {
		dir = "send"
	}
	r.got = append(r.got, string(ev.Host)+" "+ev.Kind.String()+" "+dir)
}

// TestParseGluedMessages checks that the processor reads each message of a
// glued line as an event of its own (corpus 210): the [send] connection
// behind a [receive] one is seen.
func TestParseGluedMessages(t *testing.T) {
	asm := &recordingAsm{}
	var texts []string
	p := pipeline.NewProcessor(asm, &Lines{}, nil,
		pipeline.WithTap(func(_ string, rec *pipeline.Record, _ *pipeline.Event) { texts = append(texts, string(rec.Text)) }))
	in := "NCCL INFO Channel 12/0 : 13[5] -> 5[5] [receive] via NET/IBext/5/GDRDMA    " +
		"VM-17-82-centos:11980:12549 [2] NCCL INFO Channel 03/0 : 2[2] -> 10[2] [send] via NET/IBext/2/GDRDMA  " +
		"VM-17-82-centos:11978:12548 [0] NCCL INFO Channel 12/0 : 8[0] -> 0[0] [receive] via NET/IBext/0/GDRDMA"
	p.Record(&pipeline.Record{Text: []byte(in)})
	want := []string{" connection receive", "VM-17-82-centos connection send", "VM-17-82-centos connection receive"}
	if strings.Join(asm.got, "|") != strings.Join(want, "|") {
		t.Errorf("events %q; want %q", asm.got, want)
	}
	if len(texts) != 3 || strings.Contains(texts[0], "[send]") || !strings.HasPrefix(texts[2], "VM-17-82-centos:11978") {
		t.Errorf("tap texts %q; want one message each", texts)
	}
	if p.Stats.Records != 1 || p.Stats.NCCLLines != 3 {
		t.Errorf("stats %+v; want 1 record, 3 NCCL messages", p.Stats)
	}
	p.Record(&pipeline.Record{Text: []byte("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0")})
	if len(asm.got) != 4 {
		t.Errorf("a one-message line gave %d events; want 1", len(asm.got)-3)
	}
}
