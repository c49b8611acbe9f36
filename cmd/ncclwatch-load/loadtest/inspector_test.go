package loadtest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// inspectorStream collects the first n records of the cluster-inspector
// stream of seed at rate that keep accepts, by job, and their hash.
func inspectorStream(t *testing.T, seed uint64, rate float64, n int64, keep func(int) bool) (string, map[string][]string) {
	t.Helper()
	h := sha256.New()
	byJob := map[string][]string{}
	_, err := clusterRecords(seed, "load", ClusterNCCLShare, DefaultConcurrent, rate, n, keep, nil, func(job string, rec []byte) error {
		h.Write(rec)
		h.Write([]byte(job + "\n"))
		byJob[job] = append(byJob[job], string(rec))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), byJob
}

// TestInspectorDeterministic: the cluster-inspector stream depends on its
// seed and rate alone, and producers that each take a part of the jobs
// give together each job's records, in order, as one that takes them all.
func TestInspectorDeterministic(t *testing.T) {
	const n = 30000
	a, all := inspectorStream(t, 5, 20000, n, nil)
	if b, _ := inspectorStream(t, 5, 20000, n, nil); a != b {
		t.Fatal("two cluster-inspector streams of seed 5 differ")
	}
	if c, _ := inspectorStream(t, 6, 20000, n, nil); a == c {
		t.Fatal("the streams of seeds 5 and 6 are the same")
	}
	if d, _ := inspectorStream(t, 5, 10000, n, nil); a == d {
		t.Fatal("the streams of rates 20000 and 10000 are the same")
	}
	parts := map[string][]string{}
	for w := range 3 {
		_, m := inspectorStream(t, 5, 20000, n, func(id int) bool { return id%3 == w })
		for job, recs := range m {
			parts[job] = append(parts[job], recs...)
		}
	}
	if len(parts) != len(all) {
		t.Fatalf("producers' parts hold %d jobs; the whole stream %d", len(parts), len(all))
	}
	for job, recs := range all {
		if !slices.Equal(parts[job], recs) {
			t.Fatalf("job %s: the producers' records differ from the whole stream's", job)
		}
	}
}

// TestInspectorRecords: the Inspector records of the stream decode as
// Fluent Bit records of their job whose text parses as an Inspector
// record of a communicator the job's NCCL init names, with the job's
// ranks; their share is the rate's against the cluster's 1000 lines/s;
// the cluster shape carries none.
func TestInspectorRecords(t *testing.T) {
	for _, tc := range []struct {
		rate      float64
		n         int64
		minJoined float64 // share of records whose job's init was seen
	}{{DefaultInspectorRate, 200000, 0.2}, {1000, 40000, 0.5}, {250, 40000, 0.5}} {
		rate, n := tc.rate, tc.n
		dec := parsers.NewDecoder(parsers.DefaultDecoderConfig())
		var lines parsers.Lines
		var insp, other int64
		comms := map[string]string{} // commId of each job's init lines
		var recs []pipeline.CollectiveRecord
		var jobs []string
		_, err := clusterRecords(9, "load", ClusterNCCLShare, DefaultConcurrent, rate, n, nil, nil, func(job string, rec []byte) error {
			return dec.Decode(rec, func(r *pipeline.Record) {
				if r.Meta == nil || r.Meta.Job != job {
					t.Fatalf("record of job %s decodes with meta %+v", job, r.Meta)
				}
				if parsers.IsInspector(r.Text) {
					insp++
					var c pipeline.CollectiveRecord
					if err := parsers.ParseInspector(r.Text, &c); err != nil {
						t.Fatalf("%v: %s", err, r.Text)
					}
					c.Comm = bytes.Clone(c.Comm)
					recs, jobs = append(recs, c), append(jobs, job)
					return
				}
				other++
				var ev pipeline.Event
				if lines.Classify(r.Text, &ev) && len(ev.CommID) > 0 {
					comms[job] = string(ev.CommID)
				}
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		want := rate / (rate + 1/clusterLineInterval.Seconds())
		if got := float64(insp) / float64(insp+other); got < want-0.01 || got > want+0.01 {
			t.Errorf("rate %.0f: Inspector share %.4f (%d of %d); want %.4f", rate, got, insp, insp+other, want)
		}
		joined := 0
		for i, c := range recs {
			if c.NRanks <= 0 || c.NNodes <= 0 || c.Rank < 0 || c.Rank >= c.NRanks || c.NRanks != c.NNodes*clusterGPUs ||
				!(c.BusBW > 0) || c.Bytes <= 0 {
				t.Fatalf("record %d of job %s: %+v", i, jobs[i], c)
			}
			if id, ok := comms[jobs[i]]; ok {
				if id != string(c.Comm) {
					t.Fatalf("record %d of job %s: header.id %s; its init says commId %s", i, jobs[i], c.Comm, id)
				}
				joined++
			}
		}
		if float64(joined) < tc.minJoined*float64(len(recs)) {
			t.Errorf("rate %.0f: %d of %d records of jobs whose init was seen", rate, joined, len(recs))
		}
	}
	var buf bytes.Buffer
	cfg := DefaultGenConfig()
	cfg.Shape, cfg.Bytes, cfg.NCCLShare, cfg.InspectorRate = ShapeCluster, 1<<20, ClusterNCCLShare, 5000
	if _, err := Generate(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte(`{"header":`)) {
		t.Error("the cluster shape carries Inspector records")
	}
}

// TestInspectorGenRate: gen's raw cluster-inspector log holds dump lines
// at the rate's share, with dump timestamps that follow stream time.
func TestInspectorGenRate(t *testing.T) {
	var buf bytes.Buffer
	cfg := DefaultGenConfig()
	cfg.Shape, cfg.Bytes, cfg.NCCLShare, cfg.InspectorRate = ShapeClusterInspector, 4<<20, ClusterNCCLShare, 3000
	if _, err := Generate(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	var insp, other int
	var last int64
	for l := range bytes.Lines(buf.Bytes()) {
		if !bytes.HasPrefix(l, []byte(`{"header":`)) {
			other++
			continue
		}
		insp++
		var c pipeline.CollectiveRecord
		if err := parsers.ParseInspector(bytes.TrimRight(l, "\n"), &c); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if c.DumpTimeUS < last {
			t.Fatalf("dump_timestamp_us %d after %d", c.DumpTimeUS, last)
		}
		last = c.DumpTimeUS
	}
	if got := float64(insp) / float64(insp+other); got < 0.74 || got > 0.76 {
		t.Errorf("Inspector share %.4f (%d of %d); want 0.75 (3000/s beside 1000 lines/s)", got, insp, insp+other)
	}
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixMicro()
	if span := time.Duration(last-start) * time.Microsecond; span < time.Duration(other-1)*clusterLineInterval-time.Millisecond ||
		span > time.Duration(other)*clusterLineInterval {
		t.Errorf("last dump timestamp %v after the start; the %d cluster lines span %v", span, other, time.Duration(other)*clusterLineInterval)
	}
}
