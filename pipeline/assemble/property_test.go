package assemble_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// The property tests mutate every real excerpt of testdata/corpus and check
// a rule of CLASSIFICATION.md that must hold whatever the log says. Each
// run also checks that fallback is true exactly when the verdict is
// socket_fallback (run).

// TestPropertyPlainSendKeepsGDR: adding a [send] … via NET/<net>/0 line
// without GDRDMA never turns gdr from true to false (rule 4).
func TestPropertyPlainSendKeepsGDR(t *testing.T) {
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, before := run(t, lines, nil, pipeline.Expectation{})
		if before.GDR == nil || !*before.GDR {
			continue
		}
		h, net := firstNetConn(lines)
		if h == "" {
			continue
		}
		add := h + "Channel 31/0 : 0[0] -> 1[1] [send] via NET/" + net + "/0"
		_, after := run(t, append(append([]string{}, lines...), add), nil, pipeline.Expectation{})
		if after.GDR == nil || !*after.GDR {
			t.Errorf("%s: gdr %s after adding %q", name, show(after.GDR), add)
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d excerpts with gdr true and NET lines", checked)
	}
	t.Logf("%d excerpts", checked)
}

// TestPropertyOneHostNeverRaisesMultiNode: keeping only one host's NCCL
// lines never makes multi_node true where the whole log did not (rule 6).
func TestPropertyOneHostNeverRaisesMultiNode(t *testing.T) {
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, before := run(t, lines, nil, pipeline.Expectation{})
		hosts := map[string][]string{}
		for _, l := range lines {
			if ev, ok := parse(l); ok && len(ev.Host) > 0 {
				hosts[string(ev.Host)] = append(hosts[string(ev.Host)], l)
			}
		}
		if before.MultiNode != nil && *before.MultiNode {
			continue
		}
		for h, kept := range hosts {
			_, after := run(t, kept, nil, pipeline.Expectation{})
			if after.MultiNode != nil && *after.MultiNode {
				t.Errorf("%s: only host %s's lines give multi_node true; the whole file gives %s", name, h, show(before.MultiNode))
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d host subsets", checked)
	}
	t.Logf("%d host subsets", checked)
}

// TestPropertyFastSocketNeverFallsBack: the same log on FastSocket (an
// intended TCP plugin) never yields socket_fallback (rule 9).
func TestPropertyFastSocketNeverFallsBack(t *testing.T) {
	r := strings.NewReplacer("NET/Socket", "NET/FastSocket", "Using network Socket", "Using network FastSocket",
		"Using internal Network Socket", "Using internal Network FastSocket")
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, before := run(t, lines, nil, pipeline.Expectation{})
		if before.Network == nil || *before.Network != "Socket" {
			continue
		}
		mut := make([]string, len(lines))
		for i, l := range lines {
			mut[i] = r.Replace(l)
		}
		_, after := run(t, mut, nil, pipeline.Expectation{})
		if after.Network == nil || *after.Network != "FastSocket" {
			t.Errorf("%s: network %s after renaming Socket to FastSocket", name, show(after.Network))
		}
		if after.Verdict == pipeline.VerdictSocketFallback || after.Fallback == nil || *after.Fallback {
			t.Errorf("%s on FastSocket: verdict %s, fallback %s", name, after.Verdict, show(after.Fallback))
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d Socket excerpts", checked)
	}
	t.Logf("%d Socket excerpts", checked)
}

// TestPropertyFactsIgnorePolicy: the facts of a summary are the same under
// any policy (CLASSIFICATION.md: policy enters only fallback and verdict).
func TestPropertyFactsIgnorePolicy(t *testing.T) {
	no := false
	policies := []pipeline.Expectation{
		{Network: pipeline.ClassTCP},
		{Network: pipeline.ClassTCPX, GDR: &no},
		{Network: pipeline.ClassRDMA, HCAs: 64, GDREveryGPU: true},
	}
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, base := run(t, lines, nil, pipeline.Expectation{})
		for _, e := range policies {
			_, s := run(t, lines, nil, e)
			if facts(s) != facts(base) {
				t.Errorf("%s: facts under %+v = %s; under the default policy %s", name, e, facts(s), facts(base))
			}
			if e.Network == pipeline.ClassTCP && s.Verdict == pipeline.VerdictSocketFallback {
				t.Errorf("%s: socket_fallback under a TCP policy", name)
			}
		}
	}
}

