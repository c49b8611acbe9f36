package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
)

// guardReportTarget is a parsed --report URL:
// kafka://BROKER[,BROKER]/TOPIC[?job=NAME&namespace=NS&cluster=C].
type guardReportTarget struct {
	brokers []string
	topic   string
	meta    replayMeta
}

func parseGuardReport(s string) (guardReportTarget, error) {
	u, err := url.Parse(s)
	if err != nil {
		return guardReportTarget{}, err
	}
	switch u.Scheme {
	case "kafka":
	case "http", "https":
		// run reads Kafka only; an HTTP ingest would be a second door into
		// the pipeline (ARCHITECTURE.md), so guard reports through Kafka.
		return guardReportTarget{}, errors.New("http reporting is not implemented: use kafka://BROKER/TOPIC, the topic `ncclwatch run` consumes")
	default:
		return guardReportTarget{}, fmt.Errorf("%q: want kafka://BROKER[,BROKER]/TOPIC", s)
	}
	t := guardReportTarget{brokers: splitList(u.Host), topic: strings.Trim(u.Path, "/")}
	if len(t.brokers) == 0 || t.topic == "" {
		return guardReportTarget{}, fmt.Errorf("%q: want kafka://BROKER[,BROKER]/TOPIC", s)
	}
	q := u.Query()
	host, _ := os.Hostname()
	t.meta = replayMeta{Job: q.Get("job"), Namespace: q.Get("namespace"), Cluster: q.Get("cluster"),
		Node: host, Container: "guard"}
	if t.meta.Namespace == "" {
		t.meta.Namespace = "default"
	}
	return t, nil
}

// guardReportMax caps the NCCL lines one guarded job reports: NCCL init of
// a few thousand ranks, far more than a verdict needs.
const guardReportMax = 20000

// guardReporter collects the job's NCCL lines and produces them as Fluent
// Bit records when the job ends, so `ncclwatch run` classifies and stores the
// guarded job like any other (job_verdicts) where no Fluent Bit runs.
type guardReporter struct {
	t       guardReportTarget
	prod    *kafka.Producer
	msgs    []kafka.ProducerMessage
	start   time.Time
	dropped int
}

func newGuardReporter(spec string, argv []string) (*guardReporter, error) {
	t, err := parseGuardReport(spec)
	if err != nil {
		return nil, err
	}
	if t.meta.Job == "" {
		t.meta.Job = guardJobName(os.Getenv, argv)
	}
	t.meta.Pod = t.meta.Job + "-" + t.meta.Node
	cfg := kafka.DefaultProducerConfig()
	cfg.Brokers, cfg.Topic = t.brokers, t.topic
	prod, err := kafka.NewProducer(cfg)
	if err != nil {
		return nil, err
	}
	return &guardReporter{t: t, prod: prod, start: time.Now()}, nil
}

// guardJobName names a guarded job without a job= parameter: the batch
// system's job ID when there is one, else the command and guard's PID.
func guardJobName(getenv func(string) string, argv []string) string {
	for _, k := range []string{"NCCLWATCH_GUARD_JOB", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_NAME"} {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return filepath.Base(argv[0]) + "-" + strconv.Itoa(os.Getpid())
}

// add keeps one NCCL line (copied) for the report.
func (r *guardReporter) add(line []byte) {
	if len(r.msgs) >= guardReportMax {
		r.dropped++
		return
	}
	// One microsecond apart keeps the lines' order visible in time.
	t := r.start.Add(time.Duration(len(r.msgs)) * time.Microsecond)
	r.msgs = append(r.msgs, kafka.ProducerMessage{Key: []byte(r.t.meta.Job),
		Value: fluentBitJSON(nil, line, t, r.t.meta), Time: t})
}

// close produces what was collected, within a bounded time.
func (r *guardReporter) close(g *guard) {
	defer r.prod.Close()
	if len(r.msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := r.prod.Produce(ctx, r.msgs); err != nil {
		g.say("--report: %d NCCL lines not sent to %s: %v", len(r.msgs), r.t.topic, err)
		return
	}
	g.say("--report: sent %d NCCL lines of job %s/%s to Kafka topic %s (%d over the cap not sent)",
		len(r.msgs), r.t.meta.Namespace, r.t.meta.Job, r.t.topic, r.dropped)
}
