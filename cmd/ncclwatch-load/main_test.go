package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
)

// TestGenShapes checks gen's shape flags: --shape picks the stream, the
// cluster shape gets its own NCCL share unless --nccl-share is given,
// --random-steps is --shape random-steps, and bad combinations are usage
// errors.
func TestGenShapes(t *testing.T) {
	gen := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"gen", "--size", "64KB"}, args...), &out, &errOut)
		if code != 0 && errOut.Len() == 0 {
			t.Errorf("gen %v: exit %d with no message", args, code)
		}
		return out.String(), code
	}
	want := func(shape loadtest.Shape, share float64) string {
		cfg := loadtest.DefaultGenConfig()
		cfg.Bytes, cfg.Shape, cfg.NCCLShare = 64<<10, shape, share
		var b bytes.Buffer
		if _, err := loadtest.Generate(&b, cfg); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, want(loadtest.ShapeDefault, 0.05)},
		{[]string{"--shape", "cluster"}, want(loadtest.ShapeCluster, loadtest.ClusterNCCLShare)},
		{[]string{"--shape", "cluster", "--nccl-share", "0.1"}, want(loadtest.ShapeCluster, 0.1)},
		{[]string{"--random-steps"}, want(loadtest.ShapeRandomSteps, 0.05)},
		{[]string{"--shape", "random-steps"}, want(loadtest.ShapeRandomSteps, 0.05)},
	} {
		got, code := gen(tc.args...)
		if code != 0 || got != tc.want {
			t.Errorf("gen %v: exit %d, %d bytes; want exit 0 and the Generate stream of %d bytes", tc.args, code, len(got), len(tc.want))
		}
	}
	if d, c := want(loadtest.ShapeDefault, 0.05), want(loadtest.ShapeCluster, loadtest.ClusterNCCLShare); d == c || !strings.Contains(c, "Using network") {
		t.Error("the default and cluster streams are the same, or the cluster stream has no NCCL init")
	}
	for _, args := range [][]string{{"--shape", "inspector"}, {"--shape", "cluster", "--random-steps"}, {"--shape", "all"}} {
		if _, code := gen(args...); code != 2 {
			t.Errorf("gen %v: exit %d; want 2", args, code)
		}
	}
}

// TestLoadShapeFlags checks the benchmark's shape flags up to validation:
// an unknown shape and --random-steps beside another shape are usage
// errors (exit 2) before any server is reached.
func TestLoadShapeFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--shape", "bogus"},
		{"--shape", "cluster,default", "--random-steps"},
		{"--shape", "all", "--concurrent", "0"},
	} {
		var out, errOut bytes.Buffer
		args = append(args, "--brokers", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1")
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("ncclwatch-load %v: exit %d; want 2 (stderr %q)", args, code, errOut.String())
		}
	}
}