// TestPropertySingleNodeIBDisabledIsNoFallback: a single-node log stays
// free of socket_fallback when NCCL_IB_DISABLE=1 is added (the false alert
// of issue 10).
func TestPropertySingleNodeIBDisabledIsNoFallback(t *testing.T) {
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, before := run(t, lines, nil, pipeline.Expectation{})
		if before.MultiNode == nil || *before.MultiNode {
			continue
		}
		var mut []string
		for _, l := range lines {
			if h := header(l); h != "" && !strings.Contains(h, "WARN") {
				mut = append(mut, h+"NCCL_IB_DISABLE set by environment to 1.")
			}
			mut = append(mut, l)
		}
		_, after := run(t, mut, nil, pipeline.Expectation{})
		if after.Verdict == pipeline.VerdictSocketFallback {
			t.Errorf("%s: single node with NCCL_IB_DISABLE=1 gives socket_fallback (%v)", name, after.Reasons)
		}
		if show(after.MultiNode) != show(before.MultiNode) {
			t.Errorf("%s: multi_node %s → %s after an env line", name, show(before.MultiNode), show(after.MultiNode))
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d single-node excerpts", checked)
	}
	t.Logf("%d single-node excerpts", checked)
}

// TestPropertyReceiveGDRMakesGDR: one [receive] NET connection with
// /GDRDMA makes gdr and gdr_recv true (rule 4: any connection).
func TestPropertyReceiveGDRMakesGDR(t *testing.T) {
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, before := run(t, lines, nil, pipeline.Expectation{})
		if before.GDR == nil || *before.GDR {
			continue
		}
		h, net := firstNetConn(lines)
		if h == "" {
			continue
		}
		add := h + "Channel 31/0 : 1[1] -> 0[0] [receive] via NET/" + net + "/0/GDRDMA"
		_, after := run(t, append(append([]string{}, lines...), add), nil, pipeline.Expectation{})
		if after.GDR == nil || !*after.GDR || after.GDRRecv == nil || !*after.GDRRecv {
			t.Errorf("%s: gdr %s, gdr_recv %s after adding %q", name, show(after.GDR), show(after.GDRRecv), add)
		}
		if after.Verdict == pipeline.VerdictGDROff {
			t.Errorf("%s: gdr_off with a GDRDMA connection", name)
		}
		checked++
	}
	if checked < 3 {
		t.Fatalf("only %d excerpts with gdr false and NET lines", checked)
	}
	t.Logf("%d excerpts", checked)
}

// TestPropertyFailedPluginIsNotSelected: a process that prints "Failed to
// initialize NET plugin X" after its last line never reports X from a
// device list or plugin init alone (rule 1.4).
func TestPropertyFailedPluginIsNotSelected(t *testing.T) {
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		var kept []string
		headers := map[string]string{}
		for _, l := range lines {
			// Only the weaker evidence: drop Using network, Assigned and
			// channel lines.
			if strings.Contains(l, "Using network") || strings.Contains(l, "Using internal Network") ||
				strings.Contains(l, "Assigned NET plugin") || strings.Contains(l, " via ") {
				continue
			}
			kept = append(kept, l)
			if ev, ok := parse(l); ok && header(l) != "" {
				headers[string(ev.Host)+":"+string(ev.PID)] = header(l)
			}
		}
		_, before := run(t, kept, nil, pipeline.Expectation{})
		if before.Network == nil || *before.Network == "mixed" || *before.Network == "Socket" {
			continue
		}
		mut := append([]string{}, kept...)
		for _, h := range headers {
			mut = append(mut, h+"Failed to initialize NET plugin "+*before.Network)
		}
		_, after := run(t, mut, nil, pipeline.Expectation{})
		if after.Network != nil && *after.Network == *before.Network {
			t.Errorf("%s: network %s after every process failed to initialize it", name, *after.Network)
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d excerpts decided by device lists or plugin init", checked)
	}
	t.Logf("%d excerpts", checked)
}

