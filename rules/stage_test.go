package rules

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
)

// recordingSink keeps copies of the batches it accepts; fail makes the next
// calls fail.
type recordingSink struct {
	mu      sync.Mutex
	batches []pipeline.Batch
	fail    int
}

func (s *recordingSink) Consume(_ context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return errors.New("sink down")
	}
	cp := *b
	cp.Jobs = append([]pipeline.JobSummary(nil), b.Jobs...)
	cp.Alerts = append([]pipeline.Alert(nil), b.Alerts...)
	s.batches = append(s.batches, cp)
	return nil
}

func (s *recordingSink) alerts() []pipeline.Alert {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pipeline.Alert
	for _, b := range s.batches {
		out = append(out, b.Alerts...)
	}
	return out
}

// recorder is an http.RoundTripper that answers from a script and keeps
// the requests: the notifiers' transport in tests that run on a fake clock.
type recorder struct {
	mu       sync.Mutex
	statuses []int // answers in order; 200 when exhausted
	bodies   []string
	at       []time.Time
	paths    []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, string(b))
	r.at = append(r.at, time.Now())
	r.paths = append(r.paths, req.URL.Path)
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Body: io.NopCloser(strings.NewReader("")),
		Header: http.Header{}, Request: req}, nil
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...)
}

func testNotifierConfig(url string) NotifierConfig {
	c := DefaultNotifierConfig()
	c.URL = url
	return c
}

