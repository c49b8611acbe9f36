package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// loadOptions configure `ncclwatch load`.
type loadOptions struct {
	brokers     []string
	clickhouse  []string
	topic       string
	database    string
	config      string // optional YAML, as for `run`, to tune the service
	records     int64
	jobs        int
	partitions  int
	producers   int
	ncclShare   float64
	seed        uint64
	latRate     float64 // records/s offered while latency is measured
	latDuration time.Duration
	produceOnly bool
	keep        bool
	cpuprofile  string
	timeout     time.Duration
}

// runLoad is `ncclwatch load`, the project's load benchmark. It runs three
// phases against a real broker and ClickHouse:
//
//  1. produce: a seeded backlog of mixed Fluent Bit records (gen.go's
//     stream, one generator per job, jobs keyed so that partitions spread)
//     is produced as fast as the broker acknowledges it;
//  2. consume: the service runs in-process (serve, with the ClickHouse sink
//     wrapped by a stopwatch) until every record is in a batch ClickHouse
//     acknowledged: records/s and MB/s from the first record delivered to
//     the last batch acknowledged;
//  3. latency: records are offered at a fixed rate, each stamped with the
//     time it was made as its envelope time, which the pipeline carries
//     into its NCCL row; a row's record-to-row latency is the time its
//     batch was acknowledged minus that stamp (every NCCL row is a sample,
//     about 5 % of the records).
//
// Memory is the process's own (VmRSS sampled every 50 ms, VmHWM), producer
// included; the report gives the high-water mark after phase 1 apart.
func runLoad(args []string, stdout, stderr io.Writer) int {
	o := loadOptions{}
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(listFlag{&o.brokers}, "brokers", "Kafka bootstrap brokers host:port[,…] (env NCCLWATCH_BROKERS)")
	fs.Var(listFlag{&o.clickhouse}, "clickhouse", "ClickHouse native address host:port (env NCCLWATCH_CLICKHOUSE)")
	fs.StringVar(&o.topic, "topic", "", "topic to create and fill (default: ncclwatch-load-<random>)")
	fs.StringVar(&o.database, "database", "", "ClickHouse database (default: ncclwatch_load_<random>, dropped at the end)")
	fs.StringVar(&o.config, "config", "", "YAML config as for `run` (pipeline, kafka and clickhouse tuning); flags above win")
	fs.Int64Var(&o.records, "records", 1_000_000, "records in the backlog that is produced, then consumed")
	fs.IntVar(&o.jobs, "jobs", 64, "training jobs (record keys) the stream is spread over")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the topic")
	fs.IntVar(&o.producers, "producers", 4, "concurrent producers for the backlog")
	fs.Float64Var(&o.ncclShare, "nccl-share", 0.05, "fraction of lines that are NCCL lines")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed: the same seed gives the same stream")
	fs.Float64Var(&o.latRate, "latency-rate", 20000, "records/s offered while record-to-row latency is measured (0: skip)")
	fs.DurationVar(&o.latDuration, "latency-duration", 10*time.Second, "how long latency is measured")
	fs.BoolVar(&o.produceOnly, "produce-only", false, "only produce the backlog (for an external `ncclwatch run`)")
	fs.BoolVar(&o.keep, "keep", false, "keep the database at the end")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the consuming phases to this file")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: ncclwatch load [flags]

Load benchmark against a running Kafka broker and ClickHouse server: produce a
seeded mixed Fluent Bit stream (trainer output with NCCL lines, many jobs),
consume it with the service in-process, measure records/s and MB/s end to end,
record-to-row latency at a given offered rate and peak RSS, and print a report.

flags:`)
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if len(o.brokers) == 0 {
		o.brokers = splitList(os.Getenv("NCCLWATCH_BROKERS"))
	}
	if len(o.clickhouse) == 0 {
		o.clickhouse = splitList(os.Getenv("NCCLWATCH_CLICKHOUSE"))
	}
	suffix := randomSuffix()
	if o.topic == "" {
		o.topic = "ncclwatch-load-" + suffix
	}
	if o.database == "" {
		o.database = "ncclwatch_load_" + suffix
	}
	var bad []string
	switch {
	case len(o.brokers) == 0:
		bad = append(bad, "--brokers: required")
	case len(o.clickhouse) == 0 && !o.produceOnly:
		bad = append(bad, "--clickhouse: required")
	}
	if o.records <= 0 || o.jobs <= 0 || o.partitions <= 0 || o.producers <= 0 {
		bad = append(bad, "--records, --jobs, --partitions and --producers must be > 0")
	}
	if o.ncclShare < 0 || o.ncclShare > 1 || o.latRate < 0 || o.latDuration < 0 {
		bad = append(bad, "--nccl-share must be in [0,1], --latency-rate and --latency-duration >= 0")
	}
	if len(bad) > 0 {
		fmt.Fprintln(stderr, "ncclwatch load:", strings.Join(bad, "; "))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := load(ctx, o, stderr)
	if rep != nil {
		rep.print(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch load:", err)
		return 1
	}
	return exitOK
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// loadJob names job j of the stream: fixed width, so that every job's
// records have the same size.
func loadJob(prefix string, j int) string { return fmt.Sprintf("%s-j%04d", prefix, j) }

// genRecords calls fn with n seeded Fluent Bit records of one synthetic
// job: gen.go's stream (Format "fluentbit", the shape of Fluent Bit's
// kubernetes filter) with gen's fixed job name replaced by job, and the
// record's "time" set by stamp (nil keeps gen's). rec is valid only
// during the call. Jobs differ in seed, node count and network (every
// fourth one is a silent Socket fallback).
func genRecords(seed uint64, j int, job string, share float64, n int64, stamp func() time.Time, fn func(rec []byte) error) error {
	cfg := defaultGenConfig()
	cfg.Seed = seed<<20 + uint64(j)
	cfg.Bytes = math.MaxInt64
	cfg.Format = "fluentbit"
	cfg.NCCLShare = share
	cfg.Nodes = 2 + j%4
	if j%4 == 3 {
		cfg.Network = "Socket"
	}
	lw := &lineWriter{left: n, job: []byte(job), stamp: stamp, fn: fn}
	_, err := generate(lw, cfg)
	if errors.Is(err, errEnough) {
		return nil
	}
	if err == nil {
		err = errors.New("load: generator ended early")
	}
	return err
}

var errEnough = errors.New("enough records")

// genJobName is the job name gen.go writes into every record.
var genJobName = []byte("train-llm-7b")

// lineWriter turns generate's output into records: it splits lines,
// rewrites each and stops the generator with errEnough after left records.
type lineWriter struct {
	left  int64
	job   []byte
	stamp func() time.Time
	fn    func([]byte) error
	carry []byte
	rec   []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			w.carry = append(w.carry, p...)
			break
		}
		line := p[:nl]
		if len(w.carry) > 0 {
			w.carry = append(w.carry, line...)
			line = w.carry
		}
		p = p[nl+1:]
		w.rec = rewriteRecord(w.rec[:0], line, w.job, w.stamp)
		w.carry = w.carry[:0]
		if err := w.fn(w.rec); err != nil {
			return 0, err
		}
		if w.left--; w.left <= 0 {
			return 0, errEnough
		}
	}
	return n, nil
}

// rewriteRecord appends rec with gen's job name replaced by job and, when
// stamp is set, its "time" field set to stamp().
func rewriteRecord(dst, rec, job []byte, stamp func() time.Time) []byte {
	for {
		i := bytes.Index(rec, genJobName)
		if i < 0 {
			break
		}
		dst = append(dst, rec[:i]...)
		dst = append(dst, job...)
		rec = rec[i+len(genJobName):]
	}
	dst = append(dst, rec...)
	if stamp == nil {
		return dst
	}
	// "stream" comes right after "log" in gen's records: this cannot
	// match inside the escaped log text.
	const key = `"stream":"stdout","time":"`
	i := bytes.Index(dst, []byte(key))
	if i < 0 {
		return dst
	}
	start := i + len(key)
	end := bytes.IndexByte(dst[start:], '"')
	if end < 0 {
		return dst
	}
	tail := append([]byte(nil), dst[start+end:]...)
	dst = stamp().UTC().AppendFormat(dst[:start], time.RFC3339Nano)
	return append(dst, tail...)
}

