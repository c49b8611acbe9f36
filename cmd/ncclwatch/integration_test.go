package main

// Integration tests of the whole service on the real Kafka broker and
// ClickHouse server of deploy/local (NCCLWATCH_TEST_KAFKA and
// NCCLWATCH_TEST_CLICKHOUSE, set by `make test`). They skip without them,
// and fail instead under NCCLWATCH_REQUIRE_SERVERS=1. Every test has its own
// topic, consumer group and database (random suffix), so they share the
// servers with other tests safely; the one that pauses ClickHouse starts a
// private server. Every wait is bounded by itWait and polls every itPoll.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
	"github.com/ncclwatch/ncclwatch/sinks"
)

const (
	itPoll = 100 * time.Millisecond
	itWait = 3 * time.Minute
	corpus = "../../testdata/corpus/"
)

// itServers returns the integration broker and ClickHouse server, or skips
// (fails under NCCLWATCH_REQUIRE_SERVERS=1: CI never skips silently).
func itServers(t *testing.T) (brokers []string, clickhouse string) {
	t.Helper()
	v := testenv.Servers(t, "", "NCCLWATCH_TEST_KAFKA", "NCCLWATCH_TEST_CLICKHOUSE")
	return splitList(v[0]), v[1]
}

func randHex() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// itEnv is one test's topic, group and database.
type itEnv struct {
	// private: the database is on a server of the test's own, removed
	// with it; the cleanup does not drop it.
	private bool
	brokers []string
	chAddr  string
	topic   string
	group   string
	db      string
	ch      *sinks.ClickHouse
}

// newITEnv creates a topic with the given partitions and connects to
// chAddr for the test's queries; the database is dropped at the end.
func newITEnv(t *testing.T, brokers []string, chAddr string, partitions int) *itEnv {
	t.Helper()
	suffix := randHex()
	name := strings.ToLower(strings.NewReplacer("/", "-", " ", "_").Replace(strings.TrimPrefix(t.Name(), "TestIntegration")))
	e := &itEnv{brokers: brokers, chAddr: chAddr, topic: "ncclwatch-it-" + name + "-" + suffix,
		group: "ncclwatch-it-" + name + "-" + suffix, db: "ncclwatch_it_" + suffix}
	ctx, cancel := context.WithTimeout(context.Background(), itWait)
	defer cancel()
	if err := kafka.CreateTopic(ctx, brokers, e.topic, partitions); err != nil {
		t.Fatalf("CreateTopic(%s, %d) = %v", e.topic, partitions, err)
	}
	cfg := sinks.DefaultClickHouseConfig()
	cfg.Addr, cfg.Database = []string{chAddr}, e.db
	cfg.QueryTimeout = 10 * time.Second
	ch, err := sinks.NewClickHouse(ctx, cfg)
	if err != nil {
		t.Fatalf("NewClickHouse(%s) = %v", chAddr, err)
	}
	e.ch = ch
	t.Cleanup(func() {
		if e.private {
			ch.Close() // the server and its data go with the test
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // 18.16 drops slowly on a loaded machine
		defer cancel()
		// clickhouse-go reads the answer to DDL sent through Query as
		// io.EOF from 18.16; whether the database is gone is what counts.
		// A DROP cut by its deadline or the driver's read timeout goes on
		// in the server (a long run's tables hold many parts): give it as
		// long again before the error counts.
		dropErr := e.exec(ctx, "DROP DATABASE IF EXISTS "+e.db)
		if errors.Is(dropErr, io.EOF) {
			dropErr = nil
		}
		n, err := e.count("SELECT count() FROM system.databases WHERE name = '{db}'")
		for wait := time.Now().Add(90 * time.Second); dropErr != nil && err == nil && n != 0 && time.Now().Before(wait); {
			time.Sleep(time.Second)
			n, err = e.count("SELECT count() FROM system.databases WHERE name = '{db}'")
		}
		if err != nil || n != 0 {
			t.Errorf("database %s still exists after DROP (%d, %v; drop: %v)", e.db, n, err, dropErr)
		}
		ch.Close()
	})
	return e
}

// config is the service configuration the tests run with: fast batches,
// rebalances and shutdowns, an ephemeral HTTP port.
func (e *itEnv) config(t *testing.T) serviceConfig {
	t.Helper()
	cfg := defaultServiceConfig()
	cfg.Kafka.Brokers, cfg.Kafka.Topics, cfg.Kafka.GroupID = e.brokers, []string{e.topic}, e.group
	cfg.Kafka.MaxWait = 100 * time.Millisecond
	cfg.Kafka.HeartbeatInterval = 500 * time.Millisecond
	cfg.Kafka.SessionTimeout = 6 * time.Second // the broker's group.min.session.timeout.ms
	cfg.Kafka.RebalanceTimeout = 10 * time.Second
	cfg.ClickHouse.Addr, cfg.ClickHouse.Database = []string{e.chAddr}, e.db
	cfg.Pipeline.Batch.MaxWait = 100 * time.Millisecond
	cfg.Pipeline.RetryBackoff = 100 * time.Millisecond
	cfg.Pipeline.MaxBackoff = time.Second
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Migrate = true
	return cfg
}

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// query runs sql and calls fn for each row with the row's Scan.
func (e *itEnv) query(ctx context.Context, sql string, fn func(scan func(...any) error) error) error {
	r, err := e.ch.Query(ctx, sql)
	if err != nil {
		return err
	}
	var rs rows = r
	defer rs.Close()
	for rs.Next() {
		if err := fn(rs.Scan); err != nil {
			return err
		}
	}
	return rs.Err()
}

func (e *itEnv) exec(ctx context.Context, sql string) error {
	return e.query(ctx, sql, func(func(...any) error) error { return nil })
}

func (e *itEnv) count(sql string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n uint64
	err := e.query(ctx, strings.ReplaceAll(sql, "{db}", e.db), func(scan func(...any) error) error { return scan(&n) })
	return n, err
}

// verdictRow is what the tests compare of a job: the job_verdicts columns
// that scan reports too, with the stored summary's version.
type verdictRow struct {
	Network      *string `json:"network"`
	NetworkClass *string `json:"network_class"`
	Fabric       *string `json:"fabric"`
	GDR          *bool   `json:"gdr"`
	NNodes       *int    `json:"nnodes"`
	NRanks       *int    `json:"nranks"`
	NCCLVersion  *string `json:"nccl_version"`
	Verdict      string  `json:"verdict"`
	Version      uint64  `json:"version"` // max(version) of job_summaries: the NCCL lines folded in
	Rows         uint64  `json:"rows"`    // rows of job_verdicts for the job: 1
}

// want is what scan reports for one file: the uninterrupted expectation.
func want(t *testing.T, path string) verdictRow {
	t.Helper()
	res := scanFile(t, path)
	s := res.Summary
	return verdictRow{Network: s.Network, NetworkClass: s.NetworkClass, Fabric: s.Fabric, GDR: s.GDR,
		NNodes: s.NNodes, NRanks: s.NRanks, NCCLVersion: s.NCCLVersion, Verdict: string(s.Verdict),
		Version: uint64(res.Input.NCCLLines), Rows: 1}
}

// verdicts reads job_verdicts and the summaries' versions, by job.
func (e *itEnv) verdicts() (map[string]verdictRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]verdictRow{}
	err := e.query(ctx, "SELECT job, network, network_class, fabric, gdr, nnodes, nranks, nccl_version, verdict FROM "+
		e.db+".job_verdicts", func(scan func(...any) error) error {
		var (
			job, verdict              string
			network, class, fab, nccl *string
			gdr                       *uint8
			nnodes, nranks            *int32
		)
		if err := scan(&job, &network, &class, &fab, &gdr, &nnodes, &nranks, &nccl, &verdict); err != nil {
			return err
		}
		v := out[job]
		v.Network, v.NetworkClass, v.Fabric, v.NCCLVersion, v.Verdict = network, class, fab, nccl, verdict
		if gdr != nil {
			b := *gdr != 0
			v.GDR = &b
		}
		v.NNodes, v.NRanks = intOf(nnodes), intOf(nranks)
		v.Rows++
		out[job] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = e.query(ctx, "SELECT job, max(version) FROM "+e.db+".job_summaries GROUP BY job",
		func(scan func(...any) error) error {
			var job string
			var version uint64
			if err := scan(&job, &version); err != nil {
				return err
			}
			v := out[job]
			v.Version = version
			out[job] = v
			return nil
		})
	return out, err
}

func intOf(p *int32) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// diffVerdicts says how got differs from want, "" when it does not.
func diffVerdicts(got, want map[string]verdictRow) string {
	var d []string
	for job, w := range want {
		g, ok := got[job]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("job %s: missing from job_verdicts", job))
		case show(g) != show(w):
			d = append(d, fmt.Sprintf("job %s:\n  got  %s\n  want %s", job, show(g), show(w)))
		}
	}
	for job := range got {
		if _, ok := want[job]; !ok {
			d = append(d, fmt.Sprintf("job %s: in job_verdicts but never replayed", job))
		}
	}
	slices.Sort(d)
	return strings.Join(d, "\n")
}

