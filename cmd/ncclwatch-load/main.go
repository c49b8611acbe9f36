// Command ncclwatch-load is the project's load benchmark, kept apart from
// the product's command: it produces a seeded mixed Fluent Bit stream into
// a real Kafka topic and times `ncclwatch run` (and, with --peer,
// ClickHouse's own Kafka engine) consuming it into ClickHouse. Its gen
// subcommand writes the same synthetic training log as a file, the input of
// the scan benchmarks. deploy/local/load.sh is the entry; the method
// is docs/performance.md.
//
//	ncclwatch-load [flags]          the benchmark
//	ncclwatch-load gen [flags]      write a synthetic training log
//
// The stream comes in shapes (--shape, for both):
//
//	default       64 jobs whose every rank prints each step's progress line
//	random-steps  every trainer line a step of its own (--random-steps)
//	cluster       ~24 jobs running at once, jobs of 1-8 nodes starting and
//	              ending (about one per 7 000 records), six trainers each
//	              printing on one rank or on every rank, NCCL init per job,
//	              warnings and data-loader noise; 5.8 % NCCL lines
//	cluster-inspector  the cluster stream with NCCL Inspector records
//	              mixed in, --inspector-rate per second of stream time
//	              (the cluster's lines are 1 ms apart)
//
// --shape takes a list or "all": every shape then runs in turn, each on a
// fresh topic and database with its peer, and a table of them all ends
// the output:
//
//	ncclwatch-load --peer --records 3000000 --shape all ...
//	ncclwatch-load gen --shape cluster --size 300MB -o /tmp/cluster.log
//	ncclwatch scan --json /tmp/cluster.log
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ncclwatch/ncclwatch/cmd/ncclwatch-load/loadtest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "gen" {
		return runGen(args[1:], stdout, stderr)
	}
	return runLoad(args, stdout, stderr)
}

type listFlag struct{ l *[]string }

func (f listFlag) String() string {
	if f.l == nil {
		return ""
	}
	return strings.Join(*f.l, ",")
}

func (f listFlag) Set(s string) error {
	*f.l = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f.l = append(*f.l, v)
		}
	}
	return nil
}

// parse parses flags; ok false means exit with code.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

