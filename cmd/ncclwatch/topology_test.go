package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// topologyScanInput writes corpus 234 (IB with GDR across the hosts
// cosmos-hpc-100a45 and cosmos-hpc-100a55) as Fluent Bit records whose
// Kubernetes node is the host that printed each line (the envelope is
// made here, the lines are the corpus'), and a hand-made inventory that
// places the two nodes in zones zoneA and zoneB.
func topologyScanInput(t *testing.T, zoneA, zoneB string) (log, inv string) {
	t.Helper()
	b, err := os.ReadFile(corpusPath("234_ib_gdrdma_send_only_p2p_ipc_read_connected_all_rings_2host_busid.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		host, _, _ := strings.Cut(line, ":")
		rec, err := json.Marshal(map[string]any{"log": line + "\n",
			"kubernetes": map[string]string{"host": host, "pod_name": "trainer-" + host, "namespace_name": "ml"}})
		if err != nil {
			t.Fatal(err)
		}
		out.Write(rec)
		out.WriteByte('\n')
	}
	dir := t.TempDir()
	log, inv = filepath.Join(dir, "job.jsonl"), filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(log, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	y := "- {node: cosmos-hpc-100a45, pool: a100-ib, region: r1, zone: " + zoneA + ", rdma_capable: true}\n" +
		"- {node: cosmos-hpc-100a55, pool: a100-ib, region: r1, zone: " + zoneB + ", rdma_capable: true}\n"
	if err := os.WriteFile(inv, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return log, inv
}

// A job across two zones is named as such in scan --json (topology and a
// reason, verdict unchanged) and by the built-in NCCLJobSpansZones alert;
// its twin in one zone is not.
func TestScanTopology(t *testing.T) {
	for _, c := range []struct {
		name, zoneB string
		crosses     string
		zones       []string
		alert       bool
	}{
		{"two zones", "z-b", pipeline.LevelZone, []string{"z-a", "z-b"}, true},
		{"one zone", "z-a", "", []string{"z-a"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			log, inv := topologyScanInput(t, "z-a", c.zoneB)
			var out, errOut bytes.Buffer
			code := runScan([]string{"--no-progress", "--json", "--inventory", inv, "--rules", "builtin", log},
				strings.NewReader(""), &out, &errOut)
			var doc struct {
				Summary pipeline.JobSummary `json:"summary"`
				Alerts  []pipeline.Alert    `json:"alerts"`
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatalf("scan: %v\n%s%s", err, out.String(), errOut.String())
			}
			s := doc.Summary
			if s.Verdict != pipeline.VerdictOK || s.NetworkClass == nil || *s.NetworkClass != pipeline.ClassRDMA {
				t.Errorf("verdict %s, class %v; want ok on rdma", s.Verdict, s.NetworkClass)
			}
			tp := s.Topology
			if tp == nil {
				t.Fatalf("no topology in %s", out.String())
			}
			if tp.Nodes != 2 || tp.Crosses != c.crosses || !slices.Equal(tp.Zones, c.zones) || tp.Within != pipeline.LevelZone {
				t.Errorf("topology %+v; want 2 nodes, crosses %q, zones %v, within zone", *tp, c.crosses, c.zones)
			}
			reason := "RDMA job spans 2 zones (z-a, z-b); pool a100-ib keeps it within one zone"
			if slices.Contains(s.Reasons, reason) != c.alert {
				t.Errorf("reasons %q; want %q: %v", s.Reasons, reason, c.alert)
			}
			fired := slices.ContainsFunc(doc.Alerts, func(a pipeline.Alert) bool { return a.Rule == "NCCLJobSpansZones" })
			if fired != c.alert {
				t.Errorf("NCCLJobSpansZones fired %v; want %v (alerts %+v)", fired, c.alert, doc.Alerts)
			}
			// An alert is a finding; the verdict alone is ok.
			want := exitOK
			if len(doc.Alerts) > 0 {
				want = exitFinding
			}
			if code != want {
				t.Errorf("exit %d; want %d", code, want)
			}
		})
	}
}
