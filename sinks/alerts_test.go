package sinks

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func TestRulesAlertsDDL(t *testing.T) {
	old := ddl(t, "18.16.1")
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS ncclwatch.alerts",
		"active_at DateTime,",
		"ENGINE = ReplacingMergeTree(version)\nORDER BY (cluster, namespace, job, pool, rule, state)",
		"rule String,",
	} {
		if !strings.Contains(old, want) {
			t.Errorf("18.16 alerts DDL lacks %q", want)
		}
	}
	cur := ddl(t, "24.8.4.13")
	for _, want := range []string{
		"active_at DateTime64(3),",
		"rule LowCardinality(String),",
		"job String,",
		"ORDER BY (cluster, namespace, job, pool, rule, state)\nSETTINGS non_replicated_deduplication_window = 1000",
	} {
		if !strings.Contains(cur, want) {
			t.Errorf("24.8 alerts DDL lacks %q", want)
		}
	}
	var versions []int
	for _, m := range alertMigrations(featuresOf(24, 8)) {
		versions = append(versions, m.Version)
	}
	for _, v := range versions {
		if v < 6 || v > 19 {
			t.Errorf("alert migration %d outside 6–19", v)
		}
	}
}

// alertBatch is what the rules stage adds to a batch: a firing alert of a
// job and a resolved one of a pool, evaluated at eval.
func alertBatch(job string, eval time.Time) *pipeline.Batch {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &pipeline.Batch{Alerts: []pipeline.Alert{
		{Rule: "NCCLSocketFallback", Severity: "critical", Job: job, Namespace: "ml", Cluster: "c1", State: "firing",
			Labels:      map[string]string{"alertname": "NCCLSocketFallback", "severity": "critical", "job_name": job},
			Annotations: map[string]string{"summary": job + " fell back", "runbook": "check the device plugin"},
			ActiveAt:    t0, FiredAt: t0, EvalTime: eval},
		{Rule: "NCCLFabricUnproven", Severity: "warning", Pool: "h100-" + job, State: "resolved",
			Labels:   map[string]string{"alertname": "NCCLFabricUnproven", "pool": "h100-" + job},
			ActiveAt: t0, FiredAt: t0, ResolvedAt: eval, EvalTime: eval},
	}}
}

