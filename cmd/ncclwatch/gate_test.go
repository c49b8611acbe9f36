package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestFabricGateScript runs deploy/kubernetes/fabric-gate/fabric-gate.sh
// against the read API (live state, bearer token) with a kubectl on PATH
// that records its arguments.
func TestFabricGateScript(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	script, err := filepath.Abs("../../deploy/kubernetes/fabric-gate/fabric-gate.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubectlLog := filepath.Join(dir, "kubectl.log")
	fake := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + kubectlLog + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("gate-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live := newLiveJobs(10)
	live.observe([]pipeline.JobSummary{
		{Namespace: "research", Job: "llm-13b", Verdict: pipeline.VerdictSocketFallback, Version: 5},
		{Namespace: "research", Job: "llm-70b", Verdict: pipeline.VerdictOK, Version: 5},
		{Namespace: "research", Job: "bert", Verdict: pipeline.VerdictGDROff, Version: 5},
	})
	api, err := newJobsAPI(live, nil, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		job, action string
		wantCode    int
		wantKubectl string
	}{
		{"llm-13b", "delete", 1, "-n research annotate --overwrite job llm-13b ncclwatch.io/verdict=socket_fallback\n-n research delete job llm-13b --wait=false\n"},
		{"llm-13b", "suspend", 1, "-n research annotate --overwrite job llm-13b ncclwatch.io/verdict=socket_fallback\n" +
			`-n research patch job llm-13b --type=merge -p {"spec":{"suspend":true}}` + "\n"},
		{"llm-70b", "delete", 0, ""},
		{"bert", "delete", 0, ""},    // gdr_off is not in GATE_FAIL by default
		{"missing", "delete", 0, ""}, // no verdict: no evidence, passes
	} {
		os.Remove(kubectlLog)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "sh", script, "research", tc.job)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "NCCLWATCH_URL="+srv.URL,
			"NCCLWATCH_TOKEN_FILE="+tokenFile, "GATE_AFTER=1", "GATE_INTERVAL=0.2", "GATE_ACTION="+tc.action)
		out, err := cmd.CombinedOutput()
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", tc.job, err)
		}
		got, _ := os.ReadFile(kubectlLog)
		if code != tc.wantCode || string(got) != tc.wantKubectl {
			t.Errorf("fabric-gate.sh research %s (%s) = exit %d, kubectl:\n%s\nwant exit %d, kubectl:\n%s\noutput:\n%s",
				tc.job, tc.action, code, got, tc.wantCode, tc.wantKubectl, out)
		}
		if tc.job == "llm-70b" && !strings.Contains(string(out), "is on the fabric") {
			t.Errorf("llm-70b: output %q does not say it passed", out)
		}
	}
}
