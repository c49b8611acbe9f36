package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// NotifierConfig configures one Alertmanager or webhook notifier.
type NotifierConfig struct {
	// URL: for Alertmanager its base URL (http://alertmanager:9093; the
	// v2 API path is added), for a webhook the full URL to POST to.
	URL string `yaml:"url"`
	// Headers are added to every request (Authorization, …).
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one request. Alertmanager answers in milliseconds;
	// 10 s means it is stuck.
	Timeout time.Duration `yaml:"timeout"`
	// QueueSize bounds the alerts waiting to be sent. Beyond it Notify
	// drops (ncclwatch_notifications_dropped_total) rather than block the
	// pipeline; Alertmanager still gets every firing alert at the next
	// re-send. 10 000 is hours of state changes of a large cluster.
	QueueSize int `yaml:"queue_size"`
	// MaxBatch is the most alerts sent in one request: Alertmanager
	// takes arrays; 64 keeps a request well under its body limits.
	MaxBatch int `yaml:"max_batch"`
	// MaxRetries is how often a request that failed transiently (network,
	// 5xx, 429) is tried again; RetryBackoff is the first wait, doubled
	// each time up to MaxBackoff. 5 from 500 ms ride out a receiver
	// restart (15.5 s) without holding the queue for minutes.
	MaxRetries   int           `yaml:"max_retries"`
	RetryBackoff time.Duration `yaml:"retry_backoff"`
	MaxBackoff   time.Duration `yaml:"max_backoff"`
	// ResendInterval (Alertmanager only) re-sends every firing alert this
	// often, each valid for four intervals (endsAt), as Prometheus does:
	// if ncclwatch dies, Alertmanager resolves its alerts by itself. 1 m
	// is Prometheus' resend delay.
	ResendInterval time.Duration `yaml:"resend_interval"`
	// GeneratorURL is the link Alertmanager shows for an alert's source
	// (a Grafana dashboard, say); empty is none.
	GeneratorURL string `yaml:"generator_url"`
}

// DefaultNotifierConfig returns the defaults documented on each field.
func DefaultNotifierConfig() NotifierConfig {
	return NotifierConfig{Timeout: 10 * time.Second, QueueSize: 10000, MaxBatch: 64, MaxRetries: 5,
		RetryBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second, ResendInterval: time.Minute}
}

// UnmarshalYAML fills the fields a configuration file leaves out with the
// defaults.
func (c *NotifierConfig) UnmarshalYAML(n *yaml.Node) error {
	type plain NotifierConfig
	p := plain(DefaultNotifierConfig())
	if err := n.Decode(&p); err != nil {
		return err
	}
	*c = NotifierConfig(p)
	return nil
}

// Validate reports every invalid field; path names the config entry
// ("rules.alertmanagers[0]").
func (c NotifierConfig) Validate(path string) error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("%s.url: %q is not an http(s) URL", path, c.URL))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s.timeout: must be > 0", path))
	}
	if c.QueueSize <= 0 {
		errs = append(errs, fmt.Errorf("%s.queue_size: must be > 0", path))
	}
	if c.MaxBatch <= 0 {
		errs = append(errs, fmt.Errorf("%s.max_batch: must be > 0", path))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("%s.max_retries: must be >= 0", path))
	}
	if c.RetryBackoff <= 0 || c.MaxBackoff < c.RetryBackoff {
		errs = append(errs, fmt.Errorf("%s.retry_backoff: must be > 0 and <= max_backoff", path))
	}
	if c.ResendInterval < 0 {
		errs = append(errs, fmt.Errorf("%s.resend_interval: must be >= 0", path))
	}
	return errors.Join(errs...)
}