// eventually polls check until it returns "" or itWait passes, then fails
// with check's last answer and what dump says.
func eventually(t *testing.T, what string, check func() string, dump func() string) {
	t.Helper()
	deadline := time.Now().Add(itWait)
	for {
		d := check()
		if d == "" {
			return
		}
		if time.Now().After(deadline) {
			extra := ""
			if dump != nil {
				extra = "\n" + dump()
			}
			t.Fatalf("%s: not reached within %s:\n%s%s", what, itWait, d, extra)
		}
		time.Sleep(itPoll)
	}
}

// waitVerdicts waits until job_verdicts holds exactly want.
func (e *itEnv) waitVerdicts(t *testing.T, want map[string]verdictRow, dump func() string) {
	t.Helper()
	eventually(t, "job_verdicts equal to scan", func() string {
		got, err := e.verdicts()
		if err != nil {
			return err.Error()
		}
		return diffVerdicts(got, want)
	}, dump)
}

// replayFile produces one file as one job's Fluent Bit records (replay.go)
// and returns the number of records.
func (e *itEnv) replayFile(t *testing.T, job, path string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), itWait)
	defer cancel()
	n, _, err := replay(ctx, io.Discard, e.brokers, e.topic, 1, replayMeta{Job: job, Namespace: "it", Pod: job + "-worker-0",
		Container: "trainer"}, 0, 1, []string{path})
	if err != nil {
		t.Fatalf("replay %s as %s: %v", path, job, err)
	}
	return n
}

// syncBuffer is a log destination shared by the service's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tail(s.b.String(), 40)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// itService is serve() running in the test process.
type itService struct {
	name   string
	cancel context.CancelFunc
	done   chan error
	log    *syncBuffer
	addr   string
}

