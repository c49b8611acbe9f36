package assemble_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// golden is what testdata/golden/<excerpt>.json holds: the job summary with
// its reasons and evidence, and each communicator's decided fields.
type golden struct {
	Summary       pipeline.JobSummary `json:"summary"`
	Communicators []goldenComm        `json:"communicators"`
}

type goldenComm struct {
	CommID       string           `json:"comm_id"`
	Network      *string          `json:"network"`
	NetworkClass string           `json:"network_class"`
	GDR          *bool            `json:"gdr"`
	MultiNode    *bool            `json:"multi_node"`
	NNodes       *int             `json:"nnodes"`
	NRanks       *int             `json:"nranks"`
	Verdict      pipeline.Verdict `json:"verdict"`
	Reasons      []string         `json:"reasons"`
}

// TestGolden pins the full decision (values, reasons, evidence) for every
// corpus excerpt; `go test ./pipeline/assemble -update` rewrites the files
// after a deliberate change, and the diff shows what changed.
func TestGolden(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range corpusFiles(t) {
		comms, sum := run(t, readLines(t, name), nil, pipeline.Expectation{})
		g := golden{Summary: sum, Communicators: []goldenComm{}}
		for _, c := range comms {
			g.Communicators = append(g.Communicators, goldenComm{CommID: c.CommID, Network: c.Network,
				NetworkClass: c.NetworkClass, GDR: c.GDR, MultiNode: c.MultiNode, NNodes: c.NNodes, NRanks: c.NRanks,
				Verdict: c.Verdict, Reasons: c.Reasons})
		}
		got, err := json.MarshalIndent(g, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join(dir, strings.TrimSuffix(name, ".log")+".json")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run go test ./pipeline/assemble -update)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the decision differs from %s (run go test ./pipeline/assemble -update and read the diff):\n%s", name, path, firstDiff(string(got), string(want)))
		}
	}
}

// firstDiff shows the first differing line of two texts.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + itoa(i+1) + ": got  " + gl + "\n         want " + wl
		}
	}
	return ""
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
