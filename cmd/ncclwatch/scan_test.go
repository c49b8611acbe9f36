package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func corpusPath(name string) string { return filepath.Join("..", "..", "testdata", "corpus", name) }

// TestScanExitStatus checks the documented exit statuses scripts rely on.
func TestScanExitStatus(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inv.yaml")
	if err := os.WriteFile(inv, []byte("- {node: tcp-node-1, pool: cpu-net, rdma_capable: false}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fb := filepath.Join(t.TempDir(), "fb.jsonl")
	if err := os.WriteFile(fb, []byte(`{"log":"ubuntu:1:1 [0] NCCL INFO NET/IB : No device found.\n","kubernetes":{"host":"tcp-node-1","pod_name":"p"}}
{"log":"ubuntu:1:1 [0] NCCL INFO Using network Socket\n","kubernetes":{"host":"tcp-node-1","pod_name":"p"}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"fallback", []string{corpusPath(fallbackFile)}, exitFinding},
		{"healthy ib", []string{corpusPath("083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log")}, exitOK},
		{"gdr off", []string{corpusPath("063_roce_gdr_disabled_for_hca_gdr_level_sys.log")}, exitFinding},
		{"gdr off not expected", []string{"--no-gdr-expected", corpusPath("063_roce_gdr_disabled_for_hca_gdr_level_sys.log")}, exitOK},
		{"tcp pool", []string{"--expect", "tcp", corpusPath(fallbackFile)}, exitOK},
		{"inventory says tcp", []string{"--inventory", inv, fb}, exitOK},
		{"without inventory", []string{fb}, exitFinding},
		{"no nccl evidence", []string{filepath.Join("..", "..", "README.md")}, exitOK},
		{"missing file", []string{"/nonexistent/x.log"}, exitUsage},
		{"bad flag", []string{"--nope"}, exitUsage},
		{"bad expect", []string{"--expect", "infiniband", corpusPath(fallbackFile)}, exitUsage},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := runScan(append([]string{"--no-progress"}, c.args...), strings.NewReader(""), &out, &errOut); got != c.want {
				t.Fatalf("scan %v = %d; want %d\nstdout: %s\nstderr: %s", c.args, got, c.want, out.String(), errOut.String())
			}
		})
	}
}

const fallbackFile = "022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log"

// TestScanJSONContract checks the documented summary fields exist with the
// documented types, reading stdin.
func TestScanJSONContract(t *testing.T) {
	in, err := os.ReadFile(corpusPath(fallbackFile))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := runScan([]string{"--json", "-"}, bytes.NewReader(in), &out, &errOut); code != exitFinding {
		t.Fatalf("exit %d; stderr %s", code, errOut.String())
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"communicators", "summary", "input"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("document lacks %q", k)
		}
	}
	var sum map[string]any
	if err := json.Unmarshal(doc["summary"], &sum); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nccl_version": "string", "version_skew": "bool", "network": "string", "network_class": "string",
		"fabric": "null", "gdr": "null", "multi_node": "bool", "nnodes": "null", "nranks": "null", "intra": "array",
		"fallback": "bool", "warns": "number", "verdict": "string"}
	for k, typ := range want {
		v, ok := sum[k]
		if !ok {
			t.Errorf("summary lacks %q", k)
			continue
		}
		got := "null"
		switch v.(type) {
		case string:
			got = "string"
		case bool:
			got = "bool"
		case float64:
			got = "number"
		case []any:
			got = "array"
		}
		if got != typ {
			t.Errorf("summary.%s is %s (%v); want %s", k, got, v, typ)
		}
	}
	if sum["network"] != "Socket" || sum["fallback"] != true || sum["verdict"] != "socket_fallback" || sum["nccl_version"] != "2.18.3" {
		t.Errorf("summary = %v", sum)
	}
}

// TestScanTablePrintsTelemetry checks the human-readable report shows the
// nccl-tests and training figures found.
func TestScanTablePrintsTelemetry(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "telemetry")
	var out, errOut bytes.Buffer
	runScan([]string{"--no-progress", filepath.Join(dir, "017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log"),
		filepath.Join(dir, "026_megatron_core_moe_ep8_throughput_params_norm_warnings_interleaved_a100.log")},
		strings.NewReader(""), &out, &errOut)
	for _, want := range []string{"nccl-tests all_reduce_perf: 16 ranks on 2 hosts", "avg bus bandwidth 220.921 GB/s",
		"training megatron: 5 step lines (steps 20 to 100)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("scan output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestScanDenseStretch scans trainer output in which almost every line
// holds a telemetry token, so the block scanner hands on every line after
// its sample (pipeline.BlockScanner's dense stretch): every step is read,
// and lines without a token count as malformed or oversized no more than
// where the finder searched them (never), while those with one do; with
// telemetry off the same input has few candidates and nothing changes.
func TestScanDenseStretch(t *testing.T) {
	var in strings.Builder
	lines, steps, wantMalformed, wantOver, long := 0, 0, 0, 0, 0
	for i := range 3000 {
		switch {
		case i%97 == 0:
			in.WriteString(`{"step": 1, "note": "cut`) // JSON-looking, unreadable, no token
		case i%211 == 0:
			in.WriteString(`{"log": "host:1:1 [0] NCCL INFO cut`) // unreadable, with a token
			wantMalformed++
		case i%503 == 0:
			in.WriteString(strings.Repeat("x", 300)) // over the cap, no token
			long++
		case i%701 == 0:
			in.WriteString("NCCL " + strings.Repeat("y", 300)) // over the cap, with a token
			wantOver++
			long++
		default:
			fmt.Fprintf(&in, "{'loss': %d.25, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}", i)
			steps++
		}
		in.WriteByte('\n')
		lines++
	}
	type result struct {
		Input struct {
			Candidates int64 `json:"candidate_lines"`
			Oversized  int64 `json:"oversized_lines"`
			Malformed  int64 `json:"malformed_records"`
		} `json:"input"`
		Training []struct {
			Steps int `json:"steps"`
		} `json:"training"`
	}
	for _, tel := range []string{"on", "off"} {
		var out, errOut bytes.Buffer
		runScan([]string{"--json", "--no-progress", "--telemetry", tel, "--max-line-bytes", "200", "-"},
			strings.NewReader(in.String()), &out, &errOut)
		var res result
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("telemetry %s: %v; stderr %s", tel, err, errOut.String())
		}
		if res.Input.Malformed != int64(wantMalformed) || res.Input.Oversized != int64(wantOver) {
			t.Errorf("telemetry %s: %d malformed, %d oversized; want %d, %d", tel,
				res.Input.Malformed, res.Input.Oversized, wantMalformed, wantOver)
		}
		if tel == "off" {
			continue
		}
		if len(res.Training) != 1 || res.Training[0].Steps != steps {
			t.Errorf("training %+v; want one series of %d steps", res.Training, steps)
		}
		// The dense stretch hands on every line under the cap.
		if res.Input.Candidates <= int64(steps) || res.Input.Candidates > int64(lines-long) {
			t.Errorf("%d candidate lines; want more than the %d step lines (a dense stretch), at most %d", res.Input.Candidates, steps, lines-long)
		}
	}
}

// TestScanDenseStretchJSONEscapes: in a dense stretch of JSON records, a
// record whose text holds a token only once its escapes are undone
// ("TFLOP\/s"; the MaxText line is cut before its loss, itself a token)
// is passed over, as the finder, searching the records'
// bytes, passes over it where it searches; the same record unescaped is
// read.
func TestScanDenseStretchJSONEscapes(t *testing.T) {
	for _, c := range []struct {
		slash   string
		maxtext int
	}{{`\/`, 0}, {`/`, 39}} {
		var in strings.Builder
		for i := range 600 {
			fmt.Fprintf(&in, `{"date": 1700000000.5, "log": "{'loss': %d.25, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}\n", "stream": "stdout"}`+"\n", i)
		}
		for i := 1; i <= 39; i++ {
			fmt.Fprintf(&in, `{"date": 1700000000.5, "log": "I0811 21:55:16.704861 1 metric_logger.py:226] completed step: %d, seconds: 10.344, TFLOP%ss%sdevice: 346.932\n", "stream": "stdout"}`+"\n", i, c.slash, c.slash)
		}
		var out, errOut bytes.Buffer
		runScan([]string{"--json", "--no-progress", "--telemetry", "on", "-"}, strings.NewReader(in.String()), &out, &errOut)
		var res struct {
			Input struct {
				Candidates int `json:"candidate_lines"`
			} `json:"input"`
			Training []struct {
				Framework string `json:"framework"`
				Steps     int    `json:"steps"`
			} `json:"training"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v; stderr %s", err, errOut.String())
		}
		got := map[string]int{}
		for _, tr := range res.Training {
			got[tr.Framework] = tr.Steps
		}
		if got["hf_trainer"] != 600 || got["maxtext"] != c.maxtext || res.Input.Candidates != 639 {
			t.Errorf("TFLOP%ss: series %v, %d candidate lines; want 600 Hugging Face steps, %d MaxText steps, 639 lines handed on (a dense stretch)",
				c.slash, got, res.Input.Candidates, c.maxtext)
		}
	}
}