// The stage adds the alert changes to the batch that holds the summaries
// that caused them, without touching the caller's batch, and notifies only
// after the sink accepted it; when the sink fails the changes wait for the
// retry.
func TestRulesStageAlertsInSameBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := mustParse(t, stateRules)
		e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{})
		rec := &recorder{}
		wh, err := NewWebhook("wh", testNotifierConfig("http://receiver.invalid/hook"), NotifierDeps{Client: &http.Client{Transport: rec}})
		if err != nil {
			t.Fatal(err)
		}
		sink := &recordingSink{fail: 1}
		st := NewStage(e, sink, time.Hour, StageDeps{Notifiers: []*Notifier{wh}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- st.Run(ctx) }()

		sum, comms := fallbackJob("train", 1, false)
		b := &pipeline.Batch{Jobs: []pipeline.JobSummary{sum}, Comms: comms,
			Offsets: []pipeline.Offset{{Topic: "logs", Partition: 0, Next: 10}}}
		if err := st.Consume(ctx, b); err == nil {
			t.Fatal("Consume with a failing sink = nil")
		}
		if len(b.Alerts) != 0 {
			t.Errorf("the caller's batch got %d alerts; Consume must not mutate it", len(b.Alerts))
		}
		// The runner retries with the same batch.
		if err := st.Consume(ctx, b); err != nil {
			t.Fatalf("Consume retry = %v", err)
		}
		if len(sink.batches) != 1 {
			t.Fatalf("sink got %d batches; want 1", len(sink.batches))
		}
		got := sink.batches[0]
		if len(got.Jobs) != 1 || len(got.Alerts) != 1 || got.Alerts[0].State != pipeline.AlertPending || len(got.Offsets) != 1 {
			t.Errorf("stored batch: %d jobs, alerts %q, %d offsets; want the job, its pending alert and the offsets together",
				len(got.Jobs), changes(got.Alerts), len(got.Offsets))
		}
		synctest.Wait()
		if n := len(rec.requests()); n != 0 {
			t.Errorf("%d notifications for a pending alert; want none", n)
		}
		// `for: 2m` passes without a batch (the stage is not run by a
		// loop here, so nothing is scheduled): nothing yet. The next
		// batch evaluates.
		time.Sleep(2 * time.Minute)
		if err := st.Consume(ctx, &pipeline.Batch{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		reqs := rec.requests()
		if len(reqs) != 1 {
			t.Fatalf("%d webhook requests; want 1", len(reqs))
		}
		var p WebhookPayload
		if err := json.Unmarshal([]byte(reqs[0]), &p); err != nil {
			t.Fatal(err)
		}
		if p.Version != "1" || len(p.Alerts) != 1 || p.Alerts[0].State != "firing" || p.Alerts[0].Rule != "Fallback" ||
			p.Alerts[0].Labels["job_name"] != "train" {
			t.Errorf("webhook payload = %s", reqs[0])
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// The schedule: absence and `for` progress without batches, the run loop
// handing the stage an empty batch every interval; the changes are stored
// as a batch of alerts alone, then sent to Alertmanager, which hears about
// a firing alert again every resend interval until it resolves.
func TestRulesStageScheduleAndResend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rs := mustParse(t, `groups:
  - name: g
    rules:
      - alert: InitMissing
        expr: '!job.seen && activity.nodes > 1 && now - activity.first_seen > duration("10m") && now - activity.last_seen < duration("5m")'
        labels: {severity: warning}
`)
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{Metrics: m})
		rec := &recorder{}
		cfg := testNotifierConfig("http://alertmanager.invalid:9093/")
		cfg.ResendInterval = time.Minute
		am, err := NewAlertmanager("am", cfg, NotifierDeps{Client: &http.Client{Transport: rec}, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		sink := &recordingSink{}
		st := NewStage(e, sink, 30*time.Second, StageDeps{Notifiers: []*Notifier{am}, Metrics: m})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- st.Run(ctx) }()
		// A run loop with no records, the stage its sink.
		in := make(chan pipeline.Input)
		loopDone := make(chan error)
		r := pipeline.NewRunner(pipeline.DefaultRunnerConfig(), pipeline.RunnerDeps{NewAssembler: assemble.Factory,
			NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(parsers.DefaultDecoderConfig()) },
			Classifier: &parsers.Lines{}, Sink: st, Observe: true, Logger: zerolog.Nop()})
		go func() { loopDone <- r.Run(ctx, in) }()

		start := time.Now()
		logs := func(node string) {
			e.ObserveActivity(Activity{Namespace: "ml", Job: "silent", Node: node, Pod: node + "-pod", Time: time.Now()})
		}
		logs("n1")
		logs("n2")
		for range 11 {
			time.Sleep(time.Minute)
			logs("n1")
		}
		synctest.Wait()
		// Fired at the first tick past 10 minutes.
		stored := sink.alerts()
		if changes(stored) != "InitMissing/silent:firing" {
			t.Fatalf("stored = %q; want the firing alert", changes(stored))
		}
		if d := stored[0].FiredAt.Sub(start); d <= 10*time.Minute || d > 10*time.Minute+30*time.Second {
			t.Errorf("fired %v after the pods started logging; want within one interval after 10m", d)
		}
		for _, b := range sink.batches {
			if len(b.Offsets) != 0 || len(b.Jobs) != 0 {
				t.Errorf("scheduled batch carries %d offsets, %d jobs; want alerts alone", len(b.Offsets), len(b.Jobs))
			}
		}
		reqs := rec.requests()
		if len(reqs) == 0 {
			t.Fatalf("no request to Alertmanager")
		}
		if rec.paths[0] != "/api/v2/alerts" {
			t.Errorf("path = %s; want /api/v2/alerts", rec.paths[0])
		}
		var posted []amAlert
		if err := json.Unmarshal([]byte(reqs[0]), &posted); err != nil {
			t.Fatal(err)
		}
		if len(posted) != 1 || posted[0].Labels["alertname"] != "InitMissing" || !posted[0].StartsAt.Equal(stored[0].FiredAt) ||
			!posted[0].EndsAt.Equal(rec.at[0].Add(4*time.Minute)) {
			t.Errorf("posted = %+v", posted)
		}
		// Re-sent every minute while firing.
		n := len(rec.requests())
		for range 3 {
			time.Sleep(time.Minute)
			logs("n1")
		}
		synctest.Wait()
		if got := len(rec.requests()) - n; got != 3 {
			t.Errorf("%d re-sends in 3 minutes; want 3", got)
		}
		// The pods stop logging: resolved 5 minutes later, endsAt set, and
		// no more re-sends.
		time.Sleep(5*time.Minute + 30*time.Second)
		synctest.Wait()
		stored = sink.alerts()
		if changes(stored) != "InitMissing/silent:firing InitMissing/silent:resolved" {
			t.Fatalf("stored = %q", changes(stored))
		}
		reqs = rec.requests()
		if err := json.Unmarshal([]byte(reqs[len(reqs)-1]), &posted); err != nil {
			t.Fatal(err)
		}
		if !posted[0].EndsAt.Equal(stored[1].ResolvedAt) {
			t.Errorf("resolved endsAt = %v; want %v", posted[0].EndsAt, stored[1].ResolvedAt)
		}
		n = len(reqs)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if got := len(rec.requests()); got != n {
			t.Errorf("%d requests after the resolve; want none", got-n)
		}
		if v := testutil.ToFloat64(m.Notifications.WithLabelValues("am", "sent")); v != float64(n) {
			t.Errorf("sent = %v; want %d", v, n)
		}
		close(in)
		if err := <-loopDone; err != nil {
			t.Errorf("Run = %v", err)
		}
		cancel()
		<-done
	})
}

