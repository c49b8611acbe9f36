package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func TestConfigUnknownKeysAtEveryDepth(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error; none means valid
	}{
		{"valid nested keys", `
kafka:
  brokers: [127.0.0.1:9092]
  sasl: {mechanism: PLAIN, username: u, password: p}
clickhouse:
  addr: [127.0.0.1:9000]
pipeline:
  batch: {max_rows: 5000, max_wait: 2s}
  assembler: {}
rules:
  interval: 30s
  files: [builtin]
  webhooks:
    - url: http://127.0.0.1:1/hook
      headers: {X-Any-Header: v}
`, nil},
		{"top level", "migrte: true\n", []string{"line 1: unknown key migrte"}},
		{"second level", "clickhouse:\n  adr: [x]\n", []string{"line 2: unknown key clickhouse.adr"}},
		{"third level", "pipeline:\n  batch:\n    max_row: 10\n", []string{"line 3: unknown key pipeline.batch.max_row"}},
		{"inside a list", "rules:\n  webhooks:\n    - url: http://127.0.0.1:1/\n      timout: 1s\n",
			[]string{"line 4: unknown key rules.webhooks[0].timout"}},
		{"pointer struct", "kafka:\n  sasl:\n    user: x\n", []string{"unknown key kafka.sasl.user"}},
		{"every typo at once", "log: {levle: debug}\ndecoder:\n  max_line_byte: 1\n",
			[]string{"unknown key log.levle", "unknown key decoder.max_line_byte"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c := defaultServiceConfig()
			err := c.loadFile(path)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("loadFile(%q) = %v; want nil", tc.yaml, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loadFile(%q) = nil; want an error naming %q", tc.yaml, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("loadFile(%q) = %v; want it to name %q", tc.yaml, err, w)
				}
			}
		})
	}
	// The walk itself is what caught the typo: the default is untouched.
	c := defaultServiceConfig()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("pipeline:\n  batch:\n    max_rows: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.loadFile(path); err != nil || c.Pipeline.Batch.MaxRows != 7 {
		t.Errorf("loadFile(max_rows: 7) = %v, MaxRows %d; want nil, 7", err, c.Pipeline.Batch.MaxRows)
	}
}

func TestGCPercentUnlessGOGCSet(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
	}
	if pct, ok := gcPercent(env("")); !ok || pct != serviceGCPercent {
		t.Errorf("GOGC unset: gcPercent = %d, %v; want %d, true", pct, ok, serviceGCPercent)
	}
	for _, v := range []string{"100", "off", "50"} {
		if pct, ok := gcPercent(env(v)); ok {
			t.Errorf("GOGC=%s: gcPercent = %d, true; want the user's choice left alone", v, pct)
		}
	}
}

// TestMemoryLimit: run sets the memory bound as the Go soft memory limit,
// or 85 % of the cgroup's memory limit where that is lower, unless
// GOMEMLIMIT is set.
func TestMemoryLimit(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if v, ok := m[name]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMEMLIMIT" {
				return v
			}
			return ""
		}
	}
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	// The defaults' bound: two batches of the backlog's 32 MiB beside the
	// base.
	bound := memoryBound(pipeline.DefaultRunnerConfig())
	if want := int64(memoryBase + 2*32<<20); bound != want {
		t.Fatalf("memoryBound(defaults) = %d; want %d", bound, want)
	}
	live := pipeline.BatchConfig{MaxBytes: 16 << 20, Backlog: pipeline.BacklogLimits{MaxBytes: 64 << 20}}
	if b := memoryBound(pipeline.RunnerConfig{Batch: live}); b != memoryBase+2*16<<20 {
		t.Errorf("memoryBound(backlog batches off) = %d; want the live bytes counted", b)
	}
	live.Backlog.MaxRows = 120000
	if b := memoryBound(pipeline.RunnerConfig{Batch: live}); b != memoryBase+2*64<<20 {
		t.Errorf("memoryBound(backlog 64 MiB) = %d; want the backlog's bytes counted", b)
	}
	for _, c := range []struct {
		name  string
		env   string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2 1 GiB", "", map[string]string{v2: "1073741824\n"}, bound, true},
		{"v2 256 MiB", "", map[string]string{v2: "268435456\n"}, 228170137, true},
		{"v1 256 MiB", "", map[string]string{v1: "268435456\n"}, 228170137, true},
		{"v2 max", "", map[string]string{v2: "max\n", v1: "268435456\n"}, bound, true},
		{"v1 unlimited", "", map[string]string{v1: "9223372036854771712\n"}, bound, true},
		{"no cgroup", "", nil, bound, true},
		{"GOMEMLIMIT set", "512MiB", map[string]string{v2: "268435456\n"}, 0, false},
	} {
		got, ok := memoryLimit(env(c.env), files(c.files), bound)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: memoryLimit = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