// startService runs serve(cfg) until the test ends (or stop) and waits
// until its HTTP endpoints answer.
func startService(t *testing.T, name string, cfg serviceConfig) *itService {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	s := &itService{name: name, done: make(chan error, 1), log: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		cancel()
		t.Fatalf("%s: listen %s: %v", name, cfg.HTTP.Listen, err)
	}
	s.addr = ln.Addr().String()
	go func() { s.done <- serve(ctx, cfg, newLogger(s.log, "info"), serveOptions{listener: ln}) }()
	if err, stopped := awaitHealthz(s.addr, s.done, itWait); stopped {
		cancel()
		t.Fatalf("%s: serve returned before it started: %v\n%s", name, err, s.log)
	} else if err != nil {
		cancel()
		t.Fatalf("%s: %v\n%s", name, err, s.log)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// awaitHealthz polls http://addr/healthz until it answers 200: serve has
// connected its sink and serves its endpoints. It reports serve's error
// and stopped when serve returned first (the error was taken from done),
// and an error when limit passed first.
func awaitHealthz(addr string, done <-chan error, limit time.Duration) (err error, stopped bool) {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return err, true
		default:
		}
		if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil, false
			}
		}
		select {
		case err := <-done:
			return err, true
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("serve did not answer /healthz within %s", limit), false
}

// stop cancels the service and waits for serve to return.
func (s *itService) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("%s: serve() = %v\n%s", s.name, err, s.log)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s: serve did not return within 30s of cancel\n%s", s.name, s.log)
	}
}

func (s *itService) dump() string { return "---- " + s.name + " log ----\n" + s.log.String() }

// httpGet returns the status and body of GET url, bounded by 5 s.
func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric reads one sample from addr's /metrics: name with its labels as
// the exposition format prints them, e.g. `x_total{reason="oversized"}`.
// An absent sample is 0.
func metric(t *testing.T, addr, sample string) float64 {
	t.Helper()
	code, body, err := httpGet("http://" + addr + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s/metrics = %d, %v", addr, code, err)
	}
	v, _ := sampleValue(body, sample)
	return v
}

func sampleValue(body, sample string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if rest, ok := strings.CutPrefix(l, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func readyz(addr string) int {
	code, _, err := httpGet("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	return code
}

// TestIntegrationEndToEndEqualsScan replays real corpus files as jobs into
// the real broker, runs the service against the real ClickHouse, and checks
// that every job's job_verdicts row is what scan says for the same file.
func TestIntegrationEndToEndEqualsScan(t *testing.T) {
	brokers, chAddr := itServers(t)
	e := newITEnv(t, brokers, chAddr, 3)
	files := []string{
		"083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log",
		"107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log",
		"063_roce_gdr_disabled_for_hca_gdr_level_sys.log",
		"045_nvls_single_node_h800_nccl2.18.3_part2_connect_complete.log",
		"082_efa_aws_libfabric_gdrdma_p4d_eks_2node_16rank_channels.log",
		"022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log",
		"069_nccl2.27.5_ofi_plugin_rejected_fallback_internal_ib_roce_part2.log",
		"052_fastrak_tcpxo_gcp_a3mega_using_network_grep.log",
		"080_efa_ofi_libfabric_no_gdr_g7e_2node_nccl2.29.2.log",
	}
	wantRows := map[string]verdictRow{}
	for _, f := range files {
		job := "e2e-" + f[:3]
		wantRows[job] = want(t, corpus+f)
		e.replayFile(t, job, corpus+f)
	}
	svc := startService(t, "ncclwatch", e.config(t))
	e.waitVerdicts(t, wantRows, svc.dump)

	var lines uint64
	for _, w := range wantRows {
		lines += w.Version
	}
	if n, err := e.count("SELECT count() FROM {db}.nccl_events FINAL"); err != nil || n != lines {
		t.Errorf("nccl_events FINAL rows = %d, %v; want %d (the NCCL lines replayed)", n, err, lines)
	}
	if code := readyz(svc.addr); code != http.StatusOK {
		t.Errorf("/readyz = %d; want 200", code)
	}
}

// genJobs writes n seeded synthetic raw training logs (gen.go) into dir,
// alternating IB and silent Socket jobs of 2 to 4 nodes, and returns their
// paths by job name.
func genJobs(t *testing.T, dir string, n int, bytesPerJob int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range n {
		cfg := loadtest.DefaultGenConfig()
		cfg.RandomSteps = true // the stream these tests were written against
		cfg.Seed = uint64(100 + i)
		cfg.Bytes = bytesPerJob
		cfg.Nodes = 2 + i%3
		cfg.Network = []string{"IB", "Socket"}[i%2]
		job := fmt.Sprintf("gen-%02d-%s", i, strings.ToLower(cfg.Network))
		path := filepath.Join(dir, job+".log")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := loadtest.Generate(f, cfg); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		out[job] = path
	}
	return out
}

// buildBinary builds ncclwatch into dir, with -race when the test binary
// has it (the build then reuses the test's compiled packages).
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "ncclwatch")
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	cmd := exec.Command("go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// process is `ncclwatch run` as a child process.
type process struct {
	cmd  *exec.Cmd
	log  string
	addr string
	done chan struct{}
}

// startProcess starts `ncclwatch run --config config` with env added to the
// test's environment.
func startProcess(t *testing.T, bin, config, logPath, addr string, env ...string) *process {
	t.Helper()
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", config)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(append(os.Environ(), "NCCLWATCH_BROKERS=", "NCCLWATCH_CLICKHOUSE="), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: logPath, addr: addr, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	eventually(t, "ncclwatch run answering /readyz", func() string {
		select {
		case <-p.done:
			return "exited"
		default:
		}
		if code := readyz(addr); code != http.StatusOK {
			return fmt.Sprintf("/readyz = %d", code)
		}
		return ""
	}, p.dump)
	return p
}

func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *process) dump() string {
	b, _ := os.ReadFile(p.log)
	return "---- " + p.log + " ----\n" + tail(string(b), 40)
}