// Notifier sends firing and resolved alerts to Alertmanager (v2 API) or to
// a generic JSON webhook from its own goroutine (Run): Notify only queues,
// so evaluation never waits on the network. Requests that fail transiently
// are retried with backoff; the queue is bounded and what does not fit is
// dropped and counted.
type Notifier struct {
	name   string
	cfg    NotifierConfig
	client *http.Client
	m      *Metrics
	am     bool // Alertmanager: v2 payload, re-sends while firing
	target string

	queue chan pipeline.Alert
	mu    sync.Mutex
	// firing holds the alerts Alertmanager must keep hearing about, by
	// identity, for the re-send.
	firing map[string]pipeline.Alert
}

// maxFiring bounds the re-send set; the engine's states bound it first.
const maxFiring = 100000

// NotifierDeps are a notifier's collaborators; both may be nil.
type NotifierDeps struct {
	// Client sends the requests (http.DefaultClient's transport with
	// cfg.Timeout when nil).
	Client  *http.Client
	Metrics *Metrics
}

// NewAlertmanager returns a notifier for Alertmanager's
// POST /api/v2/alerts. name labels its metrics.
func NewAlertmanager(name string, cfg NotifierConfig, deps NotifierDeps) (*Notifier, error) {
	if err := cfg.Validate("notifier " + name); err != nil {
		return nil, err
	}
	n := newNotifier(name, cfg, deps)
	n.am = true
	n.target = strings.TrimRight(cfg.URL, "/") + "/api/v2/alerts"
	return n, nil
}

// NewWebhook returns a notifier that POSTs {"version": "1", "alerts":
// [...]} with each alert as pipeline.Alert's JSON. It sends each change
// once (no re-send).
func NewWebhook(name string, cfg NotifierConfig, deps NotifierDeps) (*Notifier, error) {
	if err := cfg.Validate("notifier " + name); err != nil {
		return nil, err
	}
	n := newNotifier(name, cfg, deps)
	n.target = cfg.URL
	return n, nil
}

func newNotifier(name string, cfg NotifierConfig, deps NotifierDeps) *Notifier {
	client := deps.Client
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout}
	}
	n := &Notifier{name: name, cfg: cfg, client: client, m: deps.Metrics,
		queue: make(chan pipeline.Alert, cfg.QueueSize), firing: map[string]pipeline.Alert{}}
	if n.m != nil {
		n.m.QueueCapacity.WithLabelValues(name).Set(float64(cfg.QueueSize))
		n.m.QueueLength.WithLabelValues(name).Set(0)
		n.m.NotificationDrops.WithLabelValues(name)
	}
	return n
}

// Name returns the name the notifier's metrics carry.
func (n *Notifier) Name() string { return n.name }

// Notify queues the firing and resolved alerts of a list of state changes
// and returns at once; pending and inactive changes are not sent.
func (n *Notifier) Notify(alerts []pipeline.Alert) {
	for _, a := range alerts {
		if a.State != pipeline.AlertFiring && a.State != pipeline.AlertResolved {
			continue
		}
		if n.am {
			n.mu.Lock()
			id := alertID(&a)
			if a.State == pipeline.AlertFiring {
				if _, ok := n.firing[id]; ok || len(n.firing) < maxFiring {
					n.firing[id] = cloneAlert(a)
				}
			} else {
				delete(n.firing, id)
			}
			n.mu.Unlock()
		}
		select {
		case n.queue <- cloneAlert(a):
		default:
			if n.m != nil {
				n.m.NotificationDrops.WithLabelValues(n.name).Inc()
			}
		}
	}
	if n.m != nil {
		n.m.QueueLength.WithLabelValues(n.name).Set(float64(len(n.queue)))
	}
}

// Firing returns the alerts the notifier re-sends, sorted.
func (n *Notifier) Firing() []pipeline.Alert {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Collect(maps.Values(n.firing))
	sortAlerts(out)
	return out
}