// Transient failures are retried with doubling backoff; a 4xx is not
// retried; a full queue drops and counts.
func TestRulesNotifierRetryAndDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		rec := &recorder{statuses: []int{503, 503, 200, 400}}
		cfg := testNotifierConfig("http://hook.invalid/x")
		cfg.QueueSize = 2
		cfg.MaxBatch = 1
		wh, _ := NewWebhook("wh", cfg, NotifierDeps{Client: &http.Client{Transport: rec}, Metrics: m})
		firing := func(job string) pipeline.Alert {
			return pipeline.Alert{Rule: "R", State: pipeline.AlertFiring, Job: job, Labels: map[string]string{"job_name": job}}
		}
		// Queue of 2: the third is dropped before Run starts.
		wh.Notify([]pipeline.Alert{firing("a"), firing("b"), firing("c"),
			{Rule: "R", State: pipeline.AlertPending}, {Rule: "R", State: pipeline.AlertInactive}})
		if v := testutil.ToFloat64(m.NotificationDrops.WithLabelValues("wh")); v != 1 {
			t.Errorf("drops = %v; want 1", v)
		}
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		done := make(chan error)
		go func() { done <- wh.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		cancel()
		<-done
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.at) != 4 {
			t.Fatalf("%d requests; want 4 (a: 503, 503, 200; b: 400)", len(rec.at))
		}
		if d := rec.at[1].Sub(start); d != 500*time.Millisecond {
			t.Errorf("first retry after %v; want 500ms", d)
		}
		if d := rec.at[2].Sub(rec.at[1]); d != time.Second {
			t.Errorf("second retry after %v; want 1s", d)
		}
		for outcome, want := range map[string]float64{"retried": 2, "sent": 1, "rejected": 1} {
			if v := testutil.ToFloat64(m.Notifications.WithLabelValues("wh", outcome)); v != want {
				t.Errorf("%s = %v; want %v", outcome, v, want)
			}
		}
	})
}

// Eval never blocks on the network: a receiver that hangs does not slow
// Notify.
func TestRulesNotifyNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return nil, r.Context().Err()
		})}
		cfg := testNotifierConfig("http://am.invalid")
		cfg.QueueSize = 10
		am, _ := NewAlertmanager("am", cfg, NotifierDeps{Client: client})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- am.Run(ctx) }()
		start := time.Now()
		for i := range 1000 {
			am.Notify([]pipeline.Alert{{Rule: "R", State: pipeline.AlertFiring, Labels: map[string]string{"i": string(rune('a' + i%26))}}})
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Notify took %v of fake time; want none", d)
		}
		if n := len(am.Firing()); n != 26 {
			t.Errorf("%d alerts in the re-send set; want 26 distinct", n)
		}
		cancel()
		close(hang)
		<-done
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRulesNotifierConfigValidate(t *testing.T) {
	c := DefaultNotifierConfig()
	c.URL = "ftp://x"
	c.QueueSize = 0
	err := c.Validate("rules.alertmanagers[0]")
	for _, want := range []string{"rules.alertmanagers[0].url", "rules.alertmanagers[0].queue_size"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want %s", err, want)
		}
	}
	sc := DefaultServiceConfig()
	sc.Engine.Interval = 0
	sc.Webhooks = []NotifierConfig{{URL: "http://x"}}
	err = sc.Validate()
	for _, want := range []string{"rules.interval: must be > 0", "rules.webhooks[0].timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ServiceConfig.Validate = %v; want %s", err, want)
		}
	}
}

// The `rules:` section of run's configuration file, with defaults for what
// it leaves out, and Setup from it.
func TestRulesSetupFromYAML(t *testing.T) {
	var doc struct {
		Rules ServiceConfig `yaml:"rules"`
	}
	doc.Rules = DefaultServiceConfig()
	src := `rules:
  files: [builtin]
  interval: 10s
  alertmanagers:
    - url: http://alertmanager.monitoring:9093
      resend_interval: 2m
  webhooks:
    - url: https://hooks.example/ncclwatch
      headers: {Authorization: Bearer x}
`
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Rules
	if c.Engine.Interval != 10*time.Second || c.Engine.Retention != 15*time.Minute {
		t.Errorf("engine config = %+v", c.Engine)
	}
	if am := c.Alertmanagers[0]; am.ResendInterval != 2*time.Minute || am.QueueSize != 10000 || am.Timeout != 10*time.Second {
		t.Errorf("alertmanager config = %+v; want defaults where unset", am)
	}
	if wh := c.Webhooks[0]; wh.Headers["Authorization"] != "Bearer x" || wh.MaxRetries != 5 {
		t.Errorf("webhook config = %+v", wh)
	}
	reg := prometheus.NewRegistry()
	st, err := Setup(c, &recordingSink{}, SetupDeps{Metrics: NewMetrics(reg), Fleet: Nodes{}})
	if err != nil {
		t.Fatalf("Setup = %v", err)
	}
	if len(st.notifiers) != 2 || len(st.Engine().Rules()) != 12 || st.interval != 10*time.Second {
		t.Errorf("stage: %d notifiers, %d rules, interval %v", len(st.notifiers), len(st.Engine().Rules()), st.interval)
	}
	c.Files = []string{"missing.yaml"}
	if _, err := Setup(c, &recordingSink{}, SetupDeps{}); err == nil {
		t.Errorf("Setup with a missing rule file = nil error")
	}
}
