package loadtest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// clusterHash is the SHA-256 of the first n records of the cluster
// stream of seed that keep accepts, each followed by its job.
func clusterHash(t *testing.T, seed uint64, n int64, keep func(int) bool) (string, int) {
	t.Helper()
	h := sha256.New()
	jobs, err := clusterRecords(seed, "load", ClusterNCCLShare, DefaultConcurrent, 0, n, keep, nil, func(job string, rec []byte) error {
		h.Write(rec)
		h.Write([]byte(job + "\n"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), jobs
}

// TestClusterDeterministic checks that the cluster stream depends on its
// seed alone: two runs give the same records, another seed others, and
// producers that each format a part of the jobs give together the same
// records of each job, in the same order, as one that formats them all.
func TestClusterDeterministic(t *testing.T) {
	const n = 60000
	a, jobs := clusterHash(t, 7, n, nil)
	if b, _ := clusterHash(t, 7, n, nil); a != b {
		t.Fatalf("two cluster streams of seed 7 differ")
	}
	if c, _ := clusterHash(t, 8, n, nil); a == c {
		t.Fatalf("the cluster streams of seeds 7 and 8 are the same")
	}
	byJob := func(keep func(int) bool) (map[string][]string, int) {
		m := map[string][]string{}
		jobs, err := clusterRecords(7, "load", ClusterNCCLShare, DefaultConcurrent, 0, n, keep, nil, func(job string, rec []byte) error {
			m[job] = append(m[job], string(rec))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return m, jobs
	}
	all, _ := byJob(nil)
	parts := map[string][]string{}
	const producers = 3
	for w := range producers {
		m, j := byJob(func(id int) bool { return id%producers == w })
		if j != jobs {
			t.Errorf("producer %d walked %d jobs; want %d", w, j, jobs)
		}
		for job, recs := range m {
			if _, dup := parts[job]; dup {
				t.Fatalf("job %s formatted by two producers", job)
			}
			parts[job] = recs
		}
	}
	if len(parts) != len(all) {
		t.Fatalf("producers together formatted %d jobs; want %d", len(parts), len(all))
	}
	for job, recs := range all {
		if !slices.Equal(parts[job], recs) {
			t.Fatalf("job %s: the producers' records differ from the whole stream's", job)
		}
	}
	// gen's raw log is the same stream: its lines are the records' logs.
	cfg := DefaultGenConfig()
	cfg.Shape, cfg.NCCLShare, cfg.Bytes = ShapeCluster, ClusterNCCLShare, 1<<20
	var raw, fb bytes.Buffer
	if _, err := Generate(&raw, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Format = "fluentbit"
	if _, err := Generate(&fb, cfg); err != nil {
		t.Fatal(err)
	}
	dec := parsers.NewDecoder(parsers.DefaultDecoderConfig())
	lines := bytes.Split(bytes.TrimSuffix(raw.Bytes(), []byte("\n")), []byte("\n"))
	recs := bytes.Split(bytes.TrimSuffix(fb.Bytes(), []byte("\n")), []byte("\n"))
	for i := range min(len(lines), len(recs)) {
		var got []byte
		if err := dec.Decode(recs[i], func(r *pipeline.Record) { got = bytes.Clone(r.Text) }); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		dec.Flush(func(*pipeline.Record) {})
		if !bytes.Equal(got, lines[i]) {
			t.Fatalf("line %d: raw %q, Fluent Bit record's log %q", i, lines[i], got)
		}
	}
}

// jobStats is what TestClusterShape reads of one job with the project's
// parsers.
type jobStats struct {
	first, last int
	lines, nccl int
	ranks       int // nranks of its NCCL comm lines
	complete    int // "Init COMPLETE" lines
	framework   string
	unnumbered  int           // progress lines without a step number
	steps       []int64       // progress steps in stream order
	epochs      []int64       // Lightning's epoch of each step
	perStep     map[int64]int // progress lines per step
}

// TestClusterShape reads the cluster stream with the project's decoder and
// line parser and checks its shape: about one job per 7 000 records, 24
// running at once, 5.8 % NCCL lines, every job's NCCL init on all its
// ranks, all six trainers, one progress line per step on one-rank
// trainers and one per rank on torchtitan, and steps counting up.
func TestClusterShape(t *testing.T) {
	const n = 300000
	dec := parsers.NewDecoder(parsers.DefaultDecoderConfig())
	lp := parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
	var ev pipeline.Event
	var tl pipeline.TelemetryLine
	stats := map[string]*jobStats{}
	var order []string
	i, nccl := 0, 0
	jobs, err := clusterRecords(3, "load", ClusterNCCLShare, DefaultConcurrent, 0, n, nil, nil, func(job string, rec []byte) error {
		var text []byte
		var label string
		if err := dec.Decode(rec, func(r *pipeline.Record) {
			text = bytes.Clone(r.Text)
			label = r.Meta.Labels["training.kubeflow.org/job-name"]
		}); err != nil {
			t.Fatalf("record %d: Decode(%s) = %v", i, rec, err)
		}
		dec.Flush(func(*pipeline.Record) {})
		if label != job {
			t.Fatalf("record %d: job label %q; want %q", i, label, job)
		}
		s := stats[job]
		if s == nil {
			s = &jobStats{first: i, perStep: map[int64]int{}}
			stats[job] = s
			order = append(order, job)
		}
		s.last = i
		s.lines++
		isNCCL, isTel := lp.Line(text, &ev, &tl)
		switch {
		case isNCCL:
			nccl++
			s.nccl++
			if ev.NRanks > 0 {
				s.ranks = ev.NRanks
			}
			if bytes.Contains(text, []byte("Init COMPLETE")) {
				s.complete++
			}
		case isTel && tl.Kind == pipeline.TelemetryStep:
			if s.framework != "" && s.framework != tl.Framework {
				t.Fatalf("job %s: steps of %s and %s", job, s.framework, tl.Framework)
			}
			s.framework = tl.Framework
			if tl.Step < 0 {
				// Hugging Face's dict without the step key: a row each.
				s.unnumbered++
				break
			}
			s.steps = append(s.steps, tl.Step)
			s.perStep[tl.Step]++
			if tl.Framework == pipeline.FrameworkLightning {
				e, _ := strconv.ParseInt(string(text[len("Epoch "):bytes.IndexByte(text, ':')]), 10, 64)
				s.epochs = append(s.epochs, e)
			}
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != jobs {
		t.Errorf("records of %d jobs; clusterRecords says %d", len(stats), jobs)
	}
	if lo, hi := n/7000*6/10, n/7000*16/10+DefaultConcurrent; jobs < lo || jobs > hi {
		t.Errorf("%d jobs in %d records; want %d-%d (about one per 7 000 records)", jobs, n, lo, hi)
	}
	// Jobs running at once: those whose first record is at or before i
	// and whose last is at or after it.
	for i := n / 10; i < n*9/10; i += n / 50 {
		running := 0
		for _, s := range stats {
			if s.first <= i && s.last >= i {
				running++
			}
		}
		if running < DefaultConcurrent-3 || running > DefaultConcurrent {
			t.Errorf("record %d: %d jobs running; want %d-%d", i, running, DefaultConcurrent-3, DefaultConcurrent)
		}
	}
	frameworks := map[string]int{}
	for _, job := range order {
		s := stats[job]
		if s.ranks == 0 || s.complete != s.ranks && s.first < n/2 {
			t.Errorf("job %s: %d Init COMPLETE lines, nranks %d; want one per rank", job, s.complete, s.ranks)
		}
		if s.framework == "" {
			if s.last < n-5000 {
				t.Errorf("job %s: no progress lines in %d lines", job, s.lines)
			}
			continue
		}
		frameworks[s.framework]++
		if len(s.steps) == 0 {
			if s.framework != pipeline.FrameworkHF {
				t.Errorf("job %s (%s): %d progress lines, none with a step", job, s.framework, s.unnumbered)
			}
			continue
		}
		every := s.framework == pipeline.FrameworkTorchtitan
		for k, step := range s.steps {
			if k == 0 {
				continue
			}
			prev := s.steps[k-1]
			switch {
			case every && step < prev:
				t.Fatalf("job %s (%s): step %d after %d", job, s.framework, step, prev)
			case !every && step <= prev && (s.framework != pipeline.FrameworkLightning || s.epochs[k] <= s.epochs[k-1]):
				t.Fatalf("job %s (%s): step %d after %d", job, s.framework, step, prev)
			}
		}
		last := s.steps[len(s.steps)-1]
		for step, c := range s.perStep {
			switch {
			case every && c != s.ranks && !(step == last && s.last >= n-1000):
				t.Errorf("job %s (torchtitan, %d ranks): step %d printed %d times; want once per rank", job, s.ranks, step, c)
			case !every && s.framework != pipeline.FrameworkLightning && c != 1:
				t.Errorf("job %s (%s): step %d printed %d times; want once (one rank prints)", job, s.framework, step, c)
			}
		}
	}
	for _, f := range []string{pipeline.FrameworkMegatron, pipeline.FrameworkTorchtitan, pipeline.FrameworkHF,
		pipeline.FrameworkDeepSpeed, pipeline.FrameworkLightning, pipeline.FrameworkNanoGPT} {
		if frameworks[f] == 0 {
			t.Errorf("no %s job among %d: %v", f, jobs, frameworks)
		}
	}
	// Over a stream this short the share is above ClusterNCCLShare (its
	// last jobs are cut after their init; TestClusterJobShare checks the
	// share of whole jobs).
	share := float64(nccl) / n
	t.Logf("%d records, %d jobs, NCCL share %.4f, trainers %v", n, jobs, share, frameworks)
	if share < 0.050 || share > 0.085 {
		t.Errorf("NCCL share over the stream: %.4f; want 0.050-0.085", share)
	}
}

// TestClusterJobShare checks that whole jobs print ClusterNCCLShare NCCL
// lines among all their lines, on average, and that the lines the
// generator means as NCCL lines are those the project's parser reads as
// NCCL lines.
func TestClusterJobShare(t *testing.T) {
	var lp parsers.Lines
	var ev pipeline.Event
	var lines, nccl int64
	var buf []byte
	const jobs, parsed = 300, 10
	for id := range jobs {
		j := newClusterJob(5, "load", id, id%DefaultConcurrent, ClusterNCCLShare)
		for {
			var spec lineSpec
			buf, spec = j.next(buf[:0], id < parsed)
			if spec.rank < 0 {
				break
			}
			lines++
			if spec.nccl {
				nccl++
			}
			if id < parsed && lp.Classify(buf, &ev) != spec.nccl {
				t.Fatalf("job %d: Classify(%q) = %v; the generator meant %v", id, buf, !spec.nccl, spec.nccl)
			}
		}
	}
	share := float64(nccl) / float64(lines)
	t.Logf("%d jobs, %d lines (%d a job), NCCL share %.4f", jobs, lines, lines/jobs, share)
	if share < ClusterNCCLShare-0.004 || share > ClusterNCCLShare+0.004 {
		t.Errorf("NCCL share of %d whole jobs: %.4f; want %.3f ± 0.004", jobs, share, ClusterNCCLShare)
	}
	if per := lines / jobs; per < 5000 || per > 9000 {
		t.Errorf("%d lines a job; want about 7 000 (400 jobs in 3 M records)", per)
	}
}
