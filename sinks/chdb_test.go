package sinks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

// The schema, the inserts and the queries written for current servers
// (23.x and later: DateTime64, LowCardinality, codecs, insert deduplication
// tokens, the new analyzer) run against chDB, ClickHouse's current engine
// (26.x) as a Python library (deploy/local/chdb.sh), since the test server
// is Debian's 18.16. The test drives chDB from Go so that the DDL is what
// migrations() writes for chDB's version, the inserts are what the sink's
// tables name (column lists, tokens) with the values their append functions
// pass, and the expected query results are cookbook()'s, the ones the
// 18.16 server must return too: one source for both engines.
//
// Where a chDB session differs from a server: no ZooKeeper, so no
// Replicated tables; no remote_servers, so no Distributed tables and no ON
// CLUSTER (their DDL is parsed by chDB's parser, EXPLAIN AST, not run); no
// native protocol, so the values travel as SQL literals in an INSERT …
// VALUES with the sink's column list and settings instead of clickhouse-go's
// native blocks (those are covered against the 18.16 server).

// chdbPython returns the python of chDB's virtualenv (NCCLWATCH_TEST_CHDB,
// set by make test through deploy/local/chdb.sh python), or skips the test
// when there is none (fails under NCCLWATCH_REQUIRE_SERVERS=1).
func chdbPython(t *testing.T) string {
	t.Helper()
	return testenv.Server(t, "NCCLWATCH_TEST_CHDB", "deploy/local/chdb.sh python prints it; make test sets it")
}

// chdbStmt is one statement for deploy/local/chdb/exec.py: format empty
// ignores its output.
type chdbStmt struct {
	SQL    string `json:"sql"`
	Format string `json:"format,omitempty"`
	what   string // names the statement in failures
}

type chdbResult struct {
	OK    bool   `json:"ok"`
	Out   string `json:"out"`
	Error string `json:"error"`
}

// runChDB runs stmts in one chDB session (a fresh directory) and returns
// one result per statement.
func runChDB(t *testing.T, py string, stmts []chdbStmt) []chdbResult {
	t.Helper()
	in, err := json.Marshal(stmts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), py, filepath.Join("..", "deploy", "local", "chdb", "exec.py"), t.TempDir())
	cmd.Env = append(os.Environ(), "TZ=UTC")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chDB exec.py: %v\n%s", err, stderr.String())
	}
	var res []chdbResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(stmts) {
		t.Fatalf("chDB exec.py: %d results for %d statements (%v)\n%s", len(res), len(stmts), err, stderr.String())
	}
	return res
}

// recordingBatch keeps the values a table's append function passes, in
// the place of the driver's batch: rows (Append) or columns (Column(i):
// Append of a slice, the columnar path, or AppendRow a row at a time, for
// arrays), and counts the blocks sent (Flush); the other methods are not
// used.
type recordingBatch struct {
	driver.Batch
	ncols   int
	rows    [][]any
	cols    map[int][]any
	flushes int // blocks sent before the last (Flush)
}

func (r *recordingBatch) Flush() error {
	r.flushes++
	return nil
}

func (r *recordingBatch) Append(v ...any) error {
	r.rows = append(r.rows, slices.Clone(v))
	return nil
}

func (r *recordingBatch) Columns() []column.Interface { return make([]column.Interface, r.ncols) }

func (r *recordingBatch) Column(i int) driver.BatchColumn { return recordingColumn{r, i} }

type recordingColumn struct {
	r *recordingBatch
	i int
}

func (c recordingColumn) Append(v any) error {
	s := reflect.ValueOf(v)
	if s.Kind() != reflect.Slice {
		return fmt.Errorf("column %d: Append(%T), want a slice", c.i, v)
	}
	if c.r.cols == nil {
		c.r.cols = map[int][]any{}
	}
	for j := range s.Len() {
		c.r.cols[c.i] = append(c.r.cols[c.i], s.Index(j).Interface())
	}
	return nil
}