// alertID is an alert's identity: its label set.
func alertID(a *pipeline.Alert) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(a.Labels)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(a.Labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Run sends queued alerts, and re-sends firing ones to Alertmanager, until
// ctx is done. What is still queued then is dropped: Alertmanager resolves
// firing alerts by their endsAt when nobody re-sends them.
func (n *Notifier) Run(ctx context.Context) error {
	var resend <-chan time.Time
	if n.am && n.cfg.ResendInterval > 0 {
		t := time.NewTicker(n.cfg.ResendInterval)
		defer t.Stop()
		resend = t.C
	}
	batch := make([]pipeline.Alert, 0, n.cfg.MaxBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-n.queue:
			batch = append(batch[:0], a)
		drain:
			for len(batch) < n.cfg.MaxBatch {
				select {
				case a := <-n.queue:
					batch = append(batch, a)
				default:
					break drain
				}
			}
			if n.m != nil {
				n.m.QueueLength.WithLabelValues(n.name).Set(float64(len(n.queue)))
			}
			n.send(ctx, batch)
		case <-resend:
			all := n.Firing()
			for len(all) > 0 && ctx.Err() == nil {
				k := min(len(all), n.cfg.MaxBatch)
				n.send(ctx, all[:k])
				all = all[k:]
			}
		}
	}
}

// send posts one batch, retrying transient failures.
func (n *Notifier) send(ctx context.Context, alerts []pipeline.Alert) {
	body, err := n.encode(alerts, time.Now())
	if err != nil {
		n.outcome("rejected")
		return
	}
	backoff := pipeline.Backoff{Min: n.cfg.RetryBackoff, Max: n.cfg.MaxBackoff}
	for attempt := 0; ; attempt++ {
		err := n.post(ctx, body)
		if err == nil {
			n.outcome("sent")
			return
		}
		var perm permanentErr
		if errors.As(err, &perm) {
			n.outcome("rejected")
			return
		}
		if attempt >= n.cfg.MaxRetries || ctx.Err() != nil {
			n.outcome("failed")
			return
		}
		n.outcome("retried")
		if !backoff.Wait(ctx) {
			n.outcome("failed")
			return
		}
	}
}

func (n *Notifier) outcome(o string) {
	if n.m != nil {
		n.m.Notifications.WithLabelValues(n.name, o).Inc()
	}
}

// permanentErr is a request the receiver refused for good (4xx other than
// 408 and 429): resending the same body would be refused again.
type permanentErr struct{ error }

func (n *Notifier) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.target, bytes.NewReader(body))
	if err != nil {
		return permanentErr{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ncclwatch")
	for k, v := range n.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return permanentErr{fmt.Errorf("%s: %s: %s", n.target, resp.Status, bytes.TrimSpace(msg))}
	}
	return fmt.Errorf("%s: %s: %s", n.target, resp.Status, bytes.TrimSpace(msg))
}

// amAlert is Alertmanager's v2 postableAlert.
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// WebhookPayload is the body of a webhook notification.
type WebhookPayload struct {
	Version string           `json:"version"` // "1"
	Alerts  []pipeline.Alert `json:"alerts"`
}

func (n *Notifier) encode(alerts []pipeline.Alert, now time.Time) ([]byte, error) {
	if !n.am {
		return json.Marshal(WebhookPayload{Version: "1", Alerts: alerts})
	}
	out := make([]amAlert, len(alerts))
	for i, a := range alerts {
		starts := a.FiredAt
		if starts.IsZero() {
			starts = a.ActiveAt
		}
		ends := a.ResolvedAt
		if a.State == pipeline.AlertFiring {
			// Valid for four re-sends, as Prometheus does.
			every := n.cfg.ResendInterval
			if every <= 0 {
				every = time.Minute
			}
			ends = now.Add(4 * every)
		}
		out[i] = amAlert{Labels: a.Labels, Annotations: a.Annotations, StartsAt: starts.UTC(), EndsAt: ends.UTC(),
			GeneratorURL: n.cfg.GeneratorURL}
	}
	return json.Marshal(out)
}
