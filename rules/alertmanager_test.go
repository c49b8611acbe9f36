package rules

// Integration test against a real Alertmanager (Debian's
// prometheus-alertmanager 0.25, started by deploy/local/alertmanager.sh):
// NCCLWATCH_TEST_ALERTMANAGER=127.0.0.1:19094. It skips without it, and
// fails instead under NCCLWATCH_REQUIRE_SERVERS=1. The Alertmanager of
// deploy/local sends its notifications to a webhook on the next port
// (NCCLWATCH_TEST_ALERTMANAGER_WEBHOOK overrides), where this test listens
// to see the groups it forms and their resolution. Every run labels its
// alerts with a cluster of its own, so runs can share the server.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

func testAlertmanager(t *testing.T) string {
	t.Helper()
	return testenv.Server(t, "NCCLWATCH_TEST_ALERTMANAGER", "deploy/local/alertmanager.sh start")
}

// amNotification is the body Alertmanager's webhook receiver posts.
type amNotification struct {
	Status      string            `json:"status"`
	GroupLabels map[string]string `json:"groupLabels"`
	Alerts      []struct {
		Status      string            `json:"status"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		EndsAt      time.Time         `json:"endsAt"`
	} `json:"alerts"`
}

// amReceiver listens where deploy/local's Alertmanager sends notifications
// and keeps those of one cluster.
type amReceiver struct {
	mu    sync.Mutex
	got   []amNotification
	srv   *http.Server
	label string
}

func listenReceiver(t *testing.T, amAddr, cluster string) *amReceiver {
	t.Helper()
	addr := os.Getenv("NCCLWATCH_TEST_ALERTMANAGER_WEBHOOK")
	if addr == "" {
		host, port, err := net.SplitHostPort(amAddr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		addr = net.JoinHostPort(host, strconv.Itoa(p+1))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen for Alertmanager's notifications on %s: %v", addr, err)
	}
	r := &amReceiver{label: cluster}
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var n amNotification
		if err := json.NewDecoder(req.Body).Decode(&n); err == nil && n.GroupLabels["cluster"] == r.label {
			r.mu.Lock()
			r.got = append(r.got, n)
			r.mu.Unlock()
		}
	})}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *amReceiver) find(status string, alerts int) (amNotification, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.got {
		if n.Status == status && len(n.Alerts) == alerts {
			return n, true
		}
	}
	return amNotification{}, false
}

func poll(t *testing.T, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// getJSON GETs an Alertmanager API path into v.
func getJSON(t *testing.T, base, path string, v any) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// TestAlertmanagerIntegration drives the built-in pack through the stage
// to a real Alertmanager: two jobs of one namespace fall back to Socket and
// one runs RDMA without GDR. Alertmanager must receive the three alerts,
// group the two fallbacks into one notification (group_by alertname,
// cluster, namespace), and resolve them when the jobs are gone.
func TestRulesAlertmanagerIntegration(t *testing.T) {
	amAddr := testAlertmanager(t)
	base := "http://" + amAddr
	var rb [4]byte
	rand.Read(rb[:])
	cluster := "it-" + hex.EncodeToString(rb[:])
	recv := listenReceiver(t, amAddr, cluster)

	rs, err := Load(BuiltinName)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(DefaultConfig(), rs, EngineDeps{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultNotifierConfig()
	cfg.URL = base
	cfg.ResendInterval = time.Second
	am, err := NewAlertmanager("am", cfg, NotifierDeps{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	st := NewStage(e, sink, time.Hour, StageDeps{Notifiers: []*Notifier{am}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- st.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var b pipeline.Batch
	for _, name := range []string{"llm-a", "llm-b"} {
		sum, comms := fallbackJob(name, 1, false)
		sum.Cluster = cluster
		for i := range comms {
			comms[i].Cluster = cluster
		}
		b.Jobs = append(b.Jobs, sum)
		b.Comms = append(b.Comms, comms...)
	}
	sum, comms := fallbackJob("bert", 1, true)
	sum.Cluster, sum.GDR = cluster, ptr(false)
	for i := range comms {
		comms[i].Cluster = cluster
	}
	comms[1].GDR = ptr(false)
	b.Jobs = append(b.Jobs, sum)
	b.Comms = append(b.Comms, comms...)
	if err := st.Consume(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if got := changes(sink.alerts()); got != "NCCLGDRDisabled/bert:firing NCCLSocketFallback/llm-a:firing NCCLSocketFallback/llm-b:firing" {
		t.Fatalf("stored changes = %q", got)
	}

	// Received: the v2 API lists the three, with our labels and annotations.
	filter := "?filter=" + url.QueryEscape(`cluster="`+cluster+`"`)
	type apiAlert struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		Status      struct {
			State string `json:"state"`
		} `json:"status"`
	}
	var listed []apiAlert
	poll(t, "Alertmanager to list 3 alerts", func() bool {
		getJSON(t, base, "/api/v2/alerts"+filter, &listed)
		return len(listed) == 3
	})
	for _, a := range listed {
		if a.Status.State != "active" || a.Labels["namespace"] != "ml" || a.Annotations["runbook"] == "" || a.Annotations["summary"] == "" {
			t.Errorf("listed alert = %+v", a)
		}
	}

	// Grouped: one group of the two fallbacks, one of the GDR alert.
	var groups []struct {
		Labels map[string]string `json:"labels"`
		Alerts []apiAlert        `json:"alerts"`
	}
	getJSON(t, base, "/api/v2/alerts/groups"+filter, &groups)
	sizes := map[string]int{}
	for _, g := range groups {
		sizes[g.Labels["alertname"]] = len(g.Alerts)
	}
	if fmt.Sprint(sizes) != "map[NCCLGDRDisabled:1 NCCLSocketFallback:2]" {
		t.Errorf("groups = %v; want the two fallbacks in one group", sizes)
	}
	var n amNotification
	poll(t, "a notification of the fallback group", func() bool {
		var ok bool
		n, ok = recv.find("firing", 2)
		return ok
	})
	var jobs []string
	for _, a := range n.Alerts {
		jobs = append(jobs, a.Labels["job_name"])
	}
	slices.Sort(jobs)
	if n.GroupLabels["alertname"] != "NCCLSocketFallback" || fmt.Sprint(jobs) != "[llm-a llm-b]" {
		t.Errorf("notification = %+v", n)
	}

	// Re-sent while firing: Alertmanager still has them after a few
	// re-send intervals.
	time.Sleep(3 * cfg.ResendInterval)
	getJSON(t, base, "/api/v2/alerts"+filter, &listed)
	if len(listed) != 3 {
		t.Errorf("%d alerts listed after re-sends; want 3", len(listed))
	}

	// Resolved: the jobs are gone.
	for _, j := range []string{"llm-a", "llm-b", "bert"} {
		e.Forget(pipeline.JobKey(cluster, "ml", j))
	}
	// The run loop's scheduled batch: empty, it evaluates.
	if err := st.Consume(ctx, &pipeline.Batch{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "Alertmanager to drop the resolved alerts", func() bool {
		getJSON(t, base, "/api/v2/alerts"+filter, &listed)
		return len(listed) == 0
	})
	poll(t, "a resolved notification of the fallback group", func() bool {
		_, ok := recv.find("resolved", 2)
		return ok
	})
	if f := am.Firing(); len(f) != 0 {
		t.Errorf("notifier still re-sends %d alerts", len(f))
	}
}
