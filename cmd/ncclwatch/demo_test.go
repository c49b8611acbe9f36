package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestDemo runs `ncclwatch demo` end to end on its in-process broker with
// the JSON-lines sink and checks every bundled job's verdict.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := demo(ctx, &out, &errOut, demoOptions{out: dir, listen: "127.0.0.1:0", timeout: 60 * time.Second}); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	want := map[string]pipeline.Verdict{
		"llm-70b-ib": pipeline.VerdictOK, "llm-13b-socket": pipeline.VerdictSocketFallback,
		"bert-roce-gdr-off": pipeline.VerdictGDROff, "nvls-single-node": pipeline.VerdictOK, "efa-p4d": pipeline.VerdictOK,
	}
	f, err := os.Open(filepath.Join(dir, "job_summaries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	latest := map[string]pipeline.JobSummary{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var j pipeline.JobSummary
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			t.Fatal(err)
		}
		if old, ok := latest[j.Job]; !ok || j.Version >= old.Version {
			latest[j.Job] = j
		}
	}
	for job, v := range want {
		if got := latest[job].Verdict; got != v {
			t.Errorf("job %s verdict = %q; want %q", job, got, v)
		}
		if !strings.Contains(out.String(), job) {
			t.Errorf("demo output does not mention %s:\n%s", job, out.String())
		}
	}
	if !strings.Contains(out.String(), "NCCLSocketFallback   llm-13b-socket") {
		t.Errorf("demo output does not show the fallback alert:\n%s", out.String())
	}
	// The cost: medians of the bundled trainer lines, computed here from
	// nanoGPT's "time X ms" fields independently of the telemetry parser.
	for _, c := range []struct{ job, file string }{
		{"llm-13b-socket", "demo/llm-13b-socket.steps.log"}, {"llm-70b-ib", "demo/llm-70b-ib.steps.log"},
	} {
		want := fmt.Sprintf("median step %.3f s (nanogpt)", nanoGPTMedian(t, c.file))
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q for %s:\n%s", want, c.job, out.String())
		}
	}
	ratio := nanoGPTMedian(t, "demo/llm-13b-socket.steps.log") / nanoGPTMedian(t, "demo/llm-70b-ib.steps.log")
	if want := fmt.Sprintf("ratio %.2fx: llm-13b-socket takes", ratio); !strings.Contains(out.String(), want) {
		t.Errorf("demo output lacks %q:\n%s", want, out.String())
	}
	// The checkpoint beside the step time: nanoGPT's "saving checkpoint to
	// out" lines of the bundled trainer excerpt, counted here by hand.
	for _, c := range []struct{ job, file string }{
		{"llm-13b-socket", "demo/llm-13b-socket.steps.log"}, {"llm-70b-ib", "demo/llm-70b-ib.steps.log"},
	} {
		raw, err := demoFS.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(string(raw), "saving checkpoint to out\n")
		line := fmt.Sprintf("%-16s checkpoints: ", c.job)
		switch {
		case n == 0 && strings.Contains(out.String(), line):
			t.Errorf("demo output shows checkpoints for %s, whose trainer lines save none:\n%s", c.job, out.String())
		case n > 0 && !strings.Contains(out.String(), fmt.Sprintf("%s%d save(s) to out (nanogpt), no save duration printed", line, n)):
			t.Errorf("demo output lacks %s's %d checkpoint save(s):\n%s", c.job, n, out.String())
		}
	}
	// The live bus bandwidth beside the verdict: the median of the 64
	// bundled records' busbw (demo/llm-70b-ib.inspector.log), 181.6 GB/s.
	if want := "llm-70b-ib       ok               IB (rdma) gdr yes  AllReduce: median busbw 181.6 GB/s over 64 records"; !strings.Contains(out.String(), want) {
		t.Errorf("demo output lacks %q:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "silent socket fallback in: llm-13b-socket") {
		t.Errorf("demo output does not say which job fell back:\n%s", out.String())
	}
}

// nanoGPTMedian is the median of the "time X ms" fields of nanoGPT's iter
// lines in file, in seconds.
func nanoGPTMedian(t *testing.T, file string) float64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var times []float64
	for _, line := range strings.Split(string(b), "\n") {
		_, after, ok := strings.Cut(line, ", time ")
		if !ok || !strings.Contains(line, "iter ") {
			continue
		}
		ms, _, _ := strings.Cut(after, "ms")
		v, err := strconv.ParseFloat(ms, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", file, line, err)
		}
		times = append(times, v/1000)
	}
	if len(times) == 0 {
		t.Fatalf("%s: no iter lines", file)
	}
	sort.Float64s(times)
	if n := len(times); n%2 == 0 {
		return (times[n/2-1] + times[n/2]) / 2
	}
	return times[len(times)/2]
}