// loadSink is the ClickHouse sink with a stopwatch: it notes when each
// batch was acknowledged, how far it covers each partition, and the
// record-to-row latency of the NCCL rows of records produced after since.
type loadSink struct {
	inner *sinks.ClickHouse
	since atomic.Int64 // unix nanoseconds; 0 = no latency sampling

	mu        sync.Mutex
	next      map[int32]int64 // next offset stored, per partition
	batches   int
	busy      time.Duration // inside ClickHouse inserts: the runner waits meanwhile
	rows      int
	events    int
	latencies []time.Duration
}

// maxLatencySamples bounds the sample memory (8 MB).
const maxLatencySamples = 1 << 20

func (s *loadSink) Consume(ctx context.Context, b *pipeline.Batch) error {
	start := time.Now()
	if err := s.inner.Consume(ctx, b); err != nil {
		return err
	}
	now := time.Now()
	since := s.since.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy += now.Sub(start)
	s.batches++
	s.rows += b.Len()
	s.events += len(b.Events)
	for _, o := range b.Offsets {
		s.next[o.Partition] = max(s.next[o.Partition], o.Next)
	}
	if since != 0 {
		for i := range b.Events {
			t := b.Events[i].Time
			if t.UnixNano() >= since && len(s.latencies) < maxLatencySamples {
				s.latencies = append(s.latencies, now.Sub(t))
			}
		}
	}
	return nil
}

