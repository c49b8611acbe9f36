package loadtest

import (
	"bytes"
	"context"
	"hash/crc32"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

// TestGenRecords checks the load stream: seeded, exactly n records, each a
// Fluent Bit record of its own job with the stamped time, about 5 % of them
// NCCL lines, one in four jobs a Socket job.
func TestGenRecords(t *testing.T) {
	const n = 8000
	stampAt := time.Date(2026, 11, 29, 15, 0, 0, 123456789, time.UTC)
	collect := func(j int) [][]byte {
		var out [][]byte
		err := Records(7, j, JobName("load", j), 0.05, n, func() time.Time { return stampAt }, func(rec []byte) error {
			out = append(out, bytes.Clone(rec))
			return nil
		})
		if err != nil {
			t.Fatalf("Records(job %d) = %v", j, err)
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
		job := JobName("load", j)
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
		seen[crc32.ChecksumIEEE([]byte(JobName("load", j)))%8]++
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

// TestIntegrationLoad runs a small benchmark against the real servers,
// with the Kafka engine peer: every phase completes, the report has its
// figures, and both consumers stored every NCCL line of the stream.
func TestIntegrationLoad(t *testing.T) {
	v := testenv.Servers(t, "", "NCCLWATCH_TEST_KAFKA", "NCCLWATCH_TEST_CLICKHOUSE")
	k, chAddr := v[0], v[1]
	bin := filepath.Join(t.TempDir(), "ncclwatch")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/ncclwatch").CombinedOutput(); err != nil {
		t.Fatalf("go build ncclwatch: %v\n%s", err, out)
	}
	o := DefaultOptions()
	o.Brokers, o.ClickHouse = strings.Split(k, ","), []string{chAddr}
	o.NCCLWatch, o.KafkaTool, o.Peer = bin, []string{"../../../deploy/local/kafka.sh", "tool"}, true
	o.Records, o.Jobs, o.Partitions, o.Producers = 10000, 8, 4, 2
	o.LatRate, o.LatDuration, o.Timeout = 2000, time.Second, 3*time.Minute
	// The test server's pid, as load.sh finds it (deploy/local/
	// clickhouse.sh's pid file for its port), when it runs here.
	local := false
	if _, port, err := net.SplitHostPort(chAddr); err == nil {
		dir := os.Getenv("TMPDIR")
		if dir == "" {
			dir = "/tmp"
		}
		if b, err := os.ReadFile(filepath.Join(dir, "ncclwatch-clickhouse-"+port, "clickhouse.pid")); err == nil {
			pid := strings.TrimSpace(string(b))
			if _, ok := sampleCPU(pid); ok {
				o.ServerPID, local = pid, true
			}
		}
	}
	// The test broker's pid likewise (deploy/local/kafka.sh's pid file).
	broker := false
	if _, port, err := net.SplitHostPort(o.Brokers[0]); err == nil {
		dir := os.Getenv("TMPDIR")
		if dir == "" {
			dir = "/tmp"
		}
		if b, err := os.ReadFile(filepath.Join(dir, "ncclwatch-kafka-"+port, "kafka.pid")); err == nil {
			pid := strings.TrimSpace(string(b))
			if _, _, ok := readCPU(pid); ok {
				o.BrokerPID, broker = pid, true
			}
		}
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	rep, err := Run(context.Background(), o, &errOut)
	var out bytes.Buffer
	if rep != nil {
		rep.Print(&out)
	}
	if err != nil {
		t.Fatalf("Run = %v\nreport:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	t.Logf("report:\n%s", out.String())
	for _, want := range []string{"produce:  10000 records", "consume:  ncclwatch run: 10000 records", "peer:     ClickHouse Kafka engine",
		"ratio:", "record-to-row p50", "VmHWM", "socket_fallback", "parts:    ncclwatch's tables at lag 0: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// Every insert writes a part: at least nccl_events, training_steps and
	// the summaries got one.
	if rep.parts.inserted < 4 {
		t.Errorf("parts written by inserts: %d; want at least 4\n%s", rep.parts.inserted, out.String())
	}
	if broker {
		// The broker serves both consumers their 10 000 records: more than
		// one 10 ms clock tick each.
		if rep.brokerPeer == nil || rep.brokerConsume == nil || rep.brokerConsume.user+rep.brokerConsume.sys <= 0 ||
			!strings.Contains(out.String(), "broker:   Kafka broker CPU (pid "+o.BrokerPID+")") {
			t.Errorf("no broker CPU figures with the local broker's pid %s:\n%s", o.BrokerPID, out.String())
		}
	}
	if b := rep.boxConsume; b == nil || b.cpus < 1 || b.busy <= 0 || b.busy > b.total || !strings.Contains(out.String(), "box:      while ncclwatch consumed") {
		t.Errorf("box CPU figures %+v; want this host's CPUs busy while ncclwatch consumed:\n%s", b, out.String())
	}
	if local {
		if rep.serverPeer == nil || rep.serverConsume == nil || !strings.Contains(out.String(), "server:   ClickHouse server CPU (pid "+o.ServerPID+")") {
			t.Errorf("no server CPU figures with the local server's pid %s:\n%s", o.ServerPID, out.String())
		} else if rep.serverPeer.user+rep.serverPeer.sys <= 0 {
			// The Kafka engine consumes in the server: 10 000 JSON
			// records take more than one 10 ms clock tick.
			t.Errorf("server CPU while the peer consumed: %+v; want some", *rep.serverPeer)
		}
		if rep.parts.files < 10*rep.parts.inserted {
			t.Errorf("%d files in %d parts; want the files of the local server's parts (over 10 each)", rep.parts.files, rep.parts.inserted)
		}
	}
	// The NCCL lines of the stream, counted from the generator: the peer's
	// rows are those lines of the backlog, and every one of them (backlog
	// and latency phase) is an nccl_events row a query sees.
	ncclLines := func(prefix string, seed uint64, total int64, perJob func(j int) int64) int64 {
		var n int64
		for j := 0; total > 0; j++ {
			m := min(perJob(j), total)
			total -= m
			err := Records(seed, j, JobName(prefix, j%o.Jobs), o.NCCLShare, m, nil, func(rec []byte) error {
				if bytes.Contains(rec, []byte("NCCL")) {
					n++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	backlog := ncclLines("load", o.Seed, o.Records, func(j int) int64 { return o.Records / int64(o.Jobs) })
	latency := ncclLines("latency", o.Seed+1, int64(o.LatRate*o.LatDuration.Seconds()),
		func(int) int64 { return max(int64(o.LatRate*o.LatDuration.Seconds())/int64(o.Jobs), 1) })
	if rep.peer == nil || int64(rep.peer.rows) != backlog {
		t.Errorf("peer rows %v; want the backlog's %d NCCL lines", rep.peer, backlog)
	}
	if want := strconv.FormatInt(backlog+latency, 10); rep.stored != want {
		t.Errorf("nccl_events rows a query sees: %s; want %s (NCCL lines of backlog and latency phase)\n%s", rep.stored, want, out.String())
	}
}

// TestSampleCPU reads a process's CPU the way the report reads the
// ClickHouse server's: this test process has used some, and no pid means no
// figure.
func TestSampleCPU(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = crc32.ChecksumIEEE([]byte(strconv.Itoa(n)))
	}
	s, ok := sampleCPU(strconv.Itoa(os.Getpid()))
	if !ok || s.user+s.sys <= 0 || len(s.threads) == 0 {
		t.Fatalf("sampleCPU(self) = %+v, %v; want some CPU and threads", s, ok)
	}
	if d := s.since(s); d != (serverCPU{}) {
		t.Errorf("s.since(s) = %+v; want zero", d)
	}
	if _, ok := sampleCPU(""); ok {
		t.Error("sampleCPU(\"\") ok; want no figure without a pid")
	}
	if p := startServerProbe(""); p.stop() != nil {
		t.Error("a probe without a pid gave a figure")
	}
	// The host's CPUs: this test spun one of them for 50 ms above.
	b, ok := readBox()
	if !ok || b.cpus < 1 || b.busy <= 0 || b.busy > b.total {
		t.Errorf("readBox() = %+v, %v; want the host's CPUs with some busy time", b, ok)
	}
}
