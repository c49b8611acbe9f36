package loadtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// Options configure the load benchmark.
type Options struct {
	Brokers    []string
	ClickHouse []string
	Topic      string // created and filled (default: ncclwatch-load-<random>)
	Database   string // default: ncclwatch_load_<random>, dropped at the end
	// NCCLWatch is the ncclwatch binary the benchmark runs as
	// `ncclwatch run` on the topic.
	NCCLWatch string
	Config    string // optional YAML for `ncclwatch run` (tuning); the benchmark's flags win
	// Peer also times ClickHouse's own Kafka engine with a materialized
	// view doing the minimal job on the same topic, before ncclwatch.
	Peer bool
	// KafkaTool runs a Kafka tool class (deploy/local/kafka.sh tool); the
	// peer's fresh group is reset to the earliest offsets with it.
	KafkaTool  []string
	Records    int64
	Jobs       int
	Partitions int
	Producers  int
	NCCLShare  float64
	// ShareSet says NCCLShare was chosen: RunShapes then gives it to every
	// shape, and otherwise each shape's DefaultShare.
	ShareSet bool
	Seed     uint64
	// Shape is the shape of the stream Run produces (ShapeDefault when
	// empty); RandomSteps is the older name of ShapeRandomSteps.
	Shape       Shape
	RandomSteps bool
	// Concurrent is the number of jobs the cluster shape runs at once; it
	// has as many jobs in all as fit its records, not Jobs.
	Concurrent int
	// InspectorRate is the NCCL Inspector records per second of stream
	// time of the cluster-inspector shape.
	InspectorRate float64
	LatRate       float64 // records/s offered while latency is measured; 0 skips it
	LatDuration   time.Duration
	ProduceOnly   bool
	Keep          bool
	CPUProfile    string // CPU profile of ncclwatch's consume phase
	// ServerPID, when set, is the pid of the ClickHouse server (on this
	// host): its CPU during the peer's and ncclwatch's consume phases is
	// reported.
	ServerPID string
	// BrokerPID, when set, is the pid of the Kafka broker (on this host):
	// its CPU during the same phases is reported.
	BrokerPID string
	Timeout   time.Duration
}

// DefaultOptions is the benchmark: 1 M records over 64 jobs on 8
// partitions, 5 % NCCL lines; 20 k records/s for 10 s of latency samples.
func DefaultOptions() Options {
	return Options{Records: 1_000_000, Jobs: 64, Partitions: 8, Producers: 4, NCCLShare: 0.05, Seed: 1, Concurrent: DefaultConcurrent, InspectorRate: DefaultInspectorRate,
		LatRate: 20000, LatDuration: 10 * time.Second, Timeout: 15 * time.Minute,
		NCCLWatch: "ncclwatch", KafkaTool: []string{"deploy/local/kafka.sh", "tool"}}
}

// Validate checks o and fills the random topic and database names.
func (o *Options) Validate() error {
	var bad []string
	switch {
	case len(o.Brokers) == 0:
		bad = append(bad, "--brokers: required")
	case len(o.ClickHouse) == 0 && !o.ProduceOnly:
		bad = append(bad, "--clickhouse: required")
	}
	if o.Records <= 0 || o.Jobs <= 0 || o.Partitions <= 0 || o.Producers <= 0 || o.Concurrent <= 0 {
		bad = append(bad, "--records, --jobs, --partitions, --producers and --concurrent must be > 0")
	}
	switch {
	case o.Shape == "" && o.RandomSteps:
		o.Shape = ShapeRandomSteps
	case o.Shape == "":
		o.Shape = ShapeDefault
	case o.RandomSteps && o.Shape != ShapeRandomSteps:
		bad = append(bad, "--random-steps is --shape random-steps: not with --shape "+string(o.Shape))
	}
	if !slices.Contains(shapes, o.Shape) {
		bad = append(bad, "--shape: want one of "+strings.Join(ShapeNames(), ", "))
	}
	o.RandomSteps = o.Shape == ShapeRandomSteps
	if o.NCCLShare < 0 || o.NCCLShare > 1 || o.LatRate < 0 || o.LatDuration < 0 || o.InspectorRate < 0 {
		bad = append(bad, "--nccl-share must be in [0,1], --latency-rate, --latency-duration and --inspector-rate >= 0")
	}
	if o.Peer && len(o.KafkaTool) == 0 {
		bad = append(bad, "--kafka-tool: required with --peer")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	suffix := randomSuffix()
	if o.Topic == "" {
		o.Topic = "ncclwatch-load-" + suffix
	}
	if o.Database == "" {
		o.Database = "ncclwatch_load_" + suffix
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// procStatus reads VmRSS and VmHWM (bytes) of process pid ("self" for
// this one) from /proc.
func procStatus(pid string) (rss, hwm int64) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(l, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(l, "VmHWM:"):
			dst = &hwm
		default:
			continue
		}
		f := strings.Fields(l)
		if len(f) >= 2 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			*dst = kb << 10
		}
	}
	return rss, hwm
}

