package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// TestMain lets the test binary stand in for the ncclwatch binary, so guard
// runs as a process of its own that tests can signal.
func TestMain(m *testing.M) {
	if os.Getenv("NCCLWATCH_TEST_AS_BINARY") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const fakeLauncher = "../../testdata/guard/fake-launcher.sh"

// launcherStreams is what fake-launcher.sh prints for file: odd lines on
// stdout, even lines in red on stderr.
func launcherStreams(t *testing.T, file string) (stdout, stderr []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if i%2 == 0 {
			stdout = append(stdout, line...)
		} else {
			stderr = append(stderr, "\x1b[31m"...)
			stderr = append(stderr, bytes.TrimSuffix(line, []byte("\n"))...)
			stderr = append(stderr, "\x1b[0m\n"...)
		}
	}
	return stdout, stderr
}

// Bytes returns a copy of what was written (syncBuffer: integration_test.go).
func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// guardProc starts `ncclwatch guard FLAGS -- fake-launcher.sh FILE DELAY
// HOLD EXIT` as a process, bounded by a 60 s context.
type guardProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	start          time.Time
	cancel         context.CancelFunc
}

func startGuard(t *testing.T, flags []string, file string, delay string, hold, exit int, env ...string) *guardProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	args := append([]string{"guard"}, flags...)
	args = append(args, "--", fakeLauncher, file, delay, fmt.Sprint(hold), fmt.Sprint(exit))
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "NCCLWATCH_TEST_AS_BINARY=1"), env...)
	g := &guardProc{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel}
	cmd.Stdout, cmd.Stderr = g.stdout, g.stderr
	g.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return g
}

// wait returns guard's exit status and how long it ran.
func (g *guardProc) wait(t *testing.T) (int, time.Duration) {
	t.Helper()
	err := g.cmd.Wait()
	d := time.Since(g.start)
	if err == nil {
		return 0, d
	}
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("guard: %v", err)
	}
	return ee.ExitCode(), d
}

func corpusFile(t *testing.T, prefix string) string {
	t.Helper()
	m, err := filepath.Glob("../../testdata/corpus/" + prefix + "_*.log")
	if err != nil || len(m) != 1 {
		t.Fatalf("corpus file %s: %v %v", prefix, m, err)
	}
	return m[0]
}

// childStderr strips guard's own lines from the combined stderr, leaving
// the job's bytes.
func childStderr(b []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("ncclwatch guard: ")) {
			out = append(out, line...)
		}
	}
	return out
}

