package sinks

import (
	"io"
	"maps"
	"slices"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// alertTables are the tables of the alerting issue (the alerts table);
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
