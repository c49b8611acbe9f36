// Package sinks writes pipeline batches out: ClickHouse (schema migrations,
// idempotent batch inserts, server-version features) and, beside it, the
// local outputs.
package sinks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// ClickHouseConfig configures the ClickHouse sink.
type ClickHouseConfig struct {
	// Addr lists the native-protocol endpoints, host:port; the driver
	// picks the first that answers.
	Addr []string `yaml:"addr"`
	// Database holds every table; it is created by Migrate.
	Database string `yaml:"database"`
	// Username and Password authenticate; empty Username is "default".
	// PasswordFile names a file that holds the password instead (a mounted
	// secret; one trailing newline is dropped): one of the two, not both.
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	// TLS, when set, speaks TLS to the native port (the server's
	// tcp_port_secure, 9440 in the packages), verifying its certificate.
	TLS *pipeline.TLSConfig `yaml:"tls"`
	// DialTimeout bounds one connection attempt.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// QueryTimeout bounds one statement: one insert attempt, one DDL
	// statement, and each read of a streamed result.
	QueryTimeout time.Duration `yaml:"query_timeout"`
	// Cluster, when set, names the cluster (the server's remote_servers)
	// the schema spans: Migrate creates every table ON CLUSTER as a
	// Replicated…MergeTree NAME_local on each shard and a Distributed NAME
	// over them, sharded by job (see expand), and the sink inserts through
	// the Distributed tables synchronously (insert_distributed_sync), so
	// that an insert that returns has reached a replica of every shard it
	// touches. Set it when the schema is first migrated: a database
	// migrated without it stays single-server.
	Cluster string `yaml:"cluster"`
	// MaxLineBytes caps the stored text of an event line.
	MaxLineBytes int `yaml:"max_line_bytes"`
	// MaxDeadLetterBytes caps the stored raw bytes of a dead letter.
	MaxDeadLetterBytes int `yaml:"max_dead_letter_bytes"`
}

// DefaultClickHouseConfig returns the configuration ncclwatch runs with.
func DefaultClickHouseConfig() ClickHouseConfig {
	return ClickHouseConfig{
		// The native port of a server on the same host, as in the
		// ClickHouse packages.
		Addr: []string{"127.0.0.1:9000"},
		// One database holds the whole schema so that it can be granted
		// and dropped as a unit.
		Database: "ncclwatch",
		// The account every ClickHouse installation has.
		Username: "default",
		// A connect on a LAN answers in milliseconds; failing after 5 s
		// leaves the time to the retry loop, which may find another Addr.
		DialTimeout: 5 * time.Second,
		// One batch (thousands of rows, a few MiB) inserts in well under a
		// second; 30 s means the server is stuck, not busy. The run loop
		// reports an outage after pipeline.sink_timeout meanwhile.
		QueryTimeout: 30 * time.Second,
		// 4 KiB holds every NCCL INFO/WARN line seen in the corpus with
		// room to spare; longer lines are topology dumps whose tail says
		// nothing the classifier uses.
		MaxLineBytes: 4096,
		// 16 KiB of a poison record is enough to see what it was without
		// letting one bad record bloat the table.
		MaxDeadLetterBytes: 16 << 10,
	}
}

// Validate reports every invalid field, named by its configuration path.
func (c ClickHouseConfig) Validate() error {
	var errs []error
	if len(c.Addr) == 0 {
		errs = append(errs, errors.New("clickhouse.addr: must not be empty"))
	}
	for i, a := range c.Addr {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("clickhouse.addr[%d]: %q is not host:port", i, a))
		}
	}
	switch {
	case c.Database == "":
		errs = append(errs, errors.New("clickhouse.database: must not be empty"))
	case !isIdentifier(c.Database):
		errs = append(errs, fmt.Errorf("clickhouse.database: %q must be letters, digits and _ and not start with a digit", c.Database))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, errors.New("clickhouse.dial_timeout: must be > 0"))
	}
	if c.QueryTimeout <= 0 {
		errs = append(errs, errors.New("clickhouse.query_timeout: must be > 0"))
	}
	if strings.ContainsAny(c.Cluster, "'\\\n\r\x00") || c.Cluster != strings.TrimSpace(c.Cluster) {
		errs = append(errs, fmt.Errorf("clickhouse.cluster: %q must not contain quotes, backslashes, line breaks or surrounding spaces", c.Cluster))
	}
	if c.Password != "" && c.PasswordFile != "" {
		errs = append(errs, errors.New("clickhouse.password, clickhouse.password_file: set one, not both"))
	}
	errs = append(errs, c.TLS.Validate("clickhouse.tls")...)
	if c.MaxLineBytes <= 0 {
		errs = append(errs, errors.New("clickhouse.max_line_bytes: must be > 0"))
	}
	if c.MaxDeadLetterBytes <= 0 {
		errs = append(errs, errors.New("clickhouse.max_dead_letter_bytes: must be > 0"))
	}
	return errors.Join(errs...)
}