// A fallback log whose communicator prints Init COMPLETE: guard stops the
// job at once (it would otherwise hold for 60 s), long before --settle.
func TestGuardKillsFallbackAtInitComplete(t *testing.T) {
	file := corpusFile(t, "008") // 64-node Socket ring, one Init COMPLETE
	wantOut, wantErr := launcherStreams(t, file)
	g := startGuard(t, []string{"--settle", "30s", "--grace", "5s"}, file, "0.05", 60, 0)
	code, took := g.wait(t)
	if code != exitGuardStopped {
		t.Fatalf("guard exit = %d; want %d\nstderr:\n%s", code, exitGuardStopped, g.stderr.Bytes())
	}
	if took >= 30*time.Second {
		t.Errorf("guard took %s; want the job stopped before --settle 30s", took)
	}
	stderr := g.stderr.Bytes()
	for _, want := range []string{
		"verdict socket_fallback", "a communicator printed Init COMPLETE", "negotiated: network Socket (tcp)",
		"NCCL uses Socket across nodes", "check (NCCLSocketFallback): Check that the pods request the RDMA resource",
		"SIGTERM to process group", "job stopped after",
	} {
		if !bytes.Contains(stderr, []byte(want)) {
			t.Errorf("guard stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !bytes.Contains(g.stdout.Bytes(), []byte("fake-launcher: got SIGTERM")) {
		t.Errorf("the job did not see SIGTERM; stdout:\n%s", g.stdout.Bytes())
	}
	// What the job printed before it stopped came through unchanged.
	out := bytes.TrimSuffix(g.stdout.Bytes(), []byte("fake-launcher: got SIGTERM\n"))
	if !bytes.HasPrefix(wantOut, out) || len(out) == 0 {
		t.Errorf("stdout is not a prefix of the job's:\n%q\nwant prefix of\n%q", out, wantOut)
	}
	// dash reports the `sleep` SIGTERM ended on its stderr.
	ce := bytes.TrimSuffix(childStderr(stderr), []byte("Terminated\n"))
	if !bytes.HasPrefix(wantErr, ce) || len(ce) == 0 {
		t.Errorf("job stderr is not a prefix of the job's:\n%q\nwant prefix of\n%q", ce, wantErr)
	}
}

// A fallback log without Init COMPLETE (NCCL 2.26.2, 16 ranks on Socket):
// guard decides --settle after the first NCCL line.
func TestGuardKillsFallbackAfterSettle(t *testing.T) {
	file := corpusFile(t, "107")
	g := startGuard(t, []string{"--settle", "1s", "--grace", "5s", "--no-nccl-debug"}, file, "0.01", 60, 0)
	code, took := g.wait(t)
	if code != exitGuardStopped {
		t.Fatalf("guard exit = %d; want %d\nstderr:\n%s", code, exitGuardStopped, g.stderr.Bytes())
	}
	if took >= 60*time.Second {
		t.Errorf("guard took %s; the job was not stopped", took)
	}
	stderr := g.stderr.Bytes()
	for _, want := range []string{"verdict socket_fallback", "--settle 1s passed since the first NCCL line", "NCCL 2.26.2", "16 ranks"} {
		if !bytes.Contains(stderr, []byte(want)) {
			t.Errorf("guard stderr lacks %q:\n%s", want, stderr)
		}
	}
	if bytes.Contains(stderr, []byte("NCCL_DEBUG was not set")) {
		t.Errorf("--no-nccl-debug: guard still set NCCL_DEBUG:\n%s", stderr)
	}
}

// A job that ignores SIGTERM gets SIGKILL after --grace.
func TestGuardKillsAfterGrace(t *testing.T) {
	file := corpusFile(t, "008")
	g := startGuard(t, []string{"--settle", "30s", "--grace", "1s"}, file, "0.01", 60, 0, "FAKE_IGNORE_TERM=1")
	code, took := g.wait(t)
	if code != exitGuardStopped {
		t.Fatalf("guard exit = %d; want %d\nstderr:\n%s", code, exitGuardStopped, g.stderr.Bytes())
	}
	if took >= 30*time.Second {
		t.Errorf("guard took %s; want the job killed after --grace 1s", took)
	}
	if !bytes.Contains(g.stderr.Bytes(), []byte("job still running 1s after SIGTERM; sending SIGKILL to process group")) {
		t.Errorf("guard stderr lacks the SIGKILL notice:\n%s", g.stderr.Bytes())
	}
}

// A healthy IB log: the job runs to its own end, its exit status comes
// back, and both streams arrive byte for byte, colours included.
func TestGuardHealthyJobRunsToItsEnd(t *testing.T) {
	file := corpusFile(t, "083") // IB with GDRDMA, 2 nodes, 16 ranks
	wantOut, wantErr := launcherStreams(t, file)
	g := startGuard(t, []string{"--settle", "500ms"}, file, "0.01", 2, 7)
	code, _ := g.wait(t)
	if code != 7 {
		t.Fatalf("guard exit = %d; want the job's 7\nstderr:\n%s", code, g.stderr.Bytes())
	}
	if got := g.stdout.Bytes(); !bytes.Equal(got, wantOut) {
		t.Errorf("stdout = %q; want %q", got, wantOut)
	}
	stderr := g.stderr.Bytes()
	if got := childStderr(stderr); !bytes.Equal(got, wantErr) {
		t.Errorf("job stderr = %q; want %q", got, wantErr)
	}
	if bytes.Contains(stderr, []byte("verdict")) {
		t.Errorf("guard printed a verdict block for a healthy job:\n%s", stderr)
	}
	if !bytes.Contains(stderr, []byte("NCCL_DEBUG was not set; running the job with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV")) {
		t.Errorf("guard did not say it set NCCL_DEBUG:\n%s", stderr)
	}
}

// --on-fallback warn prints the block and lets the job finish.
func TestGuardWarnOnly(t *testing.T) {
	file := corpusFile(t, "008")
	wantOut, _ := launcherStreams(t, file)
	g := startGuard(t, []string{"--on-fallback", "warn"}, file, "0.01", 2, 0)
	code, _ := g.wait(t)
	if code != 0 {
		t.Fatalf("guard exit = %d; want the job's 0\nstderr:\n%s", code, g.stderr.Bytes())
	}
	stderr := g.stderr.Bytes()
	if !bytes.Contains(stderr, []byte("verdict socket_fallback")) || !bytes.Contains(stderr, []byte("warn only")) {
		t.Errorf("guard stderr lacks the warning block:\n%s", stderr)
	}
	if got := g.stdout.Bytes(); !bytes.Equal(got, wantOut) {
		t.Errorf("stdout = %q; want %q", got, wantOut)
	}
}

// SIGINT to guard reaches the job, whose status (130) guard mirrors.
func TestGuardPassesSignals(t *testing.T) {
	file := corpusFile(t, "083")
	wantOut, _ := launcherStreams(t, file)
	g := startGuard(t, []string{"--settle", "500ms"}, file, "0.01", 60, 0)
	// Wait (bounded) until the job printed everything and holds.
	for i := 0; !bytes.Equal(g.stdout.Bytes(), wantOut); i++ {
		if i == 500 {
			t.Fatalf("job output incomplete after 10 s: %q", g.stdout.Bytes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the launcher reaches its wait
	if err := g.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, took := g.wait(t)
	if code != 130 {
		t.Fatalf("guard exit = %d; want 130 (the job's SIGINT exit)\nstderr:\n%s", code, g.stderr.Bytes())
	}
	if took >= 60*time.Second {
		t.Errorf("the job kept running %s after SIGINT", took)
	}
	if !bytes.HasSuffix(g.stdout.Bytes(), []byte("fake-launcher: got SIGINT\n")) {
		t.Errorf("the job did not see SIGINT; stdout ends %q", g.stdout.Bytes())
	}
}

func TestGuardEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []string
		allowed bool
		want    []string
		added   bool
	}{
		{"unset", []string{"PATH=/bin"}, true, []string{"PATH=/bin", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET,ENV"}, true},
		{"subsys kept", []string{"NCCL_DEBUG_SUBSYS=ALL"}, true, []string{"NCCL_DEBUG_SUBSYS=ALL", "NCCL_DEBUG=INFO"}, true},
		{"set by user", []string{"NCCL_DEBUG=WARN"}, true, []string{"NCCL_DEBUG=WARN"}, false},
		{"not allowed", []string{"PATH=/bin"}, false, []string{"PATH=/bin"}, false},
	} {
		got, added := guardEnv(tc.in, tc.allowed)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") || added != tc.added {
			t.Errorf("%s: guardEnv(%q) = %q, %v; want %q, %v", tc.name, tc.in, got, added, tc.want, tc.added)
		}
	}
}

func TestGuardFlags(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	p, argv, _, ok := parseGuardPolicy([]string{"--forbid", "socket_fallback,gdr_off", "--", "torchrun", "--nnodes=2"},
		env(map[string]string{"NCCLWATCH_GUARD_SETTLE": "45s", "NCCLWATCH_GUARD_ON_FALLBACK": "warn"}), &bytes.Buffer{})
	if !ok || p.kill || p.settle != 45*time.Second || len(p.forbid) != 2 || strings.Join(argv, " ") != "torchrun --nnodes=2" {
		t.Errorf("parseGuardPolicy = %+v %q %v; want warn, 45s, 2 forbidden, torchrun --nnodes=2", p, argv, ok)
	}
	for _, bad := range [][]string{
		{"--forbid", "ok", "--", "x"}, {"--on-fallback", "ignore", "--", "x"}, {"--expect", "carrier-pigeon", "--", "x"},
		{"--settle", "0s", "--", "x"}, {}, {"--report", "http://127.0.0.1:1/", "--", "x"}, {"--report", "kafka://", "--", "x"},
	} {
		var stderr bytes.Buffer
		if _, _, code, ok := parseGuardPolicy(bad, env(nil), &stderr); ok || code != exitUsage || stderr.Len() == 0 {
			t.Errorf("parseGuardPolicy(%q) = ok %v, code %d, %q; want a usage error", bad, ok, code, stderr.String())
		}
	}
}

// --report kafka:// sends the guarded job's NCCL lines to the topic the
// service consumes; the service (in-process broker, JSON-lines sink here)
// then classifies the job like any other.
func TestGuardReportToService(t *testing.T) {
	const topic = "guard-report"
	fake, err := kafka.NewFake(topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	report := "kafka://" + strings.Join(fake.Addrs(), ",") + "/" + topic + "?job=guarded-107&namespace=ci"
	// No delay between lines: all 50 NCCL lines are out long before the
	// settle time, however loaded the machine.
	g := startGuard(t, []string{"--settle", "3s", "--report", report}, corpusFile(t, "107"), "0", 60, 0)
	if code, _ := g.wait(t); code != exitGuardStopped {
		t.Fatalf("guard exit = %d; want %d\nstderr:\n%s", code, exitGuardStopped, g.stderr.Bytes())
	}
	if !bytes.Contains(g.stderr.Bytes(), []byte("--report: sent 50 NCCL lines of job ci/guarded-107 to Kafka topic "+topic)) {
		t.Fatalf("guard did not report 50 NCCL lines:\n%s", g.stderr.Bytes())
	}

	cfg := defaultServiceConfig()
	cfg.Kafka.Brokers, cfg.Kafka.Topics, cfg.Kafka.GroupID = fake.Addrs(), []string{topic}, "guard-report-test"
	cfg.Kafka.HeartbeatInterval, cfg.Kafka.MaxWait = 500*time.Millisecond, 100*time.Millisecond
	cfg.Pipeline.Batch.MaxWait = 200 * time.Millisecond
	cfg.HTTP.Listen = "127.0.0.1:0"
	jl, err := sinks.NewJSONLines(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer jl.Close()
	got := make(chan pipeline.JobSummary, 64)
	// The summaries the service stored, as the last stage of its chain.
	opts := serveOptions{sink: jl, after: pipeline.ConsumerFunc(func(_ context.Context, b *pipeline.Batch) error {
		for _, j := range b.Jobs {
			select {
			case got <- j:
			default:
			}
		}
		return nil
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, cfg, newLogger(io.Discard, "warn"), opts) }()
	defer func() { cancel(); <-errc }()
	for {
		select {
		case j := <-got:
			if j.Job == "guarded-107" && j.Namespace == "ci" && j.Verdict == pipeline.VerdictSocketFallback &&
				j.NRanks != nil && *j.NRanks == 16 {
				return
			}
		case err := <-errc:
			t.Fatalf("service stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("the service never classified ci/guarded-107 as socket_fallback")
		}
	}
}
