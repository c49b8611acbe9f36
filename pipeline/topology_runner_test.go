package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// Through the runner: a job whose records come from Kubernetes nodes in
// two zones of an inventory is stored with its topology and the span
// reason, and keeps them in the final summary stored when a new job pushes
// it out of the assembler (assembler.max_jobs).
func TestRunnerTopology(t *testing.T) {
	invPath := filepath.Join(t.TempDir(), "nodes.yaml")
	if err := os.WriteFile(invPath, []byte(
		"- {node: cosmos-hpc-100a45, pool: a100-ib, zone: z-a, rdma_capable: true}\n"+
			"- {node: cosmos-hpc-100a55, pool: a100-ib, zone: z-b, rdma_capable: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := pipeline.LoadInventory(invPath)
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	h := newHarness(t, sink, nil)
	// The harness' runner, with an inventory and room for one job.
	cfg := pipeline.DefaultRunnerConfig()
	cfg.Assembler.MaxJobs = 1
	h.r = pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory, NewDecoder: h.decoder,
		Classifier: h.cls, Candidate: h.cand, Committer: h.commit, Metrics: h.m, Logger: zerolog.Nop(),
		Now: func() time.Time { return h.now }, Sink: sink, Loader: sink, Inventory: inv})
	// Corpus 234: IB with GDR across cosmos-hpc-100a45 and -100a55; each
	// line's Kubernetes node is the host that printed it.
	b, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", "234_ib_gdrdma_send_only_p2p_ipc_read_connected_all_rings_2host_busid.log"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		host, _, _ := strings.Cut(line, ":")
		h.send(t, 0, "llm-span", fluentBit(t, line, "llm-span", "w-"+host, host))
	}
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.send(t, 0, "other", fluentBit(t, "h:1:1 [0] NCCL INFO Using network IB", "other", "other-0", "n9"))
	if err := h.r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	const reason = "RDMA job spans 2 zones (z-a, z-b); pool a100-ib keeps it within one zone"
	var stored int
	for _, j := range sink.jobs {
		if j.Job != "llm-span" {
			continue
		}
		stored++
		if j.Topology == nil || j.Topology.Crosses != pipeline.LevelZone || strings.Join(j.Topology.Zones, ",") != "z-a,z-b" {
			t.Errorf("summary %d of llm-span: topology %+v; want zones z-a, z-b crossed", stored, j.Topology)
		}
		if !strings.Contains(strings.Join(j.Reasons, "|"), reason) {
			t.Errorf("summary %d of llm-span: reasons %q lack %q", stored, j.Reasons, reason)
		}
	}
	if stored < 2 {
		t.Errorf("llm-span stored %d times; want its summary and its final one when pushed out", stored)
	}
}