// writeRunConfig writes the YAML config a `ncclwatch run` subprocess of the
// test uses (fast rebalances, migrations at start, /metrics on a free port)
// with pipelineYAML appended, and returns its path and the HTTP address.
func writeRunConfig(t *testing.T, e *itEnv, dir, chAddr, pipelineYAML string) (config, addr string) {
	t.Helper()
	return writeRunConfigWith(t, e, dir, fmt.Sprintf("clickhouse:\n  addr: [%q]\n  database: %s\n", chAddr, e.db),
		"migrate: true\n"+pipelineYAML)
}

// writeRunConfigWith is writeRunConfig with the clickhouse section and the
// rest of the file (after kafka and http) given.
func writeRunConfigWith(t *testing.T, e *itEnv, dir, clickhouseYAML, restYAML string) (config, addr string) {
	t.Helper()
	port := freePort(t)
	config = filepath.Join(dir, "ncclwatch.yaml")
	yaml := fmt.Sprintf(`kafka:
  brokers: [%q]
  topics: [%q]
  group_id: %q
  max_wait: 100ms
  heartbeat_interval: 500ms
  session_timeout: 6s
  rebalance_timeout: 10s
http:
  listen: 127.0.0.1:%d
`, e.brokers[0], e.topic, e.group, port) + clickhouseYAML + restYAML
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return config, fmt.Sprintf("127.0.0.1:%d", port)
}

// TestIntegrationKillAndRestart kills `ncclwatch run` with SIGKILL while it
// consumes a mixed stream of many jobs, restarts it in the same group, and
// checks that storage shows every job once with the uninterrupted verdict
// and version, and every NCCL line once.
func TestIntegrationKillAndRestart(t *testing.T) {
	brokers, chAddr := itServers(t)
	e := newITEnv(t, brokers, chAddr, 3)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	jobs := genJobs(t, dir, 12, 1<<20)
	wantRows := map[string]verdictRow{}
	var lines uint64
	for job, path := range jobs {
		w := want(t, path)
		wantRows[job] = w
		lines += w.Version
	}

	config, addr := writeRunConfig(t, e, dir, chAddr, `pipeline:
  batch:
    max_rows: 200
    max_wait: 100ms
`)
	logPath := filepath.Join(dir, "run.log")
	first := startProcess(t, bin, config, logPath, addr)

	// Produce while the service consumes, paced so that the stream lasts
	// a few seconds whatever the machine: the kill lands mid-stream.
	names := make([]string, 0, len(jobs))
	for job := range jobs {
		names = append(names, job)
	}
	slices.Sort(names)
	var total int64
	produced := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), itWait)
		defer cancel()
		for _, job := range names {
			n, _, err := replay(ctx, io.Discard, e.brokers, e.topic, 1, replayMeta{Job: job, Namespace: "it",
				Pod: job + "-worker-0", Container: "trainer"}, 25000, 1, []string{jobs[job]})
			if err != nil {
				produced <- err
				return
			}
			total += n
		}
		produced <- nil
	}()

	// The kill waits for an alert to be firing too (the second job falls
	// back to sockets): after the restart the alerts firing at the kill
	// keep their times (the rules engine restores its stored states).
	// How many records that takes depends on where the batches fell.
	firingQ := "SELECT concat(job, ' ', rule), toString(fired_at) FROM " + e.db + ".alerts FINAL WHERE state = 'firing' ORDER BY 1"
	var commitsAtKill, recordsAtKill float64
	eventually(t, "some batches committed and an alert firing", func() string {
		commitsAtKill = metric(t, addr, "ncclwatch_offset_commits_total")
		recordsAtKill = metric(t, addr, "ncclwatch_records_total")
		if commitsAtKill < 3 || recordsAtKill < 20000 {
			return fmt.Sprintf("%v commits, %v records so far", commitsAtKill, recordsAtKill)
		}
		if len(queryStrings(t, e.ch, firingQ)) == 0 {
			return fmt.Sprintf("%v commits, %v records so far, no alert firing", commitsAtKill, recordsAtKill)
		}
		return ""
	}, first.dump)
	first.kill()
	t.Logf("killed -9 after %v commits and %v records", commitsAtKill, recordsAtKill)
	firingAtKill := queryStrings(t, e.ch, firingQ)

	second := startProcess(t, bin, config, logPath, addr)
	select {
	case err := <-produced:
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
	case <-time.After(itWait):
		t.Fatal("replay did not finish")
	}
	if float64(total) <= recordsAtKill {
		t.Fatalf("the kill came after the whole stream (%d records) was consumed: it proves nothing", total)
	}
	e.waitVerdicts(t, wantRows, second.dump)
	eventually(t, "nccl_events holds every NCCL line once", func() string {
		n, err := e.count("SELECT count() FROM {db}.nccl_events FINAL")
		if err != nil || n != lines {
			return fmt.Sprintf("nccl_events FINAL rows = %d, %v; want %d", n, err, lines)
		}
		return ""
	}, second.dump)
	if n, err := e.count("SELECT count() FROM (SELECT job FROM {db}.job_verdicts GROUP BY job HAVING count() > 1)"); err != nil || n != 0 {
		t.Errorf("jobs with more than one job_verdicts row = %d, %v; want 0", n, err)
	}
	if r := metric(t, addr, "ncclwatch_state_rebuilt_events_total"); r == 0 {
		t.Errorf("the restarted service rebuilt no events from storage:\n%s", second.dump())
	}
	if len(firingAtKill) == 0 {
		t.Errorf("no alert was firing at the kill: the restore of alert states is not exercised")
	}
	eventually(t, "the alerts firing at the kill still firing, with their times", func() string {
		now := queryStrings(t, e.ch, firingQ)
		var missing []string
		for _, a := range firingAtKill {
			if !slices.Contains(now, a) {
				missing = append(missing, a)
			}
		}
		if len(missing) > 0 {
			return fmt.Sprintf("firing at the kill (job rule fired_at): %v; now: %v", firingAtKill, now)
		}
		return ""
	}, second.dump)
	t.Logf("%d alerts firing at the kill kept their fired_at after the restart", len(firingAtKill))
	t.Logf("restarted service: %v records, %v rebuilt events",
		metric(t, addr, "ncclwatch_records_total"), metric(t, addr, "ncclwatch_state_rebuilt_events_total"))
}

