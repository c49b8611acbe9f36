package sinks

import (
	"context"
	"fmt"
	"io"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// foldTables is fold_snapshots: the state of a partition's open fold
// window stored with the commit that passed it (pipeline.FoldSnapshot),
// read back by the next reader of the partition (LoadFold). It is the
// runner's own state, not a table to query.
var foldTables = []table{
	{
		name:    "fold_snapshots",
		columns: []string{"topic", "`partition`", "`offset`", "state"},
		rows:    func(b *pipeline.Batch) int { return len(b.Sealed) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.Sealed {
				s := &b.Sealed[i]
				if err := d.Append(s.Topic, s.Partition, s.At, string(s.State)); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.Sealed {
				s := &b.Sealed[i]
				writeSource(h, pipeline.Source{Topic: s.Topic, Partition: s.Partition, Offset: s.At})
				h.Write(s.State)
			}
		},
	},
}

// foldMigrations are migrations 50–59.
func foldMigrations(f features) []migration {
	settings := f.ddl().settings
	// Only the snapshot at a partition's committed offset is ever read,
	// and only until the partition reads on past its window; 30 days
	// covers a partition left idle for weeks. Servers before 19.6 keep
	// them (monthly partitions, dropped by hand).
	ttl := ""
	if f.TTL {
		ttl = "\nTTL inserted_at + INTERVAL 30 DAY"
	}
	return []migration{
		// One row per commit that passed an open fold window. offset is
		// the committed offset the snapshot goes with.
		{Version: 50, Name: "fold_snapshots", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.fold_snapshots{on_cluster}
(
    topic String,
    ` + "`partition`" + ` Int32,
    ` + "`offset`" + ` Int64,
    state String,
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(inserted_at)
ORDER BY (topic, ` + "`partition`, `offset`" + `)` + ttl + settings}},
	}
}

// LoadFold returns the fold snapshot stored with a partition's committed
// offset at (pipeline.FoldLoader); ok is false when none was.
func (c *ClickHouse) LoadFold(ctx context.Context, topic string, partition int32, at int64) (state []byte, ok bool, err error) {
	rows, err := c.conn.Query(ctx, "SELECT state FROM "+c.cfg.Database+".fold_snapshots FINAL "+
		"WHERE topic = ? AND `partition` = ? AND `offset` = ? LIMIT 1", topic, partition, at)
	if err != nil {
		return nil, false, fmt.Errorf("clickhouse load fold: %w", err)
	}
	defer rows.Close()
	var s string
	if rows.Next() {
		if err := rows.Scan(&s); err != nil {
			return nil, false, fmt.Errorf("clickhouse load fold: %w", err)
		}
		ok = true
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("clickhouse load fold: %w", err)
	}
	return []byte(s), ok, nil
}
