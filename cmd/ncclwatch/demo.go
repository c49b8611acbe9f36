package main

import (
	"context"
	"embed"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// demoFS holds real NCCL log excerpts (cmd/ncclwatch/demo/README.md), so an
// installed binary runs the demo from any directory.
//
//go:embed demo/*.log
var demoFS embed.FS

// demoJobs are the jobs the demo replays, one per bundled log. steps, when
// set, is a real trainer excerpt replayed after the NCCL log as the job's
// step-time lines (demo/README.md says where each comes from).
var demoJobs = []struct {
	job, file, namespace, node, steps string
}{
	{"llm-70b-ib", "demo/llm-70b-ib.log", "research", "dgx-a17", "demo/llm-70b-ib.steps.log"},
	// Its log comes from two hosts: one Kubernetes node name on every
	// record would say both were one node (pipeline/CLASSIFICATION.md,
	// multi_node), so its records name none and the hosts decide.
	{"llm-13b-socket", "demo/llm-13b-socket.log", "research", "", "demo/llm-13b-socket.steps.log"},
	{"bert-roce-gdr-off", "demo/bert-roce-gdr-off.log", "nlp", "roce-node-2", ""},
	{"nvls-single-node", "demo/nvls-single-node.log", "bench", "h800-01", ""},
	{"efa-p4d", "demo/efa-p4d.log", "aws", "p4d-0", ""},
}

// demoInspector are NCCL Inspector records replayed after a job's lines,
// as a Fluent Bit tail of its dump directory sends them: the job's live
// bus bandwidth, shown beside its verdict. They are derived from the
// plugin's writer format, not captured (demo/README.md).
var demoInspector = map[string]string{"llm-70b-ib": "demo/llm-70b-ib.inspector.log"}

const demoTopic = "training-logs"

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var clickhouse []string
	fs.Var(listFlag{&clickhouse}, "clickhouse", "also write to this ClickHouse (host:port; env NCCLWATCH_CLICKHOUSE)")
	database := fs.String("database", "ncclwatch_demo", "ClickHouse database for the demo")
	out := fs.String("out", "", "directory for JSON-lines results when no ClickHouse is given (default: a new temporary directory)")
	keep := fs.Bool("serve", false, "keep serving /metrics and consuming after the jobs settled (Ctrl-C stops)")
	listen := fs.String("listen", "127.0.0.1:0", "address for /metrics, /healthz, /readyz")
	timeout := fs.Duration("timeout", 60*time.Second, "give up if the jobs have not settled by then")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch demo [flags]\n\nStart an in-process Kafka broker, replay five real NCCL logs as jobs, run the real pipeline\nand print each job's verdict as it settles.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	if len(clickhouse) == 0 {
		clickhouse = splitList(os.Getenv("NCCLWATCH_CLICKHOUSE"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, stdout, stderr, demoOptions{clickhouse: clickhouse, database: *database, out: *out,
		serve: *keep, listen: *listen, timeout: *timeout}); err != nil {
		fmt.Fprintln(stderr, "ncclwatch demo:", err)
		return 1
	}
	return exitOK
}

type demoOptions struct {
	clickhouse []string
	database   string
	out        string
	serve      bool
	listen     string
	timeout    time.Duration
}

func demo(ctx context.Context, stdout, stderr io.Writer, o demoOptions) error {
	fake, err := kafka.NewFake(demoTopic, 3)
	if err != nil {
		return err
	}
	defer fake.Close()

	produced, err := produceDemo(ctx, fake.Addrs())
	if err != nil {
		return err
	}
	cfg, opts, where, closeSink, err := demoService(fake.Addrs(), o)
	if err != nil {
		return err
	}
	defer closeSink()
	fmt.Fprintf(stdout, "ncclwatch demo: in-process Kafka on %s, %d real NCCL logs replayed as %d jobs (%d records)\n",
		strings.Join(fake.Addrs(), ","), len(demoJobs), len(demoJobs), produced)
	fmt.Fprintf(stdout, "results: %s\n\n", where)
	table := newDemoTable(stdout, opts.registry, produced)
	opts.after = table

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	log := newLogger(stderr, cfg.Log.Level).Level(zerolog.WarnLevel)
	go func() { errc <- serve(runCtx, cfg, log, opts) }()

	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	select {
	case <-table.settled:
	case err := <-errc:
		return fmt.Errorf("pipeline stopped before the jobs settled: %v", err)
	case <-deadline.C:
		cancel()
		<-errc
		return fmt.Errorf("jobs did not settle within %s", o.timeout)
	case <-ctx.Done():
		cancel()
		return <-errc
	}
	if err := table.report(stdout); err != nil {
		return err
	}
	if o.serve {
		fmt.Fprintf(stdout, "serving http://%s/metrics — Ctrl-C stops\n", opts.listener.Addr())
		<-ctx.Done()
	}
	cancel()
	return <-errc
}

// demoService is the demo's service configuration: the in-process broker
// as the source, and ClickHouse when o names one, else JSON lines in a
// directory (where says which, closeSink closes it). The listener and
// the registry are the demo's own, so that it knows where the service
// listens and reads its record count.
func demoService(brokers []string, o demoOptions) (cfg serviceConfig, opts serveOptions, where string,
	closeSink func(), err error) {
	cfg = defaultServiceConfig()
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Topics = []string{demoTopic}
	cfg.Kafka.GroupID = "ncclwatch-demo"
	cfg.Kafka.HeartbeatInterval = 500 * time.Millisecond
	cfg.Kafka.MaxWait = 100 * time.Millisecond
	cfg.Pipeline.Batch.MaxWait = 200 * time.Millisecond
	cfg.HTTP.Listen = o.listen
	cfg.Log.Level = "warn"
	closeSink = func() {}
	if len(o.clickhouse) > 0 {
		cfg.ClickHouse.Addr = o.clickhouse
		cfg.ClickHouse.Database = o.database
		cfg.Migrate = true
		where = fmt.Sprintf("ClickHouse %s, database %s (SELECT * FROM %s.job_verdicts)", strings.Join(o.clickhouse, ","), o.database, o.database)
	} else {
		dir := o.out
		if dir == "" {
			if dir, err = os.MkdirTemp("", "ncclwatch-demo-"); err != nil {
				return cfg, opts, "", closeSink, err
			}
		}
		jl, err := sinks.NewJSONLines(dir)
		if err != nil {
			return cfg, opts, "", closeSink, err
		}
		opts.sink, closeSink = jl, func() { jl.Close() }
		where = dir + " (JSON lines: job_summaries.jsonl, comm_summaries.jsonl, nccl_events.jsonl)"
	}
	if err := cfg.validate(); err != nil {
		closeSink()
		return cfg, opts, "", func() {}, err
	}
	if opts.listener, err = net.Listen("tcp", o.listen); err != nil {
		closeSink()
		return cfg, opts, "", func() {}, fmt.Errorf("listen %s: %w", o.listen, err)
	}
	opts.registry = prometheus.NewRegistry()
	return cfg, opts, where, closeSink, nil
}

// demoRow is the format of the demo's table: rows print as jobs settle,
// so columns have fixed widths.
const demoRow = "%-18s %-16s %-21s %-4s %-5s %-5s %s\n"

// demoTable is the demo's terminal sink, the last stage of its chain: it
// prints each job's verdict when it first appears or changes in a stored
// batch, keeps the latest summaries and alert states, and closes settled
// once every job was printed and the service's records counter
// (ncclwatch_records_total in reg) reached the records produced.
type demoTable struct {
	w        io.Writer
	reg      prometheus.Gatherer
	produced int64
	settled  chan struct{}

	mu      sync.Mutex
	printed map[string]pipeline.Verdict
	latest  map[string]pipeline.JobSummary
	alerts  map[string]pipeline.Alert // latest state by rule and subject
	once    sync.Once
}

func newDemoTable(w io.Writer, reg prometheus.Gatherer, produced int64) *demoTable {
	fmt.Fprintf(w, demoRow, "JOB", "VERDICT", "NETWORK", "GDR", "NODES", "RANKS", "WHY")
	return &demoTable{w: w, reg: reg, produced: produced, settled: make(chan struct{}),
		printed: map[string]pipeline.Verdict{}, latest: map[string]pipeline.JobSummary{}, alerts: map[string]pipeline.Alert{}}
}

// Consume prints what b changed.
func (t *demoTable) Consume(_ context.Context, b *pipeline.Batch) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range b.Alerts {
		t.alerts[alertKey(&a)] = a
	}
	for _, j := range b.Jobs {
		t.latest[j.Job] = j
		if v, ok := t.printed[j.Job]; ok && v == j.Verdict {
			continue
		}
		t.printed[j.Job] = j.Verdict
		network := strOrDash(j.Network)
		if j.NetworkClass != nil {
			network += " (" + *j.NetworkClass + ")"
		}
		fmt.Fprintf(t.w, demoRow, j.Job, j.Verdict, network, boolOrDash(j.GDR),
			intOrDash(j.NNodes), intOrDash(j.NRanks), strings.Join(j.Reasons, "; "))
	}
	if len(b.Jobs) > 0 && len(t.printed) == len(demoJobs) && gathered(t.reg, "ncclwatch_records_total") >= float64(t.produced) {
		t.once.Do(func() { close(t.settled) })
	}
	return nil
}

