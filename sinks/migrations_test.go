package sinks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"18.16.1", 18, 16, true},
		{"24.8.4.13", 24, 8, true},
		{"26.3.1.1", 26, 3, true},
		{" 23.8 ", 23, 8, true},
		{"19", 0, 0, false},
		{"x.1", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tc := range tests {
		major, minor, err := parseVersion(tc.in)
		if (err == nil) != tc.ok || major != tc.major || minor != tc.minor {
			t.Errorf("parseVersion(%q) = %d, %d, %v; want %d, %d, ok=%v", tc.in, major, minor, err, tc.major, tc.minor, tc.ok)
		}
	}
}

func TestFeaturesOf(t *testing.T) {
	tests := []struct {
		major, minor int
		want         features
	}{
		{18, 16, features{}},
		{19, 3, features{LowCardinality: true}},
		{19, 6, features{LowCardinality: true, TTL: true}},
		{19, 11, features{LowCardinality: true, TTL: true, Codecs: true}},
		{20, 1, features{DateTime64: true, LowCardinality: true, TTL: true, Codecs: true}},
		{22, 1, features{DateTime64: true, LowCardinality: true, TTL: true, Codecs: true}},
		{22, 2, features{DateTime64: true, LowCardinality: true, TTL: true, Codecs: true, DedupToken: true}},
		{24, 8, features{DateTime64: true, LowCardinality: true, TTL: true, Codecs: true, DedupToken: true}},
		{26, 3, features{DateTime64: true, LowCardinality: true, TTL: true, Codecs: true, DedupToken: true}},
	}
	for _, tc := range tests {
		if got := featuresOf(tc.major, tc.minor); got != tc.want {
			t.Errorf("featuresOf(%d, %d) = %+v; want %+v", tc.major, tc.minor, got, tc.want)
		}
	}
}

// ddl renders every statement of the migrations for a server version.
func ddl(t *testing.T, version string) string {
	t.Helper()
	major, minor, err := parseVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, m := range migrations(featuresOf(major, minor)) {
		for _, s := range m.Stmts {
			sb.WriteString(render(s, "ncclwatch", ""))
			sb.WriteString(";\n")
		}
	}
	return sb.String()
}

func TestMigrationsDDL(t *testing.T) {
	old := ddl(t, "18.16.1")
	for _, banned := range []string{"DateTime64", "LowCardinality", "TTL", "CODEC", "SETTINGS", "{db}", "{on_cluster}"} {
		if strings.Contains(old, banned) {
			t.Errorf("18.16 DDL contains %q:\n%s", banned, old)
		}
	}
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS ncclwatch.nccl_events",
		"time DateTime,",
		"ENGINE = ReplacingMergeTree\nPARTITION BY toYYYYMM(time)\nORDER BY (topic, `partition`, `offset`, line)",
		"ENGINE = ReplacingMergeTree(version)\nPARTITION BY toYYYYMM(first_seen)\nORDER BY (cluster, namespace, job, comm_id)",
		"ORDER BY (cluster, namespace, job)",
		"CREATE TABLE IF NOT EXISTS ncclwatch.dead_letters",
		"CREATE VIEW IF NOT EXISTS ncclwatch.job_verdicts AS",
		"argMax((network, network_class, fabric, gdr, nnodes, nranks, nccl_version, verdict, reasons, first_seen, last_seen), version) AS latest",
		"job String,\n    namespace String,",
	} {
		if !strings.Contains(old, want) {
			t.Errorf("18.16 DDL lacks %q:\n%s", want, old)
		}
	}

	cur := ddl(t, "24.8.4.13")
	for _, want := range []string{
		"time DateTime64(6) CODEC(Delta, ZSTD(1)),",
		"job LowCardinality(String),",
		"namespace LowCardinality(String),",
		"verdict LowCardinality(String),",
		"text String CODEC(ZSTD(1)),",
		"raw String CODEC(ZSTD(1)),",
		"SETTINGS non_replicated_deduplication_window = 1000",
	} {
		if !strings.Contains(cur, want) {
			t.Errorf("24.8 DDL lacks %q:\n%s", want, cur)
		}
	}
	// High-cardinality and key columns stay plain.
	for _, want := range []string{"pod String,", "pid String,", "topic String,", "comm_id String,"} {
		if !strings.Contains(cur, want) {
			t.Errorf("24.8 DDL lacks %q", want)
		}
	}
	// The one TTL: fold snapshots, read only at a partition's committed
	// offset, expire (sinks/folds.go).
	if n := strings.Count(cur, "TTL "); n != 1 || !strings.Contains(cur, "ORDER BY (topic, `partition`, `offset`)\nTTL inserted_at + INTERVAL 30 DAY") {
		t.Errorf("24.8 DDL has %d TTL clauses; want the fold_snapshots one only:\n%s", n, cur)
	}
}

