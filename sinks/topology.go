package sinks

import (
	"context"
	"strings"
)

// topologyColumns are the columns migration 70 adds to job_summaries for a
// job's topology (pipeline.Topology): the distinct zones, blocks, racks and
// NVLink cliques of its nodes, and the level it spans beyond its pools'
// policy ("" when none). job_verdicts shows them from migration 71.
var topologyColumns = []string{"zones", "blocks", "racks", "cliques", "topology_crosses"}

// addColumnStmt is a migration statement that adds column to table.
// 18.16 has no ADD COLUMN IF NOT EXISTS (19.1), so Migrate skips the
// statement when the table already has the column (addedColumn): that
// keeps a migration interrupted half-way safe to apply again.
func addColumnStmt(table, column, typ string) string {
	return "ALTER TABLE {db}." + table + "{on_cluster}\n    ADD COLUMN " + column + " " + typ
}

// addedColumn returns the database, table and column a rendered ADD
// COLUMN statement adds; ok is false for any other statement.
func addedColumn(stmt string) (db, table, column string, ok bool) {
	rest, ok := strings.CutPrefix(stmt, "ALTER TABLE ")
	if !ok {
		return "", "", "", false
	}
	end := strings.IndexAny(rest, " \n")
	if end < 0 {
		return "", "", "", false
	}
	name := rest[:end]
	_, rest, ok = strings.Cut(rest[end:], "ADD COLUMN ")
	if !ok {
		return "", "", "", false
	}
	column, _, _ = strings.Cut(rest, " ")
	db, table, ok = strings.Cut(name, ".")
	if !ok || column == "" {
		return "", "", "", false
	}
	return db, table, column, true
}

// hasColumn reports whether db.table has column.
func (c *ClickHouse) hasColumn(ctx context.Context, db, table, column string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	rows, err := c.conn.Query(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
		db, table, column)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return false, err
		}
	}
	return n > 0, rows.Err()
}

// topologyMigrations are migrations 70–79: the topology of job summaries.
func topologyMigrations(f features) []migration {
	lc := f.ddl().lc
	add := make([]string, 0, len(topologyColumns))
	for _, col := range topologyColumns {
		typ := "Array(String)"
		if col == "topology_crosses" {
			typ = lc
		}
		add = append(add, addColumnStmt("job_summaries", col, typ))
	}
	return []migration{
		{Version: 70, Name: "job_summaries_topology", Stmts: add},
		// A view's query is fixed when it is created: job_verdicts is
		// recreated to show the new columns (18.16 has no CREATE OR
		// REPLACE VIEW). Between the two statements the view is missing;
		// readers retry. The columns keep migration 5's tuple, so a row
		// shows one version's values throughout.
		{Version: 71, Name: "job_verdicts_topology", Stmts: []string{
			"DROP TABLE IF EXISTS {db}.job_verdicts{on_cluster}",
			`CREATE VIEW IF NOT EXISTS {db}.job_verdicts{on_cluster} AS
SELECT
    job,
    namespace,
    cluster,
    tupleElement(latest, 1) AS network,
    tupleElement(latest, 2) AS network_class,
    tupleElement(latest, 3) AS fabric,
    tupleElement(latest, 4) AS gdr,
    tupleElement(latest, 5) AS nnodes,
    tupleElement(latest, 6) AS nranks,
    tupleElement(latest, 7) AS nccl_version,
    tupleElement(latest, 8) AS verdict,
    tupleElement(latest, 9) AS reasons,
    tupleElement(latest, 10) AS first_seen,
    tupleElement(latest, 11) AS last_seen,
    tupleElement(latest, 12) AS zones,
    tupleElement(latest, 13) AS blocks,
    tupleElement(latest, 14) AS racks,
    tupleElement(latest, 15) AS cliques,
    tupleElement(latest, 16) AS topology_crosses
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        argMax((network, network_class, fabric, gdr, nnodes, nranks, nccl_version, verdict, reasons, first_seen, last_seen,
            zones, blocks, racks, cliques, topology_crosses), version) AS latest
    FROM {db}.job_summaries
    GROUP BY cluster, namespace, job
)`}},
	}
}
