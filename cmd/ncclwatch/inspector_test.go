package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestScanInspectorDumpDir: scan reads an NCCL Inspector dump directory
// (one file per process, records read raw: no envelope) as one input and
// reports each communicator's collective in the collectives section. The
// expected figures are the records' (testdata/inspector/derive.py).
func TestScanInspectorDumpDir(t *testing.T) {
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "inspector", "derived_*.log"))
	if err != nil || len(files) != 4 {
		t.Fatalf("derived records: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if rc := runScan([]string{"--json", dir}, nil, &out, &errb); rc != 0 {
		t.Fatalf("scan = %d: %s", rc, errb.String())
	}
	var res struct {
		Collectives []pipeline.CollectiveReport `json:"collectives"`
		Input       scanInput                   `json:"input"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Input.Malformed != 0 || !slices.Equal(res.Input.Files, []string{dir}) {
		t.Errorf("input = %+v; want the directory, no malformed record", res.Input)
	}
	var got []string
	for _, c := range res.Collectives {
		name := "-"
		if c.CommName != nil {
			name = *c.CommName
		}
		p50 := "-"
		if c.LargeBusBWP50 != nil {
			p50 = fmt.Sprint(*c.LargeBusBWP50)
		}
		got = append(got, fmt.Sprintf("%s %s %s p2p=%v records=%d max=%d large=%d p50=%s", c.CommID, name, c.Op, c.P2P,
			c.Records, c.MaxBytes, c.LargeRecords, p50))
	}
	// In name order of the files: 2.28 plain (AllReduce, ReduceScatter,
	// AllGather of 0 bytes and busbw "nan"), 2.28 verbose (AllReduce
	// 1 GiB), 2.30 plain (AllReduce "DP Group 0", Send), 2.30 verbose
	// (Recv, AllGather 128 MiB).
	want := []string{
		"0x4f2a9c31d07e15 DP Group 0 AllReduce p2p=false records=3 max=1073741824 large=3 p50=265.883376",
		"0x4f2a9c31d07e15 - ReduceScatter p2p=false records=1 max=33554432 large=0 p50=-",
		"0x4f2a9c31d07e15 DP Group 0 AllGather p2p=false records=2 max=134217728 large=1 p50=123.240321",
		"0x1c9e07d3b2a4f8 unknown Send p2p=true records=1 max=536870912 large=1 p50=465.225126",
		"0x1c9e07d3b2a4f8 PP Group 1 Recv p2p=true records=1 max=536870912 large=1 p50=458.86312",
	}
	if !slices.Equal(got, want) {
		t.Errorf("collectives =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestInspectorIDIsInitCommID: the Inspector's header.id is the commHash
// NCCL prints as "commId 0x%llx" on its init lines (docs/inspector.md
// cites the source), so a record of a communicator names the comm_id the
// assembler gives that communicator: here corpus 085's init (NCCL 2.16.5,
// commId 0xb2f794396f6d0bd1) and a record written as the plugin formats
// the same hash ("0x%lx").
func TestInspectorIDIsInitCommID(t *testing.T) {
	dir := t.TempDir()
	init, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", "085_ib_roce_gdr_level_sys_trace_2node_topology_nccl2.16.5.log"))
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"header":{"id":"0xb2f794396f6d0bd1","rank":0,"n_ranks":2,"nnodes":2},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1767225600000000,"hostname":"n013","pid":4000},"coll_perf":{"coll":"AllReduce","coll_sn":1,"coll_msg_size_bytes":268435456,"coll_exec_time_us":6700,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":40.064000,"coll_busbw_gbs":40.064000}}`
	log := filepath.Join(dir, "job.log")
	if err := os.WriteFile(log, append(append(init, '\n'), rec+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	runScan([]string{"--json", log}, nil, &out, &errb)
	var res struct {
		Communicators []pipeline.CommSummary      `json:"communicators"`
		Collectives   []pipeline.CollectiveReport `json:"collectives"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	if len(res.Collectives) != 1 {
		t.Fatalf("collectives = %+v; want one", res.Collectives)
	}
	var ids []string
	for _, c := range res.Communicators {
		ids = append(ids, c.CommID)
	}
	if !slices.Contains(ids, res.Collectives[0].CommID) {
		t.Errorf("collective comm_id %s is none of the communicators' %v", res.Collectives[0].CommID, ids)
	}
}
