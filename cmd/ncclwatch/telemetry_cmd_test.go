package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTelemetryTestCommand runs `ncclwatch telemetry test` on a declared
// format, a real generic log (testdata/telemetry 123) and an NCCL line.
func TestTelemetryTestCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ncclwatch.yaml")
	if err := os.WriteFile(cfg, []byte(`telemetry:
  formats:
    - name: mytrainer
      token: "loss:"
      pattern: "it: {step}, loss: {loss}, dt: {step_time:ms}ms"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	real, err := os.ReadFile(filepath.Join("..", "..", "testdata", "telemetry", "123_tf_slim_global_step_recording_summary_interleaved.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "train.log")
	text := "it: 120, loss: 2.31, dt: 410ms\nhost:1:1 [0] NCCL INFO it: 5, loss: 2, dt: 3ms\n" + string(real)
	if err := os.WriteFile(log, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"telemetry", "test", "--config", cfg, log}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d; stderr %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		log + ":1\tdeclared:mytrainer\tstep step=120 step_time_s=0.41 loss=2.31\n",
		log + ":3\tprogress\tstep step=2130 step_time_s=0.888 loss=6.8195\n",
		"20 telemetry lines: declared:mytrainer 1, progress 19\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, ":2\t") {
		t.Errorf("the NCCL line gave telemetry:\n%s", out)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("telemetry:\n  formats:\n    - name: x\n      token: loss\n      pattern: \"step {step} speed {speed}\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"telemetry", "test", "--config", bad, log}, nil, &stdout, &stderr); code != exitUsage {
		t.Fatalf("invalid format: exit %d; want %d", code, exitUsage)
	}
	if want := `telemetry.formats[0].pattern: unknown field "speed"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr.String(), want)
	}
}