// alertKey is an alert's rule and subject (a pool, or a job).
func alertKey(a *pipeline.Alert) string {
	if a.Pool != "" {
		return a.Rule + "\x00pool/" + a.Pool
	}
	return a.Rule + "\x00" + pipeline.JobKey(a.Cluster, a.Namespace, a.Job)
}

// gathered returns the value of the counter or gauge name in reg, 0 when
// it has none.
func gathered(reg prometheus.Gatherer, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

// report prints what the settled jobs say: where the fallback is, what it
// costs, the live bus bandwidth and the active alerts.
func (t *demoTable) report(w io.Writer) error {
	t.mu.Lock()
	fallback := []string{}
	for job, v := range t.printed {
		if v == pipeline.VerdictSocketFallback {
			fallback = append(fallback, job)
		}
	}
	sums := maps.Clone(t.latest)
	var active []string
	for _, k := range slices.Sorted(maps.Keys(t.alerts)) {
		if a := t.alerts[k]; a.State == pipeline.AlertPending || a.State == pipeline.AlertFiring {
			active = append(active, fmt.Sprintf("  %-8s %-20s %-18s %s\n", a.State, a.Rule, a.Job, a.Annotations["summary"]))
		}
	}
	t.mu.Unlock()
	slices.Sort(fallback)
	fmt.Fprintf(w, "\nall %d jobs settled; silent socket fallback in: %s\n", len(demoJobs), strings.Join(fallback, ", "))
	if err := printDemoCost(w, sums); err != nil {
		return err
	}
	if err := printDemoBandwidth(w, sums); err != nil {
		return err
	}
	if len(active) > 0 {
		// The built-in rule pack evaluated the same summaries.
		fmt.Fprintln(w, "alerts (built-in rules; sent to Alertmanager when one is configured):")
		for _, a := range active {
			fmt.Fprint(w, a)
		}
	}
	return nil
}

// produceDemo replays the bundled logs into the broker and returns the
// number of records.
func produceDemo(ctx context.Context, brokers []string) (int64, error) {
	pcfg := kafka.DefaultProducerConfig()
	pcfg.Brokers, pcfg.Topic = brokers, demoTopic
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		return 0, err
	}
	defer prod.Close()
	var n int64
	for _, j := range demoJobs {
		rp := &replayer{meta: replayMeta{Job: j.job, Namespace: j.namespace, Node: j.node, Pod: j.job + "-worker-0",
			Container: "pytorch", Cluster: "demo"}, dec: parsers.NewDecoder(parsers.DefaultDecoderConfig()), start: time.Now()}
		var msgs []kafka.ProducerMessage
		for _, file := range []string{j.file, j.steps, demoInspector[j.job]} {
			if file == "" {
				continue
			}
			f, err := demoFS.Open(file)
			if err != nil {
				return n, err
			}
			err = rp.records(f, func(v []byte) error {
				msgs = append(msgs, kafka.ProducerMessage{Key: []byte(j.job), Value: append([]byte(nil), v...)})
				return nil
			})
			f.Close()
			if err != nil {
				return n, err
			}
		}
		if err := prod.Produce(ctx, msgs); err != nil {
			return n, err
		}
		n += int64(len(msgs))
	}
	return n, nil
}