func runLoad(args []string, stdout, stderr io.Writer) int {
	o := loadtest.DefaultOptions()
	fs := flag.NewFlagSet("ncclwatch-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(listFlag{&o.Brokers}, "brokers", "Kafka bootstrap brokers host:port[,…] (env NCCLWATCH_BROKERS)")
	fs.Var(listFlag{&o.ClickHouse}, "clickhouse", "ClickHouse native address host:port (env NCCLWATCH_CLICKHOUSE)")
	fs.StringVar(&o.Topic, "topic", "", "topic to create and fill (default: ncclwatch-load-<random>)")
	fs.StringVar(&o.Database, "database", "", "ClickHouse database (default: ncclwatch_load_<random>, dropped at the end)")
	fs.StringVar(&o.NCCLWatch, "ncclwatch", o.NCCLWatch, "the ncclwatch binary to run as `ncclwatch run`")
	fs.StringVar(&o.Config, "config", "", "YAML config for `ncclwatch run` (pipeline, kafka and clickhouse tuning); the benchmark's flags win")
	fs.BoolVar(&o.Peer, "peer", false, "first time ClickHouse's Kafka engine + a materialized view on the same topic and print the ratio")
	kafkaTool := fs.String("kafka-tool", strings.Join(o.KafkaTool, " "), "command that runs a Kafka tool class (for --peer's offset reset)")
	fs.Int64Var(&o.Records, "records", o.Records, "records in the backlog that is produced, then consumed")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "training jobs (record keys) the stream is spread over")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of the topic")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent producers for the backlog")
	fs.Float64Var(&o.NCCLShare, "nccl-share", o.NCCLShare, "fraction of lines that are NCCL lines, for every shape (default: each shape's, 0.05; 0.058 for cluster)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "random seed: the same seed gives the same stream")
	fs.Float64Var(&o.LatRate, "latency-rate", o.LatRate, "records/s offered while record-to-row latency is measured (0: skip)")
	fs.DurationVar(&o.LatDuration, "latency-duration", o.LatDuration, "how long latency is measured")
	shape := fs.String("shape", "", "stream shapes to run, comma-separated, each with its peer and on a topic of its own: "+
		strings.Join(loadtest.ShapeNames(), ", ")+" or all (default: default); several print one table of them at the end")
	fs.IntVar(&o.Concurrent, "concurrent", o.Concurrent, "jobs running at once in the cluster shape (its jobs in all are as many as fit --records)")
	fs.Float64Var(&o.InspectorRate, "inspector-rate", o.InspectorRate, "NCCL Inspector records per second of stream time in the cluster-inspector shape (the cluster's lines: 1000/s)")
	fs.BoolVar(&o.RandomSteps, "random-steps", false, "the same as --shape random-steps")
	fs.BoolVar(&o.ProduceOnly, "produce-only", false, "only produce the backlog (for an external `ncclwatch run`)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the database and the topic at the end")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of ncclwatch run's consume phase to this file")
	fs.StringVar(&o.ServerPID, "clickhouse-pid", "", "pid of the ClickHouse server on this host: its CPU during the consume phases is reported")
	fs.StringVar(&o.BrokerPID, "kafka-pid", "", "pid of the Kafka broker on this host: its CPU during the consume phases is reported")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: ncclwatch-load [flags]
       ncclwatch-load gen [flags]

Load benchmark against a running Kafka broker and ClickHouse server: produce a
seeded mixed Fluent Bit stream (trainer output with NCCL lines, many jobs),
optionally time ClickHouse's Kafka engine on it (--peer), time ncclwatch run
consuming it into ClickHouse until its group's lag is 0, measure
record-to-row latency at an offered rate and ncclwatch's RSS, and print a
report.

flags:`)
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	o.KafkaTool = strings.Fields(*kafkaTool)
	o.ShareSet = flagSet(fs, "nccl-share")
	list := []loadtest.Shape{loadtest.ShapeDefault}
	switch {
	case *shape != "":
		var err error
		if list, err = loadtest.ParseShapes(*shape); err != nil {
			fmt.Fprintln(stderr, "ncclwatch-load: --shape:", err)
			return 2
		}
		if o.RandomSteps && (len(list) != 1 || list[0] != loadtest.ShapeRandomSteps) {
			fmt.Fprintln(stderr, "ncclwatch-load: --random-steps is --shape random-steps: give one of them")
			return 2
		}
	case o.RandomSteps:
		list = []loadtest.Shape{loadtest.ShapeRandomSteps}
	}
	o.Shape = list[0]
	if len(o.Brokers) == 0 {
		_ = listFlag{&o.Brokers}.Set(os.Getenv("NCCLWATCH_BROKERS"))
	}
	if len(o.ClickHouse) == 0 {
		_ = listFlag{&o.ClickHouse}.Set(os.Getenv("NCCLWATCH_CLICKHOUSE"))
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(stderr, "ncclwatch-load:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := loadtest.RunShapes(ctx, o, list, stdout, stderr); err != nil {
		return 1
	}
	return 0
}

// flagSet reports whether flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func runGen(args []string, stdout, stderr io.Writer) int {
	cfg := loadtest.DefaultGenConfig()
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed: the same seed gives the same bytes")
	size := fs.String("size", "64MB", "approximate output size (B, KB, MB, GB)")
	fs.Float64Var(&cfg.NCCLShare, "nccl-share", cfg.NCCLShare, "fraction of lines that are NCCL lines (default: the shape's, 0.05; 0.058 for cluster)")
	fs.StringVar(&cfg.Format, "format", cfg.Format, "raw or fluentbit")
	shape := fs.String("shape", string(loadtest.ShapeDefault), "stream shape: "+strings.Join(loadtest.ShapeNames(), ", "))
	fs.IntVar(&cfg.Concurrent, "concurrent", loadtest.DefaultConcurrent, "jobs running at once (cluster shape)")
	fs.Float64Var(&cfg.InspectorRate, "inspector-rate", loadtest.DefaultInspectorRate, "NCCL Inspector records per second of stream time (cluster-inspector shape; the cluster's lines: 1000/s)")
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes of the synthetic job (default and random-steps shapes)")
	fs.IntVar(&cfg.GPUs, "gpus", cfg.GPUs, "GPUs per node (default and random-steps shapes)")
	fs.StringVar(&cfg.Network, "network", cfg.Network, "IB, RoCE, EFA or Socket (default and random-steps shapes)")
	fs.BoolVar(&cfg.RandomSteps, "random-steps", false, "the same as --shape random-steps")
	out := fs.String("o", "-", "output file, - for stdout")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch-load gen [flags]  — write a seeded synthetic training log (trainer output with NCCL lines)")
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	n, err := loadtest.ParseSize(*size)
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch-load gen: --size:", err)
		return 2
	}
	cfg.Bytes = n
	cfg.Shape = loadtest.Shape(*shape)
	if cfg.RandomSteps && flagSet(fs, "shape") && cfg.Shape != loadtest.ShapeRandomSteps {
		fmt.Fprintln(stderr, "ncclwatch-load gen: --random-steps is --shape random-steps: give one of them")
		return 2
	}
	if cfg.RandomSteps {
		cfg.Shape = loadtest.ShapeRandomSteps
	}
	if !flagSet(fs, "nccl-share") {
		cfg.NCCLShare = cfg.Shape.DefaultShare()
	}
	if cfg.Format != "raw" && cfg.Format != "fluentbit" {
		fmt.Fprintln(stderr, "ncclwatch-load gen: --format: want raw or fluentbit")
		return 2
	}
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintln(stderr, "ncclwatch-load gen:", err)
			return 2
		}
		defer f.Close()
		w = f
	}
	if _, err := loadtest.Generate(w, cfg); err != nil {
		fmt.Fprintln(stderr, "ncclwatch-load gen:", err)
		return 2
	}
	return 0
}