// TestPropertyProcessOrder: grouping the lines by process (each process's
// lines in their order) changes no fact: a summary depends on what each
// process printed, not on how the processes' lines interleave.
func TestPropertyProcessOrder(t *testing.T) {
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		_, base := run(t, lines, nil, pipeline.Expectation{})
		var first []string
		var order []string
		byProc := map[string][]string{}
		for _, l := range lines {
			ev, ok := parse(l)
			if !ok || len(ev.PID) == 0 || ev.Kind == pipeline.EventTestRank {
				first = append(first, l)
				continue
			}
			k := string(ev.Host) + ":" + string(ev.PID)
			if _, seen := byProc[k]; !seen {
				order = append(order, k)
			}
			byProc[k] = append(byProc[k], l)
		}
		grouped := first
		for i := len(order) - 1; i >= 0; i-- { // reversed process order
			grouped = append(grouped, byProc[order[i]]...)
		}
		_, s := run(t, grouped, nil, pipeline.Expectation{})
		if facts(s) != facts(base) {
			t.Errorf("%s: facts with lines grouped by process = %s; as logged %s", name, facts(s), facts(base))
		}
	}
}

// firstNetConn returns the header of the first NET connection line of
// lines and its net name, or "".
func firstNetConn(lines []string) (head, net string) {
	for _, l := range lines {
		ev, ok := parse(l)
		if ok && ev.Kind == pipeline.EventConnection && ev.Transport == pipeline.TransportNet && header(l) != "" {
			return header(l), string(ev.Name)
		}
	}
	return "", ""
}

// TestPropertyGluedLinesAddNoNode: gluing two lines of a one-host log (the
// whole of the first, or its last bytes as a torn line leaves them) never
// makes multi_node true: a host read from a glued header is a tear of the
// real one, not a node (rule 6, node identity).
func TestPropertyGluedLinesAddNoNode(t *testing.T) {
	checked := 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		hosts := map[string]bool{}
		for _, l := range lines {
			if ev, ok := parse(l); ok && len(ev.Host) > 0 {
				hosts[string(ev.Host)] = true
			}
		}
		if len(hosts) != 1 {
			continue
		}
		_, before := run(t, lines, nil, pipeline.Expectation{})
		if before.MultiNode != nil && *before.MultiNode {
			continue
		}
		// At most about 24 glue points a file keep the test quick.
		step := max(1, (len(lines)-1)/24)
		for i := 0; i+1 < len(lines); i += step {
			a := lines[i]
			for _, head := range []string{a, a[max(0, len(a)-2):], a[max(0, len(a)-13):]} {
				glued := append(append(append([]string{}, lines[:i]...), head+lines[i+1]), lines[i+2:]...)
				comms, after := run(t, glued, nil, pipeline.Expectation{})
				if after.MultiNode != nil && *after.MultiNode {
					t.Errorf("%s: gluing %q to line %d gives multi_node true (hosts %v); the whole file gives %s",
						name, head, i+2, hostsOf(comms), show(before.MultiNode))
				}
				checked++
			}
		}
	}
	if checked < 200 {
		t.Fatalf("only %d glued variants", checked)
	}
	t.Logf("%d glued variants", checked)
}