// privateClickHouse starts a ClickHouse server of the test's own on free
// ports (deploy/local/clickhouse.sh) and returns its native address and a
// function that pauses (SIGSTOP) or resumes (SIGCONT) it.
func privateClickHouse(t *testing.T) (addr string, signal func(syscall.Signal)) {
	t.Helper()
	tcp, httpPort := freePort(t), freePort(t)
	for httpPort == tcp {
		httpPort = freePort(t)
	}
	tmp := t.TempDir()
	script := "../../deploy/local/clickhouse.sh"
	// No TLS port: the shared server holds make test's, and this one is
	// plaintext only (CLICKHOUSE_SECURE_DIR would point into the shared one).
	env := append(os.Environ(), "CLICKHOUSE_PORT="+strconv.Itoa(tcp), "CLICKHOUSE_HTTP_PORT="+strconv.Itoa(httpPort), "TMPDIR="+tmp,
		"CLICKHOUSE_TLS_PORT=", "CLICKHOUSE_SECURE_DIR=")
	run := func(arg string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, arg)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	if out, err := run("start"); err != nil {
		t.Fatalf("clickhouse.sh start: %v\n%s", err, out)
	}
	pidText, err := os.ReadFile(filepath.Join(tmp, "ncclwatch-clickhouse-"+strconv.Itoa(tcp), "clickhouse.pid"))
	pid, perr := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil || perr != nil {
		t.Fatalf("clickhouse pid file: %v %v", err, perr)
	}
	signal = func(sig syscall.Signal) {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Errorf("kill -%d %d: %v", sig, pid, err)
		}
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		if out, err := run("stop"); err != nil {
			t.Errorf("clickhouse.sh stop: %v\n%s", err, out)
		}
	})
	return "127.0.0.1:" + strconv.Itoa(tcp), signal
}

// committed reads the group's committed offsets with the broker's own
// tool (ConsumerGroupCommand): an independent view of what was committed.
func committed(t *testing.T, e *itEnv) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), itWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../../deploy/local/kafka.sh", "tool",
		"org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", e.brokers[0],
		"--describe", "--group", e.group)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ConsumerGroupCommand --describe: %v\n%s", err, out)
	}
	offs := map[int]int64{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[1] != e.topic {
			continue
		}
		p, err1 := strconv.Atoi(f[2])
		o, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil {
			continue
		}
		if err2 != nil {
			o = 0 // "-": nothing committed
		}
		offs[p] = o
	}
	return offs
}