func TestMigrationsNumbered(t *testing.T) {
	for _, v := range []string{"18.16.1", "24.8.4.13"} {
		major, minor, _ := parseVersion(v)
		ms := migrations(featuresOf(major, minor))
		prev := 0
		for _, m := range ms {
			// Each issue owns a range (core 1–5, alerting 6–19,
			// telemetry 20–39): versions increase, with gaps.
			if m.Version <= prev {
				t.Errorf("%s: migration %s has version %d after %d; versions must increase", v, m.Name, m.Version, prev)
			}
			prev = m.Version
			for _, s := range m.Stmts {
				// ADD COLUMN: Migrate skips it where the column exists;
				// a copy, where its source holds no rows any more.
				_, _, _, add := addedColumn(render(s, "nw", ""))
				_, _, copied := copySource(render(s, "nw", ""))
				if !strings.Contains(s, "IF NOT EXISTS") && !strings.HasPrefix(s, "DROP TABLE IF EXISTS ") && !add && !copied {
					t.Errorf("%s: migration %d is not idempotent: %s", v, m.Version, s)
				}
			}
		}
	}
}

// Every column an insert names exists in the table's DDL, on both ends.
func TestInsertColumnsInDDL(t *testing.T) {
	for _, v := range []string{"18.16.1", "24.8.4.13"} {
		major, minor, _ := parseVersion(v)
		// A table's DDL: the migration that creates it and those that
		// add columns to it.
		byName := map[string]string{}
		for _, m := range migrations(featuresOf(major, minor)) {
			byName[m.Name] += strings.Join(m.Stmts, "\n")
			for _, st := range m.Stmts {
				if _, table, col, ok := addedColumn(render(st, "nw", "")); ok {
					byName[table] += "\n    " + col + " "
				}
			}
		}
		for _, tb := range allTables() {
			body, ok := byName[tb.name]
			if !ok {
				t.Errorf("%s: no migration creates %s", v, tb.name)
				continue
			}
			for _, col := range tb.columns {
				if !strings.Contains(body, "\n    "+col+" ") {
					t.Errorf("%s: %s inserts column %s, which its DDL lacks", v, tb.name, col)
				}
			}
		}
	}
}

func TestRenderOnCluster(t *testing.T) {
	got := render("CREATE DATABASE IF NOT EXISTS {db}{on_cluster}", "nw", "{cluster}")
	if want := "CREATE DATABASE IF NOT EXISTS nw ON CLUSTER '{cluster}'"; got != want {
		t.Errorf("render = %q; want %q", got, want)
	}
	if got := render("CREATE TABLE IF NOT EXISTS {db}.t{on_cluster} (a UInt8)", "nw", ""); got != "CREATE TABLE IF NOT EXISTS nw.t (a UInt8)" {
		t.Errorf("render without cluster = %q", got)
	}
}

