// Package sinks writes pipeline batches out: ClickHouse (schema migrations,
// idempotent batch inserts, server-version features) and, beside it, the
// local outputs.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

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
	// onInsert, when set, is called after every insert attempt of one
	// table with its row count, duration and outcome (nil on success);
	// set at construction (WithMetrics).
	onInsert func(table string, rows int, d time.Duration, err error)

	cfg      ClickHouseConfig
	conn     driver.Conn
	version  string
	features features // from version

	batches, rows, failures atomic.Uint64
	strSizes                strSizes
	// series are the training step series this sink sent; tables are
	// the tables Consume writes, the series table listing from series.
	series sentSeries
	tables []table
	// staleLock overrides lockStale (tests).
	staleLock time.Duration
}

// ClickHouseOption sets what a ClickHouse sink reports to at construction.
type ClickHouseOption func(*ClickHouse)

// WithMetrics makes the sink observe each table insert's latency in
// m.InsertLatency.
func WithMetrics(m *pipeline.Metrics) ClickHouseOption {
	return func(c *ClickHouse) {
		if m == nil {
			return
		}
		c.onInsert = func(table string, _ int, d time.Duration, _ error) {
			m.InsertLatency.WithLabelValues(table).Observe(d.Seconds())
		}
	}
}

// NewClickHouse validates cfg, connects, and reads the server version,
// which decides the schema features (see Migrate) and whether inserts carry
// deduplication tokens. It does not migrate.
//
// The first call installs, for the whole process and for good, the
// driver's String column provider that makes an insert's columns at their
// size (colsize.go): the driver has no other way to size them, and
// growing them from empty is a large share of an insert's CPU and
// allocation on load-shaped batches (BenchmarkClickHouseConsume). Every
// String column the driver makes in the process goes through it; one not
// announced by an insert of a sink is made empty, as without it.
func NewClickHouse(ctx context.Context, cfg ClickHouseConfig, opts ...ClickHouseOption) (*ClickHouse, error) {
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
	for _, o := range opts {
		o(c)
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
	bounds, err := c.eventBounds(ctx, topic, parts, sinceSQL)
	if err != nil || bounds == "" {
		return err
	}
	// FINAL folds replays within a partition of the table; LIMIT 1 BY
	// also folds copies that landed in different months (an event whose
	// time is the ingest time, replayed across a month boundary).
	q := "SELECT topic, `partition`, `offset`, line, time, job, namespace, cluster, pod, container, node, host, pid, " +
		"dev, rank, kind, warn, text FROM " + c.cfg.Database + ".nccl_events FINAL " +
		"WHERE topic = ? AND " + bounds + " AND inserted_at >= " + sinceSQL +
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

// eventBounds returns the condition that bounds LoadEvents' query to the
// table partitions and the ranges of the sorting key that hold the events
// stored at or after since, or "" when no partition has one: the months
// (the table is partitioned by toYYYYMM(time)) of those events, and for
// each Kafka partition, its lowest offset among them. Nothing indexes
// inserted_at, and a FINAL query reads every column of every row of the
// partitions before its WHERE (the server moves no condition to PREWHERE
// under FINAL): the finished jobs' events, almost all of a partition,
// would be read in full on every assignment. This query has no FINAL, so
// the server reads inserted_at first and the other columns only of the
// rows that pass. Kafka offsets grow with time, so the offset bound skips
// the granules of older events in the months read. The bounds drop no
// event that the FINAL query returns (each passes this query's filter),
// and FINAL still sees every copy of a coordinate in the months read: the
// copies have the same sorting key, and the months are whole table
// partitions.
func (c *ClickHouse) eventBounds(ctx context.Context, topic string, parts []string, sinceSQL string) (string, error) {
	q := "SELECT `partition`, min(`offset`), groupUniqArray(toYYYYMM(time)) FROM " + c.cfg.Database + ".nccl_events " +
		"WHERE topic = ? AND `partition` IN (" + strings.Join(parts, ", ") + ") AND inserted_at >= " + sinceSQL +
		" GROUP BY `partition` ORDER BY `partition`"
	rows, err := c.conn.Query(ctx, q, topic)
	if err != nil {
		return "", fmt.Errorf("clickhouse load events: %w", err)
	}
	defer rows.Close()
	var ranges []string
	months := map[uint32]bool{}
	for rows.Next() {
		var (
			p   int32
			off int64
			ms  []uint32
		)
		if err := rows.Scan(&p, &off, &ms); err != nil {
			return "", fmt.Errorf("clickhouse load events: %w", err)
		}
		ranges = append(ranges, fmt.Sprintf("`partition` = %d AND `offset` >= %d", p, off))
		for _, m := range ms {
			months[m] = true
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("clickhouse load events: %w", err)
	}
	if len(ranges) == 0 {
		return "", nil
	}
	in := make([]string, 0, len(months))
	for _, m := range slices.Sorted(maps.Keys(months)) {
		in = append(in, strconv.FormatUint(uint64(m), 10))
	}
	return "(" + strings.Join(ranges, " OR ") + ") AND toYYYYMM(time) IN (" + strings.Join(in, ", ") + ")", nil
}