func sum(m map[int]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// TestIntegrationClickHouseDown pauses the service's ClickHouse (SIGSTOP:
// the server is unreachable but keeps its data) while records arrive, and
// checks that nothing is committed meanwhile, /readyz says 503, and that
// after SIGCONT consumption resumes and every job and event is stored.
func TestIntegrationClickHouseDown(t *testing.T) {
	brokers, _ := itServers(t)
	chAddr, signal := privateClickHouse(t)
	e := newITEnv(t, brokers, chAddr, 2)
	cfg := e.config(t)
	cfg.ClickHouse.QueryTimeout = 2 * time.Second
	cfg.ClickHouse.DialTimeout = time.Second
	cfg.Pipeline.SinkTimeout = 5 * time.Second // the default, said here because it is measured
	svc := startService(t, "ncclwatch", cfg)

	phases := [][]string{
		{"083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log", "022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log"},
		{"107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log", "063_roce_gdr_disabled_for_hca_gdr_level_sys.log"},
		{"082_efa_aws_libfabric_gdrdma_p4d_eks_2node_16rank_channels.log"},
	}
	wantRows := map[string]verdictRow{}
	var produced [3]int64
	replayPhase := func(i int) {
		for _, f := range phases[i] {
			job := "down-" + f[:3]
			wantRows[job] = want(t, corpus+f)
			produced[i] += e.replayFile(t, job, corpus+f)
		}
	}

	replayPhase(0)
	e.waitVerdicts(t, wantRows, svc.dump)
	commits0 := metric(t, svc.addr, "ncclwatch_offset_commits_total")

	signal(syscall.SIGSTOP)
	stalled := time.Now()
	paused := true
	defer func() {
		if paused {
			signal(syscall.SIGCONT)
		}
	}()
	replayPhase(1)
	for readyz(svc.addr) != http.StatusServiceUnavailable {
		if time.Since(stalled) > 30*time.Second {
			t.Fatalf("/readyz still not 503 %v after ClickHouse was paused:\n%s", time.Since(stalled), svc.dump())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("ClickHouse stall to /readyz 503: %v (pipeline.sink_timeout %v)", time.Since(stalled).Round(10*time.Millisecond), cfg.Pipeline.SinkTimeout)
	eventually(t, "ncclwatch_sink_healthy 0 while ClickHouse is paused", func() string {
		if v := metric(t, svc.addr, "ncclwatch_sink_healthy"); v != 0 {
			return fmt.Sprintf("ncclwatch_sink_healthy = %v", v)
		}
		return ""
	}, svc.dump)
	offs1 := committed(t, e)
	commits1 := metric(t, svc.addr, "ncclwatch_offset_commits_total")
	time.Sleep(3 * time.Second) // several failed inserts and retries
	offs2 := committed(t, e)
	commits2 := metric(t, svc.addr, "ncclwatch_offset_commits_total")
	if commits2 != commits1 {
		t.Errorf("offset commits went from %v to %v while ClickHouse was paused", commits1, commits2)
	}
	if sum(offs2) != sum(offs1) || sum(offs2) > produced[0] {
		t.Errorf("committed offsets while paused: %v then %v; want unchanged and at most the %d records stored before the pause",
			offs1, offs2, produced[0])
	}
	if code := readyz(svc.addr); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while ClickHouse is paused; want 503", code)
	}
	if n := metric(t, svc.addr, "ncclwatch_insert_errors_total"); n == 0 {
		t.Errorf("ncclwatch_insert_errors_total = 0 while ClickHouse is paused")
	}
	t.Logf("paused: commits %v (before the pause %v), committed offsets %v, /readyz 503", commits2, commits0, offs2)

	signal(syscall.SIGCONT)
	paused = false
	replayPhase(2)
	e.waitVerdicts(t, wantRows, svc.dump)
	var lines uint64
	for _, w := range wantRows {
		lines += w.Version
	}
	eventually(t, "everything stored and committed after the resume", func() string {
		n, err := e.count("SELECT count() FROM {db}.nccl_events FINAL")
		if err != nil || n != lines {
			return fmt.Sprintf("nccl_events FINAL rows = %d, %v; want %d", n, err, lines)
		}
		if code := readyz(svc.addr); code != http.StatusOK {
			return fmt.Sprintf("/readyz = %d", code)
		}
		if v := metric(t, svc.addr, "ncclwatch_sink_healthy"); v != 1 {
			return fmt.Sprintf("ncclwatch_sink_healthy = %v", v)
		}
		return ""
	}, svc.dump)
	if log := svc.dump(); !strings.Contains(log, "sink has not stored a batch within pipeline.sink_timeout") {
		t.Errorf("no warning logged for the outage:\n%s", log)
	}
	all := produced[0] + produced[1] + produced[2]
	// A commit held back by an open training_steps row or nccl-tests run
	// reaches the end once the partition was quiet for pipeline.fold_idle.
	eventually(t, "every record committed after the resume", func() string {
		if offs := committed(t, e); sum(offs) != all {
			return fmt.Sprintf("committed offsets = %v (sum %d); want every record (%d)", offs, sum(offs), all)
		}
		return ""
	}, svc.dump)
}

// TestIntegrationPoisonRecords mixes invalid JSON and oversized records
// with valid Fluent Bit records on one partition and checks that the bad
// ones are dead letters with reasons, counted in the metric, and that the
// valid jobs after them are stored.
func TestIntegrationPoisonRecords(t *testing.T) {
	brokers, chAddr := itServers(t)
	e := newITEnv(t, brokers, chAddr, 1)
	cfg := e.config(t)
	cfg.Pipeline.MaxRecordBytes = 2048
	cfg.Decoder.MaxLineBytes = 512

	now := time.Now()
	var msgs []kafka.ProducerMessage
	add := func(v []byte) int64 {
		msgs = append(msgs, kafka.ProducerMessage{Key: []byte("poison"), Value: v})
		return int64(len(msgs) - 1)
	}
	addFile := func(job, name string) {
		b, err := os.ReadFile(corpus + name)
		if err != nil {
			t.Fatal(err)
		}
		m := replayMeta{Job: job, Namespace: "it", Pod: job + "-worker-0", Node: "node-" + job, Container: "trainer"}
		for i, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			add(fluentBitJSON(nil, []byte(l), now.Add(time.Duration(i)*time.Microsecond), m))
		}
	}
	wantRows := map[string]verdictRow{
		"poison-083": want(t, corpus+"083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log"),
		"poison-022": want(t, corpus+"022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log"),
	}
	addFile("poison-083", "083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log")
	// Each bad record holds an NCCL token: the prefilter passes only those
	// to the decoder (records without one are skipped undecoded).
	bad := map[int64]string{
		// Each kind of poison from issue 8's fault-injection run: none may
		// be read as text (that made fake jobs out of the NCCL line inside).
		add([]byte(`{"log":"h:1:1 [0] NCCL INFO Using network IB\n","stream":"stdout","time":}`)):                                          "json_syntax",
		add([]byte(`{"log":"h:1:1 [0] NCCL INFO bad escape \q","time":"2026-11-29T12:00:00Z"}`)):                                           "json_syntax",
		add([]byte(`{"log":"h:1:1 [0] NCCL INFO unterminated,"kubernetes":{"pod_name":"x"}}`)):                                             "json_syntax",
		add([]byte(`{"log":"h:1:1 [0] NCCL INFO Using network Socket\n","kubernetes":{"pod_name":"chaos-poison-trunc`)):                    "json_truncated",
		add([]byte(`{"log":7,"message":"h:1:1 [0] NCCL INFO Using network Socket","kubernetes":{"pod_name":"chaos-poison-lognum-0000"}}`)): "json_type",
		add([]byte("{\"log\":\"h:1:1 [0] NCCL INFO Using network\x00Socket\\n\",\"kubernetes\":{\"pod_name\":\"chaos-poison-nul\"}}")):     "json_control",
		add([]byte(`{"msg":"h:1:1 [0] NCCL INFO Using network Socket","kubernetes":{"pod_name":"chaos-poison-notext"}}`)):                  "json_no_text",
		add(fluentBitJSON(nil, []byte("h:1:1 [0] NCCL INFO "+strings.Repeat("x", 4000)), now, replayMeta{Job: "x"})):                       "oversized",
		add(fluentBitJSON(nil, []byte("h:1:1 [0] NCCL INFO "+strings.Repeat("y", 900)), now, replayMeta{Job: "x"})):                        "oversized",
	}
	addFile("poison-022", "022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log")

	pcfg := kafka.DefaultProducerConfig()
	pcfg.Brokers, pcfg.Topic = e.brokers, e.topic
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), itWait)
	defer cancel()
	if err := prod.Produce(ctx, msgs); err != nil {
		t.Fatalf("produce: %v", err)
	}
	prod.Close()

	svc := startService(t, "ncclwatch", cfg)
	e.waitVerdicts(t, wantRows, svc.dump)

	got := map[int64]string{}
	eventually(t, "dead_letters holds the bad records", func() string {
		clear(got)
		qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer qcancel()
		err := e.query(qctx, "SELECT `offset`, reason, length(raw) FROM "+e.db+".dead_letters FINAL ORDER BY `offset`",
			func(scan func(...any) error) error {
				var off int64
				var reason string
				var n uint64
				if err := scan(&off, &reason, &n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("dead letter at %d has no raw bytes", off)
				}
				got[off] = reason
				return nil
			})
		if err != nil {
			return err.Error()
		}
		if len(got) != len(bad) {
			return fmt.Sprintf("dead letters %v; want offsets %v", got, bad)
		}
		return ""
	}, svc.dump)
	counts := map[string]float64{}
	for off, reason := range bad {
		counts[reason]++
		if !strings.HasPrefix(got[off], reason+": ") {
			t.Errorf("dead letter at offset %d: reason %q; want %q…", off, got[off], reason+": ")
		}
	}
	for reason, n := range counts {
		sample := `ncclwatch_dead_letters_total{reason="` + reason + `"}`
		if v := metric(t, svc.addr, sample); v != n {
			t.Errorf("%s = %v; want %v", sample, v, n)
		}
	}
}