// TestTornHostIsNoNode: a header whose host took the bytes of a torn line
// before it ("86gpu-dev-0342cf21", "nvlsPerRankSigpu-dev-0342cf21") is the
// real host's, while two real names that differ by a leading "a-" are two.
func TestTornHostIsNoNode(t *testing.T) {
	lines := []string{
		"gpu-dev-0342cf21:977:977 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>",
		"gpu-dev-0342cf21:978:978 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>",
		"86gpu-dev-0342cf21:977:1040 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
		"nvlsPerRankSigpu-dev-0342cf21:978:1041 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM",
		"gpu-dev-0342cf21:977:1040 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
	}
	comms, s := run(t, lines[:4], nil, pipeline.Expectation{})
	if s.MultiNode != nil && *s.MultiNode || len(hostsOf(comms)) != 1 {
		t.Errorf("torn hosts: multi_node %s, hosts %v; want not true, one host", show(s.MultiNode), hostsOf(comms))
	}
	if _, s := run(t, lines, nil, pipeline.Expectation{}); s.MultiNode == nil || *s.MultiNode {
		t.Errorf("torn hosts with nNodes 1: multi_node %s; want false", show(s.MultiNode))
	}
	two := []string{
		"node1:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
		"a-node1:11:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
	}
	if _, s := run(t, two, nil, pipeline.Expectation{}); s.MultiNode == nil || !*s.MultiNode {
		t.Errorf("node1 and a-node1: multi_node %s; want true", show(s.MultiNode))
	}
}

// hostsOf returns the hosts the summaries name.
func hostsOf(comms []pipeline.CommSummary) []string {
	var hs []string
	for _, c := range comms {
		for _, h := range c.Hosts {
			if !slices.Contains(hs, h) {
				hs = append(hs, h)
			}
		}
	}
	return hs
}

// TestPropertyOneHostProvesNodesOnlyByItsOwnLines states exactly when one
// host's lines alone (every line of every other host removed) make
// multi_node true: only by evidence a single host prints about the others —
// a printed nNodes > 1, a NET peer on the device of another local rank, a
// rank offset, an nccl-tests table naming several hosts — or because the
// one hostname is two nodes (two addresses on one interface, rule 6's node
// identity). Never by distinct hosts otherwise: a torn, glued or
// decorated line adds no node.
func TestPropertyOneHostProvesNodesOnlyByItsOwnLines(t *testing.T) {
	ownProof := map[string]bool{assemble.KindPrintedNNodes: true, assemble.KindSameGPUOverNet: true,
		assemble.KindRankOffset: true, assemble.KindTestDevices: true}
	checked, raised := 0, 0
	for _, name := range corpusFiles(t) {
		lines := readLines(t, name)
		hosts := map[string][]string{}
		for _, l := range lines {
			if ev, ok := parse(l); ok && len(ev.Host) > 0 {
				hosts[string(ev.Host)] = append(hosts[string(ev.Host)], l)
			}
		}
		for h, kept := range hosts {
			checked++
			_, s := run(t, kept, nil, pipeline.Expectation{})
			if s.MultiNode == nil || !*s.MultiNode {
				continue
			}
			raised++
			for _, e := range s.Evidence {
				if e.Field != "multi_node" || ownProof[e.Kind] {
					continue
				}
				if e.Kind == assemble.KindDistinctNodes && twoAddresses(kept) {
					continue
				}
				t.Errorf("%s: only host %s's lines give multi_node true by %s (%s)", name, h, e.Kind, e.Detail)
			}
		}
	}
	if checked < 100 || raised == 0 {
		t.Fatalf("%d host subsets, %d multi-node: too few to say anything", checked, raised)
	}
	t.Logf("%d host subsets, %d of them multi-node by their own lines", checked, raised)
}

// twoAddresses reports whether lines show two addresses on one interface.
func twoAddresses(lines []string) bool {
	ips := map[string]map[string]bool{}
	for _, l := range lines {
		ev, ok := parse(l)
		if !ok || len(ev.Iface) == 0 || len(ev.IP) == 0 {
			continue
		}
		if ips[string(ev.Iface)] == nil {
			ips[string(ev.Iface)] = map[string]bool{}
		}
		ips[string(ev.Iface)][string(ev.IP)] = true
		if len(ips[string(ev.Iface)]) > 1 {
			return true
		}
	}
	return false
}

