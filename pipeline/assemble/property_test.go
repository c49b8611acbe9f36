package assemble_test

import (
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
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