// TestIntegrationRebalance starts a second service in the group half-way
// through the stream; partitions move while jobs are half-assembled. The
// stored verdicts and versions must equal the single-consumer expectation.
func TestIntegrationRebalance(t *testing.T) {
	brokers, chAddr := itServers(t)
	const partitions = 4
	e := newITEnv(t, brokers, chAddr, partitions)
	files := []string{
		"083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log",
		"107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log",
		"045_nvls_single_node_h800_nccl2.18.3_part2_connect_complete.log",
		"082_efa_aws_libfabric_gdrdma_p4d_eks_2node_16rank_channels.log",
		"022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log",
		"069_nccl2.27.5_ofi_plugin_rejected_fallback_internal_ib_roce_part2.log",
		"080_efa_ofi_libfabric_no_gdr_g7e_2node_nccl2.29.2.log",
		"054_silent_socket_fallback_slurm_ib_cluster_torchrun.log",
	}
	dir := t.TempDir()
	type half struct{ job, first, second string }
	var halves []half
	wantRows, firstRows := map[string]verdictRow{}, map[string]verdictRow{}
	spread := map[uint32]bool{}
	for _, f := range files {
		job := "rebalance-" + f[:3]
		// The producer's balancer is CRC32 of the key, as librdkafka's.
		spread[crc32.ChecksumIEEE([]byte(job))%partitions] = true
		b, err := os.ReadFile(corpus + f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(b), "\n")
		h := half{job: job, first: filepath.Join(dir, job+".1"), second: filepath.Join(dir, job+".2")}
		if err := os.WriteFile(h.first, []byte(strings.Join(lines[:len(lines)/2], "")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(h.second, []byte(strings.Join(lines[len(lines)/2:], "")), 0o644); err != nil {
			t.Fatal(err)
		}
		halves = append(halves, h)
		wantRows[job] = want(t, corpus+f)
		if w := want(t, h.first); w.Version > 0 {
			firstRows[job] = w
		}
	}
	if len(spread) < 3 {
		t.Fatalf("jobs land on %d of %d partitions; rename them so that both members get work", len(spread), partitions)
	}

	a := startService(t, "member-a", e.config(t))
	var firstRecords int64
	for _, h := range halves {
		firstRecords += e.replayFile(t, h.job, h.first)
	}
	// Wait until the first halves are stored, so that the member that
	// takes partitions over must rebuild their jobs from storage.
	eventually(t, "first halves stored", func() string {
		got, err := e.verdicts()
		if err != nil {
			return err.Error()
		}
		var d []string
		for job, w := range firstRows {
			if got[job].Version != w.Version {
				d = append(d, fmt.Sprintf("%s: version %d; want %d", job, got[job].Version, w.Version))
			}
		}
		// And committed: a commit held back by an open nccl-tests run or
		// training row is released once a partition was read to its end
		// and stayed quiet for pipeline.fold_idle.
		if c := sum(committed(t, e)); c != firstRecords {
			d = append(d, fmt.Sprintf("committed %d of %d records", c, firstRecords))
		}
		return strings.Join(d, "\n")
	}, a.dump)
	recordsA := metric(t, a.addr, "ncclwatch_records_total")

	b := startService(t, "member-b", e.config(t))
	dump := func() string { return a.dump() + "\n" + b.dump() }
	eventually(t, "both members assigned after the rebalance", func() string {
		ra, rb := readyz(a.addr), readyz(b.addr)
		if ra != http.StatusOK || rb != http.StatusOK || metric(t, b.addr, "ncclwatch_state_rebuilds_total") == 0 {
			return fmt.Sprintf("/readyz a=%d b=%d", ra, rb)
		}
		return ""
	}, dump)
	for _, h := range halves {
		e.replayFile(t, h.job, h.second)
	}
	e.waitVerdicts(t, wantRows, dump)

	var lines uint64
	for _, w := range wantRows {
		lines += w.Version
	}
	if n, err := e.count("SELECT count() FROM {db}.nccl_events FINAL"); err != nil || n != lines {
		t.Errorf("nccl_events FINAL rows = %d, %v; want %d", n, err, lines)
	}
	ra, rb := metric(t, a.addr, "ncclwatch_records_total"), metric(t, b.addr, "ncclwatch_records_total")
	if ra <= recordsA || rb == 0 {
		t.Errorf("records after the rebalance: member a %v (had %v before), member b %v; want both to consume", ra, recordsA, rb)
	}
	if n := metric(t, b.addr, "ncclwatch_state_rebuilt_events_total"); n == 0 {
		t.Errorf("member b rebuilt no stored events after taking partitions over\n%s", b.dump())
	}
}

// TestIntegrationRestartAfterPartialBatch stores a job's events the way a
// process does that dies after the nccl_events insert of a batch and before
// its job_summaries insert (inserts are per table, offsets uncommitted),
// then restarts the runner on the same partition: the records are
// delivered again and skipped as stored, and the job's summary must still
// be written, from the state rebuilt out of storage.
func TestIntegrationRestartAfterPartialBatch(t *testing.T) {
	brokers, chAddr := itServers(t)
	e := newITEnv(t, brokers, chAddr, 1)
	ctx, cancel := context.WithTimeout(context.Background(), itWait)
	defer cancel()
	if _, err := e.ch.Migrate(ctx); err != nil {
		t.Fatalf("Migrate() = %v", err)
	}
	const name = "107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log"
	const job = "partial-107"
	wantRows := map[string]verdictRow{job: want(t, corpus+name)}
	b, err := os.ReadFile(corpus + name)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var msgs []pipeline.Message
	m := replayMeta{Job: job, Namespace: "it", Pod: job + "-worker-0", Container: "trainer"}
	for i, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		msgs = append(msgs, pipeline.Message{Topic: e.topic, Partition: 0, Offset: int64(i), Key: []byte(job),
			Value: fluentBitJSON(nil, []byte(l), now.Add(time.Duration(i)*time.Microsecond), m), Time: now})
	}
	life := func(sink pipeline.Consumer) {
		t.Helper()
		cfg := e.config(t).Pipeline
		dcfg := parsers.DefaultDecoderConfig()
		r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory, NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: &parsers.Lines{},
			Candidate: parsers.Candidate, Sink: sink, Loader: e.ch})
		if err := r.Assigned(ctx, []pipeline.Partition{{Topic: e.topic, Partition: 0}}); err != nil {
			t.Fatalf("Assigned: %v", err)
		}
		for _, msg := range msgs {
			if err := r.Message(ctx, msg); err != nil {
				t.Fatalf("Message: %v", err)
			}
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	// First life: only the events table gets the batch, then the process
	// is gone (no summaries, no commit).
	life(pipeline.ConsumerFunc(func(ctx context.Context, b *pipeline.Batch) error {
		return e.ch.Consume(ctx, &pipeline.Batch{Events: b.Events, Offsets: b.Offsets})
	}))
	if n, err := e.count("SELECT count() FROM {db}.job_summaries"); err != nil || n != 0 {
		t.Fatalf("job_summaries after the first life = %d, %v; want 0", n, err)
	}
	// Second life: everything is delivered again from the uncommitted
	// offset.
	life(e.ch)
	got, err := e.verdicts()
	if err != nil {
		t.Fatal(err)
	}
	if d := diffVerdicts(got, wantRows); d != "" {
		t.Errorf("after a restart that found the events stored but not the summary:\n%s", d)
	}
}

// TestIntegrationSIGTERM sends SIGTERM to `ncclwatch run` while it holds an
// open batch (batches flush only on a 1-minute timer here) and checks that
// it stores and commits that batch and exits cleanly within its shutdown
// timeout.
func TestIntegrationSIGTERM(t *testing.T) {
	brokers, chAddr := itServers(t)
	e := newITEnv(t, brokers, chAddr, 2)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	config, addr := writeRunConfig(t, e, dir, chAddr, `pipeline:
  batch:
    max_rows: 1000000
    max_wait: 1m
  shutdown_timeout: 15s
  fold_idle: 10m
`)
	p := startProcess(t, bin, config, filepath.Join(dir, "run.log"), addr)

	path := corpusPath("107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log")
	n := e.replayFile(t, "sigterm-job", path)
	eventually(t, "every record delivered", func() string {
		if got := metric(t, addr, "ncclwatch_records_total"); got < float64(n) {
			return fmt.Sprintf("%v of %d records delivered", got, n)
		}
		return ""
	}, p.dump)
	if c := metric(t, addr, "ncclwatch_offset_commits_total"); c != 0 {
		t.Fatalf("%v commits before SIGTERM; the batch was meant to be open", c)
	}

	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("ncclwatch run still running 30 s after SIGTERM:\n%s", p.dump())
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM; want 0:\n%s", code, p.dump())
	}
	got, err := e.verdicts()
	if err != nil {
		t.Fatal(err)
	}
	w := want(t, path)
	if g, ok := got["sigterm-job"]; !ok || g.Verdict != w.Verdict || g.Version != w.Version {
		t.Errorf("after SIGTERM job_verdicts has %+v (present %v); want verdict %s version %d", g, ok, w.Verdict, w.Version)
	}
	// Everything is stored, and committed up to the first line of the
	// log's nccl-tests run (its command line), a run that never printed a
	// row and may still get them: a restart replays it from there so that
	// its rows keep its header (README, Delivery under faults).
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hold := int64(slices.IndexFunc(strings.Split(string(b), "\n"), func(l string) bool {
		return strings.Contains(l, "nccl-tests/build/all_reduce_perf")
	}))
	if hold < 0 {
		t.Fatal("no nccl-tests command line in the input")
	}
	if c := sum(committed(t, e)); c != hold {
		t.Errorf("committed offsets cover %d records after SIGTERM; want %d (all before the open nccl-tests run) of %d", c, hold, n)
	}
}