// stored returns the records stored so far: on a fresh topic offsets are
// dense from 0, so the sum of the next offsets counts every record.
func (s *loadSink) stored() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.next {
		n += v
	}
	return n
}

// memSampler follows the process's resident memory.
type memSampler struct {
	mu     sync.Mutex
	maxRSS int64
}

// procStatus reads VmRSS and VmHWM (bytes) from /proc/self/status.
func procStatus() (rss, hwm int64) {
	f, err := os.Open("/proc/self/status")
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

func (m *memSampler) run(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rss, _ := procStatus()
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

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// phase is one measured part of the run.
type phase struct {
	records int64
	bytes   int64
	wall    time.Duration
	cpu     time.Duration
}

func (p phase) String() string {
	if p.wall <= 0 {
		return "-"
	}
	s := p.wall.Seconds()
	return fmt.Sprintf("%d records, %.1f MB in %.2f s: %.0f records/s, %.1f MB/s; CPU %.1f s (%.2f cores)",
		p.records, float64(p.bytes)/1e6, s, float64(p.records)/s, float64(p.bytes)/1e6/s, p.cpu.Seconds(), p.cpu.Seconds()/s)
}

// loadReport holds the figures `load` prints.
type loadReport struct {
	o                loadOptions
	server           string
	ncclRows         int
	batches          int
	produce          phase
	consume          phase // first record delivered → last batch acknowledged by the sink
	deliver          time.Duration
	insertBusy       time.Duration // of the consume phase, inside ClickHouse inserts
	consumeBatches   int
	latRecords       int64
	latRate          float64
	latencies        []time.Duration // sorted
	hwmProduce       int64
	maxRSSConsume    int64
	maxRSSLatency    int64
	hwmEnd           int64
	heapAfterConsume uint64
	stored           string // nccl_events rows as a query sees them
	verdicts         string // job verdicts by kind
}

// storedFigures reads back what a query sees: the NCCL rows (FINAL) and
// the job verdicts, as a check that the load was stored whole.
func storedFigures(ctx context.Context, ch *sinks.ClickHouse, db string) (stored, verdicts string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := ch.Query(ctx, "SELECT count() FROM "+db+".nccl_events FINAL")
	if err != nil {
		return err.Error(), ""
	}
	var n uint64
	for rows.Next() {
		_ = rows.Scan(&n)
	}
	rows.Close()
	stored = strconv.FormatUint(n, 10)
	rows, err = ch.Query(ctx, "SELECT verdict, count() FROM "+db+".job_verdicts GROUP BY verdict ORDER BY verdict")
	if err != nil {
		return stored, err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var v string
		var c uint64
		if err := rows.Scan(&v, &c); err != nil {
			return stored, err.Error()
		}
		parts = append(parts, fmt.Sprintf("%s %d", v, c))
	}
	return stored, strings.Join(parts, ", ")
}

// quantile returns the q-quantile of sorted d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func (r *loadReport) print(w io.Writer) {
	o := r.o
	fmt.Fprintf(w, "ncclwatch load: %d records over %d jobs, %d partitions, %.1f %% NCCL lines, seed %d\n",
		o.records, o.jobs, o.partitions, o.ncclShare*100, o.seed)
	fmt.Fprintf(w, "machine: %d CPUs %s/%s %s; broker %s; clickhouse %s %s; topic %s, database %s\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), strings.Join(o.brokers, ","),
		strings.Join(o.clickhouse, ","), r.server, o.topic, o.database)
	fmt.Fprintf(w, "produce:  %s (%d producers, generation + lz4 + acks)\n", r.produce, o.producers)
	if o.produceOnly {
		return
	}
	fmt.Fprintf(w, "consume:  %s end to end (first record delivered to last batch acknowledged by ClickHouse; all delivered after %.2f s)\n",
		r.consume, r.deliver.Seconds())
	fmt.Fprintf(w, "          %d batches stored while consuming, %.2f s inside ClickHouse inserts (%.0f %% of the time; decoding waits meanwhile)\n",
		r.consumeBatches, r.insertBusy.Seconds(), 100*r.insertBusy.Seconds()/max(r.consume.wall.Seconds(), 1e-9))
	fmt.Fprintf(w, "stored:   %d NCCL rows in %d batches; a query sees %s nccl_events rows (FINAL); job verdicts: %s\n",
		r.ncclRows, r.batches, r.stored, r.verdicts)
	if len(r.latencies) > 0 {
		fmt.Fprintf(w, "latency:  %d records offered at %.0f records/s: record-to-row p50 %s, p90 %s, p99 %s, max %s (%d NCCL rows: record time to batch acknowledged)\n",
			r.latRecords, r.latRate, quantile(r.latencies, 0.5).Round(time.Millisecond), quantile(r.latencies, 0.9).Round(time.Millisecond),
			quantile(r.latencies, 0.99).Round(time.Millisecond), r.latencies[len(r.latencies)-1].Round(time.Millisecond), len(r.latencies))
	}
	fmt.Fprintf(w, "memory:   VmHWM after produce %.0f MB; max VmRSS consuming %.0f MB, during latency phase %.0f MB; VmHWM at end %.0f MB; Go heap in use after consume %.0f MB\n",
		mb(r.hwmProduce), mb(r.maxRSSConsume), mb(r.maxRSSLatency), mb(r.hwmEnd), float64(r.heapAfterConsume)/1e6)
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// load runs the benchmark: produce the backlog, consume it in-process,
// then measure latency at an offered rate.
func load(ctx context.Context, o loadOptions, stderr io.Writer) (*loadReport, error) {
	rep := &loadReport{o: o}
	cfg := defaultServiceConfig()
	if o.config != "" {
		if err := cfg.loadFile(o.config); err != nil {
			return nil, err
		}
	}
	cfg.Kafka.Brokers, cfg.Kafka.Topics, cfg.Kafka.GroupID = o.brokers, []string{o.topic}, o.topic
	if len(o.clickhouse) > 0 {
		cfg.ClickHouse.Addr = o.clickhouse
	}
	cfg.ClickHouse.Database = o.database
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Log.Level = "warn"
	if err := cfg.validate(); err != nil && !o.produceOnly {
		return nil, err
	}

	mem := &memSampler{}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go mem.run(mctx)

	pcfg := kafka.DefaultProducerConfig()
	pcfg.Brokers, pcfg.Topic = o.brokers, o.topic
	if err := kafka.CreateTopicWith(ctx, pcfg, o.partitions); err != nil {
		return nil, err
	}
	var err error
	if rep.produce, err = produceBacklog(ctx, o, pcfg); err != nil {
		return rep, err
	}
	_, rep.hwmProduce = procStatus()
	mem.reset()
	if o.produceOnly {
		return rep, nil
	}

	ch, err := sinks.NewClickHouse(ctx, cfg.ClickHouse)
	if err != nil {
		return rep, err
	}
	defer ch.Close()
	rep.server = ch.Version()
	if _, err := ch.Migrate(ctx); err != nil {
		return rep, err
	}
	if !o.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rows, err := ch.Query(dctx, "DROP DATABASE IF EXISTS "+o.database); err == nil {
				rows.Close()
			}
		}()
	}
	sink := &loadSink{inner: ch, next: map[int32]int64{}}

	// The profile covers the backlog's consumption only: the latency
	// phase also runs the generator.
	stopProfile := func() {}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return rep, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return rep, err
		}
		var once sync.Once
		stopProfile = func() { once.Do(pprof.StopCPUProfile) }
		defer stopProfile()
	}

	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	started := make(chan *serviceState, 1)
	served := make(chan error, 1)
	hooks := &serveHooks{sink: sink, started: func(s *serviceState) { started <- s }}
	go func() { served <- serve(sctx, cfg, newLogger(stderr, cfg.Log.Level), hooks) }()
	stopServe := func() error {
		scancel()
		select {
		case err := <-served:
			return err
		case <-time.After(time.Minute):
			return errors.New("load: service did not stop within a minute")
		}
	}
	var state *serviceState
	select {
	case state = <-started:
	case err := <-served:
		return rep, fmt.Errorf("service stopped: %v", err)
	case <-ctx.Done():
		return rep, ctx.Err()
	}

	// Consume the backlog.
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	var first, delivered time.Time
	var cpu0 time.Duration
	total := rep.produce.records
	for sink.stored() < total {
		select {
		case <-poll.C:
		case err := <-served:
			return rep, fmt.Errorf("service stopped while consuming: %v", err)
		case <-ctx.Done():
			_ = stopServe()
			return rep, fmt.Errorf("consuming the backlog: %w (%d of %d records stored)", ctx.Err(), sink.stored(), total)
		}
		n := state.delivered.Load()
		if first.IsZero() && n > 0 {
			first, cpu0 = time.Now(), cpuTime()
		}
		if delivered.IsZero() && n >= total {
			delivered = time.Now()
		}
	}
	end := time.Now()
	stopProfile()
	if delivered.IsZero() {
		delivered = end
	}
	rep.consume = phase{records: total, bytes: rep.produce.bytes, wall: end.Sub(first), cpu: cpuTime() - cpu0}
	sink.mu.Lock()
	rep.insertBusy, rep.consumeBatches = sink.busy, sink.batches
	sink.mu.Unlock()
	rep.deliver = delivered.Sub(first)
	rep.maxRSSConsume = mem.reset()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.heapAfterConsume = ms.HeapInuse

	// Latency at an offered rate: records carry their production time as
	// their envelope time, which becomes each NCCL row's time.
	if o.latRate > 0 && o.latDuration > 0 {
		rep.latRate = o.latRate
		start := time.Now()
		sink.since.Store(start.UnixNano())
		n, err := producePaced(ctx, o, pcfg)
		if err != nil {
			_ = stopServe()
			return rep, err
		}
		rep.latRecords = n
		deadline := time.Now().Add(time.Minute)
		for sink.stored() < total+n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if s := sink.stored(); s < total+n {
			_ = stopServe()
			return rep, fmt.Errorf("latency phase: %d of %d records stored a minute after the last was produced", s-total, n)
		}
		rep.maxRSSLatency = mem.reset()
	}
	if err := stopServe(); err != nil {
		return rep, err
	}
	_, rep.hwmEnd = procStatus()
	rep.stored, rep.verdicts = storedFigures(ctx, ch, o.database)
	sink.mu.Lock()
	rep.ncclRows, rep.batches = sink.events, sink.batches
	rep.latencies = slices.Clone(sink.latencies)
	sink.mu.Unlock()
	slices.Sort(rep.latencies)
	return rep, nil
}

