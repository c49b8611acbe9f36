package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestScanMNNVLIsNotIntraNode checks that P2P/MNNVL connections (NCCL ≥ 2.20,
// GPUs of a multi-node NVLink domain, possibly on other nodes) do not count
// as intra-node evidence, while P2P/indirect (2.8+, relayed through another
// GPU of the node) does. Line formats: testdata/nccl-formats/census.tsv.
func TestScanMNNVLIsNotIntraNode(t *testing.T) {
	const head = "NCCL version 2.27.5+cuda12.9\n"
	for _, c := range []struct {
		name, conn string
		want       any // summary.multi_node
	}{
		{"mnnvl", "gb200-a:41:41 [0] NCCL INFO Channel 00/1 : 0[0] -> 4[0] via P2P/MNNVL/read\n", nil},
		{"indirect", "gb200-a:41:41 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/indirect/2[2]\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := head + "gb200-a:41:41 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>\n" + c.conn
			var out, errOut bytes.Buffer
			runScan([]string{"--no-progress", "--json", "-"}, strings.NewReader(in), &out, &errOut)
			var doc struct {
				Summary map[string]any `json:"summary"`
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatalf("scan --json: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
			}
			if got := doc.Summary["multi_node"]; got != c.want {
				t.Errorf("multi_node = %v; want %v (summary %v)", got, c.want, doc.Summary)
			}
		})
	}
}