// procCPU returns process pid's user+system CPU time (see readCPU), 0
// when it cannot be read.
func procCPU(pid string) time.Duration {
	u, s, _ := readCPU(pid)
	return u + s
}

// selfCPU returns this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memSampler follows a process's resident memory.
type memSampler struct {
	pid    string
	mu     sync.Mutex
	maxRSS int64
}

func (m *memSampler) run(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rss, _ := procStatus(m.pid)
		m.mu.Lock()
		m.maxRSS = max(m.maxRSS, rss)
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// reset starts a new window and returns the maximum of the last one.
func (m *memSampler) reset() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.maxRSS
	m.maxRSS = 0
	return v
}

// phase is one measured part of the run.
type phase struct {
	records int64
	bytes   int64
	wall    time.Duration
	cpu     time.Duration
}

func (p phase) rate() float64 {
	if p.wall <= 0 {
		return 0
	}
	return float64(p.records) / p.wall.Seconds()
}

func (p phase) String() string {
	if p.wall <= 0 {
		return "-"
	}
	s := p.wall.Seconds()
	return fmt.Sprintf("%d records, %.1f MB in %.2f s: %.0f records/s, %.1f MB/s; CPU %.1f s (%.2f cores)",
		p.records, float64(p.bytes)/1e6, s, float64(p.records)/s, float64(p.bytes)/1e6/s, p.cpu.Seconds(), p.cpu.Seconds()/s)
}

// Report holds the figures the benchmark prints.
type Report struct {
	o             Options
	server        string
	produce       phase
	jobs          int // jobs in the backlog
	peer          *peerResult
	consume       phase       // ncclwatch run started → its group's lag 0
	serverPeer    *serverCPU  // the ClickHouse server's CPU during the peer's phase
	serverConsume *serverCPU  // … and during ncclwatch's consume phase
	brokerPeer    *serverCPU  // the Kafka broker's CPU during the peer's phase
	brokerConsume *serverCPU  // … and during ncclwatch's consume phase
	boxConsume    *boxCPU     // this host's CPUs during ncclwatch's consume phase
	parts         partFigures // of ncclwatch's tables at lag 0
	partsErr      error
	firstCommit   time.Duration // ncclwatch run started → its first commit
	latRecords    int64
	latencies     []time.Duration // sorted
	hwmProduce    int64
	maxRSSConsume int64
	maxRSSLatency int64
	hwmEnd        int64
	stored        string // nccl_events rows as a query sees them
	steps         string // training_steps rows
	verdicts      string // job verdicts by kind
	jobRows       string // job_verdicts rows
}

