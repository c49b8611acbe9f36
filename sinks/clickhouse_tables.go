package sinks

import (
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// table is how one table's rows are taken from a batch.
type table struct {
	name    string
	columns []string // in the order append passes values
	rows    func(b *pipeline.Batch) int
	append  func(d driver.Batch, b *pipeline.Batch, cfg *ClickHouseConfig) error
	// cols, set instead of append for the tables written a column at a
	// time, appends b's rows to c (see columns).
	cols func(c *columns, b *pipeline.Batch, cfg *ClickHouseConfig)
	// key feeds what identifies each row (coordinates, or summary key and
	// version) to h, for the deduplication token.
	key func(b *pipeline.Batch, h io.Writer)
}

// fill appends t's rows of b to d. A table written a column at a time
// goes in blocks of at most blockRows rows (one block when blockRows is 0),
// each but the last sent (d.Flush) once made, so that the driver's columns
// and the encoded block hold one block, not the insert. An error of
// sending is returned as a sendError.
func (t *table) fill(d driver.Batch, b *pipeline.Batch, cfg *ClickHouseConfig, blockRows int) error {
	if t.cols == nil {
		return t.append(d, b, cfg)
	}
	n := t.rows(b)
	if blockRows <= 0 {
		blockRows = max(n, 1)
	}
	for lo := 0; lo < n; lo += blockRows {
		if lo > 0 {
			if err := d.Flush(); err != nil {
				return sendError{err}
			}
		}
		c := newColumns(d, lo, min(blockRows, n-lo))
		t.cols(c, b, cfg)
		if err := c.done(); err != nil {
			return err
		}
	}
	return nil
}

// sendError is an error of sending a block to the server, not of its
// values.
type sendError struct{ err error }

func (e sendError) Error() string { return e.err.Error() }
func (e sendError) Unwrap() error { return e.err }

// insertSQL names the columns: 18.16 takes batch inserts only with a
// column list, and a list keeps inserts working when columns are added.
func (t *table) insertSQL(db string) string {
	return "INSERT INTO " + db + "." + t.name + " (" + strings.Join(t.columns, ", ") + ")"
}

// token is the insert_deduplication_token of this table's rows of b: the
// table, the first and last source offsets of the batch, the row count, and
// a hash of every row's identity. A replay of the same batch gets the same
// token; a different batch (or the same coordinates with a newer summary
// version) gets another, since a server silently drops an insert whose
// token it has seen even when the data differs.
func (t *table) token(b *pipeline.Batch) string {
	h := fnv.New64a()
	t.key(b, h)
	var span string
	if len(b.Offsets) > 0 {
		first, last := b.Offsets[0], b.Offsets[len(b.Offsets)-1]
		span = fmt.Sprintf("%s/%d@%d-%s/%d@%d", first.Topic, first.Partition, first.Next, last.Topic, last.Partition, last.Next)
	}
	return fmt.Sprintf("ncclwatch:%s:%s:%d:%016x", t.name, span, t.rows(b), h.Sum64())
}

// allTables lists every table Consume writes: the core ones here, then
// those of sinks/alerts.go, the series of the training steps
// (sinks/series.go), those of sinks/telemetry.go, sinks/checkpoint.go,
// sinks/inspector.go and sinks/folds.go (last: a snapshot goes with the
// batch's commit). The series table gets every series of a batch; a sink
// sends only those it has not sent (tablesOf).
func allTables() []table { return tablesOf(everySeries) }

// tablesOf is allTables with the series table's rows of a batch listed by
// series (a series strictly before the training step rows that name it).
func tablesOf(series func(b *pipeline.Batch) []int32) []table {
	out := make([]table, 0, len(tables)+len(alertTables)+1+len(telemetryTables)+len(checkpointTables)+
		len(inspectorTables)+len(foldTables))
	out = append(out, tables...)
	out = append(out, alertTables...)
	out = append(out, seriesTable(series))
	out = append(out, telemetryTables...)
	out = append(out, checkpointTables...)
	out = append(out, inspectorTables...)
	return append(out, foldTables...)
}

var tables = []table{
	{
		name: "nccl_events",
		columns: []string{"topic", "`partition`", "`offset`", "line", "time", "job", "namespace", "cluster",
			"pod", "container", "node", "host", "pid", "dev", "rank", "kind", "warn", "text"},
		rows: func(b *pipeline.Batch) int { return len(b.Events) },
		cols: func(c *columns, b *pipeline.Batch, cfg *ClickHouseConfig) {
			ev := b.Events
			sourceColumns(c, func(j int) *pipeline.Source { return &ev[j].Source })
			col(c, func(j int) time.Time { return clampTime(ev[j].Time) })
			col(c, func(j int) string { return ev[j].Job })
			col(c, func(j int) string { return ev[j].Namespace })
			col(c, func(j int) string { return ev[j].Cluster })
			col(c, func(j int) string { return ev[j].Pod })
			col(c, func(j int) string { return ev[j].Container })
			col(c, func(j int) string { return ev[j].Node })
			col(c, func(j int) string { return ev[j].Host })
			col(c, func(j int) string { return ev[j].PID })
			col(c, func(j int) int16 { return int16(clamp(ev[j].Dev, -1<<15, 1<<15-1)) })
			col(c, func(j int) int32 { return int32(clamp(ev[j].Rank, -1<<31, 1<<31-1)) })
			col(c, func(j int) string { return ev[j].Kind })
			col(c, func(j int) uint8 { return b2u(ev[j].Warn) })
			col(c, func(j int) string { return capText(ev[j].Line, cfg.MaxLineBytes) })
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.Events {
				writeSource(h, b.Events[i].Source)
			}
		},
	},
	{
		name:    "dead_letters",
		columns: []string{"topic", "`partition`", "`offset`", "line", "time", "reason", "raw"},
		rows:    func(b *pipeline.Batch) int { return len(b.DeadLetters) },
		append: func(d driver.Batch, b *pipeline.Batch, cfg *ClickHouseConfig) error {
			for i := range b.DeadLetters {
				dl := &b.DeadLetters[i]
				raw := dl.Raw
				if len(raw) > cfg.MaxDeadLetterBytes {
					raw = raw[:cfg.MaxDeadLetterBytes]
				}
				if err := d.Append(dl.Source.Topic, dl.Source.Partition, dl.Source.Offset, dl.Source.Line,
					clampTime(dl.Time), dl.Reason, string(raw)); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.DeadLetters {
				writeSource(h, b.DeadLetters[i].Source)
			}
		},
	},
	{
		name: "comm_summaries",
		columns: []string{"job", "namespace", "cluster", "comm_id", "nccl_versions", "network", "network_class",
			"fabric", "hcas", "oob_iface", "gdr", "multi_node", "nranks", "nnodes", "local_ranks", "hosts", "intra",
			"nvls", "collnet", "plugin", "rdma_failures", "env_keys", "env_values", "warns", "warnings",
			"init_complete", "verdict", "reasons", "first_seen", "last_seen", "version"},
		rows: func(b *pipeline.Batch) int { return len(b.Comms) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.Comms {
				s := &b.Comms[i]
				keys, values := envColumns(s.Env)
				if err := d.Append(s.Job, s.Namespace, s.Cluster, s.CommID, strs(s.NCCLVersions), s.Network, s.NetworkClass,
					s.Fabric, hcaColumn(s.HCAs), s.OOBIface, boolPtr(s.GDR), boolPtr(s.MultiNode),
					intPtr(s.NRanks), intPtr(s.NNodes), intPtr(s.LocalRanks), strs(s.Hosts), strs(s.Intra),
					b2u(s.NVLS), b2u(s.CollNet), s.Plugin, strs(s.RDMAFailure), keys, values,
					count32(s.Warns), strs(s.Warnings), b2u(s.InitComplete), string(s.Verdict), strs(s.Reasons),
					clampTime(s.FirstSeen), clampTime(s.LastSeen), s.Version); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.Comms {
				s := &b.Comms[i]
				writeKey(h, s.Version, s.Cluster, s.Namespace, s.Job, s.CommID)
			}
		},
	},
	{
		name: "job_summaries",
		columns: []string{"job", "namespace", "cluster", "nccl_version", "version_skew", "network", "network_class",
			"fabric", "gdr", "multi_node", "nnodes", "nranks", "intra", "fallback", "warns", "verdict", "reasons",
			"nccl_lines", "first_seen", "last_seen", "version", "zones", "blocks", "racks", "cliques", "topology_crosses"},
		rows: func(b *pipeline.Batch) int { return len(b.Jobs) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.Jobs {
				s := &b.Jobs[i]
				t := s.Topology
				if t == nil {
					t = &pipeline.Topology{}
				}
				if err := d.Append(s.Job, s.Namespace, s.Cluster, s.NCCLVersion, b2u(s.VersionSkew), s.Network,
					s.NetworkClass, s.Fabric, boolPtr(s.GDR), boolPtr(s.MultiNode), intPtr(s.NNodes), intPtr(s.NRanks),
					strs(s.Intra), boolPtr(s.Fallback), count32(s.Warns), string(s.Verdict), strs(s.Reasons),
					uint64(max(s.NCCLLines, 0)), clampTime(s.FirstSeen), clampTime(s.LastSeen), s.Version,
					strs(t.Zones), strs(t.Blocks), strs(t.Racks), strs(t.Cliques), t.Crosses); err != nil {
					return err
				}
			}
			return nil
		},
		key: func(b *pipeline.Batch, h io.Writer) {
			for i := range b.Jobs {
				s := &b.Jobs[i]
				writeKey(h, s.Version, s.Cluster, s.Namespace, s.Job)
			}
		},
	},
}
