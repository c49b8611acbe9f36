package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
	if !strings.Contains(out.String(), "silent socket fallback in: llm-13b-socket") {
		t.Errorf("demo output does not say which job fell back:\n%s", out.String())
	}
}