// demoMedianStep is the median step time of a job's bundled trainer lines,
// read with the telemetry parser and assembler the service runs, and what
// their checkpoint lines say (demoCheckpoints; "" without any).
func demoMedianStep(file string) (float64, string, string, error) {
	f, err := demoFS.Open(file)
	if err != nil {
		return 0, "", "", err
	}
	defer f.Close()
	s := newScanner(pipeline.Expectation{}, 64<<10, nil, true)
	if err := s.read(file, f, 0); err != nil {
		return 0, "", "", err
	}
	res := s.result()
	for _, tr := range res.Training {
		if tr.MedianStepTime != nil {
			return *tr.MedianStepTime, tr.Framework, demoCheckpoints(res.Checkpoints), nil
		}
	}
	return 0, "", "", fmt.Errorf("%s: no step times", file)
}

// demoCheckpoints says in one line what checkpoint series report: saves,
// where to, and their durations where the trainer printed one.
func demoCheckpoints(cs []pipeline.CheckpointReport) string {
	var parts []string
	for _, c := range cs {
		if c.Saves == 0 {
			continue
		}
		p := fmt.Sprintf("%d save(s) to %s (%s)", c.Saves, strings.Join(c.Paths, ", "), c.Framework)
		if len(c.SaveDurations) == 0 {
			p += ", no save duration printed"
		} else {
			p += fmt.Sprintf(", %s s", strconv.FormatFloat(slices.Max(c.SaveDurations), 'f', -1, 64))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// sameScale reports whether two jobs are both multi-node and agree on the
// node and rank counts wherever both logs print them.
func sameScale(a, b pipeline.JobSummary) bool {
	agree := func(x, y *int) bool { return x == nil || y == nil || *x == *y }
	return a.MultiNode != nil && *a.MultiNode && b.MultiNode != nil && *b.MultiNode &&
		agree(a.NNodes, b.NNodes) && agree(a.NRanks, b.NRanks)
}

// printDemoCost prints, for every fallback job with trainer lines, its
// median step time beside the healthy multi-node job of the same scale
// (sameScale) and the ratio.
func printDemoCost(w io.Writer, sums map[string]pipeline.JobSummary) error {
	steps := map[string]string{}
	for _, j := range demoJobs {
		if j.steps != "" {
			steps[j.job] = j.steps
		}
	}
	scale := func(s pipeline.JobSummary) string {
		if s.NNodes == nil && s.NRanks == nil {
			return "multi-node"
		}
		return intOrDash(s.NNodes) + " nodes/" + intOrDash(s.NRanks) + " ranks"
	}
	names := slices.Sorted(maps.Keys(steps))
	printedHeader := false
	for _, bad := range names {
		b := sums[bad]
		if b.Verdict != pipeline.VerdictSocketFallback {
			continue
		}
		for _, good := range names {
			g := sums[good]
			if g.Verdict != pipeline.VerdictOK || !sameScale(g, b) {
				continue
			}
			bt, bfw, bck, err := demoMedianStep(steps[bad])
			if err != nil {
				return err
			}
			gt, gfw, gck, err := demoMedianStep(steps[good])
			if err != nil {
				return err
			}
			if !printedHeader {
				fmt.Fprintln(w, "\nwhat the fallback costs (median step time of the jobs' trainer lines, same scale):")
				printedHeader = true
			}
			fmt.Fprintf(w, "  %-16s %-16s %-16s median step %s s (%s)\n", bad, b.Verdict, scale(b), strconv.FormatFloat(bt, 'f', 3, 64), bfw)
			if bck != "" {
				fmt.Fprintf(w, "  %-16s checkpoints: %s\n", bad, bck)
			}
			fmt.Fprintf(w, "  %-16s %-16s %-16s median step %s s (%s)\n", good, g.Verdict, scale(g), strconv.FormatFloat(gt, 'f', 3, 64), gfw)
			if gck != "" {
				fmt.Fprintf(w, "  %-16s checkpoints: %s\n", good, gck)
			}
			fmt.Fprintf(w, "  ratio %.2fx: %s takes %.0f%% longer per step than %s\n", bt/gt, bad, (bt/gt-1)*100, good)
		}
	}
	if printedHeader {
		fmt.Fprintln(w, "  (the trainer lines are real nanoGPT excerpts from two published runs joined to these jobs, see\n"+
			"  cmd/ncclwatch/demo/README.md; they show the report, they are not a measurement of this fallback.\n"+
			"  The published case: 12.36 s on sockets vs 6.07 s on RDMA, 2.04x, Qwen2.5-14B FSDP on 16 H200.)")
	}
	return nil
}

// printDemoBandwidth prints, for each job with Inspector records, its
// verdict and negotiated network beside the bus bandwidth of each of its
// collectives, read with the parser and assembler the service runs.
func printDemoBandwidth(w io.Writer, sums map[string]pipeline.JobSummary) error {
	for _, job := range slices.Sorted(maps.Keys(demoInspector)) {
		f, err := demoFS.Open(demoInspector[job])
		if err != nil {
			return err
		}
		s := newScanner(pipeline.Expectation{}, 64<<10, nil, true)
		err = s.read(job, f, 0)
		f.Close()
		if err != nil {
			return err
		}
		sum := sums[job]
		network := strOrDash(sum.Network)
		if sum.NetworkClass != nil {
			network += " (" + *sum.NetworkClass + ")"
		}
		fmt.Fprintln(w, "\nlive bus bandwidth (NCCL Inspector records, derived from the plugin's format; demo/README.md):")
		for _, c := range s.result().Collectives {
			fmt.Fprintf(w, "  %-16s %-16s %s gdr %s  %s: median busbw %s GB/s over %d records (%d of %d MiB and more)\n",
				job, sum.Verdict, network, boolOrDash(sum.GDR), c.Op, demoGBs(c.LargeBusBWP50), c.Records, c.LargeRecords,
				c.LargeBytes>>20)
		}
	}
	return nil
}

func demoGBs(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}