// quantile returns the q-quantile of sorted d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// Print writes the report.
func (r *Report) Print(w io.Writer) {
	o := r.o
	steps := "every rank prints each step"
	switch o.Shape {
	case ShapeRandomSteps:
		steps = "random steps"
	case ShapeCluster:
		steps = fmt.Sprintf("%d running at once, trainers printing on one rank or every rank", o.Concurrent)
	case ShapeClusterInspector:
		steps = fmt.Sprintf("%d running at once, trainers printing on one rank or every rank, NCCL Inspector records at %.0f/s of stream time",
			o.Concurrent, o.inspectorRate())
	}
	fmt.Fprintf(w, "ncclwatch load: shape %s: %d records over %d jobs, %d partitions, %.1f %% NCCL lines, %s, seed %d\n",
		o.Shape, o.Records, r.jobs, o.Partitions, o.NCCLShare*100, steps, o.Seed)
	fmt.Fprintf(w, "machine: %d CPUs %s/%s %s; broker %s; clickhouse %s %s; topic %s, database %s\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), strings.Join(o.Brokers, ","),
		strings.Join(o.ClickHouse, ","), r.server, o.Topic, o.Database)
	fmt.Fprintf(w, "produce:  %s (%d producers, generation + lz4 + acks)\n", r.produce, o.Producers)
	if o.ProduceOnly {
		return
	}
	if p := r.peer; p != nil {
		fmt.Fprintf(w, "peer:     ClickHouse Kafka engine + materialized view (NCCL lines, Using network, GDRDMA): %s; %d rows (first commit after %.2f s)\n",
			p.phase, p.rows, p.firstCommit.Seconds())
	}
	fmt.Fprintf(w, "consume:  ncclwatch run: %s (process start to group lag 0; first commit after %.2f s)\n",
		r.consume, r.firstCommit.Seconds())
	printCPU(w, "server:   ClickHouse server CPU (pid "+o.ServerPID+")", r.serverPeer, r.serverConsume, (*serverCPU).String)
	printCPU(w, "broker:   Kafka broker CPU (pid "+o.BrokerPID+")", r.brokerPeer, r.brokerConsume, func(c *serverCPU) string {
		return fmt.Sprintf("%.1f s", (c.user + c.sys).Seconds())
	})
	if b := r.boxConsume; b != nil {
		fmt.Fprintf(w, "box:      while ncclwatch consumed, this host's %d CPUs were %.0f %% busy (%.1f of %.1f CPU-s, /proc/stat)\n",
			b.cpus, 100*b.busy.Seconds()/b.total.Seconds(), b.busy.Seconds(), b.total.Seconds())
	}
	if r.partsErr != nil {
		fmt.Fprintf(w, "parts:    %v\n", r.partsErr)
	} else if r.parts.inserted > 0 {
		fmt.Fprintf(w, "parts:    ncclwatch's tables at lag 0: %s\n", r.parts)
	}
	if p := r.peer; p != nil && p.phase.rate() > 0 {
		fmt.Fprintf(w, "ratio:    ncclwatch %.2fx the Kafka engine's records/s\n", r.consume.rate()/p.phase.rate())
	}
	fmt.Fprintf(w, "stored:   a query sees %s nccl_events rows (FINAL), %s training_steps rows; job verdicts: %s\n",
		r.stored, r.steps, r.verdicts)
	if len(r.latencies) > 0 {
		fmt.Fprintf(w, "latency:  %d records offered at %.0f records/s: record-to-row p50 %s, p90 %s, p99 %s, max %s (every record: its time to its offset committed, after ClickHouse acknowledged it)\n",
			r.latRecords, o.LatRate, quantile(r.latencies, 0.5).Round(time.Millisecond), quantile(r.latencies, 0.9).Round(time.Millisecond),
			quantile(r.latencies, 0.99).Round(time.Millisecond), r.latencies[len(r.latencies)-1].Round(time.Millisecond))
	}
	fmt.Fprintf(w, "memory:   load harness VmHWM after produce %.0f MB; ncclwatch run: max VmRSS consuming %.0f MB, during latency phase %.0f MB, VmHWM at end %.0f MB\n",
		mb(r.hwmProduce), mb(r.maxRSSConsume), mb(r.maxRSSLatency), mb(r.hwmEnd))
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// printCPU prints a process's CPU line: during the peer's and ncclwatch's
// consume phases, each when measured, as show formats it.
func printCPU(w io.Writer, head string, peer, consume *serverCPU, show func(*serverCPU) string) {
	if peer == nil && consume == nil {
		return
	}
	fmt.Fprint(w, head)
	if peer != nil {
		fmt.Fprintf(w, " while the peer consumed: %s;", show(peer))
	}
	if consume != nil {
		fmt.Fprintf(w, " while ncclwatch consumed: %s", show(consume))
	}
	fmt.Fprintln(w)
}

// Run runs the benchmark: produce the backlog; optionally time the peer on
// it; time `ncclwatch run` on it; then measure latency at an offered rate.
func Run(ctx context.Context, o Options, stderr io.Writer) (*Report, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rep := &Report{o: o}
	pcfg := kafka.DefaultProducerConfig()
	pcfg.Brokers, pcfg.Topic = o.Brokers, o.Topic
	if err := kafka.CreateTopicWith(ctx, pcfg, o.Partitions); err != nil {
		return nil, err
	}
	if !o.Keep {
		// Each run's topic is ~200 MB per 3 M records: left behind, they
		// fill a tmpfs broker and slow it (272 partitions after 34 runs).
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := kafka.DeleteTopic(dctx, pcfg); err != nil {
				fmt.Fprintf(stderr, "ncclwatch-load: %v\n", err)
			}
		}()
	}
	var err error
	if rep.produce, rep.jobs, err = produceBacklog(ctx, o, pcfg); err != nil {
		return rep, err
	}
	_, rep.hwmProduce = procStatus("self")
	if o.ProduceOnly {
		return rep, nil
	}

	chcfg := sinks.DefaultClickHouseConfig()
	chcfg.Addr, chcfg.Database = o.ClickHouse, o.Database
	ch, err := sinks.NewClickHouse(ctx, chcfg)
	if err != nil {
		return rep, err
	}
	defer ch.Close()
	rep.server = ch.Version()
	if _, err := ch.Migrate(ctx); err != nil {
		return rep, err
	}
	if !o.Keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = execSQL(dctx, ch, "DROP DATABASE IF EXISTS "+o.Database)
		}()
	}
	offs, err := kafka.NewGroupOffsets(o.Brokers, o.Topic, o.Partitions)
	if err != nil {
		return rep, err
	}
	defer offs.Close()
	end, err := offs.End(ctx)
	if err != nil {
		return rep, err
	}

	if o.Peer {
		probe, broker := startServerProbe(o.ServerPID), startServerProbe(o.BrokerPID)
		if rep.peer, err = runPeer(ctx, o, ch, offs, end, rep.produce, stderr); err != nil {
			return rep, fmt.Errorf("peer: %w", err)
		}
		rep.serverPeer, rep.brokerPeer = probe.stop(), broker.stop()
	}

	// ncclwatch run on the backlog, timed to its group's lag 0.
	group := o.Topic
	svc, err := consumeBacklog(ctx, o, rep, ch, offs, end, group, stderr)
	defer func() {
		if svc != nil {
			svc.kill() // the latest service; an earlier one was stopped
		}
	}()
	if err != nil {
		return rep, err
	}
	if o.CPUProfile != "" && o.LatRate > 0 && o.LatDuration > 0 {
		// The profile covers the backlog only: a fresh process measures
		// latency. (Without a latency phase there is none to start: one
		// stopped at once could get SIGTERM before its handler is set.)
		_, rep.hwmEnd = procStatus(svc.pid)
		if err := svc.stop(); err != nil {
			return rep, err
		}
		if svc, err = startService(ctx, o, group, "", stderr); err != nil {
			svc = nil
			return rep, err
		}
	}
	if err := measureLatency(ctx, o, rep, pcfg, offs, end, group, svc); err != nil {
		return rep, err
	}
	if _, hwm := procStatus(svc.pid); hwm > 0 {
		rep.hwmEnd = max(rep.hwmEnd, hwm)
	}
	if err := svc.stop(); err != nil {
		return rep, err
	}
	rep.stored, rep.steps, rep.verdicts, rep.jobRows = storedFigures(ctx, ch, o.Database)
	return rep, nil
}

