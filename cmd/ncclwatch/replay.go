package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
)

// replayMeta is the pod metadata replay gives every record.
type replayMeta struct {
	Job, Namespace, Node, Pod, Container, Cluster string
}

// fluentBitJSON appends one record of the shape deploy/fluent-bit produces
// (parsers.AppendFluentBit). Metadata fields given by the record's own
// envelope win over replay's flags only when the flag was left empty.
func fluentBitJSON(dst []byte, line []byte, t time.Time, m replayMeta) []byte {
	return parsers.AppendFluentBit(dst, line, t, parsers.FluentBitMeta(m))
}

// replayer turns files of any envelope into Fluent Bit records.
type replayer struct {
	meta  replayMeta
	dec   *parsers.Decoder
	start time.Time
	n     int64
}

// records reads r and calls fn with each record's value.
func (rp *replayer) records(r io.Reader, fn func(value []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var buf []byte
	var ferr error
	emit := func(rec *pipeline.Record) {
		if ferr != nil {
			return
		}
		m := rp.meta
		if rec.Meta != nil {
			if m.Pod == "" {
				m.Pod = rec.Meta.Pod
			}
			if m.Namespace == "" {
				m.Namespace = rec.Meta.Namespace
			}
			if m.Node == "" {
				m.Node = rec.Meta.Node
			}
			if m.Container == "" {
				m.Container = rec.Meta.Container
			}
		}
		t := rec.Time
		if t.IsZero() {
			// Keep line order visible in time: one microsecond apart.
			t = rp.start.Add(time.Duration(rp.n) * time.Microsecond)
		}
		rp.n++
		buf = fluentBitJSON(buf[:0], rec.Text, t, m)
		ferr = fn(buf)
	}
	for sc.Scan() {
		if err := rp.dec.Decode(sc.Bytes(), emit); err != nil && !errors.Is(err, parsers.ErrOversized) && ferr == nil {
			// Undecodable records are replayed as they are: the
			// service's own dead-letter path is what a replay should
			// exercise.
			ferr = fn(sc.Bytes())
		}
		if ferr != nil {
			return ferr
		}
	}
	rp.dec.Flush(emit)
	if err := sc.Err(); err != nil {
		return err
	}
	return ferr
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var brokers []string
	fs.Var(listFlag{&brokers}, "brokers", "Kafka bootstrap brokers host:port[,…] (env NCCLWATCH_BROKERS)")
	topic := fs.String("topic", "", "topic to produce to")
	m := replayMeta{Namespace: "default", Container: "trainer"}
	fs.StringVar(&m.Job, "job", "", "job name (record key and job label)")
	fs.StringVar(&m.Namespace, "namespace", m.Namespace, "Kubernetes namespace")
	fs.StringVar(&m.Node, "node", "", "Kubernetes node (default: from the file's envelope)")
	fs.StringVar(&m.Pod, "pod", "", "pod name (default JOB-worker-0)")
	fs.StringVar(&m.Container, "container", m.Container, "container name")
	fs.StringVar(&m.Cluster, "cluster", "", "cluster name")
	rate := fs.Float64("rate", 0, "records per second; 0 = as fast as the broker takes them")
	repeat := fs.Int("repeat", 1, "replay the files this many times (load tests)")
	// 8 partitions spread a handful of replayed jobs over several
	// consumers without many empty partitions on a laptop broker.
	partitions := fs.Int("partitions", 8, "partitions of the topic when replay creates it (an existing topic is used as it is)")
	config := fs.String("config", "", "take kafka.brokers, kafka.tls and kafka.sasl from this `ncclwatch run` config file (and NCCLWATCH_* env: secrets come from password_file or env, never flags)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch replay --brokers HOST:PORT --topic T --job NAME [--namespace NS] [--node NODE] [--pod POD] [--rate N] FILE...\n\nProduce log files (any envelope) into Kafka as Fluent Bit records.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args); !ok {
		return code
	}
	pcfg := kafka.DefaultProducerConfig()
	if *config != "" {
		c := defaultServiceConfig()
		if err := c.loadFile(*config); err != nil {
			fmt.Fprintln(stderr, "ncclwatch replay:", err)
			return exitUsage
		}
		if err := c.envOverrides(os.Getenv); err != nil {
			fmt.Fprintln(stderr, "ncclwatch replay:", err)
			return exitUsage
		}
		pcfg.TLS, pcfg.SASL = c.Kafka.TLS, c.Kafka.SASL
		if len(brokers) == 0 {
			brokers = c.Kafka.Brokers
		}
	}
	if len(brokers) == 0 {
		brokers = splitList(os.Getenv("NCCLWATCH_BROKERS"))
	}
	switch {
	case len(brokers) == 0:
		fmt.Fprintln(stderr, "ncclwatch replay: --brokers: required")
		return exitUsage
	case *topic == "":
		fmt.Fprintln(stderr, "ncclwatch replay: --topic: required")
		return exitUsage
	case m.Job == "":
		fmt.Fprintln(stderr, "ncclwatch replay: --job: required")
		return exitUsage
	case fs.NArg() == 0:
		fmt.Fprintln(stderr, "ncclwatch replay: no files given")
		return exitUsage
	case *partitions < 1:
		fmt.Fprintln(stderr, "ncclwatch replay: --partitions must be >= 1")
		return exitUsage
	case *rate < 0 || *repeat < 1:
		fmt.Fprintln(stderr, "ncclwatch replay: --rate must be >= 0 and --repeat >= 1")
		return exitUsage
	}
	if m.Pod == "" {
		m.Pod = m.Job + "-worker-0"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pcfg.Brokers, pcfg.Topic = brokers, *topic
	n, d, err := replayWith(ctx, stderr, pcfg, *partitions, m, *rate, *repeat, fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch replay:", err)
		return 1
	}
	fmt.Fprintf(stdout, "replayed %d records to %s in %s (%.0f records/s)\n", n, *topic, d.Round(time.Millisecond), float64(n)/d.Seconds())
	return exitOK
}

// replay produces files to Kafka and returns the number of records and the
// time it took.
func replay(ctx context.Context, stderr io.Writer, brokers []string, topic string, partitions int, m replayMeta, rate float64, repeat int, files []string) (int64, time.Duration, error) {
	pcfg := kafka.DefaultProducerConfig()
	pcfg.Brokers, pcfg.Topic = brokers, topic
	return replayWith(ctx, stderr, pcfg, partitions, m, rate, repeat, files)
}

// replayWith is replay with a whole producer configuration (TLS, SASL).
func replayWith(ctx context.Context, stderr io.Writer, pcfg kafka.ProducerConfig, partitions int, m replayMeta, rate float64, repeat int, files []string) (int64, time.Duration, error) {
	topic := pcfg.Topic
	n, created, err := kafka.EnsureTopic(ctx, pcfg, partitions)
	if err != nil {
		return 0, 0, err
	}
	if created {
		fmt.Fprintf(stderr, "created topic %s with %d partitions\n", topic, n)
	}
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		return 0, 0, err
	}
	defer prod.Close()
	rp := &replayer{meta: m, dec: parsers.NewDecoder(parsers.DefaultDecoderConfig()), start: time.Now()}
	const batch = 1000
	msgs := make([]kafka.ProducerMessage, 0, batch)
	key := []byte(m.Job)
	var sent int64
	start := time.Now()
	flush := func() error {
		if len(msgs) == 0 {
			return nil
		}
		if err := prod.Produce(ctx, msgs); err != nil {
			return err
		}
		sent += int64(len(msgs))
		msgs = msgs[:0]
		if rate > 0 {
			// Pace: sleep until the records sent so far are due.
			due := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
		return nil
	}
	chunk := batch
	if rate > 0 && rate < batch {
		chunk = max(1, int(rate/10))
	}
	for i := 0; i < repeat; i++ {
		for _, name := range files {
			f, err := os.Open(name)
			if err != nil {
				return sent, time.Since(start), err
			}
			err = rp.records(f, func(v []byte) error {
				msgs = append(msgs, kafka.ProducerMessage{Key: key, Value: append([]byte(nil), v...)})
				if len(msgs) >= chunk {
					return flush()
				}
				return nil
			})
			f.Close()
			if err != nil {
				return sent, time.Since(start), fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if err := flush(); err != nil {
		return sent, time.Since(start), err
	}
	return sent, time.Since(start), nil
}