// produceBacklog produces o.records records over o.jobs jobs with
// o.producers concurrent producers, as fast as the broker takes them.
func produceBacklog(ctx context.Context, o loadOptions, pcfg kafka.ProducerConfig) (phase, error) {
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		return phase{}, err
	}
	defer prod.Close()
	var records, size atomic.Int64
	errs := make(chan error, o.producers)
	start, cpu0 := time.Now(), cpuTime()
	stamp := func() time.Time { return time.Now() }
	for w := range o.producers {
		go func() {
			errs <- func() error {
				c := newChunker(prod, pcfg.BatchSize)
				for j := w; j < o.jobs; j += o.producers {
					n := o.records / int64(o.jobs)
					if int64(j) < o.records%int64(o.jobs) {
						n++
					}
					if n == 0 {
						continue
					}
					job := loadJob("load", j)
					err := genRecords(o.seed, j, job, o.ncclShare, n, stamp, func(rec []byte) error {
						return c.add(ctx, job, rec)
					})
					if err == nil {
						err = c.flush(ctx)
					}
					if err != nil {
						return err
					}
				}
				records.Add(c.records)
				size.Add(c.bytes)
				return nil
			}()
		}()
	}
	var first error
	for range o.producers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return phase{records: records.Load(), bytes: size.Load(), wall: time.Since(start), cpu: cpuTime() - cpu0}, first
}