// AppendRow records one row's value; a slice is copied, as the driver
// copies it (arrayCol's callers reuse one scratch slice across rows).
func (c recordingColumn) AppendRow(v any) error {
	if c.r.cols == nil {
		c.r.cols = map[int][]any{}
	}
	if s := reflect.ValueOf(v); s.Kind() == reflect.Slice {
		cp := reflect.MakeSlice(s.Type(), s.Len(), s.Len())
		reflect.Copy(cp, s)
		v = cp.Interface()
	}
	c.r.cols[c.i] = append(c.r.cols[c.i], v)
	return nil
}

// recorded returns the rows appended, column-wise appends turned into rows.
func (r *recordingBatch) recorded() ([][]any, error) {
	if len(r.cols) == 0 {
		return r.rows, nil
	}
	if len(r.rows) > 0 || len(r.cols) != r.ncols {
		return nil, fmt.Errorf("%d rows and %d of %d columns appended: mixed or incomplete", len(r.rows), len(r.cols), r.ncols)
	}
	n := len(r.cols[0])
	rows := make([][]any, n)
	for j := range rows {
		rows[j] = make([]any, r.ncols)
		for i := range r.ncols {
			if len(r.cols[i]) != n {
				return nil, fmt.Errorf("column %d has %d values, column 0 %d", i, len(r.cols[i]), n)
			}
			rows[j][i] = r.cols[i][j]
		}
	}
	return rows, nil
}

// insertStmts returns the sink's inserts of b into db, as SQL: the
// statement the sink prepares (insertSQL: the column list), the
// deduplication token the sink sends with it (when f has it), and the
// values its append function passes, as literals.
func insertStmts(t *testing.T, tables []table, b *pipeline.Batch, db string, f features) []chdbStmt {
	t.Helper()
	cfg := DefaultClickHouseConfig()
	var out []chdbStmt
	for i := range tables {
		tb := &tables[i]
		if tb.rows(b) == 0 {
			continue
		}
		rec := &recordingBatch{ncols: len(tb.columns)}
		if err := tb.fill(rec, b, &cfg, 0); err != nil {
			t.Fatalf("%s append: %v", tb.name, err)
		}
		recorded, err := rec.recorded()
		if err != nil {
			t.Fatalf("%s append: %v", tb.name, err)
		}
		var sql strings.Builder
		sql.WriteString(tb.insertSQL(db))
		if f.DedupToken {
			sql.WriteString(" SETTINGS insert_deduplication_token = " + sqlLiteral(tb.token(b)))
		}
		sql.WriteString(" VALUES")
		for j, row := range recorded {
			if len(row) != len(tb.columns) {
				t.Fatalf("%s: append passes %d values for %d columns", tb.name, len(row), len(tb.columns))
			}
			if j > 0 {
				sql.WriteString(",")
			}
			sql.WriteString("\n(")
			for k, v := range row {
				if k > 0 {
					sql.WriteString(", ")
				}
				sql.WriteString(sqlLiteral(v))
			}
			sql.WriteString(")")
		}
		out = append(out, chdbStmt{SQL: sql.String(), what: "insert into " + tb.name})
	}
	return out
}

// sqlLiteral writes a value the sink appends as a ClickHouse literal. A
// time is a DateTime64(6) in UTC, which the server casts to the column's
// DateTime or DateTime64.
func sqlLiteral(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return quoteString(x)
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = quoteString(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case time.Time:
		return "toDateTime64(" + quoteString(x.UTC().Format("2006-01-02 15:04:05.000000")) + ", 6, 'UTC')"
	case float64:
		switch {
		case math.IsNaN(x):
			return "nan"
		case math.IsInf(x, 1):
			return "inf"
		case math.IsInf(x, -1):
			return "-inf"
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case *string:
		if x == nil {
			return "NULL"
		}
		return quoteString(*x)
	case *uint8:
		if x == nil {
			return "NULL"
		}
		return strconv.FormatUint(uint64(*x), 10)
	case *int32:
		if x == nil {
			return "NULL"
		}
		return strconv.FormatInt(int64(*x), 10)
	case *int64:
		if x == nil {
			return "NULL"
		}
		return strconv.FormatInt(*x, 10)
	case *float64:
		if x == nil {
			return "NULL"
		}
		return sqlLiteral(*x)
	case []uint16:
		return uintArray(x)
	case []uint32:
		return uintArray(x)
	case []uint64:
		return uintArray(x)
	case bool:
		return strconv.FormatBool(x)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x)
	}
	panic(fmt.Sprintf("sqlLiteral: no literal for %T; extend it with the type the sink now appends", v))
}