// TestClickHouseAlerts stores alert changes, replays them (a restart
// evaluates again, later) and checks that a query with FINAL shows each
// alert state once, with its labels and annotations.
func TestRulesClickHouseAlerts(t *testing.T) {
	c := migrated(t)
	ctx := t.Context()
	eval := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	if err := c.Consume(ctx, alertBatch("train-a", eval)); err != nil {
		t.Fatalf("Consume = %v", err)
	}
	// The replay: same alerts, evaluated again a minute later.
	if err := c.Consume(ctx, alertBatch("train-a", eval.Add(time.Minute))); err != nil {
		t.Fatalf("Consume replay = %v", err)
	}
	// A plain resend of the same batch (a lost answer) changes nothing.
	if err := c.Consume(ctx, alertBatch("train-a", eval.Add(time.Minute))); err != nil {
		t.Fatalf("Consume resend = %v", err)
	}
	db := c.cfg.Database
	if n := queryInt(t, c, "SELECT count() FROM "+db+".alerts FINAL"); n != 2 {
		t.Errorf("alerts FINAL = %d rows; want 2", n)
	}
	rows, err := c.Query(ctx, "SELECT rule, state, job, pool, label_keys, label_values, annotation_keys, annotation_values, "+
		"fired_at, resolved_at, eval_time FROM "+db+".alerts FINAL ORDER BY rule")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var rule, state, job, pool string
		var lk, lv, ak, av []string
		var fired, resolved, evalAt time.Time
		if err := rows.Scan(&rule, &state, &job, &pool, &lk, &lv, &ak, &av, &fired, &resolved, &evalAt); err != nil {
			t.Fatal(err)
		}
		got = append(got, rule+" "+state+" job="+job+" pool="+pool+" labels="+strings.Join(lk, ",")+"="+strings.Join(lv, ",")+
			" annotations="+strings.Join(ak, ",")+" eval="+evalAt.UTC().Format(time.RFC3339)+" resolved="+resolved.UTC().Format(time.RFC3339))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"NCCLFabricUnproven resolved job= pool=h100-train-a labels=alertname,pool=NCCLFabricUnproven,h100-train-a annotations= eval=2026-03-01T12:01:30Z resolved=2026-03-01T12:01:30Z",
		"NCCLSocketFallback firing job=train-a pool= labels=alertname,job_name,severity=NCCLSocketFallback,train-a,critical annotations=runbook,summary eval=2026-03-01T12:01:30Z resolved=1970-01-01T00:00:00Z",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("alerts FINAL =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestClickHouseAlertsWithSummaries stores alerts in the same batch as the
// summaries that caused them: one Consume, both tables.
func TestRulesClickHouseAlertsWithSummaries(t *testing.T) {
	c := migrated(t)
	t0 := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	b := testBatch("train-b", t0)
	b.Alerts = alertBatch("train-b", t0).Alerts
	if err := c.Consume(t.Context(), b); err != nil {
		t.Fatalf("Consume = %v", err)
	}
	db := c.cfg.Database
	if n := queryInt(t, c, "SELECT count() FROM "+db+".alerts FINAL WHERE job = 'train-b' OR pool = 'h100-train-b'"); n != 2 {
		t.Errorf("alerts = %d; want 2", n)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".job_summaries FINAL WHERE job = 'train-b'"); n != 1 {
		t.Errorf("job_summaries = %d; want 1", n)
	}
}

// LoadAlerts returns each job alert's latest stored state when it is
// pending or firing (with its times, labels and annotations as stored, and
// its job's summary version), and leaves out alerts that resolved since,
// pool alerts and older states of the same alert.
func TestRulesClickHouseLoadAlerts(t *testing.T) {
	c := migrated(t)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC)
	job := func(name, state string, active, fired, resolved, eval time.Time) pipeline.Alert {
		return pipeline.Alert{Rule: "NCCLSocketFallback", Severity: "critical", Job: name, Namespace: "ml", Cluster: "c1",
			State: state, Labels: map[string]string{"alertname": "NCCLSocketFallback", "job_name": name},
			Annotations: map[string]string{"summary": name + " fell back"}, ActiveAt: active, FiredAt: fired,
			ResolvedAt: resolved, EvalTime: eval}
	}
	b := testBatch("train-c", t0) // its job summary: version 10
	b.Alerts = []pipeline.Alert{
		job("train-c", pipeline.AlertPending, t0, time.Time{}, time.Time{}, t0),
		job("healed", pipeline.AlertFiring, t0, t0, time.Time{}, t0),
		job("pend", pipeline.AlertPending, t0.Add(time.Minute), time.Time{}, time.Time{}, t0.Add(time.Minute)),
		{Rule: "NCCLFabricUnproven", Severity: "warning", Pool: "h100", State: pipeline.AlertFiring, ActiveAt: t0,
			FiredAt: t0, EvalTime: t0},
	}
	if err := c.Consume(ctx, b); err != nil {
		t.Fatalf("Consume = %v", err)
	}
	later := &pipeline.Batch{Alerts: []pipeline.Alert{
		job("train-c", pipeline.AlertFiring, t0, t0.Add(2*time.Minute), time.Time{}, t0.Add(2*time.Minute)),
		job("healed", pipeline.AlertResolved, t0, t0, t0.Add(3*time.Minute), t0.Add(3*time.Minute)),
	}}
	if err := c.Consume(ctx, later); err != nil {
		t.Fatalf("Consume = %v", err)
	}
	got, err := c.LoadAlerts(ctx, 100)
	if err != nil {
		t.Fatalf("LoadAlerts = %v", err)
	}
	var lines []string
	for _, a := range got {
		lines = append(lines, fmt.Sprintf("%s %s/%s %s active=%s fired=%s eval=%s labels=%v annotations=%v version=%d",
			a.Rule, a.Namespace, a.Job, a.State, a.ActiveAt.Format(time.TimeOnly), a.FiredAt.Format(time.TimeOnly),
			a.EvalTime.Format(time.TimeOnly), a.Labels, a.Annotations, a.SummaryVersion))
	}
	want := []string{
		"NCCLSocketFallback ml/train-c firing active=09:00:00 fired=09:02:00 eval=09:02:00 labels=map[alertname:NCCLSocketFallback job_name:train-c] annotations=map[summary:train-c fell back] version=10",
		"NCCLSocketFallback ml/pend pending active=09:01:00 fired=00:00:00 eval=09:01:00 labels=map[alertname:NCCLSocketFallback job_name:pend] annotations=map[summary:pend fell back] version=0",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("LoadAlerts =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, a := range got {
		if a.Job == "pend" && !a.FiredAt.IsZero() {
			t.Errorf("pending alert's fired_at = %v; want zero", a.FiredAt)
		}
	}
	if got, err := c.LoadAlerts(ctx, 1); err != nil || len(got) != 1 || got[0].Job != "train-c" {
		t.Errorf("LoadAlerts(limit 1) = %v, %v; want the latest evaluated (train-c)", got, err)
	}
}