// consumeBacklog starts `ncclwatch run` on the backlog and times it to
// its group's lag 0, with the servers' and this host's CPU meanwhile, and
// its tables' parts then. It returns the service, still running, also
// with an error once it started.
func consumeBacklog(ctx context.Context, o Options, rep *Report, ch *sinks.ClickHouse, offs *kafka.GroupOffsets, end []int64,
	group string, stderr io.Writer) (*service, error) {
	probe, broker, box := startServerProbe(o.ServerPID), startServerProbe(o.BrokerPID), startBoxProbe()
	svc, err := startService(ctx, o, group, o.CPUProfile, stderr)
	if err != nil {
		return nil, err
	}
	lag, err := waitLagZero(ctx, offs, group, end, svc.exited)
	if err != nil {
		return svc, fmt.Errorf("ncclwatch run consuming the backlog: %w", err)
	}
	rep.consume = phase{records: rep.produce.records, bytes: rep.produce.bytes, wall: lag.done.Sub(svc.started), cpu: procCPU(svc.pid)}
	rep.serverConsume, rep.brokerConsume, rep.boxConsume = probe.stop(), broker.stop(), box.stop()
	rep.parts, rep.partsErr = countParts(ctx, ch, o.Database)
	rep.firstCommit = lag.first.Sub(svc.started)
	rep.maxRSSConsume = svc.mem.reset()
	return svc, nil
}

