package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/rules"
)

// scanSink is the sink at the end of scan's and guard's chain, a
// pipeline.Consumer as run's sinks are: it keeps the job's summaries and
// the firing alerts of the batches it gets, for the table, the JSON
// document or guard's block.
type scanSink struct {
	comms  []pipeline.CommSummary
	sum    pipeline.JobSummary
	alerts []pipeline.Alert
}

// Consume keeps b's summaries (the last job's; a file front end has one)
// and its firing alerts.
func (s *scanSink) Consume(_ context.Context, b *pipeline.Batch) error {
	if len(b.Jobs) > 0 {
		s.sum = b.Jobs[len(b.Jobs)-1]
		s.comms = append(append(s.comms[:0], b.Comms...), b.Unnamed...)
	}
	for _, a := range b.Alerts {
		if a.State == pipeline.AlertFiring {
			s.alerts = append(s.alerts, a)
		}
	}
	return nil
}

// fileChain hands b, a file front end's batch of its one job's final
// summaries (pipeline.Assembly.SummaryBatch), through the rules stage
// (rs nil: none) to a scan sink and returns the sink. The input is
// complete, so the rules' `for` is not waited for (rules.Check); they are
// evaluated at the job's last event time, or at now when the log carried
// no times. A job without NCCL evidence is not judged: no alerts. The
// stage's evaluation errors go to log, an engine that cannot be built is
// the error; the sink's alerts are never nil with rs set.
func fileChain(rs *rules.RuleSet, b *pipeline.Batch, now time.Time, log zerolog.Logger) (*scanSink, error) {
	sink := &scanSink{}
	sum := &b.Jobs[0]
	if rs == nil || sum.NCCLLines == 0 && len(b.Comms)+len(b.Unnamed) == 0 {
		if rs != nil {
			sink.alerts = []pipeline.Alert{}
		}
		return sink, sink.Consume(context.Background(), b)
	}
	if !sum.LastSeen.IsZero() {
		now = sum.LastSeen
	}
	cfg := rules.DefaultConfig()
	cfg.IgnoreFor = true
	eng, err := rules.NewEngine(cfg, rs, rules.EngineDeps{})
	if err != nil {
		sink.alerts = []pipeline.Alert{}
		_ = sink.Consume(context.Background(), b)
		return sink, err
	}
	stage := rules.NewStage(eng, sink, 0, rules.StageDeps{Logger: log, Now: func() time.Time { return now }})
	err = stage.Consume(context.Background(), b)
	if sink.alerts == nil {
		sink.alerts = []pipeline.Alert{}
	}
	sortScanAlerts(sink.alerts)
	return sink, err
}

// errLineWriter is the rules stage's log as scan writes it: each of its
// JSON log lines becomes "prefix: error" (the message when there is no
// error) on w.
type errLineWriter struct {
	w      io.Writer
	prefix string
}

func (e errLineWriter) Write(p []byte) (int, error) {
	var line struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	msg := string(p)
	if json.Unmarshal(p, &line) == nil {
		msg = line.Message
		if line.Error != "" {
			msg = line.Error
		}
	}
	fmt.Fprintf(e.w, "%s: %s\n", e.prefix, msg)
	return len(p), nil
}
