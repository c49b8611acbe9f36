package sinks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// features says which server features the schema and the inserts may use.
// It is derived once from the server version (see featuresOf); the DDL of a
// migration depends on it, so a migration is written for the version the
// server had when it was applied.
type features struct {
	// DateTime64 (20.1): event times keep microseconds.
	DateTime64 bool
	// LowCardinality (19.3; experimental behind a setting in 18.x, so
	// treated as absent there): dictionary-encoded strings for columns
	// with few distinct values.
	LowCardinality bool
	// TTL (19.6): table and column TTL (fold_snapshots expire).
	TTL bool
	// Codecs (19.11): per-column compression codecs.
	Codecs bool
	// DedupToken (22.2): the insert_deduplication_token setting, and with
	// it the non_replicated_deduplication_window table setting it needs on
	// tables without replication.
	DedupToken bool
}

// featuresOf returns the features of ClickHouse major.minor.
func featuresOf(major, minor int) features {
	atLeast := func(ma, mi int) bool { return major > ma || major == ma && minor >= mi }
	return features{
		DateTime64:     atLeast(20, 1),
		LowCardinality: atLeast(19, 3),
		TTL:            atLeast(19, 6),
		Codecs:         atLeast(19, 11),
		DedupToken:     atLeast(22, 2),
	}
}

// parseVersion reads major and minor from a version() string such as
// "18.16.1" or "24.8.4.13".
func parseVersion(v string) (major, minor int, err error) {
	majorText, rest, ok := strings.Cut(strings.TrimSpace(v), ".")
	if !ok {
		return 0, 0, fmt.Errorf("clickhouse version %q: want major.minor", v)
	}
	minorText, _, _ := strings.Cut(rest, ".")
	if major, err = strconv.Atoi(majorText); err != nil || major < 0 {
		return 0, 0, fmt.Errorf("clickhouse version %q: bad major", v)
	}
	if minor, err = strconv.Atoi(minorText); err != nil || minor < 0 {
		return 0, 0, fmt.Errorf("clickhouse version %q: bad minor", v)
	}
	return major, minor, nil
}

// migration is one numbered schema change. Its statements hold the
// placeholders {db} (the database) and {on_cluster} (" ON CLUSTER '…'" or
// nothing); render fills them in. Every statement is idempotent (IF NOT
// EXISTS, DROP … IF EXISTS, an ADD COLUMN that Migrate skips where the
// column exists, or an INSERT … SELECT that copies into a
// ReplacingMergeTree and that Migrate skips where its source holds no rows
// of its own any more, copySource), so a migration interrupted half-way is
// safe to apply again.
type migration struct {
	Version int
	Name    string
	Stmts   []string
}

// Placeholders in migration statements.
const (
	phDB        = "{db}"
	phOnCluster = "{on_cluster}"
)

// render fills in the placeholders of a migration statement. db and cluster
// were checked by ClickHouseConfig.Validate.
func render(stmt, db, cluster string) string {
	on := ""
	if cluster != "" {
		on = " ON CLUSTER '" + cluster + "'"
	}
	return strings.NewReplacer(phDB, db, phOnCluster, on).Replace(stmt)
}

