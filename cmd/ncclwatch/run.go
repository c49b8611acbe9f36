package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/rules"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// serviceFlags are the flags of `run` (and, in part, `migrate`); they
// override the config file and the environment.
type serviceFlags struct {
	fs         *flag.FlagSet
	config     string
	brokers    []string
	topics     []string
	group      string
	clickhouse []string
	database   string
	listen     string
	inventory  string
	cluster    string
	chCluster  string
	logLevel   string
	migrate    bool
	expect     string
}

func newServiceFlags(name string, stderr io.Writer) *serviceFlags {
	f := &serviceFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	f.fs.StringVar(&f.config, "config", "", "YAML config file (see docs/configuration.md); env NCCLWATCH_* and flags override it")
	f.fs.Var(listFlag{&f.brokers}, "brokers", "Kafka bootstrap brokers host:port[,…] (env NCCLWATCH_BROKERS)")
	f.fs.Var(listFlag{&f.topics}, "topic", "Kafka topic(s) to consume, comma-separated (env NCCLWATCH_TOPICS)")
	f.fs.StringVar(&f.group, "group", "", "Kafka consumer group (env NCCLWATCH_GROUP)")
	f.fs.Var(listFlag{&f.clickhouse}, "clickhouse", "ClickHouse native address host:port[,…] (env NCCLWATCH_CLICKHOUSE)")
	f.fs.StringVar(&f.database, "database", "", "ClickHouse database (default ncclwatch; env NCCLWATCH_DATABASE)")
	f.fs.StringVar(&f.listen, "listen", "", "address for /metrics, /healthz, /readyz (default :9464; env NCCLWATCH_LISTEN)")
	f.fs.StringVar(&f.inventory, "inventory", "", "node inventory file, YAML or CSV, reloaded on change (env NCCLWATCH_INVENTORY)")
	if name == "migrate" {
		// migrate stores no records: its --cluster is the ClickHouse
		// cluster, as `ncclwatch migrate --cluster NAME` reads.
		f.fs.StringVar(&f.chCluster, "cluster", "", "ClickHouse cluster (remote_servers) to create the schema on: Replicated tables per shard and Distributed tables over them, sharded by job (same as --clickhouse-cluster)")
	} else {
		f.fs.StringVar(&f.cluster, "cluster", "", "cluster name for records that carry none (env NCCLWATCH_CLUSTER)")
	}
	f.fs.StringVar(&f.chCluster, "clickhouse-cluster", "", "ClickHouse cluster the schema spans (migrate: create it there; run: insert through its Distributed tables) (env NCCLWATCH_CLICKHOUSE_CLUSTER)")
	f.fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (env NCCLWATCH_LOG_LEVEL)")
	f.fs.BoolVar(&f.migrate, "migrate", true, "apply ClickHouse migrations at start; --migrate=false checks the schema instead and stops when it is missing or old (env NCCLWATCH_MIGRATE)")
	f.fs.StringVar(&f.expect, "expect", "", "default network class multi-node jobs expect: rdma, tcp or tcpx")
	return f
}

// resolve builds the configuration: defaults, file, environment, flags.
func (f *serviceFlags) resolve(getenv func(string) string) (serviceConfig, error) {
	cfg := defaultServiceConfig()
	if f.config != "" {
		if err := cfg.loadFile(f.config); err != nil {
			return cfg, err
		}
	}
	if err := cfg.envOverrides(getenv); err != nil {
		return cfg, err
	}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "brokers":
			cfg.Kafka.Brokers = f.brokers
		case "topic":
			cfg.Kafka.Topics = f.topics
		case "group":
			cfg.Kafka.GroupID = f.group
		case "clickhouse":
			cfg.ClickHouse.Addr = f.clickhouse
		case "database":
			cfg.ClickHouse.Database = f.database
		case "listen":
			cfg.HTTP.Listen = f.listen
		case "inventory":
			cfg.Inventory = f.inventory
		case "cluster":
			if f.fs.Name() == "migrate" {
				cfg.ClickHouse.Cluster = f.chCluster
			} else {
				cfg.Pipeline.Cluster = f.cluster
			}
		case "clickhouse-cluster":
			cfg.ClickHouse.Cluster = f.chCluster
		case "log-level":
			cfg.Log.Level = f.logLevel
		case "migrate":
			cfg.Migrate = f.migrate
		case "expect":
			cfg.Expect.Network = f.expect
		}
	})
	cfg.Pipeline.Assembler.Expect = cfg.Expect
	return cfg, nil
}