// measureLatency offers o.LatRate records/s for o.LatDuration to svc
// (nothing when either is 0). Every record's time is when it was made; it
// is stored when its offset is committed, which ncclwatch does only after
// ClickHouse acknowledged the batch that holds it.
func measureLatency(ctx context.Context, o Options, rep *Report, pcfg kafka.ProducerConfig, offs *kafka.GroupOffsets, end []int64,
	group string, svc *service) error {
	if o.LatRate <= 0 || o.LatDuration <= 0 {
		return nil
	}
	lat := &latencyProbe{partitions: o.Partitions, base: end, stamps: make([][]time.Time, o.Partitions)}
	pctx, pcancel := context.WithCancel(ctx)
	polled := make(chan error, 1)
	go func() { polled <- lat.poll(pctx, offs, group) }()
	n, err := producePaced(ctx, o, pcfg, lat)
	if err == nil {
		rep.latRecords = n
		err = lat.wait(ctx, time.Minute, svc.exited)
	}
	pcancel()
	if perr := <-polled; err == nil && perr != nil && !errors.Is(perr, context.Canceled) {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("latency phase: %w", err)
	}
	rep.latencies = lat.sorted()
	rep.maxRSSLatency = svc.mem.reset()
	return nil
}

// service is a running `ncclwatch run`.
type service struct {
	cmd     *exec.Cmd
	pid     string
	started time.Time
	exited  chan struct{}
	err     error // valid after exited is closed
	mem     *memSampler
	cancel  context.CancelFunc
	stderr  *tailBuffer
}

// startService starts `ncclwatch run` on the topic as group; profile, when
// set, is the CPU profile file it writes (NCCLWATCH_CPUPROFILE).
func startService(ctx context.Context, o Options, group, profile string, stderr io.Writer) (*service, error) {
	args := []string{"run", "--brokers", strings.Join(o.Brokers, ","), "--topic", o.Topic, "--group", group,
		"--clickhouse", strings.Join(o.ClickHouse, ","), "--database", o.Database,
		"--listen", "127.0.0.1:0", "--log-level", "warn"}
	if o.Config != "" {
		args = append(args, "--config", o.Config)
	}
	cmd := exec.Command(o.NCCLWatch, args...)
	tb := &tailBuffer{max: 16 << 10, w: stderr}
	cmd.Stdout, cmd.Stderr = tb, tb
	cmd.Env = os.Environ()
	if profile != "" {
		cmd.Env = append(cmd.Env, "NCCLWATCH_CPUPROFILE="+profile)
	}
	s := &service{cmd: cmd, exited: make(chan struct{}), stderr: tb}
	s.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s run: %w", o.NCCLWatch, err)
	}
	s.pid = strconv.Itoa(cmd.Process.Pid)
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	s.mem = &memSampler{pid: s.pid}
	mctx, mcancel := context.WithCancel(ctx)
	s.cancel = mcancel
	go s.mem.run(mctx)
	return s, nil
}

// stop ends the service with SIGTERM, as a deployment does, and returns
// its error when it did not stop cleanly within a minute.
func (s *service) stop() error {
	defer s.cancel()
	select {
	case <-s.exited:
		return fmt.Errorf("ncclwatch run exited early: %v\n%s", s.err, s.stderr.String())
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return errors.New("ncclwatch run did not stop within a minute of SIGTERM")
	}
	if s.err != nil {
		return fmt.Errorf("ncclwatch run: %v\n%s", s.err, s.stderr.String())
	}
	return nil
}