// quoteString quotes s for ClickHouse, with every byte that is not
// printable ASCII as \xHH, so that invalid UTF-8 reaches the server as the
// same bytes (the JSON that carries the statement to chDB would not keep
// them).
func quoteString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\'' || ch == '\\':
			b.WriteByte('\\')
			b.WriteByte(ch)
		case ch < 0x20 || ch >= 0x7f:
			fmt.Fprintf(&b, "\\x%02X", ch)
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// chdbTable renders a JSONCompact result as queryTable renders the 18.16
// server's: space-separated cells, NULL, @<unix seconds> for times,
// shortest decimal for floats, [a,b] for arrays, "" for an empty string.
func chdbTable(out string) ([]string, error) {
	var res struct {
		Meta []struct{ Name, Type string }
		Data [][]json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return nil, fmt.Errorf("JSONCompact result: %w", err)
	}
	var rows []string
	for _, r := range res.Data {
		if len(r) != len(res.Meta) {
			return nil, fmt.Errorf("row of %d cells for %d columns", len(r), len(res.Meta))
		}
		cells := make([]string, len(r))
		for i, c := range r {
			s, err := chdbCell(c, res.Meta[i].Type)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", res.Meta[i].Name, err)
			}
			cells[i] = s
		}
		rows = append(rows, strings.Join(cells, " "))
	}
	return rows, nil
}

// unwrapType drops the wrappers that do not change how a value reads.
func unwrapType(typ string) string {
	for _, w := range []string{"Nullable(", "LowCardinality("} {
		for strings.HasPrefix(typ, w) {
			typ = strings.TrimSuffix(strings.TrimPrefix(typ, w), ")")
		}
	}
	return typ
}

func chdbCell(raw json.RawMessage, typ string) (string, error) {
	typ = unwrapType(typ)
	if string(raw) == "null" {
		return "NULL", nil
	}
	if inner, ok := strings.CutPrefix(typ, "Array("); ok {
		inner = strings.TrimSuffix(inner, ")")
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return "", err
		}
		parts := make([]string, len(elems))
		for i, e := range elems {
			s, err := chdbCell(e, inner)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ",") + "]", nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		text = string(raw) // a number
	}
	switch {
	case strings.HasPrefix(typ, "DateTime"):
		layout := "2006-01-02 15:04:05"
		if strings.HasPrefix(typ, "DateTime64") {
			layout = "2006-01-02 15:04:05.999999999"
		}
		tm, err := time.ParseInLocation(layout, text, time.UTC)
		if err != nil {
			return "", err
		}
		return at(tm), nil
	case typ == "Float64" || typ == "Float32":
		bits := 64
		if typ == "Float32" {
			bits = 32
		}
		v, err := strconv.ParseFloat(text, bits)
		if err != nil {
			return "", err
		}
		return strconv.FormatFloat(v, 'g', -1, bits), nil
	case text == "":
		return `""`, nil
	}
	return text, nil
}

// readmeSQL returns the ```sql blocks of README.md and then of docs/*.md
// in name order.
func readmeSQL(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(docs)
	var out []string
	for _, path := range append([]string{filepath.Join("..", "README.md")}, docs...) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
			out = append(out, strings.TrimSpace(m[1]))
		}
	}
	return out
}

