package sinks

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// alertTables are the tables of alerting (the alerts table);
// Consume writes them after the core tables, so the alert state changes a
// batch's summaries caused are stored in the same Consume, before its
// offsets are committed.
var alertTables = []table{
	{
		name: "alerts",
		columns: []string{"rule", "severity", "cluster", "namespace", "job", "pool", "state", "label_keys",
			"label_values", "annotation_keys", "annotation_values", "active_at", "fired_at", "resolved_at",
			"eval_time", "version"},
		rows: func(b *pipeline.Batch) int { return len(b.Alerts) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.Alerts {
				a := &b.Alerts[i]
				lk, lv := sortedPairs(a.Labels)
				ak, av := sortedPairs(a.Annotations)
				if err := d.Append(a.Rule, a.Severity, a.Cluster, a.Namespace, a.Job, a.Pool, a.State, lk, lv, ak, av,
					clampTime(a.ActiveAt), clampTime(a.FiredAt), clampTime(a.ResolvedAt), clampTime(a.EvalTime),
					alertVersion(a)); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.Alerts {
				a := &b.Alerts[i]
				writeKey(h, alertVersion(a), a.Cluster, a.Namespace, a.Job, a.Pool, a.Rule, a.State)
			}
		},
	},
}

// LoadAlerts returns the job alerts whose latest stored state is pending
// or firing (at most limit, the most recently evaluated first), as the
// rules engine left them, each with its job's latest stored summary
// version: a restarted process restores them (rules.Engine.Restore) so
// that an alert that still holds keeps its times. The latest state is the
// row of the highest version of each (cluster, namespace, job, rule),
// folded with argMax rather than FINAL so that the query is the same
// through a cluster's Distributed tables. Pool alerts are not loaded: they
// are evaluated over every job of the pool, which a restarted process has
// not seen again yet.
func (c *ClickHouse) LoadAlerts(ctx context.Context, limit int) ([]pipeline.StoredAlert, error) {
	q := "SELECT rule, cluster, namespace, job, argMax(state, version) AS st, argMax(severity, version), " +
		"argMax(label_keys, version), argMax(label_values, version), argMax(annotation_keys, version), " +
		"argMax(annotation_values, version), argMax(active_at, version), argMax(fired_at, version), " +
		"argMax(eval_time, version), max(version) AS v FROM " + c.cfg.Database + ".alerts WHERE pool = '' " +
		"GROUP BY rule, cluster, namespace, job HAVING st IN ('" + pipeline.AlertPending + "', '" + pipeline.AlertFiring + "') " +
		"ORDER BY v DESC LIMIT " + strconv.Itoa(max(limit, 0))
	rows, err := c.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse load alerts: %w", err)
	}
	defer rows.Close()
	var out []pipeline.StoredAlert
	for rows.Next() {
		var (
			a      pipeline.Alert
			lk, lv []string
			ak, av []string
			v      uint64
		)
		if err := rows.Scan(&a.Rule, &a.Cluster, &a.Namespace, &a.Job, &a.State, &a.Severity, &lk, &lv, &ak, &av,
			&a.ActiveAt, &a.FiredAt, &a.EvalTime, &v); err != nil {
			return nil, fmt.Errorf("clickhouse load alerts: %w", err)
		}
		a.Labels, a.Annotations = pairs(lk, lv), pairs(ak, av)
		a.ActiveAt, a.FiredAt, a.EvalTime = unclamp(a.ActiveAt), unclamp(a.FiredAt), unclamp(a.EvalTime)
		out = append(out, pipeline.StoredAlert{Alert: a})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse load alerts: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	// The jobs' summary versions (of the alerts' job names: a literal
	// array, bound by the driver).
	seen := map[string]bool{}
	var names []string
	for _, a := range out {
		if !seen[a.Job] {
			seen[a.Job] = true
			names = append(names, a.Job)
		}
	}
	versions := map[string]uint64{}
	vrows, err := c.conn.Query(ctx, "SELECT cluster, namespace, job, max(version) FROM "+c.cfg.Database+
		".job_summaries WHERE has(?, job) GROUP BY cluster, namespace, job", names)
	if err != nil {
		return nil, fmt.Errorf("clickhouse load alerts: job summary versions: %w", err)
	}
	defer vrows.Close()
	for vrows.Next() {
		var cluster, namespace, job string
		var v uint64
		if err := vrows.Scan(&cluster, &namespace, &job, &v); err != nil {
			return nil, fmt.Errorf("clickhouse load alerts: job summary versions: %w", err)
		}
		versions[pipeline.JobKey(cluster, namespace, job)] = v
	}
	if err := vrows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse load alerts: job summary versions: %w", err)
	}
	for i := range out {
		a := &out[i]
		a.SummaryVersion = versions[pipeline.JobKey(a.Cluster, a.Namespace, a.Job)]
	}
	return out, nil
}

// unclamp is clampTime's inverse for a time that was zero: stored as the
// earliest storable time, read back as zero.
func unclamp(t time.Time) time.Time {
	if !t.After(minStoredTime) {
		return time.Time{}
	}
	return t.UTC()
}

// pairs is sortedPairs' inverse.
func pairs(keys, values []string) map[string]string {
	m := make(map[string]string, len(keys))
	for i, k := range keys {
		if i < len(values) {
			m[k] = values[i]
		}
	}
	return m
}

// alertVersion orders the rows of one alert state: the later evaluation
// wins, so a replay (which evaluates again, later) replaces the row it
// repeats instead of adding one.
func alertVersion(a *pipeline.Alert) uint64 {
	t := clampTime(a.EvalTime).UnixMicro()
	return uint64(max(t, 0))
}

// sortedPairs splits a map into parallel key and value arrays sorted by
// key, so that equal alerts store equal rows.
func sortedPairs(m map[string]string) (keys, values []string) {
	keys = slices.Sorted(maps.Keys(m))
	if keys == nil {
		keys = []string{}
	}
	values = make([]string, len(keys))
	for i, k := range keys {
		values[i] = m[k]
	}
	return keys, values
}

// alertMigrations are migrations 6–19 (alerting).
//
// The alerts table holds one row per alert state change. It is keyed by
// the alert's subject, rule and state, with the evaluation time as the
// version: a replay after a crash evaluates the same summaries again and
// writes the same key with a later version, which the ReplacingMergeTree
// folds, so a query with FINAL (or argMax by version) shows each state of
// an alert once. A second episode of the same rule on the same job (fired,
// resolved, fired again) replaces the first's rows; the table is the
// current picture plus the last transition of each kind, not a full log.
// No partitioning: the table is small (state changes, not lines) and
// replays must fold whatever month they land in.
func alertMigrations(f features) []migration {
	timeType := "DateTime"
	if f.DateTime64 {
		timeType = "DateTime64(3)"
	}
	t := f.ddl()
	lc, settings := t.lc, t.settings
	return []migration{
		{Version: 6, Name: "alerts", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.alerts{on_cluster}
(
    rule ` + lc + `,
    severity ` + lc + `,
    cluster ` + lc + `,
    namespace ` + lc + `,
    job String,
    pool ` + lc + `,
    state ` + lc + `,
    label_keys Array(String),
    label_values Array(String),
    annotation_keys Array(String),
    annotation_values Array(String),
    active_at ` + timeType + `,
    fired_at ` + timeType + `,
    resolved_at ` + timeType + `,
    eval_time ` + timeType + `,
    version UInt64,
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (cluster, namespace, job, pool, rule, state)` + settings}},
	}
}