func TestClickHouseConfigValidate(t *testing.T) {
	if err := DefaultClickHouseConfig().Validate(); err != nil {
		t.Fatalf("DefaultClickHouseConfig().Validate() = %v", err)
	}
	tests := []struct {
		name string
		edit func(*ClickHouseConfig)
		want string
	}{
		{"no addr", func(c *ClickHouseConfig) { c.Addr = nil }, "clickhouse.addr: must not be empty"},
		{"bad addr", func(c *ClickHouseConfig) { c.Addr = []string{"localhost"} }, `clickhouse.addr[0]: "localhost" is not host:port`},
		{"no database", func(c *ClickHouseConfig) { c.Database = "" }, "clickhouse.database: must not be empty"},
		{"bad database", func(c *ClickHouseConfig) { c.Database = "a-b; DROP" }, `clickhouse.database: "a-b; DROP" must be letters`},
		{"digit database", func(c *ClickHouseConfig) { c.Database = "1db" }, `clickhouse.database: "1db"`},
		{"dial", func(c *ClickHouseConfig) { c.DialTimeout = 0 }, "clickhouse.dial_timeout: must be > 0"},
		{"query", func(c *ClickHouseConfig) { c.QueryTimeout = -time.Second }, "clickhouse.query_timeout: must be > 0"},
		{"cluster", func(c *ClickHouseConfig) { c.Cluster = "a'b" }, "clickhouse.cluster:"},
		{"line", func(c *ClickHouseConfig) { c.MaxLineBytes = 0 }, "clickhouse.max_line_bytes: must be > 0"},
		{"dead", func(c *ClickHouseConfig) { c.MaxDeadLetterBytes = 0 }, "clickhouse.max_dead_letter_bytes: must be > 0"},
		{"password twice", func(c *ClickHouseConfig) { c.Password, c.PasswordFile = "p", "f" }, "clickhouse.password, clickhouse.password_file: set one, not both"},
		{"tls half", func(c *ClickHouseConfig) { c.TLS = &pipeline.TLSConfig{KeyFile: "k.pem"} }, "clickhouse.tls.cert_file, clickhouse.tls.key_file: set both or neither"},
	}
	for _, tc := range tests {
		cfg := DefaultClickHouseConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v; want %q", tc.name, err, tc.want)
		}
	}
	cfg := DefaultClickHouseConfig()
	cfg.Cluster = "{cluster}"
	if err := cfg.Validate(); err != nil {
		t.Errorf("macro cluster: Validate() = %v; want nil", err)
	}
}