// kill ends the service if it still runs (error paths).
func (s *service) kill() {
	s.cancel()
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// tailBuffer passes output through to w and keeps its last max bytes for
// error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	w   io.Writer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lagTimes are when a group first committed and when its lag reached 0.
type lagTimes struct{ first, done time.Time }

// lagPoll is how often committed offsets are read while timing a consumer:
// one OffsetFetch round trip, well under 1 % of a core at this rate.
const lagPoll = 10 * time.Millisecond

// waitLagZero polls group's committed offsets until they reach end on every
// partition. exited, when it closes, means the consumer died.
func waitLagZero(ctx context.Context, offs *kafka.GroupOffsets, group string, end []int64, exited <-chan struct{}) (lagTimes, error) {
	var t lagTimes
	tick := time.NewTicker(lagPoll)
	defer tick.Stop()
	for {
		c, err := offs.Committed(ctx, group)
		now := time.Now()
		if err == nil {
			var sum, want int64
			done := true
			for p := range end {
				sum += c[p]
				want += end[p]
				done = done && c[p] >= end[p]
			}
			if t.first.IsZero() && sum > 0 {
				t.first = now
			}
			if done {
				t.done = now
				return t, nil
			}
		}
		select {
		case <-ctx.Done():
			return t, fmt.Errorf("%w (last offset fetch error: %v)", ctx.Err(), err)
		case <-exited:
			return t, errors.New("consumer exited")
		case <-tick.C:
		}
	}
}

// latencyProbe holds the time of every record produced in the latency
// phase by partition and offset, and the latency of each once its offset
// is committed. The producer's balancer is CRC32 of the key modulo the
// partition count, so the partition of a record is known at production,
// and offsets on a partition follow production order (one producer).
type latencyProbe struct {
	partitions int
	base       []int64 // end offsets before the phase

	mu       sync.Mutex
	stamps   [][]time.Time // per partition, by offset - base
	produced int64
	done     []int64 // committed offset seen, per partition, minus base
	lat      []time.Duration
	samples  atomic.Int64
}

func (l *latencyProbe) add(key string, t time.Time) {
	p := int(crc32.ChecksumIEEE([]byte(key)) % uint32(l.partitions))
	l.mu.Lock()
	l.stamps[p] = append(l.stamps[p], t)
	l.produced++
	l.mu.Unlock()
}

func (l *latencyProbe) poll(ctx context.Context, offs *kafka.GroupOffsets, group string) error {
	l.mu.Lock()
	l.done = make([]int64, l.partitions)
	l.mu.Unlock()
	tick := time.NewTicker(lagPoll)
	defer tick.Stop()
	for {
		c, err := offs.Committed(ctx, group)
		now := time.Now()
		if err == nil {
			l.mu.Lock()
			for p := range c {
				upto := min(c[p]-l.base[p], int64(len(l.stamps[p])))
				for i := l.done[p]; i < upto; i++ {
					l.lat = append(l.lat, now.Sub(l.stamps[p][i]))
				}
				l.done[p] = max(l.done[p], upto)
			}
			l.samples.Store(int64(len(l.lat)))
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// wait returns when every produced record has its latency, or after limit.
func (l *latencyProbe) wait(ctx context.Context, limit time.Duration, exited <-chan struct{}) error {
	l.mu.Lock()
	n := l.produced
	l.mu.Unlock()
	deadline := time.After(limit)
	tick := time.NewTicker(lagPoll)
	defer tick.Stop()
	for l.samples.Load() < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("ncclwatch run exited")
		case <-deadline:
			return fmt.Errorf("%d of %d records committed %s after the last was produced", l.samples.Load(), n, limit)
		case <-tick.C:
		}
	}
	return nil
}

func (l *latencyProbe) sorted() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := slices.Clone(l.lat)
	slices.Sort(d)
	return d
}

// execSQL runs a statement that returns no rows.
func execSQL(ctx context.Context, ch *sinks.ClickHouse, sql string) error {
	return ch.Exec(ctx, sql)
}

// count runs a SELECT count() query.
func count(ctx context.Context, ch *sinks.ClickHouse, sql string) (uint64, error) {
	rows, err := ch.Query(ctx, sql)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// storedFigures reads back what a query sees: the NCCL rows (FINAL), the
// training_steps rows and the job verdicts (by verdict and in all), as a
// check that the load was stored whole.
func storedFigures(ctx context.Context, ch *sinks.ClickHouse, db string) (stored, steps, verdicts, jobs string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	figure := func(sql string) string {
		n, err := count(ctx, ch, sql)
		if err != nil {
			return err.Error()
		}
		return strconv.FormatUint(n, 10)
	}
	stored = figure("SELECT count() FROM " + db + ".nccl_events FINAL")
	steps = figure("SELECT count() FROM " + db + ".training_steps")
	rows, err := ch.Query(ctx, "SELECT verdict, count() FROM "+db+".job_verdicts GROUP BY verdict ORDER BY verdict")
	if err != nil {
		return stored, steps, err.Error(), "-"
	}
	defer rows.Close()
	var parts []string
	var total uint64
	for rows.Next() {
		var v string
		var c uint64
		if err := rows.Scan(&v, &c); err != nil {
			return stored, steps, err.Error(), "-"
		}
		parts = append(parts, fmt.Sprintf("%s %d", v, c))
		total += c
	}
	return stored, steps, strings.Join(parts, ", "), strconv.FormatUint(total, 10)
}
