package loadtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// TestDefaultShapesUnchanged checks that the default and random-steps
// shapes are the bytes they were before shapes existed, for the same seed:
// the SHA-256 of their output was taken from the generator as it was then
// (commit e2858ba), so figures measured on them stay comparable.
func TestDefaultShapesUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     func(*GenConfig)
		want    string
		wantLen int
	}{
		{"raw IB", func(*GenConfig) {}, "8782b3e6f2598f11ee5eb5c3be201ed681904f141442694361e57f572f385277", 1048625},
		{"shape default", func(c *GenConfig) { c.Shape = ShapeDefault }, "8782b3e6f2598f11ee5eb5c3be201ed681904f141442694361e57f572f385277", 1048625},
		{"random steps", func(c *GenConfig) { c.RandomSteps = true }, "e9939451809fcefd81f5671fc24782837258dec0ebf091ac5cff2996db7ad7e1", 1048834},
		{"shape random-steps", func(c *GenConfig) { c.Shape = ShapeRandomSteps }, "e9939451809fcefd81f5671fc24782837258dec0ebf091ac5cff2996db7ad7e1", 1048834},
		{"fluentbit", func(c *GenConfig) { c.Format = "fluentbit" }, "70ed92021cb3826fd84ddfc310db84a4201d225a104a8501f3de019dfd09a6ab", 1048681},
		{"socket", func(c *GenConfig) { c.Network = "Socket" }, "e7f985ff9ed5d76755ae4b4a48195a622d2b73cbb1860cfe5609d25dcedfb074", 1048671},
	} {
		cfg := DefaultGenConfig()
		cfg.Bytes = 1 << 20
		tc.cfg(&cfg)
		var buf bytes.Buffer
		if _, err := Generate(&buf, cfg); err != nil {
			t.Fatalf("%s: Generate = %v", tc.name, err)
		}
		sum := sha256.Sum256(buf.Bytes())
		if got := hex.EncodeToString(sum[:]); got != tc.want || buf.Len() != tc.wantLen {
			t.Errorf("%s: Generate wrote %d bytes, sha256 %s; want %d bytes, %s", tc.name, buf.Len(), got, tc.wantLen, tc.want)
		}
	}
	// The benchmark's records: the first 3 000 of jobs 0-4, seed 1.
	for _, tc := range []struct {
		shape Shape
		want  string
	}{
		{ShapeDefault, "c2714eb7a50d55ab2b5bb801af31d8aeeca29f45e3e4540f58c01d02bc9142e7"},
		{ShapeRandomSteps, "6953406f072a662f19412f2e56bd747feceda3358f7fbb306ad3021c084b1e4c"},
	} {
		o := Options{Shape: tc.shape, Seed: 1, Jobs: 5, Producers: 1, Records: 5 * 3000, NCCLShare: 0.05}
		h := sha256.New()
		n, err := backlogPart(o, 0, nil, func(job string, rec []byte) error {
			if !bytes.Contains(rec, []byte(job)) {
				t.Fatalf("%s: record of job %s does not name it: %s", tc.shape, job, rec)
			}
			h.Write(rec)
			h.Write([]byte{'\n'})
			return nil
		})
		if err != nil || n != 5 {
			t.Fatalf("%s: backlogPart = %d jobs, %v; want 5 jobs", tc.shape, n, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != tc.want {
			t.Errorf("%s: backlog records sha256 %s; want %s", tc.shape, got, tc.want)
		}
	}
}

func TestParseShapes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Shape
		err  bool
	}{
		{"all", []Shape{ShapeDefault, ShapeRandomSteps, ShapeCluster, ShapeClusterInspector}, false},
		{"cluster-inspector,cluster", []Shape{ShapeClusterInspector, ShapeCluster}, false},
		{"cluster", []Shape{ShapeCluster}, false},
		{"cluster, default,cluster", []Shape{ShapeCluster, ShapeDefault}, false},
		{"default,all", []Shape{ShapeDefault, ShapeRandomSteps, ShapeCluster, ShapeClusterInspector}, false},
		{"inspector", nil, true},
		{"", nil, true},
	} {
		got, err := ParseShapes(tc.in)
		if (err != nil) != tc.err || strings.Join(shapeStrings(got), ",") != strings.Join(shapeStrings(tc.want), ",") {
			t.Errorf("ParseShapes(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func shapeStrings(s []Shape) []string {
	var out []string
	for _, x := range s {
		out = append(out, string(x))
	}
	return out
}

// TestPrintTable checks the table of shapes: one row per report with its
// figures, the ratio of ncclwatch's records/s to the peer's, and "-" for
// what was not measured.
func TestPrintTable(t *testing.T) {
	reps := []*Report{
		{o: Options{Shape: ShapeDefault}, produce: phase{records: 3_000_000}, jobs: 64,
			consume: phase{records: 3_000_000, wall: 4 * time.Second, cpu: 9 * time.Second},
			peer:    &peerResult{phase: phase{records: 3_000_000, wall: 12 * time.Second}},
			stored:  "150000", steps: "187000", jobRows: "64", maxRSSConsume: 250e6, maxRSSLatency: 280e6,
			serverConsume: &serverCPU{user: 2 * time.Second, sys: time.Second}},
		{o: Options{Shape: ShapeCluster}, produce: phase{records: 3_000_000}, jobs: 453,
			consume: phase{records: 3_000_000, wall: 5 * time.Second, cpu: 11 * time.Second},
			stored:  "184000", steps: "1730000"},
	}
	var b bytes.Buffer
	PrintTable(&b, reps)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("PrintTable wrote %d lines; want a header and 2 rows:\n%s", len(lines), b.String())
	}
	for i, want := range [][]string{
		{"shape", "records", "nccl_events", "training_steps", "job_verdicts", "ncclwatch rec/s", "peer rec/s", "ratio", "max RSS MB", "CPU-s", "server CPU-s"},
		{"default", "3000000", "64", "150000", "187000", "750000", "250000", "3.00x", "280", "9.0", "3.0"},
		{"cluster", "3000000", "453", "184000", "1730000", "600000", "-  ", "11.0"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i]+" ", w) {
				t.Errorf("table line %d lacks %q:\n%s", i, w, b.String())
			}
		}
	}
}

// TestBacklogParts checks that the producers' parts of a backlog hold
// o.Records records together, each job in one part only, for every shape;
// and that the latency phase's stream has its total records.
func TestBacklogParts(t *testing.T) {
	for _, sh := range shapes {
		o := Options{Shape: sh, Seed: 1, Jobs: 8, Producers: 3, Records: 30000, NCCLShare: sh.DefaultShare(), Concurrent: DefaultConcurrent}
		owner := map[string]int{}
		var total int64
		jobs := -1
		for w := range o.Producers {
			n, err := backlogPart(o, w, nil, func(job string, rec []byte) error {
				if p, ok := owner[job]; ok && p != w {
					t.Fatalf("%s: job %s in the parts of producers %d and %d", sh, job, p, w)
				}
				owner[job] = w
				total++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if jobs >= 0 && n != jobs {
				t.Errorf("%s: producer %d says %d jobs, another %d", sh, w, n, jobs)
			}
			jobs = n
		}
		if total != o.Records || len(owner) != jobs {
			t.Errorf("%s: %d records of %d jobs in the parts; want %d records, %d jobs", sh, total, len(owner), o.Records, jobs)
		}
		var paced int64
		if err := pacedStream(o, 5000, nil, func(job string, rec []byte) error { paced++; return nil }); err != nil || paced != 5000 {
			t.Errorf("%s: latency stream of %d records, %v; want 5000", sh, paced, err)
		}
	}
}