// isIdentifier reports whether s is a plain ClickHouse identifier, safe to
// write into SQL unquoted.
func isIdentifier(s string) bool {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '_', 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z':
		case '0' <= ch && ch <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// ClickHouseStats are the sink's counters since it was created, for the
// caller to export as metrics.
type ClickHouseStats struct {
	Batches  uint64 // batches accepted
	Rows     uint64 // rows inserted, all tables
	Failures uint64 // batches rejected (Consume returned an error)
}

// ClickHouse stores batches in ClickHouse: NCCL events, communicator and
// job summaries, and dead letters, one insert per table per batch. Storage
// is idempotent under replay (ReplacingMergeTree on each row's source
// coordinates or summary key, and insert deduplication tokens where the
// server has them), so the caller may resend a batch after any error.
//
// Consume is not safe for concurrent use (see pipeline.Consumer); the other
// methods are.
type ClickHouse struct {
	// OnInsert, when set, is called after every insert attempt of one
	// table with its row count, duration and outcome (nil on success).
	// Set it before the first Consume.
	OnInsert func(table string, rows int, d time.Duration, err error)

	cfg      ClickHouseConfig
	conn     driver.Conn
	version  string
	features features // from version

	batches, rows, failures atomic.Uint64
	strSizes                strSizes
}

// NewClickHouse validates cfg, connects, and reads the server version,
// which decides the schema features (see Migrate) and whether inserts carry
// deduplication tokens. It does not migrate.
func NewClickHouse(ctx context.Context, cfg ClickHouseConfig) (*ClickHouse, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	installColStr()
	conn, err := open(cfg)
	if err != nil {
		return nil, fmt.Errorf("clickhouse open: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, cfg.QueryTimeout)
	defer cancel()
	if err := conn.Ping(qctx); err != nil {
		conn.Close()
		err = fmt.Errorf("clickhouse ping %s: %w%s", strings.Join(cfg.Addr, ","), err, hint(err))
		if isPermanent(err) || badCertificate(err) {
			// Bad credentials or a server certificate that does not
			// verify: retrying cannot help, the operator must act.
			return nil, pipeline.Permanent(err)
		}
		return nil, err
	}
	var version string
	if err := conn.QueryRow(qctx, "SELECT version()").Scan(&version); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse version: %w", err)
	}
	c, err := newClickHouse(cfg, conn, version)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// open makes the driver's connection pool; it does not dial yet.
func open(cfg ClickHouseConfig) (driver.Conn, error) {
	password, err := pipeline.ReadSecret("clickhouse.password", cfg.Password, cfg.PasswordFile)
	if err != nil {
		return nil, err
	}
	tc, err := cfg.TLS.Build("clickhouse.tls")
	if err != nil {
		return nil, err
	}
	return clickhouse.Open(&clickhouse.Options{
		Protocol: clickhouse.Native,
		Addr:     cfg.Addr,
		TLS:      tc,
		// No default database: the connection must work before Migrate
		// has created cfg.Database, and every statement names it.
		Auth:        clickhouse.Auth{Username: cfg.Username, Password: password},
		DialTimeout: cfg.DialTimeout,
		ReadTimeout: cfg.QueryTimeout,
		// Log text compresses several-fold; LZ4 costs little CPU and every
		// server version speaks it.
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
}

func newClickHouse(cfg ClickHouseConfig, conn driver.Conn, version string) (*ClickHouse, error) {
	major, minor, err := parseVersion(version)
	if err != nil {
		return nil, err
	}
	return &ClickHouse{
		cfg:      cfg,
		conn:     conn,
		version:  version,
		features: featuresOf(major, minor),
	}, nil
}

// Close closes the connections.
func (c *ClickHouse) Close() error { return c.conn.Close() }

// Version returns the server's version() as read at connect.
func (c *ClickHouse) Version() string { return c.version }

// Query runs a query on the server, for tests and tools. The caller closes
// the rows. Placeholders (?) are bound by the driver.
func (c *ClickHouse) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	return c.conn.Query(ctx, sql, args...)
}

// Exec runs a statement that returns no rows (DDL), for tests and tools.
func (c *ClickHouse) Exec(ctx context.Context, stmt string) error {
	return c.exec(ctx, stmt)
}

// Stats returns the counters.
func (c *ClickHouse) Stats() ClickHouseStats {
	return ClickHouseStats{
		Batches:  c.batches.Load(),
		Rows:     c.rows.Load(),
		Failures: c.failures.Load(),
	}
}

// Consume inserts the batch: events, dead letters, communicator summaries
// and job summaries, one batch insert per non-empty table, each tried once:
// retrying is the run loop's job (pipeline.Runner), the one place retry
// policy lives. An error that a retry cannot fix (a schema mismatch, a
// missing table, an authorisation error) is wrapped with
// pipeline.Permanent, with a hint of what to change.
//
// Tables inserted before a failing one keep their rows; resending the batch
// is harmless, since storage folds rows with equal coordinates or keys.
// Consume does not keep b.
func (c *ClickHouse) Consume(ctx context.Context, b *pipeline.Batch) error {
	all := allTables()
	for i := range all {
		t := &all[i]
		n := t.rows(b)
		if n == 0 {
			continue
		}
		if err := c.insert(ctx, t, b, n); err != nil {
			c.failures.Add(1)
			return err
		}
		c.rows.Add(uint64(n))
	}
	c.batches.Add(1)
	return nil
}

// insert writes one table's rows of b.
func (c *ClickHouse) insert(ctx context.Context, t *table, b *pipeline.Batch, n int) error {
	if settings := c.insertSettings(t, b); len(settings) > 0 {
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(settings))
	}
	start := time.Now()
	err := c.insertOnce(ctx, t, b)
	if c.OnInsert != nil {
		c.OnInsert(t.name, n, time.Since(start), err)
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("clickhouse insert %s: %w (last error: %v)", t.name, ctx.Err(), err)
	}
	return classify(fmt.Errorf("clickhouse insert %s: %w", t.name, err))
}

// insertSettings are the settings of one table's insert of b.
func (c *ClickHouse) insertSettings(t *table, b *pipeline.Batch) clickhouse.Settings {
	settings := clickhouse.Settings{}
	if c.features.DedupToken {
		// The same token on every attempt: a retry of an insert that did
		// reach the server (the answer was lost) is then dropped by it.
		settings["insert_deduplication_token"] = t.token(b)
	}
	if c.cfg.Cluster != "" {
		// The Distributed table writes each shard's rows to a replica
		// before the insert returns, instead of queueing them on the
		// local disk of the server we talk to: the offsets are
		// committed only for rows a shard holds, and a failed insert
		// is retried whole (the replicas drop the blocks they have).
		// The setting keeps this name as an alias on 23.x+
		// (distributed_foreground_insert).
		settings["insert_distributed_sync"] = 1
	}
	return settings
}

// classify wraps err with pipeline.Permanent and a hint when no retry
// fixes it: the one place ClickHouse errors are classified.
func classify(err error) error {
	if isPermanent(err) && !pipeline.IsPermanent(err) {
		return pipeline.Permanent(fmt.Errorf("%w%s", err, hint(err)))
	}
	return err
}

// insertOnce makes a fresh driver batch from b and sends it. A driver batch
// is never reused after a failure: its connection and buffers are in an
// unknown state.
func (c *ClickHouse) insertOnce(ctx context.Context, t *table, b *pipeline.Batch) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	hint := c.strSizes.hint(t, b, &c.cfg)
	announce(hint)
	batch, err := c.conn.PrepareBatch(ctx, t.insertSQL(c.cfg.Database))
	withdraw(hint)
	if err != nil {
		return err
	}
	c.strSizes.learn(t, batch.Columns())
	if err := t.fill(batch, b, &c.cfg); err != nil {
		_ = batch.Abort()
		// The values do not fit the table's columns: the table is not
		// the one this code was written for.
		return pipeline.Permanent(err)
	}
	return batch.Send()
}

// Exception codes of ClickHouse (src/Common/ErrorCodes.cpp) that no retry
// fixes: the statement or the data does not fit the schema, or the account
// may not write.
var permanentCodes = map[int32]bool{
	6:   true, // CANNOT_PARSE_TEXT
	8:   true, // THERE_IS_NO_COLUMN
	10:  true, // NOT_FOUND_COLUMN_IN_BLOCK
	16:  true, // NO_SUCH_COLUMN_IN_TABLE
	20:  true, // NUMBER_OF_COLUMNS_DOESNT_MATCH
	27:  true, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
	36:  true, // BAD_ARGUMENTS
	41:  true, // CANNOT_PARSE_DATETIME
	43:  true, // ILLEGAL_TYPE_OF_ARGUMENT
	44:  true, // ILLEGAL_COLUMN
	47:  true, // UNKNOWN_IDENTIFIER
	48:  true, // NOT_IMPLEMENTED
	53:  true, // TYPE_MISMATCH
	60:  true, // UNKNOWN_TABLE
	62:  true, // SYNTAX_ERROR
	69:  true, // ARGUMENT_OUT_OF_BOUND
	70:  true, // CANNOT_CONVERT_TYPE
	81:  true, // UNKNOWN_DATABASE
	115: true, // UNKNOWN_SETTING
	117: true, // INCORRECT_DATA
	131: true, // TOO_LARGE_STRING_SIZE
	164: true, // READONLY
	192: true, // UNKNOWN_USER
	193: true, // WRONG_PASSWORD
	291: true, // DATABASE_ACCESS_DENIED
	386: true, // NO_COMMON_TYPE
	497: true, // ACCESS_DENIED
	516: true, // AUTHENTICATION_FAILED
}

// isPermanent classifies an insert error. Everything not known to be
// permanent is retried: a network error, a timeout, overload (TOO_MANY_PARTS,
// MEMORY_LIMIT_EXCEEDED, TOO_MANY_SIMULTANEOUS_QUERIES), a replica that is
// read-only for a while — the caller keeps the offsets uncommitted, which is
// the safe side for an error nobody anticipated.
func isPermanent(err error) bool {
	if pipeline.IsPermanent(err) {
		return true
	}
	var ex *proto.Exception
	if errors.As(err, &ex) {
		return permanentCodes[ex.Code]
	}
	return false
}

// badCertificate reports whether err is a server certificate that does not
// verify (unknown CA, wrong host name, expired).
func badCertificate(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify)
}

// hint says what an operator should change for a permanent error.
func hint(err error) string {
	var ex *proto.Exception
	if !errors.As(err, &ex) {
		return ""
	}
	switch ex.Code {
	case 8, 10, 16, 47, 60, 81:
		return " (the schema is not the one this ncclwatch writes: run `ncclwatch migrate`, and check that no one altered the tables)"
	case 164, 192, 193, 291, 497, 516:
		return " (check clickhouse.username, clickhouse.password or clickhouse.password_file, and the account's grants on clickhouse.database)"
	}
	return ""
}

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

// fill appends t's rows of b to d.
func (t *table) fill(d driver.Batch, b *pipeline.Batch, cfg *ClickHouseConfig) error {
	if t.cols == nil {
		return t.append(d, b, cfg)
	}
	c := newColumns(d, t.rows(b))
	t.cols(c, b, cfg)
	return c.done()
}

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
// those of sinks/alerts.go, sinks/telemetry.go and sinks/checkpoint.go.
func allTables() []table {
	out := make([]table, 0, len(tables)+len(alertTables)+len(telemetryTables)+len(checkpointTables))
	out = append(out, tables...)
	out = append(out, alertTables...)
	out = append(out, telemetryTables...)
	return append(out, checkpointTables...)
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
			"nccl_lines", "first_seen", "last_seen", "version"},
		rows: func(b *pipeline.Batch) int { return len(b.Jobs) },
		append: func(d driver.Batch, b *pipeline.Batch, _ *ClickHouseConfig) error {
			for i := range b.Jobs {
				s := &b.Jobs[i]
				if err := d.Append(s.Job, s.Namespace, s.Cluster, s.NCCLVersion, b2u(s.VersionSkew), s.Network,
					s.NetworkClass, s.Fabric, boolPtr(s.GDR), boolPtr(s.MultiNode), intPtr(s.NNodes), intPtr(s.NRanks),
					strs(s.Intra), boolPtr(s.Fallback), count32(s.Warns), string(s.Verdict), strs(s.Reasons),
					uint64(max(s.NCCLLines, 0)), clampTime(s.FirstSeen), clampTime(s.LastSeen), s.Version); err != nil {
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

// columns appends a batch one column at a time (clickhouse-go's columnar
// Append): one typed slice per column instead of a row of interface values
// per row, which boxed most cells (an allocation each) and type-switched on
// every one; issue 9 measured the row-wise training_steps append at two
// thirds of the insert CPU. Columns go in the table's column order.
type columns struct {
	d   driver.Batch
	n   int // rows
	i   int // next column
	err error
	// scratch holds a slice per column type, reused from column to column
	// and, through scratchPool, from insert to insert: the driver copies
	// the values (the columns of a batch are one allocation per type, not
	// per column; 8-10 % of the sink's CPU in BenchmarkClickHouseConsume).
	// A slice keeps its last insert's strings reachable until it is
	// filled again or the pool drops it.
	scratch map[reflect.Type]any
	// measure: nothing is appended; strBytes gets, by column index, the
	// bytes of each column of Go strings that only marks (every one when
	// only is nil) (strSizes.hint).
	measure  bool
	only     []bool
	strBytes []int
}

// scratchPool holds the scratch maps of finished inserts.
var scratchPool = sync.Pool{New: func() any { return map[reflect.Type]any{} }}

func newColumns(d driver.Batch, rows int) *columns {
	return &columns{d: d, n: rows, scratch: scratchPool.Get().(map[reflect.Type]any)}
}

// col appends the next column, v(j) being row j's value.
func col[T any](c *columns, v func(j int) T) {
	if c.err != nil {
		return
	}
	if c.measure {
		wanted := c.only == nil || c.i < len(c.only) && c.only[c.i]
		if str, ok := any(v).(func(int) string); ok && wanted && c.i < len(c.strBytes) {
			total := 0
			for j := range c.n {
				total += len(str(j))
			}
			c.strBytes[c.i] = total
		}
		c.i++
		return
	}
	vals, _ := c.scratch[reflect.TypeFor[T]()].([]T)
	if cap(vals) < c.n {
		vals = make([]T, c.n)
		c.scratch[reflect.TypeFor[T]()] = vals
	}
	vals = vals[:c.n]
	for j := range vals {
		vals[j] = v(j)
	}
	if err := c.d.Column(c.i).Append(vals); err != nil {
		c.err = fmt.Errorf("column %d: %w", c.i, err)
	}
	c.i++
}

// sourceColumns appends topic, partition, offset and line.
func sourceColumns(c *columns, src func(j int) *pipeline.Source) {
	col(c, func(j int) string { return src(j).Topic })
	col(c, func(j int) int32 { return src(j).Partition })
	col(c, func(j int) int64 { return src(j).Offset })
	col(c, func(j int) int32 { return src(j).Line })
}

// done returns the first error, or one when the columns appended are not
// the batch's columns.
func (c *columns) done() error {
	if c.scratch != nil {
		scratchPool.Put(c.scratch)
		c.scratch = nil
	}
	if c.err != nil {
		return c.err
	}
	if n := len(c.d.Columns()); c.i != n {
		return fmt.Errorf("%d columns appended; the insert has %d", c.i, n)
	}
	return nil
}

func writeSource(h io.Writer, s pipeline.Source) {
	var buf [64]byte
	p := append(buf[:0], s.Topic...)
	p = append(p, 0)
	p = strconv.AppendInt(p, int64(s.Partition), 10)
	p = append(p, '/')
	p = strconv.AppendInt(p, s.Offset, 10)
	p = append(p, '/')
	p = strconv.AppendInt(p, int64(s.Line), 10)
	p = append(p, 0)
	h.Write(p)
}

func writeKey(h io.Writer, version uint64, parts ...string) {
	for _, p := range parts {
		io.WriteString(h, p)
		h.Write([]byte{0})
	}
	io.WriteString(h, strconv.FormatUint(version, 10))
	h.Write([]byte{0})
}

// DateTime holds 1970-01-01 to 2106-02-07; DateTime64 more, but both
// schemas must hold the same values. A zero time (no evidence) is stored as
// the epoch.
var (
	minStoredTime = time.Unix(0, 0)
	maxStoredTime = time.Date(2105, 12, 31, 23, 59, 59, 0, time.UTC)
)

func clampTime(t time.Time) time.Time {
	if t.Before(minStoredTime) {
		return minStoredTime
	}
	if t.After(maxStoredTime) {
		return maxStoredTime
	}
	return t
}

func clamp(v, lo, hi int) int { return min(max(v, lo), hi) }

func count32(n int) uint32 { return uint32(clamp(n, 0, 1<<32-1)) }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func boolPtr(b *bool) *uint8 {
	if b == nil {
		return nil
	}
	v := b2u(*b)
	return &v
}

func intPtr(n *int) *int32 {
	if n == nil {
		return nil
	}
	v := int32(clamp(*n, -1<<31, 1<<31-1))
	return &v
}

// strs turns nil into an empty slice, for Array(String).
func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// hcaColumn renders HCAs as NCCL prints them: "mlx5_0:1/IB".
func hcaColumn(hcas []pipeline.HCA) []string {
	out := make([]string, len(hcas))
	for i, h := range hcas {
		out[i] = h.Device + ":" + strconv.Itoa(h.Port) + "/" + h.LinkLayer
	}
	return out
}

// envColumns splits the NCCL_* overrides into parallel key and value
// arrays, sorted by key so that equal summaries store equal rows.
func envColumns(env map[string]string) (keys, values []string) {
	keys = make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	values = make([]string, len(keys))
	for i, k := range keys {
		values[i] = env[k]
	}
	return keys, values
}

// capText cuts s to at most n bytes, backing off to the start of a UTF-8
// sequence so that a valid line stays valid. Invalid UTF-8 is stored as is.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n // not UTF-8 anyway
	}
	return s[:cut]
}

// LoadEvents calls fn for every event of topic's partitions stored at or
// after since (ingest time, inserted_at: the runner evicts idle jobs by
// processing time too, so backfilled logs with old event times are rebuilt
// like live ones), once per source coordinate (topic, partition, offset,
// line) even before the table's merges folded replays, in (partition,
// offset, line) order. It is how assembler state is rebuilt after a
// restart. since is compared in whole seconds, rounded down so that no
// later event is missed. An error from fn stops the stream and is
// returned. No partitions, no events.
func (c *ClickHouse) LoadEvents(ctx context.Context, topic string, partitions []int32, since time.Time,
	fn func(pipeline.EventRow) error) error {
	if len(partitions) == 0 {
		return nil
	}
	parts := make([]string, len(partitions))
	for i, p := range partitions {
		parts[i] = strconv.FormatInt(int64(p), 10)
	}
	since = clampTime(since).UTC()
	sinceSQL := "toDateTime('" + since.Format("2006-01-02 15:04:05") + "', 'UTC')"
	// FINAL folds replays within a partition of the table; LIMIT 1 BY
	// also folds copies that landed in different months (an event whose
	// time is the ingest time, replayed across a month boundary).
	q := "SELECT topic, `partition`, `offset`, line, time, job, namespace, cluster, pod, container, node, host, pid, " +
		"dev, rank, kind, warn, text FROM " + c.cfg.Database + ".nccl_events FINAL " +
		"WHERE topic = ? AND `partition` IN (" + strings.Join(parts, ", ") + ") AND inserted_at >= " + sinceSQL +
		" ORDER BY `partition`, `offset`, line LIMIT 1 BY `partition`, `offset`, line"
	rows, err := c.conn.Query(ctx, q, topic)
	if err != nil {
		return fmt.Errorf("clickhouse load events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e    pipeline.EventRow
			dev  int16
			rank int32
			warn uint8
		)
		if err := rows.Scan(&e.Source.Topic, &e.Source.Partition, &e.Source.Offset, &e.Source.Line, &e.Time,
			&e.Job, &e.Namespace, &e.Cluster, &e.Pod, &e.Container, &e.Node, &e.Host, &e.PID,
			&dev, &rank, &e.Kind, &warn, &e.Line); err != nil {
			return fmt.Errorf("clickhouse load events: %w", err)
		}
		e.Dev, e.Rank, e.Warn = int(dev), int(rank), warn != 0
		e.Time = e.Time.UTC()
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse load events: %w", err)
	}
	return nil
}