// expand renders one migration statement for db: as it is on a single
// server, or, with cluster set, for a cluster of shards and replicas. There
// every CREATE TABLE becomes two tables, each created ON CLUSTER (so on
// every server):
//
//   - NAME_local, the same columns and keys on Replicated…MergeTree, its
//     replicas of one shard sharing the ZooKeeper path
//     /clickhouse/tables/{shard}/DB/NAME_local ({shard} and {replica} are
//     each server's macros);
//   - NAME, a Distributed table over NAME_local on every shard, sharded by
//     shardingKey: the name every insert and query uses, so that the sink,
//     the views, the cookbook and the dashboards read the same SQL on a
//     cluster as on one server.
//
// schema_migrations is the exception: one Replicated table whose replicas
// are all the servers (path without {shard}), so that every server knows
// what was applied. A view NAME becomes NAME_local, the same query over
// the local tables (and local views) of its server, and a Distributed
// NAME over NAME_local on every shard: since one job's rows live on one
// shard, a shard's view holds whole jobs, and job_verdicts one row per
// job. (18.16 also crashed a shard, SIGSEGV, when job_verdicts was a view
// over the Distributed job_summaries and its argMax state of a tuple went
// between servers.) A replay of a batch lands on the same shard (the key
// is a function of the row), where ReplacingMergeTree and FINAL fold it as
// on one server.
//
// An ALTER TABLE of NAME alters NAME_local ON CLUSTER, then drops and
// creates NAME again over it: ClickHouse refuses an ALTER ON CLUSTER of a
// Distributed table when the cluster's shards replicate internally
// ("Table NAME isn't replicated, but shard #1 is replicated", 18.16), and
// a Distributed table holds no rows and takes its columns from NAME_local
// when created (inserts in between fail and are retried). A DROP TABLE IF
// EXISTS of NAME drops NAME and then NAME_local.
func expand(stmt, db, cluster string) []string {
	const create = "CREATE TABLE IF NOT EXISTS " + phDB + "."
	const view = "CREATE VIEW IF NOT EXISTS " + phDB + "."
	const alter = "ALTER TABLE " + phDB + "."
	const drop = "DROP TABLE IF EXISTS " + phDB + "."
	if cluster != "" && (strings.HasPrefix(stmt, alter) || strings.HasPrefix(stmt, drop)) {
		verb := alter
		if strings.HasPrefix(stmt, drop) {
			verb = drop
		}
		name, rest, ok := strings.Cut(stmt[len(verb):], phOnCluster)
		if !ok {
			panic("sinks: no cluster form for " + stmt)
		}
		local := render(verb+name+"_local"+phOnCluster+rest, db, cluster)
		if verb == drop {
			return []string{render(stmt, db, cluster), local}
		}
		return []string{local, render(drop+name+phOnCluster, db, cluster), distributed(name, db, cluster)}
	}
	if cluster != "" && strings.HasPrefix(stmt, view) {
		name, body, ok := strings.Cut(stmt[len(view):], phOnCluster)
		if !ok {
			panic("sinks: no cluster form for " + stmt)
		}
		local := localRef.ReplaceAllString(body, phDB+".${1}_local")
		return []string{
			render(view+name+"_local"+phOnCluster+local, db, cluster),
			render(create+name+phOnCluster+" AS "+phDB+"."+name+"_local"+
				"\nENGINE = Distributed('"+cluster+"', '"+db+"', '"+name+"_local')", db, cluster),
		}
	}
	if cluster == "" || !strings.HasPrefix(stmt, create) {
		return []string{render(stmt, db, cluster)}
	}
	name, _, ok := strings.Cut(stmt[len(create):], phOnCluster)
	engineAt := strings.Index(stmt, "ENGINE = ReplacingMergeTree")
	if !ok || engineAt < 0 {
		// Every table of the schema is a ReplacingMergeTree; a new
		// engine needs its replicated form written here.
		panic("sinks: no cluster form for " + stmt)
	}
	rest := stmt[engineAt+len("ENGINE = ReplacingMergeTree"):]
	var version string
	if strings.HasPrefix(rest, "(") {
		version, rest, _ = strings.Cut(rest[1:], ")")
		version = ", " + version
	}
	local := name + "_local"
	zkPath := "/clickhouse/tables/{shard}/" + db + "/" + local
	if name == "schema_migrations" {
		local, zkPath = name, "/clickhouse/tables/all/"+db+"/"+name
	}
	// On Replicated tables the deduplication window is
	// replicated_deduplication_window (default 100 blocks); the same
	// margin as dedupWindow.
	rest = strings.Replace(rest, "non_replicated_deduplication_window", "replicated_deduplication_window", 1)
	replicated := create + local + phOnCluster + stmt[len(create)+len(name)+len(phOnCluster):engineAt] +
		"ENGINE = ReplicatedReplacingMergeTree('" + zkPath + "', '{replica}'" + version + ")" + rest
	out := []string{render(replicated, db, cluster)}
	if name != "schema_migrations" {
		out = append(out, distributed(name, db, cluster))
	}
	return out
}

// distributed is the CREATE statement of table name's Distributed table
// over name_local on every shard of cluster.
func distributed(name, db, cluster string) string {
	const create = "CREATE TABLE IF NOT EXISTS " + phDB + "."
	local := name + "_local"
	return render(create+name+phOnCluster+" AS "+phDB+"."+local+
		"\nENGINE = Distributed('"+cluster+"', '"+db+"', '"+local+"', "+shardingKey(name)+")", db, cluster)
}

// localRef is a table or view of the schema named in a view's query.
var localRef = regexp.MustCompile(`\{db\}\.(\w+)`)