func newLogger(w io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", "ncclwatch").Logger()
}

func runService(args []string, stderr io.Writer) int {
	f := newServiceFlags("run", stderr)
	f.fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch run [flags]\n\nConsume Fluent Bit records from Kafka, classify NCCL lines, store in ClickHouse.\n\nflags:")
		printFlags(stderr, f.fs, runFlagDefaults())
	}
	if code, ok := parseArgs(f.fs, args); !ok {
		return code
	}
	cfg, err := f.resolve(os.Getenv)
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch run: invalid configuration:\n"+err.Error())
		return exitUsage
	}
	log := newLogger(stderr, cfg.Log.Level)
	if pct, ok := gcPercent(os.Getenv); ok {
		debug.SetGCPercent(pct)
	}
	bound := memoryBound(cfg.Pipeline)
	if limit, ok := memoryLimit(os.Getenv, os.ReadFile, bound); ok {
		debug.SetMemoryLimit(limit)
		log.Info().Int64("bytes", limit).Int64("bound", bound).Msg("Go memory limit set: the memory bound, or 85 % of the container's where lower (GOMEMLIMIT unset)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log, serveOptions{}); err != nil {
		log.Error().Err(err).Msg("ncclwatch run stopped")
		return 1
	}
	log.Info().Msg("ncclwatch run stopped cleanly")
	return exitOK
}

// serviceGCPercent is the Go GC target `run` sets when GOGC is not set.
// Nearly all the service allocates is short-lived (each Kafka record's
// bytes, copied by kafka-go, parsed and dropped), so the default 100 %
// collects a ~100 MB live heap every ~100 MB of records; 200 % halves the
// collections. Below the soft memory limit (memoryLimit) that trades some
// RSS for less CPU; near it the limit rules (docs/configuration.md, "Go GC
// target and memory limit"). GOGC=100 restores Go's default.
const serviceGCPercent = 200

// gcPercent returns the GC target to set for the service: serviceGCPercent
// unless the GOGC environment variable chooses one (the runtime has
// read it then).
func gcPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return serviceGCPercent, true
}

// recordPrefilter is the runner's prefilter of whole records: NCCL-only
// (decoder.no_telemetry) it skips the records without an NCCL token (most
// of them) undecoded; with telemetry on there is none (nil): nearly every
// record of a trainer passes it, so searching every record's bytes for the
// tokens costs more than it saves (measured on the load benchmark's
// stream), and the line parser searches the decoded line for the same
// tokens anyway. A record whose lines give
// nothing is activity for the rules, as a skipped one is.
func recordPrefilter(noTelemetry bool) func([]byte) bool {
	if noTelemetry {
		return parsers.Prefilter(false)
	}
	return nil
}

// memoryLimitShare is the share of the container's memory limit that `run`
// gives the Go heap's soft limit where that is below the memory bound:
// near the limit the runtime collects harder instead of the kernel
// killing the process there. 85 % leaves room for what is not heap
// (goroutine stacks, the runtime's own, clickhouse-go's and kafka-go's
// buffers).
const memoryLimitShare = 0.85

// memoryBase is the part of memoryBound that no batch setting scales
// (docs/configuration.md, "Memory", names each part with its setting): the
// runtime and the heap's own overhead, kafka-go's fetches and the queue,
// one block of an insert, the state of a few hundred live jobs, and the
// collector's room to work.
const memoryBase = 208 << 20

