package main

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestGenRecords checks the load stream: seeded, exactly n records, each a
// Fluent Bit record of its own job with the stamped time, about 5 % of them
// NCCL lines, one in four jobs a Socket job.
func TestGenRecords(t *testing.T) {
	const n = 8000
	stampAt := time.Date(2026, 11, 29, 15, 0, 0, 123456789, time.UTC)
	collect := func(j int) [][]byte {
		var out [][]byte
		err := genRecords(7, j, loadJob("load", j), 0.05, n, func() time.Time { return stampAt }, func(rec []byte) error {
			out = append(out, bytes.Clone(rec))
			return nil
		})
		if err != nil {
			t.Fatalf("genRecords(job %d) = %v", j, err)
		}
		return out
	}
	for _, j := range []int{0, 3} {
		a, b := collect(j), collect(j)
		if len(a) != n {
			t.Fatalf("job %d: %d records; want %d", j, len(a), n)
		}
		if !slicesEqual(a, b) {
			t.Fatalf("job %d: two runs with the same seed differ", j)
		}
		job := loadJob("load", j)
		dcfg := parsers.DefaultDecoderConfig()
		dec := parsers.NewDecoder(dcfg)
		var lines parsers.Lines
		var ev pipeline.Event
		nccl, socket := 0, 0
		for i, rec := range a {
			var got []pipeline.Record
			if err := dec.Decode(rec, func(r *pipeline.Record) {
				c := *r
				c.Text = bytes.Clone(r.Text)
				got = append(got, c)
			}); err != nil {
				t.Fatalf("record %d: Decode(%q) = %v", i, rec, err)
			}
			dec.Flush(func(*pipeline.Record) {})
			if len(got) != 1 || got[0].Meta == nil {
				t.Fatalf("record %d: %d lines, meta %v; want one line with metadata", i, len(got), got)
			}
			if l := got[0].Meta.Labels["training.kubeflow.org/job-name"]; l != job {
				t.Fatalf("record %d: job label %q; want %q", i, l, job)
			}
			if !got[0].Time.Equal(stampAt) {
				t.Fatalf("record %d: time %v; want the stamp %v", i, got[0].Time, stampAt)
			}
			if bytes.Contains(rec, genJobName) {
				t.Fatalf("record %d still names gen's job: %s", i, rec)
			}
			if lines.Classify(got[0].Text, &ev) {
				nccl++
				if strings.Contains(string(got[0].Text), "Using network Socket") {
					socket++
				}
			}
		}
		if share := float64(nccl) / n; share < 0.04 || share > 0.06 {
			t.Errorf("job %d: NCCL share %.3f; want about 0.05", j, share)
		}
		if wantSocket := j%4 == 3; (socket > 0) != wantSocket {
			t.Errorf("job %d: %d 'Using network Socket' lines; want Socket job = %v", j, socket, wantSocket)
		}
	}
}

func slicesEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestLoadJobsSpread checks that the default 64 jobs land on every one of
// the default 8 partitions (the producer's balancer is CRC32 of the key).
func TestLoadJobsSpread(t *testing.T) {
	seen := map[uint32]int{}
	for j := range 64 {
		seen[crc32.ChecksumIEEE([]byte(loadJob("load", j)))%8]++
	}
	if len(seen) != 8 {
		t.Errorf("64 jobs on %d of 8 partitions: %v", len(seen), seen)
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := quantile(d, tc.q); got != tc.want {
			t.Errorf("quantile(1..100 ms, %v) = %v; want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile(nil) = %v; want 0", got)
	}
}

// TestIntegrationLoad runs a small `ncclwatch load` against the real
// servers: every phase completes and the report has its figures.
func TestIntegrationLoad(t *testing.T) {
	brokers, chAddr := itServers(t)
	var out, errOut bytes.Buffer
	code := runLoad([]string{"--brokers", strings.Join(brokers, ","), "--clickhouse", chAddr,
		"--records", "10000", "--jobs", "8", "--partitions", "4", "--producers", "2",
		"--latency-rate", "2000", "--latency-duration", "1s", "--timeout", "2m"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("load exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), tail(errOut.String(), 40))
	}
	for _, want := range []string{"produce:  10000 records", "consume:  10000 records", "record-to-row p50", "VmHWM", "socket_fallback"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// Every NCCL row the sink acknowledged is what a query sees.
	_, stored, _ := strings.Cut(out.String(), "stored:")
	var rows, batches, seen int
	if _, err := fmt.Sscanf(stored, " %d NCCL rows in %d batches; a query sees %d nccl_events", &rows, &batches, &seen); err != nil || rows == 0 || rows != seen {
		t.Errorf("stored line: %d rows acknowledged, %d seen (%v); want equal and > 0:\n%s", rows, seen, err, out.String())
	}
}