// shardingKey is the Distributed sharding expression of a table: a hash
// of the job (cluster, namespace, job), so that one job's rows, and every
// replay of them, live on one shard and its summaries fold there into one
// row per job; dead letters and fold snapshots, which have no job, by their
// Kafka partition.
func shardingKey(table string) string {
	if table == "dead_letters" || table == "fold_snapshots" {
		return "cityHash64(topic, `partition`)"
	}
	return "cityHash64(cluster, namespace, job)"
}

// dedupWindow is the number of recent insert blocks a table without
// replication remembers for insert_deduplication_token: a replay after a
// crash repeats at most the few batches that were in flight, and one
// batch is one block per table, so 1000 leaves a wide margin at a cost of
// a few KiB per table.
const dedupWindow = 1000

// ddlTypes are the column types and table clauses a server supports.
type ddlTypes struct {
	time     string              // DateTime64(6), or DateTime before 20.1
	lc       string              // LowCardinality(String), or String before 19.3
	codec    func(string) string // " CODEC(…)", or nothing before 19.11
	settings string              // the dedup window for insert tokens (22.2+), or nothing
}

// ddl returns the types and clauses of f's server.
func (f features) ddl() ddlTypes {
	t := ddlTypes{time: "DateTime", lc: "String", codec: func(string) string { return "" }}
	if f.DateTime64 {
		t.time = "DateTime64(6)"
	}
	if f.LowCardinality {
		t.lc = "LowCardinality(String)"
	}
	if f.Codecs {
		t.codec = func(c string) string { return " CODEC(" + c + ")" }
	}
	if f.DedupToken {
		t.settings = "\nSETTINGS non_replicated_deduplication_window = " + strconv.Itoa(dedupWindow)
	}
	return t
}

// migrations returns the schema, in order, written for a server with
// features f. Append new migrations at the end; never change one that was
// released, since servers that applied it will not apply it again.
func migrations(f features) []migration {
	out := coreMigrations(f)
	out = append(out, alertMigrations(f)...)
	out = append(out, telemetryMigrations(f)...)
	out = append(out, checkpointMigrations(f)...)
	out = append(out, foldMigrations(f)...)
	out = append(out, inspectorMigrations(f)...)
	return append(out, topologyMigrations(f)...)
}