// memoryBound returns the memory a configuration needs: memoryBase and
// two batches (one filling, one being stored) of the larger of the live
// and the backlog byte limits, which bound what a batch's rows hold
// (pipeline.Batch.Bytes). `run` sets it as the Go soft memory limit
// unless GOMEMLIMIT is set.
func memoryBound(p pipeline.RunnerConfig) int64 {
	batch := p.Batch.MaxBytes
	if p.Batch.Backlog.MaxRows > 0 {
		batch = max(batch, p.Batch.Backlog.MaxBytes)
	}
	return memoryBase + 2*int64(batch)
}

// memoryLimit returns the soft memory limit to set for the service: bound,
// or memoryLimitShare of the container's memory limit (cgroup v2
// memory.max, else v1 memory.limit_in_bytes) where that is lower; none
// when GOMEMLIMIT chooses one.
func memoryLimit(getenv func(string) string, readFile func(string) ([]byte, error), bound int64) (int64, bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2) or a huge number (v1: no limit, a page-rounded
		// MaxInt64): no container limit.
		if err != nil || n <= 0 || n >= 1<<60 {
			break
		}
		return min(bound, int64(float64(n)*memoryLimitShare)), true
	}
	return bound, true
}

// serveOptions are what a caller of serve chooses beside the
// configuration: where the HTTP endpoints listen, which sink stores the
// batches, and a last stage that sees what was stored. The zero value is
// `ncclwatch run`: cfg's listen address, ClickHouse, nothing after it.
type serveOptions struct {
	// listener serves /metrics, the read API and the probes; nil:
	// cfg.HTTP.Listen.
	listener net.Listener
	// sink stores the batches instead of ClickHouse (the demo's JSON-lines
	// sink); the rebuild after an assignment, the fold restore and the
	// read API's stored verdicts are then off.
	sink pipeline.Consumer
	// after is the last stage of the chain: it gets every batch once the
	// sink stored it (the demo's terminal table).
	after pipeline.Consumer
	// registry gets the service's metrics; nil: a registry of its own.
	registry *prometheus.Registry
}

// store is the sink of `run` and what else the same storage serves: the
// stored events of a rebuild, the fold snapshots, the read API's verdicts
// and the alert states of a previous process. All but sink are nil for a
// sink that is not ClickHouse.
type store struct {
	sink   pipeline.Consumer
	loader pipeline.EventLoader
	folds  pipeline.FoldLoader
	jobs   jobReader
	alerts interface {
		LoadAlerts(ctx context.Context, limit int) ([]pipeline.StoredAlert, error)
	}
	close func()
}

// openStore connects to ClickHouse and prepares its schema, unless sink is
// given.
func openStore(ctx context.Context, cfg serviceConfig, sink pipeline.Consumer, metrics *pipeline.Metrics,
	log zerolog.Logger) (store, error) {
	if sink != nil {
		return store{sink: sink, close: func() {}}, nil
	}
	ch, err := connectClickHouse(ctx, cfg.ClickHouse, metrics, log)
	if err != nil {
		return store{}, err
	}
	if err := prepareSchema(ctx, ch, cfg.Migrate, log); err != nil {
		ch.Close()
		return store{}, err
	}
	return store{sink: ch, loader: ch, folds: ch, jobs: ch, alerts: ch, close: func() { ch.Close() }}, nil
}