// chunker collects records into produce calls of up to size messages in
// one reused arena: Produce does not keep the slices.
type chunker struct {
	prod    *kafka.Producer
	size    int
	msgs    []kafka.ProducerMessage
	arena   []byte
	ends    []int
	keys    []string
	records int64
	bytes   int64
}

func newChunker(p *kafka.Producer, size int) *chunker {
	return &chunker{prod: p, size: size}
}

func (c *chunker) add(ctx context.Context, key string, rec []byte) error {
	c.arena = append(c.arena, rec...)
	c.ends = append(c.ends, len(c.arena))
	c.keys = append(c.keys, key)
	if len(c.ends) >= c.size {
		return c.flush(ctx)
	}
	return nil
}

func (c *chunker) flush(ctx context.Context) error {
	if len(c.ends) == 0 {
		return nil
	}
	c.msgs = c.msgs[:0]
	from := 0
	for i, end := range c.ends {
		// The key is the job, as Fluent Bit's output keys it.
		c.msgs = append(c.msgs, kafka.ProducerMessage{Key: []byte(c.keys[i]), Value: c.arena[from:end:end]})
		from = end
	}
	if err := c.prod.Produce(ctx, c.msgs); err != nil {
		return err
	}
	c.records += int64(len(c.ends))
	c.bytes += int64(len(c.arena))
	c.arena, c.ends, c.keys = c.arena[:0], c.ends[:0], c.keys[:0]
	return nil
}