// decorations are the forms of parsers.StripPrefix's table that carry no
// rank and no host of their own (a launcher's rank or host label is a fact,
// not a decoration): each as the text put before a line and after it.
var decorations = []struct{ name, pre, post string }{
	{"bracketed time", "[2026-04-28 14:14:49] ", ""},
	{"kubectl --timestamps", "2024-12-04T07:19:43.480123456Z ", ""},
	{"cloudwatch row", "  | 2024-12-04T07:19:43.480Z | ", ""},
	{"loki labels", `2024-12-04T07:19:43.480Z {pod="w-0", container="c"} `, ""},
	{"kibana time", "Dec 4, 2024 @ 07:19:43.480\t", ""},
	{"kubectl --prefix", "[pod/train-worker-0/pytorch] ", ""},
	{"ansi colour", "\x1b[36m", ""},
	{"pasted esc", "ESC[36m", ""},
	{"markdown quote", "> ", ""},
	{"ray tag without ip", "(RayTrainWorker pid=3704) ", ""},
	{"k9s pane", "\u2502 ", "      \u2502"},
	{"ray dedup", "", " [repeated 14x across cluster]"},
	{"kubectl prefix and timestamps", "[pod/w-1/c] 2024-12-04T07:19:43.480Z ", ""},
}

// decorate returns lines with decoration d on the lines pick selects.
func decorate(lines []string, d int, pick func(i int) bool) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l
		if pick(i) && strings.TrimSpace(l) != "" {
			out[i] = decorations[d].pre + l + decorations[d].post
		}
	}
	return out
}

// summaryKey is what a decoration must not change: the facts, the verdict,
// the fallback alert, the version and the warnings.
func summaryKey(s pipeline.JobSummary) string {
	return facts(s) + " " + string(s.Verdict) + " " + show(s.Fallback) + " " + show(s.NCCLVersion) + " " + show(s.Warns)
}

// TestPropertyDecorationsChangeNothing: every decoration form on every line
// of every corpus file leaves the summary as it was (CLASSIFICATION.md §0).
func TestPropertyDecorationsChangeNothing(t *testing.T) {
	files := corpusFiles(t)
	for _, name := range files {
		lines := readLines(t, name)
		_, base := run(t, lines, nil, pipeline.Expectation{})
		for d := range decorations {
			_, s := run(t, decorate(lines, d, func(int) bool { return true }), nil, pipeline.Expectation{})
			if got, want := summaryKey(s), summaryKey(base); got != want {
				t.Errorf("%s with %s on every line:\n got %s\nwant %s", name, decorations[d].name, got, want)
			}
		}
	}
	t.Logf("%d files × %d decorations", len(files), len(decorations))
}

// FuzzDecorations: a decoration on any subset of a corpus file's lines (a
// collector that decorates some rows, a paste that mixes two sources)
// leaves the summary as it was.
func FuzzDecorations(f *testing.F) {
	files := corpusFiles(f)
	for i := range 8 {
		f.Add(uint(i*19), uint(i), uint64(0x9e3779b97f4a7c15)*uint64(i+1))
	}
	f.Fuzz(func(t *testing.T, file, d uint, mask uint64) {
		name := files[file%uint(len(files))]
		lines := readLines(t, name)
		dec := int(d % uint(len(decorations)))
		_, base := run(t, lines, nil, pipeline.Expectation{})
		_, s := run(t, decorate(lines, dec, func(i int) bool { return mask>>(uint(i)%64)&1 == 1 }), nil, pipeline.Expectation{})
		if got, want := summaryKey(s), summaryKey(base); got != want {
			t.Errorf("%s with %s on lines of mask %#x:\n got %s\nwant %s", name, decorations[dec].name, mask, got, want)
		}
	})
}

// TestRankOffsetNeedsOneCommunicator: two processes that each hold a rank 1
// (two 2-rank communicators of Ray actors that see their own GPU as cudaDev
// 0; corpus 283 without its first line) are no rank offset: rank numbers of
// different communicators say nothing about each other.
func TestRankOffsetNeedsOneCommunicator(t *testing.T) {
	lines := readLines(t, "283_alpa_ray_gpuhost_pid_prefix_two_2rank_comms_one_host_p2p_ipc.log")[1:]
	_, s := run(t, lines, nil, pipeline.Expectation{})
	if s.MultiNode != nil && *s.MultiNode {
		t.Errorf("multi_node true (%v); want not true: both rank 1s are on one host", s.Evidence)
	}
}