// serve runs the service until ctx is done. It builds the chain — Kafka
// source → run loop (decode, parse, assemble, enrich) → rules → sink →
// live jobs → opts.after — and runs the source, the loop (which also
// keeps the rules' schedule), the rules' notifiers, the HTTP endpoints and
// the lag gauges and inventory reloads as goroutines of one group that
// exit when ctx does.
func serve(ctx context.Context, cfg serviceConfig, log zerolog.Logger, opts serveOptions) error {
	reg := opts.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := pipeline.NewMetrics(reg)

	tracer, shutdownTracer, err := newTracer(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	defer shutdownTracer()
	st, err := openStore(ctx, cfg, opts.sink, metrics, log)
	if err != nil {
		return err
	}
	defer st.close()
	var inv *pipeline.Inventory
	if cfg.Inventory != "" {
		if inv, err = pipeline.LoadInventory(cfg.Inventory); err != nil {
			return err
		}
		log.Info().Int("nodes", inv.Len()).Str("file", cfg.Inventory).Msg("inventory loaded")
	}
	live := newLiveJobs(liveJobsMax)
	api, err := newJobsAPI(live, st.jobs, cfg.HTTP.APITokenFile)
	if err != nil {
		return err
	}
	// The live jobs of the read API (and opts.after) see what the sink
	// accepted; the rules stage goes in front of the sink, so that alert
	// changes are stored in the batch whose summaries caused them.
	sink := storedChain(st.sink, live, opts.after)
	stage, err := setupRules(ctx, cfg, sink, inv, st.alerts, reg, log)
	if err != nil {
		return err
	}
	if stage != nil {
		sink = stage
	}
	src, err := kafka.NewSource(cfg.Kafka)
	if err != nil {
		return err
	}
	defer src.Close()
	runner := pipeline.NewRunner(cfg.Pipeline, runnerDeps(cfg, pipeline.RunnerDeps{Observe: stage != nil,
		Sink: sink, Committer: src, Loader: st.loader, Folds: st.folds, Inventory: inv, Metrics: metrics,
		Logger: log, Tracer: tracer}))

	ln := opts.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.HTTP.Listen); err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
	}
	srv := &http.Server{Handler: serviceMux(reg, api, runner), ReadHeaderTimeout: 5 * time.Second}
	log.Info().Strs("brokers", cfg.Kafka.Brokers).Strs("topics", cfg.Kafka.Topics).Str("group", cfg.Kafka.GroupID).
		Str("http", ln.Addr().String()).Int("parse_workers", cfg.Pipeline.ParseWorkers).Msg("ncclwatch run starting")

	// One group over every long-lived part: the first to fail cancels the
	// others, and serve returns that error once all have exited.
	g, gctx := errgroup.WithContext(ctx)
	// The source's queue into the run loop: bounded, so that a loop
	// blocked on the sink stops the fetching (back-pressure). Records come
	// in runs of up to a few hundred, and the source queues
	// kafka.queue_capacity records itself: two inputs keep the loop fed
	// without holding much more, and a revocation waits behind little.
	in := make(chan pipeline.Input, 2)
	g.Go(func() error { return emit(gctx, src, in, runner, metrics, log) })
	g.Go(func() error { return runner.Run(gctx, in) })
	if stage != nil {
		g.Go(func() error { return stage.Run(gctx) })
	}
	g.Go(func() error { return gauge(gctx, src, in, inv, metrics, log) })
	g.Go(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}

// storedChain is the end of the chain: sink, then the live jobs of the
// read API, then after (may be nil) with every batch the sink stored.
func storedChain(sink pipeline.Consumer, live *liveJobs, after pipeline.Consumer) pipeline.Consumer {
	return pipeline.ConsumerFunc(func(ctx context.Context, b *pipeline.Batch) error {
		if err := sink.Consume(ctx, b); err != nil {
			return err
		}
		if len(b.Jobs) > 0 {
			live.observe(slices.Clone(b.Jobs))
		}
		if after != nil {
			return after.Consume(ctx, b)
		}
		return nil
	})
}