// producePaced offers o.latRate records/s for o.latDuration over fresh
// jobs, each record stamped with the time it was made, and returns the
// number of records produced.
func producePaced(ctx context.Context, o loadOptions, pcfg kafka.ProducerConfig) (int64, error) {
	// A short batch timeout: the offered rate, not the producer's
	// batching, should set the latency.
	pcfg.BatchTimeout = 2 * time.Millisecond
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		return 0, err
	}
	defer prod.Close()
	total := int64(o.latRate * o.latDuration.Seconds())
	perJob := max(total/int64(o.jobs), 1)
	// One produce call per 10 ms of records, as a log shipper flushes.
	quantum := max(int64(o.latRate/100), 1)
	c := newChunker(prod, math.MaxInt)
	start := time.Now()
	var made int64
	for j := 0; made < total; j++ {
		job := loadJob("latency", j%o.jobs)
		n := min(perJob, total-made)
		err := genRecords(o.seed+1, j, job, o.ncclShare, n, time.Now, func(rec []byte) error {
			made++
			if err := c.add(ctx, job, rec); err != nil {
				return err
			}
			if made%quantum != 0 {
				return nil
			}
			if err := c.flush(ctx); err != nil {
				return err
			}
			due := start.Add(time.Duration(float64(made) / o.latRate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
			return nil
		})
		if err != nil {
			return c.records, err
		}
	}
	if err := c.flush(ctx); err != nil {
		return c.records, err
	}
	return c.records, nil
}