// TestChDB applies the migrations chDB's version gets, runs the sink's
// inserts of the seeded fleet (twice: the second must be dropped by its
// deduplication tokens) and of testBatch, and runs every cookbook query,
// documentation query (README.md, docs/*.md), view and Grafana panel query
// with asserted results.
func TestChDB(t *testing.T) {
	py := chdbPython(t)
	const db = "ncclwatch" // the name the cookbook and the README use; the session is private
	const probe = "ncclwatch_probe"

	// chDB's version decides the DDL, as a server's does in NewClickHouse.
	res := runChDB(t, py, []chdbStmt{{SQL: "SELECT version(), timezone() FORMAT TSV", Format: "TSV"}})
	if !res[0].OK {
		t.Fatalf("chDB version(): %s", res[0].Error)
	}
	version, tz, _ := strings.Cut(strings.TrimSpace(res[0].Out), "\t")
	major, minor, err := parseVersion(version)
	if err != nil || major < 23 || tz != "UTC" {
		t.Fatalf("chDB version %q (%v), timezone %q; want 23.x or later in UTC", version, err, tz)
	}
	f := featuresOf(major, minor)
	if !f.DateTime64 || !f.LowCardinality || !f.Codecs || !f.DedupToken {
		t.Fatalf("features of %s = %+v; want every feature", version, f)
	}
	t.Logf("chDB engine %s", version)

	var stmts []chdbStmt
	add := func(what string, sql ...string) {
		for _, s := range sql {
			stmts = append(stmts, chdbStmt{SQL: s, what: what})
		}
	}
	schema := func(db string) {
		for _, s := range setupStmts {
			add("setup", render(s, db, ""))
		}
		for _, m := range migrations(f) {
			for _, s := range m.Stmts {
				add(fmt.Sprintf("migration %d (%s)", m.Version, m.Name), render(s, db, ""))
			}
		}
		// The record of each migration, as recordMigration inserts it.
		add("record migrations", recordMigrationSQL(db)+" VALUES (1, now())")
		// Merges off, so that counts without FINAL show what the
		// deduplication tokens dropped and not what a merge folded.
		add("stop merges", "SYSTEM STOP MERGES")
	}
	schema(db)
	schema(probe)
	// The cluster DDL (Replicated and Distributed tables, ON CLUSTER)
	// cannot run in chDB (no ZooKeeper, no remote_servers); its parser
	// checks the text as 26.9 reads it.
	for _, s := range append(slices.Clone(setupStmts), migrationStmts(f)...) {
		for _, e := range expand(s, "ncclwatch_cluster", "ncclwatch") {
			add("parse cluster DDL", "EXPLAIN AST "+e)
		}
	}

	fl := newFleet()
	fleetBatch := fl.batch()
	all := allTables()
	seed := insertStmts(t, all, fleetBatch, db, f)
	stmts = append(stmts, seed...)
	stmts = append(stmts, seed...) // a replay: every insert is dropped by its token

	// testBatch: every column of the core tables set, a line over the cap
	// that is not UTF-8, a dead letter over its cap.
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	probeBatch := testBatch("chdb-probe", t0)
	stmts = append(stmts, insertStmts(t, all, probeBatch, probe, f)...)
	// The same events under another token (a different batch with the
	// same coordinates) are inserted: count() without FINAL shows them
	// twice, FINAL once.
	other := insertStmts(t, tables[:1], probeBatch, probe, f)[0]
	other.SQL = strings.Replace(other.SQL, "insert_deduplication_token = 'ncclwatch:", "insert_deduplication_token = 'other:", 1)
	other.what = "nccl_events under another token"
	stmts = append(stmts, other)
	nSetup := len(stmts)

	// Checks, each a query with the rows it must return.
	type check struct {
		what string
		sql  string
		want []string // nil: any rows, but at least one
		sort bool     // the query has no ORDER BY
	}
	var checks []check
	counts := map[string]int{}
	for i := range all {
		counts[all[i].name] = all[i].rows(fleetBatch)
	}
	for _, tb := range all {
		checks = append(checks, check{what: "rows of " + tb.name + " after a replay",
			sql: "SELECT count() FROM " + db + "." + tb.name, want: []string{strconv.Itoa(counts[tb.name])}})
	}
	checks = append(checks,
		check{what: "nccl_events inserted twice under two tokens, without FINAL",
			sql: "SELECT count() FROM " + probe + ".nccl_events", want: []string{strconv.Itoa(2 * len(probeBatch.Events))}},
		check{what: "nccl_events inserted twice under two tokens, FINAL",
			sql: "SELECT count() FROM " + probe + ".nccl_events FINAL", want: []string{strconv.Itoa(len(probeBatch.Events))}},
		check{what: "nccl_events round trip",
			sql: "SELECT `partition`, `offset`, line, time, job, length(text), isValidUTF8(text), dev, rank, kind, warn FROM " + probe +
				".nccl_events FINAL ORDER BY `partition`, `offset`, line",
			want: []string{
				"0 10 0 " + at(t0.Add(10*time.Second)) + " chdb-probe 63 1 0 10 version 0",
				"0 10 1 " + at(t0.Add(10*time.Second)) + " chdb-probe 55 1 0 10 network 0",
				// Cut at max_line_bytes; the cut drops the invalid tail.
				"0 11 0 " + at(t0.Add(11*time.Second)) + " chdb-probe 4096 1 0 11 topology 0",
				"1 5 0 " + at(t0.Add(5*time.Second)) + " chdb-probe 56 1 1 -1 warn 1",
			}},
		check{what: "dead letter round trip",
			sql:  "SELECT `offset`, reason, length(raw) FROM " + probe + ".dead_letters",
			want: []string{"12 oversized record 16384"}},
		check{what: "comm_summaries round trip",
			sql: "SELECT comm_id, network, fabric, hcas, gdr, nranks, env_keys, env_values, verdict, first_seen FROM " + probe +
				".comm_summaries FINAL ORDER BY comm_id",
			want: []string{
				"0x1f2e3d4c5b6a7988 Socket RoCE [mlx5_0:1/IB,mlx5_1:1/RoCE] 0 16 [NCCL_DEBUG,NCCL_IB_DISABLE] [INFO,1] socket_fallback " + at(t0),
				"unattributed NULL NULL [] NULL NULL [] [] unknown @0",
			}},
		check{what: "job_verdicts of the probe",
			sql:  "SELECT job, network, network_class, gdr, nnodes, nranks, nccl_version, verdict, reasons, first_seen, last_seen FROM " + probe + ".job_verdicts",
			want: []string{"chdb-probe Socket tcp 0 2 16 2.18.3 socket_fallback [Socket across 2 nodes] " + at(t0) + " " + at(t0.Add(time.Minute))}},
		check{what: "schema_migrations", sql: "SELECT version FROM " + db + ".schema_migrations", want: []string{"1"}},
	)

	// Every view runs under the new analyzer and shows the fleet.
	for _, m := range migrations(f) {
		if strings.HasPrefix(m.Stmts[0], "CREATE VIEW") {
			checks = append(checks, check{what: "view " + m.Name, sql: "SELECT * FROM " + db + "." + m.Name})
		}
	}
	// The cookbook, with cookbook()'s answers (the ones 18.16 gives).
	want := cookbook(fl)
	for _, q := range cookbookQueries(t) {
		w, ok := want[q.name]
		if !ok {
			t.Fatalf("%s has no expected result in cookbook()", q.name)
		}
		checks = append(checks, check{what: "cookbook " + q.name, sql: strings.TrimRight(strings.TrimSpace(q.sql), ";"), want: w})
	}
	// The documentation's SQL (docs/read-api.md): the socket fallbacks of the last day.
	readme := readmeSQL(t)
	if len(readme) == 0 {
		t.Fatal("README.md and docs/*.md have no sql block")
	}
	for i, sql := range readme {
		checks = append(checks, check{what: fmt.Sprintf("documentation sql block %d", i+1), sql: strings.TrimRight(sql, ";"),
			want: readmeWant(i), sort: true})
	}
	// Grafana: every panel with the dashboard's range, answers in grafanaWant.
	gw := grafanaWant(fl, fleetBatch)
	for name, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				w, ok := gw[p.Title]
				if !ok {
					t.Errorf("%s: panel %q has no expected result in grafanaWant()", name, p.Title)
				}
				sql := expandGrafana(tg.RawSQL, db, fl.now.Add(-7*24*time.Hour), fl.now.Add(time.Hour))
				checks = append(checks, check{what: "grafana " + p.Title, sql: sql, want: w, sort: *tg.Format == 0})
			}
		}
	}
	for _, c := range checks {
		stmts = append(stmts, chdbStmt{SQL: c.sql, Format: "JSONCompact", what: c.what})
	}

	res = runChDB(t, py, stmts)
	for i, r := range res[:nSetup] {
		if !r.OK {
			t.Errorf("%s: %s\n%s", stmts[i].what, r.Error, abbreviate(stmts[i].SQL))
		}
	}
	for i, c := range checks {
		r := res[nSetup+i]
		if !r.OK {
			t.Errorf("%s: %s\n%s", c.what, r.Error, c.sql)
			continue
		}
		got, err := chdbTable(r.Out)
		if err != nil {
			t.Errorf("%s: %v", c.what, err)
			continue
		}
		if c.sort {
			slices.Sort(got)
		}
		if c.want == nil {
			if len(got) == 0 {
				t.Errorf("%s: no rows", c.what)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s =\n\t%s\nwant\n\t%s", c.what, strings.Join(got, "\n\t"), strings.Join(c.want, "\n\t"))
		}
	}
}