// setupRules builds the rules stage in front of next, or nil when no
// rules are configured; alerts (may be nil) holds the alert states a
// previous process stored.
func setupRules(ctx context.Context, cfg serviceConfig, next pipeline.Consumer, inv *pipeline.Inventory,
	alerts interface {
		LoadAlerts(ctx context.Context, limit int) ([]pipeline.StoredAlert, error)
	},
	reg *prometheus.Registry, log zerolog.Logger) (*rules.Stage, error) {
	if len(cfg.Rules.Files) == 0 {
		return nil, nil
	}
	var fleet rules.Fleet
	if inv != nil {
		fleet = inv
	}
	stage, err := rules.Setup(cfg.Rules, next, rules.SetupDeps{Fleet: fleet, Metrics: rules.NewMetrics(reg),
		Logger: log.With().Str("component", "rules").Logger()})
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if alerts != nil {
		// Alerts that still hold after a restart keep their times.
		stored, err := alerts.LoadAlerts(ctx, cfg.Rules.Engine.MaxSubjects)
		if err != nil {
			return nil, fmt.Errorf("rules: restoring the stored alert states: %w", err)
		}
		log.Info().Int("alerts", stage.Engine().Restore(stored)).Int("stored", len(stored)).
			Msg("pending and firing alert states restored from storage")
	}
	log.Info().Strs("files", cfg.Rules.Files).Int("rules", len(stage.Engine().Rules())).
		Int("alertmanagers", len(cfg.Rules.Alertmanagers)).Int("webhooks", len(cfg.Rules.Webhooks)).Msg("alert rules loaded")
	return stage, nil
}

// runnerDeps completes deps with the decode and parse stages cfg asks
// for: the envelope decoder, the one line parser and the record
// prefilter.
func runnerDeps(cfg serviceConfig, deps pipeline.RunnerDeps) pipeline.RunnerDeps {
	dcfg := parsers.DefaultDecoderConfig()
	dcfg.MaxLineBytes = cfg.Decoder.MaxLineBytes
	if deps.Metrics != nil {
		dcfg.InvalidUTF8 = deps.Metrics.InvalidUTF8
	}
	// Telemetry (training step times, nccl-tests results) is on unless
	// the config turns it off: it widens the prefilter to progress lines.
	// One line parser does both, in one call per line: it strips a line
	// once and parses NCCL and telemetry.
	newLines := func() pipeline.Classifier {
		if cfg.Decoder.NoTelemetry {
			return &parsers.Lines{}
		}
		return parsers.NewLines(parsers.NewTelemetry(cfg.Telemetry))
	}
	deps.NewAssembler = assemble.Factory
	deps.NewDecoder = func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }
	deps.Classifier, deps.NewClassifier = newLines(), newLines
	deps.Candidate = recordPrefilter(cfg.Decoder.NoTelemetry)
	return deps
}

