package sinks

import (
	"io"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// checkpointTables is the checkpoint_events table (pipeline/checkpoint.go);
// Consume writes it after the telemetry tables.
var checkpointTables = []table{
	{
		name: "checkpoint_events",
		columns: []string{"topic", "`partition`", "`offset`", "line", "time", "end_time", "job", "namespace", "cluster",
			"pod", "node", "pool", "framework", "op", "rank", "step", "path", "duration_s", "complete", "lines"},
		rows: func(b *pipeline.Batch) int { return len(b.Checkpoints) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.Checkpoints {
				e := &b.Checkpoints[i]
				end := e.EndTime
				if end.Before(e.Time) {
					end = e.Time
				}
				if err := d.Append(e.Source.Topic, e.Source.Partition, e.Source.Offset, e.Source.Line, clampTime(e.Time),
					clampTime(end), e.Job, e.Namespace, e.Cluster, e.Pod, e.Node, e.Pool, e.Framework, e.Op,
					int32(clamp(e.Rank, -1<<31, 1<<31-1)), e.Step, e.Path, nullF(e.Duration), b2u(e.Complete),
					e.Lines); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.Checkpoints {
				writeSource(h, b.Checkpoints[i].Source)
				// Lines is the row's version: the same event with more
				// of its lines is another insert.
				h.Write([]byte{b.Checkpoints[i].Lines})
			}
		},
	},
}

// checkpointMigrations are migrations 40–49 (checkpoints). The events
// table is keyed by the coordinates of an event's first line, like the
// other telemetry tables, with lines (how many of the event's lines were
// folded in) as the version: a later copy with the end line or the timer
// wins, and a replay shows nothing twice. The view rolls events up per job,
// framework and operation, joined with job_verdicts.
func checkpointMigrations(f features) []migration {
	t := f.ddl()
	timeType, lc, codec, settings := t.time, t.lc, t.codec, t.settings
	return []migration{
		{Version: 40, Name: "checkpoint_events", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.checkpoint_events{on_cluster}
(
    topic String,
    ` + "`partition`" + ` Int32,
    ` + "`offset`" + ` Int64,
    line Int32,
    time ` + timeType + codec("Delta, ZSTD(1)") + `,
    end_time ` + timeType + `,
    job ` + lc + `,
    namespace ` + lc + `,
    cluster ` + lc + `,
    pod String,
    node ` + lc + `,
    pool ` + lc + `,
    framework ` + lc + `,
    op ` + lc + `,
    rank Int32,
    step Int64,
    path String,
    duration_s Nullable(Float64),
    complete UInt8,
    lines UInt8,
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(lines)
PARTITION BY toYYYYMM(time)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		// durations count only where printed (duration_s not NULL);
		// medianExact of an even count is the upper middle value.
		{Version: 41, Name: "checkpoint_series", Stmts: []string{`CREATE VIEW IF NOT EXISTS {db}.checkpoint_series{on_cluster} AS
SELECT
    cluster,
    namespace,
    job,
    framework,
    op,
    ckpt_pool AS pool,
    events,
    timed_events,
    total_duration_s,
    median_duration_s,
    max_duration_s,
    first_time,
    last_time,
    network,
    network_class,
    verdict
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        framework,
        op,
        any(pool) AS ckpt_pool,
        count() AS events,
        count(duration_s) AS timed_events,
        sum(duration_s) AS total_duration_s,
        medianExact(duration_s) AS median_duration_s,
        max(duration_s) AS max_duration_s,
        min(time) AS first_time,
        max(end_time) AS last_time
    FROM {db}.checkpoint_events FINAL
    GROUP BY cluster, namespace, job, framework, op
) AS l
ANY LEFT JOIN
(
    SELECT
        cluster,
        namespace,
        job,
        network,
        network_class,
        verdict
    FROM {db}.job_verdicts
) AS r USING (cluster, namespace, job)`}},
	}
}