func TestCapText(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"aé", 2, "a"},                // é is 2 bytes: not cut in half
		{"a€b", 3, "a"},               // € is 3 bytes
		{"a\xff\xfe\xfd", 2, "a\xff"}, // not UTF-8: cut at n
		{"\x80\x80\x80\x80\x80", 4, "\x80\x80\x80\x80"},
	}
	for _, tc := range tests {
		if got := capText(tc.in, tc.n); got != tc.want {
			t.Errorf("capText(%q, %d) = %q; want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestDedupToken(t *testing.T) {
	b := testBatch("tok", time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	for i := range tables {
		tb := &tables[i]
		a1, a2 := tb.token(b), tb.token(b)
		if a1 != a2 {
			t.Errorf("%s: token not stable: %q, %q", tb.name, a1, a2)
		}
		if !strings.Contains(a1, tb.name) {
			t.Errorf("%s: token %q does not name the table", tb.name, a1)
		}
	}
	// A newer summary version under the same coordinates is a different
	// insert: a server would drop it silently under an equal token.
	before := tables[3].token(b)
	b.Jobs[0].Version++
	if after := tables[3].token(b); after == before {
		t.Errorf("job_summaries token unchanged by a new version: %q", after)
	}
	before = tables[0].token(b)
	b.Events[0].Source.Offset += 1000
	if after := tables[0].token(b); after == before {
		t.Errorf("nccl_events token unchanged by other coordinates: %q", after)
	}
}

func TestIsPermanent(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{fmt.Errorf("send: %w", &proto.Exception{Code: 60, Name: "DB::Exception", Message: "Table x.y doesn't exist."}), true},
		{&proto.Exception{Code: 16, Message: "No such column fallback in table x.y"}, true},
		{pipeline.Permanent(errors.New("x")), true},
		{&proto.Exception{Code: 252, Message: "Too many parts (300)."}, false},
		{&proto.Exception{Code: 241, Message: "Memory limit (total) exceeded"}, false},
	}
	for _, tc := range tests {
		if got := isPermanent(tc.err); got != tc.want {
			t.Errorf("isPermanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

func TestEnvColumnsSorted(t *testing.T) {
	keys, values := envColumns(map[string]string{"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "INFO"})
	if want := []string{"NCCL_DEBUG", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME"}; !slices.Equal(keys, want) {
		t.Errorf("keys = %q; want %q", keys, want)
	}
	if want := []string{"INFO", "1", "eth0"}; !slices.Equal(values, want) {
		t.Errorf("values = %q; want %q", values, want)
	}
}

// TestClickHouseMigrateConcurrent: several instances of `ncclwatch run`
// starting together all migrate a fresh database; every one succeeds, the
// schema is complete, and CheckSchema then finds nothing missing.
func TestClickHouseMigrateConcurrent(t *testing.T) {
	first := newTestClickHouse(t)
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			c, err := NewClickHouse(t.Context(), first.cfg)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_, err = c.Migrate(t.Context())
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Migrate() = %v", err)
		}
	}
	if err := first.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema() after concurrent migrations = %v", err)
	}
	want := len(migrations(first.features))
	if got := queryInt(t, first, "SELECT count() FROM "+first.cfg.Database+".schema_migrations FINAL"); got != uint64(want) {
		t.Errorf("schema_migrations FINAL = %d rows; want %d", got, want)
	}
	if got := queryInt(t, first, "SELECT count() FROM system.tables WHERE database = '"+first.cfg.Database+"' AND name = '"+lockTable+"'"); got != 0 {
		t.Errorf("%s left behind after the migrations", lockTable)
	}
}

// TestClickHouseMigrateStaleLock: a migration lock left by a process that
// died while migrating is taken over once no migration was recorded for
// lockStale, and the schema is then complete; a fresh lock is waited for.
func TestClickHouseMigrateStaleLock(t *testing.T) {
	c := newTestClickHouse(t)
	c.staleLock = 3 * time.Second
	for _, s := range []string{
		"CREATE DATABASE IF NOT EXISTS " + c.cfg.Database,
		"CREATE TABLE " + c.cfg.Database + "." + lockTable + " (holder String) ENGINE = Memory",
	} {
		if err := c.conn.Exec(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := c.Migrate(ctx)
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Migrate() under a fresh lock = %v; want it to wait until its context ends", err)
	}
	c.staleLock = 30 * time.Second // the lock is 1 s old
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	_, err = c.Migrate(ctx)
	cancel()
	if err == nil {
		t.Fatal("Migrate() took a lock that is not stale")
	}
	c.staleLock = 3 * time.Second
	applied, err := c.Migrate(t.Context())
	if err != nil {
		t.Fatalf("Migrate() after the lock went stale = %v", err)
	}
	if want := len(migrations(c.features)); len(applied) != want {
		t.Errorf("Migrate() applied %d migrations; want %d", len(applied), want)
	}
	if err := c.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema() = %v", err)
	}
}

// TestExpandCluster: with a cluster, each table is a Replicated local
// table on every shard and a Distributed table over them sharded by job;
// schema_migrations is replicated on every server; views stay views.
func TestExpandCluster(t *testing.T) {
	for _, v := range []string{"18.16.1", "26.9.2.1"} {
		major, minor, _ := parseVersion(v)
		f := featuresOf(major, minor)
		var all []string
		for _, s := range append(slices.Clone(setupStmts), migrationStmts(f)...) {
			single := expand(s, "nw", "")
			if len(single) != 1 || single[0] != render(s, "nw", "") {
				t.Errorf("%s: expand without a cluster = %q; want render's", v, single)
			}
			all = append(all, expand(s, "nw", "c2")...)
		}
		ddl := strings.Join(all, "\n;\n")
		for _, want := range []string{
			"CREATE DATABASE IF NOT EXISTS nw ON CLUSTER 'c2'",
			"CREATE TABLE IF NOT EXISTS nw.schema_migrations ON CLUSTER 'c2'\n(\n    version UInt32,\n    applied_at DateTime\n)\nENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/nw/schema_migrations', '{replica}')\nORDER BY version",
			"CREATE TABLE IF NOT EXISTS nw.nccl_events_local ON CLUSTER 'c2'\n(",
			"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/nw/nccl_events_local', '{replica}')\nPARTITION BY toYYYYMM(time)\nORDER BY (topic, `partition`, `offset`, line)",
			"CREATE TABLE IF NOT EXISTS nw.nccl_events ON CLUSTER 'c2' AS nw.nccl_events_local\nENGINE = Distributed('c2', 'nw', 'nccl_events_local', cityHash64(cluster, namespace, job))",
			"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/nw/job_summaries_local', '{replica}', version)",
			"ENGINE = Distributed('c2', 'nw', 'job_summaries_local', cityHash64(cluster, namespace, job))",
			"ENGINE = Distributed('c2', 'nw', 'dead_letters_local', cityHash64(topic, `partition`))",
			"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/nw/checkpoint_events_local', '{replica}', lines)",
			"CREATE VIEW IF NOT EXISTS nw.job_verdicts_local ON CLUSTER 'c2' AS",
			"FROM nw.job_summaries_local\n",
			"CREATE TABLE IF NOT EXISTS nw.job_verdicts ON CLUSTER 'c2' AS nw.job_verdicts_local\nENGINE = Distributed('c2', 'nw', 'job_verdicts_local')",
			"FROM nw.training_steps_local FINAL",
			"nw.job_verdicts_local",
			// Migrations 70 and 71: the columns on the local tables, the
			// Distributed table created again over them (an ALTER ON
			// CLUSTER of it is refused where shards replicate), the view
			// dropped in both forms before it is created again.
			"ALTER TABLE nw.job_summaries_local ON CLUSTER 'c2'\n    ADD COLUMN zones Array(String)\n;\n" +
				"DROP TABLE IF EXISTS nw.job_summaries ON CLUSTER 'c2'\n;\n" +
				"CREATE TABLE IF NOT EXISTS nw.job_summaries ON CLUSTER 'c2' AS nw.job_summaries_local\n" +
				"ENGINE = Distributed('c2', 'nw', 'job_summaries_local', cityHash64(cluster, namespace, job))",
			"DROP TABLE IF EXISTS nw.job_verdicts ON CLUSTER 'c2'\n;\nDROP TABLE IF EXISTS nw.job_verdicts_local ON CLUSTER 'c2'\n;\nCREATE VIEW IF NOT EXISTS nw.job_verdicts_local ON CLUSTER 'c2' AS",
			// Migration 26: the copies run through the Distributed tables
			// (each row to its job's shard), the table is dropped in both
			// forms, and each shard's view joins its local tables.
			"\nFROM nw.training_steps)\n;\nINSERT INTO nw.training_step_rows (",
			"\nFROM nw.training_steps\n;\nDROP TABLE IF EXISTS nw.training_steps ON CLUSTER 'c2'\n;\nDROP TABLE IF EXISTS nw.training_steps_local ON CLUSTER 'c2'\n;\nCREATE VIEW IF NOT EXISTS nw.training_steps_local ON CLUSTER 'c2' AS",
			"FROM nw.training_step_rows_local FINAL\nANY LEFT JOIN",
			"FROM nw.training_step_series_local\n) AS s USING (cluster, namespace, job, series)",
			"CREATE TABLE IF NOT EXISTS nw.training_steps ON CLUSTER 'c2' AS nw.training_steps_local\nENGINE = Distributed('c2', 'nw', 'training_steps_local')",
		} {
			if !strings.Contains(ddl, want) {
				t.Errorf("%s: cluster DDL lacks %q", v, want)
			}
		}
		// A cluster view reads only its server's local tables and views.
		localName := regexp.MustCompile(`nw\.\w+_local\b`)
		for _, s := range all {
			if strings.HasPrefix(s, "CREATE VIEW") && strings.Contains(localName.ReplaceAllString(s, ""), "nw.") {
				t.Errorf("%s: a cluster view reads a Distributed table:\n%s", v, s)
			}
		}
		if strings.Contains(ddl, "non_replicated") || strings.Contains(ddl, "ENGINE = ReplacingMergeTree") {
			t.Errorf("%s: cluster DDL keeps a single-server engine or setting", v)
		}
		if f.DedupToken && !strings.Contains(ddl, "SETTINGS replicated_deduplication_window = 1000") {
			t.Errorf("%s: cluster DDL lacks the replicated dedup window", v)
		}
		// Every table the sink writes is Distributed, over a local table.
		for _, tb := range allTables() {
			if !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS nw."+tb.name+" ON CLUSTER 'c2' AS nw."+tb.name+"_local\nENGINE = Distributed(") {
				t.Errorf("%s: %s has no Distributed table", v, tb.name)
			}
		}
	}
}

// The copies of a migration name their source for Migrate's guard; no
// other statement is a copy.
func TestCopySource(t *testing.T) {
	var copies []string
	for _, s := range migrationStmts(featuresOf(24, 8)) {
		for _, e := range expand(s, "nw", "c2") {
			if db, table, ok := copySource(e); ok {
				copies = append(copies, db+"."+table)
			}
		}
	}
	if want := []string{"nw.training_steps", "nw.training_steps"}; !slices.Equal(copies, want) {
		t.Errorf("copy sources = %q; want %q", copies, want)
	}
}