// readmeWant is what the documentation's sql blocks return from the seeded fleet,
// sorted: the socket fallbacks last seen within a day.
func readmeWant(i int) []string {
	return [][]string{{
		"canary-h100-1 ncclwatch-canary 2 []",
		"canary-h200-5 ncclwatch-canary 2 []",
		"qwen-socket ml 2 []",
	}}[i]
}

// abbreviate keeps the start of a long statement (an insert) for a failure.
func abbreviate(sql string) string {
	if len(sql) <= 600 {
		return sql
	}
	cut := 600
	for cut > 0 && !utf8.RuneStart(sql[cut]) {
		cut--
	}
	return sql[:cut] + " …"
}

// grafanaWant is what every Grafana panel shows for the seeded fleet over
// the dashboard's default range (7 days), by panel title, sorted where the
// panel's ORDER BY leaves ties (the time series order by t only).
func grafanaWant(f fleet, b *pipeline.Batch) map[string][]string {
	cb := cookbook(f)
	h := func(d time.Duration) string { return at(f.base.Add(d)) }
	// The hourly step-time series depends on where the hour boundaries
	// fall between the steps (the jobs are placed relative to now), so it
	// is worked out from the steps: the median of each job and network
	// per hour, medianExact taking the upper middle of an even count.
	type key struct {
		hour  time.Time
		label string
	}
	byHour := map[key][]float64{}
	for _, st := range b.Steps {
		k := key{st.Time.Truncate(time.Hour), st.Job + " " + st.Network}
		byHour[k] = append(byHour[k], st.StepTime)
	}
	var hourly []string
	for k, v := range byHour {
		slices.Sort(v)
		hourly = append(hourly, at(k.hour)+" "+k.label+" "+f64(v[len(v)/2]))
	}
	slices.Sort(hourly)
	return map[string][]string{
		// 7 of the 11 jobs seen in 7 days are ok, 4 fell back.
		"Jobs on the expected fabric": {"63.6 4 0 0"},
		// ok: qwen-rdma (16), llama-1node (8), four h200 canaries and the
		// a100 one (16 each); socket_fallback: qwen-socket, old-fallback
		// (three days old, inside the week) and two canaries.
		"Jobs by verdict":                 {"ok 7 104", "socket_fallback 4 64"},
		"Pools with no RDMA proof in 6 h": cb["pools_without_rdma_proof.sql"],
		"Jobs in socket fallback (last 24 h) and the GPU-hours they burnt": cb["fallback_jobs_gpu_hours.sql"],
		"Median step time by network class, same model and scale":          cb["median_step_time_by_network_class.sql"],
		"Median step time per job and network (hourly)":                    hourly,
		// The largest size's busbw per canary run, averaged per hour: the
		// last hour holds a 357 GB/s run and the 40 GB/s fallback.
		"Canary bus bandwidth per pool": {
			h(-48*time.Hour) + " a100-roce 180",
			h(-3*time.Hour) + " h200-ib 355",
			h(-2*time.Hour) + " h200-ib 356",
			h(-time.Hour) + " h200-ib 354",
			h(0) + " h100-eth 10",
			h(0) + " h200-ib 198.5",
		},
		"Canary busbw against the pool's baseline": cb["canary_busbw_vs_baseline.sql"],
	}
}

// migrationStmts lists the statements of every migration for f, in order.
func migrationStmts(f features) []string {
	var out []string
	for _, m := range migrations(f) {
		out = append(out, m.Stmts...)
	}
	return out
}

// uintArray is the SQL array literal of xs.
func uintArray[T uint16 | uint32 | uint64](xs []T) string {
	parts := make([]string, len(xs))
	for i, n := range xs {
		parts[i] = strconv.FormatUint(uint64(n), 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}