// coreMigrations are migrations 1–5. Alerting owns 6–19 (sinks/alerts.go),
// telemetry 20–39 (sinks/telemetry.go), checkpoints 40–49
// (sinks/checkpoint.go), fold snapshots 50–59 (sinks/folds.go), NCCL
// Inspector 60–69 (sinks/inspector.go), job topology 70–79
// (sinks/topology.go).
func coreMigrations(f features) []migration {
	t := f.ddl()
	timeType, lc, codec, settings := t.time, t.lc, t.codec, t.settings

	return []migration{
		{Version: 1, Name: "nccl_events", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.nccl_events{on_cluster}
(
    topic String,
    ` + "`partition`" + ` Int32,
    ` + "`offset`" + ` Int64,
    line Int32,
    time ` + timeType + codec("Delta, ZSTD(1)") + `,
    job ` + lc + `,
    namespace ` + lc + `,
    cluster ` + lc + `,
    pod String,
    container ` + lc + `,
    node ` + lc + `,
    host ` + lc + `,
    pid String,
    dev Int16,
    rank Int32,
    kind ` + lc + `,
    warn UInt8,
    text String` + codec("ZSTD(1)") + `,
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		{Version: 2, Name: "comm_summaries", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.comm_summaries{on_cluster}
(
    job String,
    namespace ` + lc + `,
    cluster ` + lc + `,
    comm_id String,
    nccl_versions Array(String),
    network Nullable(String),
    network_class ` + lc + `,
    fabric Nullable(String),
    hcas Array(String),
    oob_iface Nullable(String),
    gdr Nullable(UInt8),
    multi_node Nullable(UInt8),
    nranks Nullable(Int32),
    nnodes Nullable(Int32),
    local_ranks Nullable(Int32),
    hosts Array(String),
    intra Array(String),
    nvls UInt8,
    collnet UInt8,
    plugin Nullable(String),
    rdma_failures Array(String),
    env_keys Array(String),
    env_values Array(String),
    warns UInt32,
    warnings Array(String),
    init_complete UInt8,
    verdict ` + lc + `,
    reasons Array(String),
    first_seen DateTime,
    last_seen DateTime,
    version UInt64,
    updated_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(first_seen)
ORDER BY (cluster, namespace, job, comm_id)` + settings}},

		{Version: 3, Name: "job_summaries", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.job_summaries{on_cluster}
(
    job String,
    namespace ` + lc + `,
    cluster ` + lc + `,
    nccl_version Nullable(String),
    version_skew UInt8,
    network Nullable(String),
    network_class Nullable(String),
    fabric Nullable(String),
    gdr Nullable(UInt8),
    multi_node Nullable(UInt8),
    nnodes Nullable(Int32),
    nranks Nullable(Int32),
    intra Array(String),
    fallback Nullable(UInt8),
    warns UInt32,
    verdict ` + lc + `,
    reasons Array(String),
    nccl_lines UInt64,
    first_seen DateTime,
    last_seen DateTime,
    version UInt64,
    updated_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(first_seen)
ORDER BY (cluster, namespace, job)` + settings}},

		{Version: 4, Name: "dead_letters", Stmts: []string{`CREATE TABLE IF NOT EXISTS {db}.dead_letters{on_cluster}
(
    topic String,
    ` + "`partition`" + ` Int32,
    ` + "`offset`" + ` Int64,
    line Int32,
    time ` + timeType + `,
    reason String,
    raw String` + codec("ZSTD(1)") + `,
    inserted_at DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (topic, ` + "`partition`, `offset`" + `, line)` + settings}},

		// argMax over a tuple, not per column: argMax skips rows whose
		// value is NULL (measured on 18.16: a newer NULL network would
		// show the older 'IB'), while a tuple is never NULL. The inner
		// alias must not be a column name, or ClickHouse substitutes it
		// into the aggregate ("aggregate function found inside another").
		{Version: 5, Name: "job_verdicts", Stmts: []string{`CREATE VIEW IF NOT EXISTS {db}.job_verdicts{on_cluster} AS
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
    tupleElement(latest, 11) AS last_seen
FROM
(
    SELECT
        cluster,
        namespace,
        job,
        argMax((network, network_class, fabric, gdr, nnodes, nranks, nccl_version, verdict, reasons, first_seen, last_seen), version) AS latest
    FROM {db}.job_summaries
    GROUP BY cluster, namespace, job
)`}},
	}
}

// setupStmts create the database and the table that records the applied
// migrations; Migrate runs them before any migration.
var setupStmts = []string{
	"CREATE DATABASE IF NOT EXISTS {db}{on_cluster}",
	`CREATE TABLE IF NOT EXISTS {db}.schema_migrations{on_cluster}
(
    version UInt32,
    applied_at DateTime
)
ENGINE = ReplacingMergeTree
ORDER BY version`,
}

// Migrate creates the database and the schema_migrations table when
// missing, then applies, in order, every migration not recorded there, and
// records each. It returns the versions it applied: none when the schema is
// current. Concurrent Migrate calls apply one at a time (lockMigrations);
// one that waited returns once the other recorded every migration.
func (c *ClickHouse) Migrate(ctx context.Context) (applied []int, err error) {
	return c.migrate(ctx, migrations(c.features))
}

// migrate is Migrate with the migrations ms.
func (c *ClickHouse) migrate(ctx context.Context, ms []migration) (applied []int, err error) {
	for _, stmt := range setupStmts {
		for _, s := range expand(stmt, c.cfg.Database, c.cfg.Cluster) {
			if err := c.exec(ctx, s); err != nil {
				return nil, fmt.Errorf("clickhouse migrate: %w", err)
			}
		}
	}

	done, err := c.appliedMigrations(ctx)
	if err != nil {
		return nil, fmt.Errorf("clickhouse migrate: %w", err)
	}
	if pending(ms, done) == 0 {
		return nil, nil
	}
	unlock, finished, err := c.lockMigrations(ctx, ms)
	if err != nil {
		return nil, fmt.Errorf("clickhouse migrate: %w", err)
	}
	if finished {
		return nil, nil
	}
	defer unlock()
	// Read again under the lock: the previous holder may have applied
	// some of them.
	if done, err = c.appliedMigrations(ctx); err != nil {
		return nil, fmt.Errorf("clickhouse migrate: %w", err)
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if err := c.apply(ctx, m); err != nil {
			return applied, fmt.Errorf("clickhouse migrate %d (%s): %w", m.Version, m.Name, err)
		}
		if err := c.recordMigration(ctx, m.Version); err != nil {
			return applied, fmt.Errorf("clickhouse migrate %d (%s): record: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// apply runs the statements of m, skipping those done before an
// interruption or by another instance migrating at the same time.
func (c *ClickHouse) apply(ctx context.Context, m migration) error {
	for _, stmt := range m.Stmts {
		for _, s := range expand(stmt, c.cfg.Database, c.cfg.Cluster) {
			if d, t, ok := copySource(s); ok {
				// A copy runs while its source still holds the rows:
				// a re-run after the source was replaced skips it.
				holds, err := c.holdsRows(ctx, d, t)
				if err != nil {
					return err
				}
				if !holds {
					continue
				}
				if err := c.execCopy(ctx, s); err != nil {
					// Another instance migrating at the same time may
					// have copied the rows and replaced the source
					// meanwhile (it drops it only after its copy).
					if holds, herr := c.holdsRows(ctx, d, t); herr == nil && !holds {
						continue
					}
					return err
				}
				continue
			}
			d, t, col, add := addedColumn(s)
			if add {
				has, err := c.hasColumn(ctx, d, t, col)
				if err != nil {
					return err
				}
				if has {
					continue // added before an interruption
				}
			}
			if err := c.execMigration(ctx, s); err != nil {
				if add {
					// Another instance migrating at the same time may
					// have added it since the check.
					if has, herr := c.hasColumn(ctx, d, t, col); herr == nil && has {
						continue
					}
				}
				return err
			}
		}
	}
	return nil
}

// unknownTableTries is how often a migration statement that finds a table
// missing (code 60) or being dropped (code 218) is tried: another instance
// migrating at the same time may be between the DROP and the CREATE of a
// view that the statement reads (job_verdicts' recreation, which
// collective_perf_fabric reads), a window of milliseconds.
const unknownTableTries = 5

// execMigration runs one migration statement, trying it again after a
// short wait while it fails for a missing or dropped table (codes 60, 218).
func (c *ClickHouse) execMigration(ctx context.Context, s string) error {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		err := c.exec(ctx, s)
		var ex *proto.Exception
		if err == nil || try == unknownTableTries || !errors.As(err, &ex) || (ex.Code != 60 && ex.Code != 218) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// CheckSchema verifies that every migration of this binary is recorded in
// the database, for a service started with migrations off. A missing
// database or schema, or one older than the binary, is a permanent error
// that names the command to run; a server that does not answer is a
// transient one.
func (c *ClickHouse) CheckSchema(ctx context.Context) error {
	done, err := c.appliedMigrations(ctx)
	if err != nil {
		return classify(fmt.Errorf("clickhouse schema of database %s: %w", c.cfg.Database, err))
	}
	var missing []int
	for _, m := range migrations(c.features) {
		if !done[m.Version] {
			missing = append(missing, m.Version)
		}
	}
	if len(missing) > 0 {
		return pipeline.Permanent(fmt.Errorf("clickhouse database %s lacks migrations %v of this ncclwatch: run `ncclwatch migrate --clickhouse %s --database %s`, or start with migrations on (migrate: true)",
			c.cfg.Database, missing, strings.Join(c.cfg.Addr, ","), c.cfg.Database))
	}
	return nil
}

// execCopy runs a migration's INSERT … SELECT. On a cluster the
// Distributed table writes each shard's rows before it returns, as the
// sink's inserts do (insertSettings), not later from the local disk of
// the server that ran it.
func (c *ClickHouse) execCopy(ctx context.Context, stmt string) error {
	if c.cfg.Cluster != "" {
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	}
	return c.exec(ctx, stmt)
}

func (c *ClickHouse) exec(ctx context.Context, stmt string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	return c.conn.Exec(ctx, stmt)
}

func (c *ClickHouse) appliedMigrations(ctx context.Context) (map[int]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	rows, err := c.conn.Query(ctx, "SELECT version FROM "+c.cfg.Database+".schema_migrations")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := make(map[int]bool)
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		done[int(v)] = true
	}
	return done, rows.Err()
}

// recordMigration inserts through a batch with a column list: 18.16 hangs
// on Exec of INSERT … VALUES from clickhouse-go.
func (c *ClickHouse) recordMigration(ctx context.Context, version int) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	b, err := c.conn.PrepareBatch(ctx, recordMigrationSQL(c.cfg.Database))
	if err != nil {
		return err
	}
	if err := b.Append(uint32(version), time.Now()); err != nil {
		_ = b.Abort()
		return err
	}
	return b.Send()
}

// recordMigrationSQL is the insert that records an applied migration.
func recordMigrationSQL(db string) string {
	return "INSERT INTO " + db + ".schema_migrations (version, applied_at)"
}