// serviceMux serves /metrics, the read API, /healthz and /readyz.
func serviceMux(reg *prometheus.Registry, api *jobsAPI, runner *pipeline.Runner) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	api.mount(mux)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !runner.HoldsAssignment() {
			http.Error(w, "not ready: waiting for a partition assignment", http.StatusServiceUnavailable)
			return
		}
		if !runner.Ready() {
			msg := "not ready: the sink has not stored a batch within pipeline.sink_timeout"
			if err := runner.LastSinkError(); err != nil {
				msg += ": " + err.Error()
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// emit runs the Kafka source into in until ctx is done or the run loop
// stopped.
func emit(ctx context.Context, src *kafka.Source, in chan<- pipeline.Input, runner *pipeline.Runner,
	metrics *pipeline.Metrics, log zerolog.Logger) error {
	retrying := func(err error) {
		log.Warn().Err(err).Msg("kafka: retrying")
		metrics.SourceRetries.WithLabelValues(kafka.RetryReason(err)).Inc()
	}
	err := src.Emit(ctx, in, runner.Stopped(), retrying)
	if errors.Is(err, kafka.ErrLoopStopped) {
		return nil // the loop's own error is the one to report
	}
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

// gauge sets the lag and queue gauges and reloads the inventory every few
// seconds until ctx is done.
func gauge(ctx context.Context, src *kafka.Source, in chan pipeline.Input, inv *pipeline.Inventory,
	metrics *pipeline.Metrics, log zerolog.Logger) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// Reset first: partitions revoked since the last tick must not
		// keep their old lag.
		metrics.ConsumerLag.Reset()
		for tp, lag := range src.Lag() {
			metrics.ConsumerLag.WithLabelValues(tp.Topic, fmt.Sprint(tp.Partition)).Set(float64(lag))
		}
		n, c := src.QueueLen()
		metrics.SourceQueue.Set(float64(n + len(in)))
		metrics.SourceQueueCap.Set(float64(c + cap(in)))
		if inv != nil {
			if changed, err := inv.Reload(); err != nil {
				log.Warn().Err(err).Msg("inventory reload failed; keeping the previous one")
			} else if changed {
				log.Info().Int("nodes", inv.Len()).Msg("inventory reloaded")
			}
		}
	}
}

// prepareSchema applies the migrations (on) or checks that the schema is
// the binary's (off); several instances migrating at once is safe, since
// every statement is idempotent.
func prepareSchema(ctx context.Context, ch *sinks.ClickHouse, migrate bool, log zerolog.Logger) error {
	if !migrate {
		if err := ch.CheckSchema(ctx); err != nil {
			return fmt.Errorf("migrate is off: %w", err)
		}
		return nil
	}
	applied, err := ch.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	log.Info().Ints("applied", applied).Str("server", ch.Version()).Msg("clickhouse migrations")
	return nil
}

// connectClickHouse retries the first connection for a while: in a fresh
// deployment ClickHouse may come up after ncclwatch.
func connectClickHouse(ctx context.Context, cfg sinks.ClickHouseConfig, metrics *pipeline.Metrics,
	log zerolog.Logger) (*sinks.ClickHouse, error) {
	deadline := time.Now().Add(60 * time.Second)
	backoff := pipeline.Backoff{Min: 500 * time.Millisecond, Max: 5 * time.Second}
	for {
		ch, err := sinks.NewClickHouse(ctx, cfg, sinks.WithMetrics(metrics))
		if err == nil {
			log.Info().Str("server", ch.Version()).Strs("addr", cfg.Addr).Msg("clickhouse connected")
			return ch, nil
		}
		if pipeline.IsPermanent(err) {
			return nil, err // wrong credentials or certificate: fatal at once
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("clickhouse %v: %w (is the server up? set --clickhouse or NCCLWATCH_CLICKHOUSE)", cfg.Addr, err)
		}
		log.Warn().Err(err).Dur("retry_in", backoff.Next()).Msg("clickhouse not reachable yet")
		if !backoff.Wait(ctx) {
			return nil, ctx.Err()
		}
	}
}

// newTracer returns an OTLP/HTTP tracer when an endpoint is configured,
// else a no-op one.
func newTracer(ctx context.Context, cfg tracingConfig) (trace.Tracer, func(), error) {
	if cfg.OTLPEndpoint == "" {
		return noop.NewTracerProvider().Tracer("ncclwatch"), func() {}, nil
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(cfg.OTLPEndpoint)}
	if cfg.Insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing.otlp_endpoint: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	return tp.Tracer("ncclwatch"), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}

func runMigrate(args []string, stdout, stderr io.Writer) int {
	f := newServiceFlags("migrate", stderr)
	f.fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch migrate [--clickhouse HOST:PORT] [--database DB] [--cluster NAME] [--config FILE]\n\nApply the numbered ClickHouse migrations (idempotent); with --cluster, on every server of that ClickHouse cluster.\n\nflags:")
		printFlags(stderr, f.fs, runFlagDefaults())
	}
	if code, ok := parseArgs(f.fs, args); !ok {
		return code
	}
	cfg, err := f.resolve(os.Getenv)
	if err == nil {
		err = cfg.ClickHouse.Validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch migrate:", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ch, err := sinks.NewClickHouse(ctx, cfg.ClickHouse)
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch migrate:", err)
		return 1
	}
	defer ch.Close()
	applied, err := ch.Migrate(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch migrate:", err)
		return 1
	}
	where := ""
	if cfg.ClickHouse.Cluster != "" {
		where = ", cluster " + cfg.ClickHouse.Cluster
	}
	fmt.Fprintf(stdout, "clickhouse %s, database %s%s: applied migrations %v\n", ch.Version(), cfg.ClickHouse.Database, where, applied)
	return exitOK
}
