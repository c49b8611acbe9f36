package sinks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

// testAddr returns the ClickHouse server for integration tests, or skips
// the test when there is none (fails under NCCLWATCH_REQUIRE_SERVERS=1, so
// that CI never skips silently).
func testAddr(t *testing.T) string {
	t.Helper()
	return testenv.Server(t, "NCCLWATCH_TEST_CLICKHOUSE", "")
}

// newTestClickHouse connects to the test server with a database of its own,
// dropped when the test ends. It does not migrate.
func newTestClickHouse(t *testing.T) *ClickHouse {
	t.Helper()
	cfg := DefaultClickHouseConfig()
	cfg.Addr = []string{testAddr(t)}
	cfg.Database = testDatabase(t)
	c, err := NewClickHouse(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewClickHouse(%s) = %v", cfg.Addr[0], err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+cfg.Database); err != nil {
			t.Errorf("drop %s: %v", cfg.Database, err)
		}
		c.Close()
	})
	return c
}

// testDatabase is a database name of the test's own.
func testDatabase(t *testing.T) string {
	t.Helper()
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	return "ncclwatch_test_" + hex.EncodeToString(r[:])
}

func migrated(t *testing.T) *ClickHouse {
	t.Helper()
	c := newTestClickHouse(t)
	if _, err := c.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate() = %v", err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

// testBatch is one batch as the pipeline makes it: four events (one with an
// over-long line that is not UTF-8), a communicator with every field set and
// one with none, a job summary and a dead letter.
func testBatch(job string, t0 time.Time) *pipeline.Batch {
	long := "NCCL INFO " + strings.Repeat("x", 5000) + "\xff\xfe"
	ev := func(p int32, off int64, line int32, kind, text string) pipeline.EventRow {
		return pipeline.EventRow{
			Source: pipeline.Source{Topic: "nccl-logs", Partition: p, Offset: off, Line: line},
			Time:   t0.Add(time.Duration(off) * time.Second), Job: job, Namespace: "ml", Cluster: "c1",
			Pod: job + "-worker-0", Container: "trainer", Node: "gpu-node-1", Host: "gpu-node-1", PID: "4242",
			Dev: 0, Rank: int(off), Kind: kind, Line: text,
		}
	}
	events := []pipeline.EventRow{
		ev(0, 10, 0, "version", "gpu-node-1:4242:4242 [0] NCCL INFO NCCL version 2.18.3+cuda12.1"),
		ev(0, 10, 1, "network", "gpu-node-1:4242:4300 [0] NCCL INFO Using network Socket"),
		ev(0, 11, 0, "topology", long),
		ev(1, 5, 0, "warn", "gpu-node-2:77:77 [1] NCCL WARN NET/IB : No device found."),
	}
	events[3].Warn, events[3].Dev, events[3].Rank = true, 1, -1
	return &pipeline.Batch{
		Events: events,
		Comms: []pipeline.CommSummary{
			{
				Job: job, Namespace: "ml", CommID: "0x1f2e3d4c5b6a7988",
				NCCLVersions: []string{"2.18.3"}, Network: ptr("Socket"), NetworkClass: pipeline.ClassTCP,
				Fabric: ptr("RoCE"), HCAs: []pipeline.HCA{{Device: "mlx5_0", Port: 1, LinkLayer: "IB"}, {Device: "mlx5_1", Port: 1, LinkLayer: "RoCE"}},
				OOBIface: ptr("eth0"), GDR: ptr(false), MultiNode: ptr(true), NRanks: ptr(16), NNodes: ptr(2), LocalRanks: ptr(8),
				Hosts: []string{"gpu-node-1", "gpu-node-2"}, Intra: []string{"P2P/IPC"}, NVLS: true,
				Env: map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "INFO"}, Plugin: ptr("libnccl-net.so"),
				RDMAFailure: []string{"NET/IB : No device found."}, Warns: 1, Warnings: []string{"NET/IB : No device found."},
				InitComplete: true, Verdict: pipeline.VerdictSocketFallback, Reasons: []string{"Socket across 2 nodes"},
				FirstSeen: t0, LastSeen: t0.Add(time.Minute), Version: 10,
			},
			{Job: job, Namespace: "ml", CommID: "unattributed", NetworkClass: pipeline.ClassUnknown, Verdict: pipeline.VerdictUnknown, Version: 10},
		},
		Jobs: []pipeline.JobSummary{{
			Job: job, Namespace: "ml", Cluster: "c1", NCCLVersion: ptr("2.18.3"), Network: ptr("Socket"),
			NetworkClass: ptr(pipeline.ClassTCP), GDR: ptr(false), MultiNode: ptr(true), NNodes: ptr(2), NRanks: ptr(16),
			Intra: []string{"P2P/IPC"}, Fallback: ptr(true), Warns: 1, Verdict: pipeline.VerdictSocketFallback,
			Reasons: []string{"Socket across 2 nodes"}, NCCLLines: 4, FirstSeen: t0, LastSeen: t0.Add(time.Minute), Version: 10,
		}},
		DeadLetters: []pipeline.DeadLetter{{
			Source: pipeline.Source{Topic: "nccl-logs", Partition: 0, Offset: 12}, Time: t0,
			Reason: "oversized record", Raw: []byte(strings.Repeat("r", 20000)),
		}},
		Offsets: []pipeline.Offset{{Topic: "nccl-logs", Partition: 0, Next: 13}, {Topic: "nccl-logs", Partition: 1, Next: 6}},
	}
}

// queryInt runs a query that returns one integer.
func queryInt(t *testing.T, c *ClickHouse, sql string, args ...any) uint64 {
	t.Helper()
	rows, err := c.Query(t.Context(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("%s: no row (%v)", sql, rows.Err())
	}
	var n uint64
	if err := rows.Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestClickHouseMigrate(t *testing.T) {
	c := newTestClickHouse(t)
	applied, err := c.Migrate(t.Context())
	if err != nil {
		t.Fatalf("Migrate() = %v", err)
	}
	var versions []int
	for _, m := range migrations(c.features) {
		versions = append(versions, m.Version)
	}
	if !slices.Equal(applied, versions) {
		t.Errorf("Migrate() applied %v; want %v", applied, versions)
	}
	again, err := c.Migrate(t.Context())
	if err != nil || len(again) != 0 {
		t.Errorf("second Migrate() = %v, %v; want nothing applied", again, err)
	}

	rows, err := c.Query(t.Context(), "SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name", c.cfg.Database)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			t.Fatal(err)
		}
		got[name] = engine
	}
	want := map[string]string{
		"schema_migrations": "ReplacingMergeTree", "nccl_events": "ReplacingMergeTree",
		"comm_summaries": "ReplacingMergeTree", "job_summaries": "ReplacingMergeTree",
		"dead_letters": "ReplacingMergeTree", "job_verdicts": "View", "alerts": "ReplacingMergeTree",
	}
	for name, engine := range want {
		if got[name] != engine {
			t.Errorf("system.tables %s.%s engine = %q; want %q", c.cfg.Database, name, got[name], engine)
		}
	}
	if n := queryInt(t, c, "SELECT uniqExact(version) FROM "+c.cfg.Database+".schema_migrations"); n != uint64(len(versions)) {
		t.Errorf("schema_migrations holds %d versions; want %d", n, len(versions))
	}
	t.Logf("server %s, features %+v", c.Version(), c.features)
}

func TestClickHouseConsume(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	var mu sync.Mutex
	inserts := map[string]int{}
	c.onInsert = func(table string, rows int, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("OnInsert(%s) err = %v", table, err)
		}
		inserts[table] += rows
	}

	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := testBatch("job-a", t0)
	if err := c.Consume(ctx, b); err != nil {
		t.Fatalf("Consume() = %v", err)
	}
	if s := c.Stats(); s.Batches != 1 || s.Rows != uint64(b.Len()) || s.Failures != 0 {
		t.Errorf("Stats() = %+v; want 1 batch, %d rows", s, b.Len())
	}
	if want := map[string]int{"nccl_events": 4, "comm_summaries": 2, "job_summaries": 1, "dead_letters": 1}; !mapsEqual(inserts, want) {
		t.Errorf("OnInsert saw %v; want %v", inserts, want)
	}

	// Text caps, byte for byte.
	rows, err := c.Query(ctx, "SELECT text FROM "+db+".nccl_events WHERE `offset` = 11")
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for rows.Next() {
		if err := rows.Scan(&text); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if want := b.Events[2].Line[:c.cfg.MaxLineBytes]; text != want {
		t.Errorf("stored text is %d bytes %q…; want the first %d bytes", len(text), text[:min(len(text), 20)], c.cfg.MaxLineBytes)
	}
	if n := queryInt(t, c, "SELECT length(raw) FROM "+db+".dead_letters"); n != uint64(c.cfg.MaxDeadLetterBytes) {
		t.Errorf("dead letter raw is %d bytes; want %d", n, c.cfg.MaxDeadLetterBytes)
	}

	// Arrays and the env map.
	rows, err = c.Query(ctx, "SELECT hcas, env_keys, env_values, hosts, nvls FROM "+db+".comm_summaries WHERE comm_id = ?", b.Comms[0].CommID)
	if err != nil {
		t.Fatal(err)
	}
	var hcas, keys, values, hosts []string
	var nvls uint8
	for rows.Next() {
		if err := rows.Scan(&hcas, &keys, &values, &hosts, &nvls); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if !slices.Equal(hcas, []string{"mlx5_0:1/IB", "mlx5_1:1/RoCE"}) || !slices.Equal(keys, []string{"NCCL_DEBUG", "NCCL_IB_DISABLE"}) ||
		!slices.Equal(values, []string{"INFO", "1"}) || !slices.Equal(hosts, []string{"gpu-node-1", "gpu-node-2"}) || nvls != 1 {
		t.Errorf("comm row = hcas %q env %q=%q hosts %q nvls %d", hcas, keys, values, hosts, nvls)
	}

	verdict := func() (uint64, string) {
		t.Helper()
		n := queryInt(t, c, "SELECT count() FROM "+db+".job_verdicts WHERE job = ?", "job-a")
		rows, err := c.Query(ctx, "SELECT verdict FROM "+db+".job_verdicts WHERE job = ?", "job-a")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var v string
		for rows.Next() {
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
		}
		return n, v
	}
	if n, v := verdict(); n != 1 || v != "socket_fallback" {
		t.Errorf("job_verdicts = %d rows, verdict %q; want 1, socket_fallback", n, v)
	}

	// Replay the batch, then an older state of the job: a query still sees
	// one row per key and the newest version.
	if err := c.Consume(ctx, b); err != nil {
		t.Fatalf("replay Consume() = %v", err)
	}
	older := testBatch("job-a", t0)
	older.Events, older.Comms, older.DeadLetters = nil, nil, nil
	older.Jobs[0].Version, older.Jobs[0].Verdict = 5, pipeline.VerdictOK
	if err := c.Consume(ctx, older); err != nil {
		t.Fatalf("older Consume() = %v", err)
	}
	if n, v := verdict(); n != 1 || v != "socket_fallback" {
		t.Errorf("after replay and older version: job_verdicts = %d rows, verdict %q; want 1, socket_fallback", n, v)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".nccl_events FINAL"); n != 4 {
		t.Errorf("nccl_events FINAL = %d rows; want 4 (one per coordinate)", n)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".comm_summaries FINAL"); n != 2 {
		t.Errorf("comm_summaries FINAL = %d rows; want 2", n)
	}
	if n := queryInt(t, c, "SELECT count() FROM "+db+".dead_letters FINAL"); n != 1 {
		t.Errorf("dead_letters FINAL = %d rows; want 1", n)
	}

	newer := testBatch("job-a", t0)
	newer.Events, newer.Comms, newer.DeadLetters = nil, nil, nil
	newer.Jobs[0].Version, newer.Jobs[0].Verdict = 20, pipeline.VerdictOK
	if err := c.Consume(ctx, newer); err != nil {
		t.Fatalf("newer Consume() = %v", err)
	}
	if n, v := verdict(); n != 1 || v != "ok" {
		t.Errorf("after newer version: job_verdicts = %d rows, verdict %q; want 1, ok", n, v)
	}
	if s := c.Stats(); s.Batches != 4 || s.Failures != 0 {
		t.Errorf("Stats() = %+v; want 4 batches, no failures", s)
	}

	// An empty batch is accepted without touching the server.
	if err := c.Consume(ctx, &pipeline.Batch{}); err != nil {
		t.Errorf("Consume(empty) = %v", err)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

type jobRow struct {
	Network, Class, Fabric, Version *string
	GDR                             *uint8
	NNodes, NRanks                  *int32
}

func TestClickHouseNullable(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	set := testBatch("job-set", t0)
	set.Events, set.DeadLetters = nil, nil
	set.Jobs[0].Network, set.Jobs[0].Fabric, set.Jobs[0].GDR = ptr("IB"), ptr("IB"), ptr(true)
	null := &pipeline.Batch{Jobs: []pipeline.JobSummary{{Job: "job-null", Verdict: pipeline.VerdictNoEvidence, Version: 1}}}
	for _, b := range []*pipeline.Batch{set, null} {
		if err := c.Consume(ctx, b); err != nil {
			t.Fatalf("Consume() = %v", err)
		}
	}

	read := func(from, job string) jobRow {
		t.Helper()
		rows, err := c.Query(ctx, "SELECT network, network_class, fabric, nccl_version, gdr, nnodes, nranks FROM "+db+"."+from+" WHERE job = ?", job)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var r jobRow
		n := 0
		for rows.Next() {
			if err := rows.Scan(&r.Network, &r.Class, &r.Fabric, &r.Version, &r.GDR, &r.NNodes, &r.NRanks); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("%s has %d rows for %s; want 1", from, n, job)
		}
		return r
	}
	for _, from := range []string{"job_summaries FINAL", "job_verdicts"} {
		r := read(from, "job-null")
		if r.Network != nil || r.Class != nil || r.Fabric != nil || r.Version != nil || r.GDR != nil || r.NNodes != nil || r.NRanks != nil {
			t.Errorf("%s job-null = %+v; want every field NULL", from, r)
		}
		r = read(from, "job-set")
		if r.Network == nil || *r.Network != "IB" || r.Class == nil || *r.Class != "tcp" || r.GDR == nil || *r.GDR != 1 ||
			r.NNodes == nil || *r.NNodes != 2 || r.NRanks == nil || *r.NRanks != 16 || r.Version == nil || *r.Version != "2.18.3" {
			t.Errorf("%s job-set = %s", from, fmtJobRow(r))
		}
	}

	// A newer state with no evidence left must show NULL, not the older
	// value: argMax alone skips NULLs.
	cleared := &pipeline.Batch{Jobs: []pipeline.JobSummary{set.Jobs[0]}}
	cleared.Jobs[0].Version, cleared.Jobs[0].Network, cleared.Jobs[0].GDR = 11, nil, nil
	if err := c.Consume(ctx, cleared); err != nil {
		t.Fatal(err)
	}
	if r := read("job_verdicts", "job-set"); r.Network != nil || r.GDR != nil || r.Fabric == nil {
		t.Errorf("job_verdicts after a newer NULL network = %s; want network and gdr NULL, fabric IB", fmtJobRow(r))
	}

	// Communicator pointers both ways.
	rows, err := c.Query(ctx, "SELECT comm_id, network, gdr, multi_node, nranks, local_ranks, oob_iface, plugin FROM "+db+".comm_summaries FINAL ORDER BY comm_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var id string
		var network, oob, plugin *string
		var gdr, multi *uint8
		var nranks, local *int32
		if err := rows.Scan(&id, &network, &gdr, &multi, &nranks, &local, &oob, &plugin); err != nil {
			t.Fatal(err)
		}
		got[id] = strings.Join([]string{fmtPtr(network), fmtPtr(gdr), fmtPtr(multi), fmtPtr(nranks), fmtPtr(local), fmtPtr(oob), fmtPtr(plugin)}, " ")
	}
	want := map[string]string{
		"0x1f2e3d4c5b6a7988": "Socket 0 1 16 8 eth0 libnccl-net.so",
		"unattributed":       "NULL NULL NULL NULL NULL NULL NULL",
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("comm %s = %q; want %q", id, got[id], w)
		}
	}
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

func fmtJobRow(r jobRow) string {
	return "network=" + fmtPtr(r.Network) + " class=" + fmtPtr(r.Class) + " fabric=" + fmtPtr(r.Fabric) +
		" version=" + fmtPtr(r.Version) + " gdr=" + fmtPtr(r.GDR) + " nnodes=" + fmtPtr(r.NNodes) + " nranks=" + fmtPtr(r.NRanks)
}

func TestClickHouseLoadEvents(t *testing.T) {
	c := migrated(t)
	ctx := t.Context()
	t0 := time.Date(2025, 3, 31, 23, 59, 0, 250_000_000, time.UTC)
	ev := func(topic string, p int32, off int64, line int32, at time.Time) pipeline.EventRow {
		return pipeline.EventRow{
			Source: pipeline.Source{Topic: topic, Partition: p, Offset: off, Line: line}, Time: at,
			Job: "job-l", Namespace: "ml", Cluster: "c1", Pod: "p", Container: "trainer", Node: "n1", Host: "h1",
			PID: "1", Dev: 3, Rank: int(off), Kind: "network", Warn: line == 1, Line: "NCCL INFO line " + strconv.FormatInt(off, 10),
		}
	}
	b := &pipeline.Batch{Events: []pipeline.EventRow{
		ev("t", 1, 7, 0, t0),
		ev("t", 0, 3, 1, t0),
		ev("t", 0, 3, 0, t0),
		ev("t", 2, 1, 0, t0),                     // partition not asked for
		ev("other", 0, 4, 0, t0),                 // topic not asked for
		ev("t", 0, 1, 0, t0.Add(-48*time.Hour)),  // an old event time, stored now: rebuilt
		ev("t", 0, 9, 0, t0.Add(30*time.Second)), // next month: another table partition
	}}
	// Replays: the same batch again, and the same coordinate with an ingest
	// time in the next month, which lands in another table partition.
	replay := &pipeline.Batch{Events: []pipeline.EventRow{ev("t", 0, 3, 0, t0.Add(2*time.Minute))}}
	for _, batch := range []*pipeline.Batch{b, b, replay} {
		if err := c.Consume(ctx, batch); err != nil {
			t.Fatalf("Consume() = %v", err)
		}
	}

	var got []pipeline.EventRow
	since := time.Now().Add(-time.Hour)
	if err := c.LoadEvents(ctx, "t", []int32{0, 1}, since, func(e pipeline.EventRow) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatalf("LoadEvents() = %v", err)
	}
	var coords []pipeline.Source
	for _, e := range got {
		coords = append(coords, e.Source)
	}
	want := []pipeline.Source{
		{Topic: "t", Partition: 0, Offset: 1, Line: 0},
		{Topic: "t", Partition: 0, Offset: 3, Line: 0},
		{Topic: "t", Partition: 0, Offset: 3, Line: 1},
		{Topic: "t", Partition: 0, Offset: 9, Line: 0},
		{Topic: "t", Partition: 1, Offset: 7, Line: 0},
	}
	if !slices.Equal(coords, want) {
		t.Fatalf("LoadEvents coordinates = %v; want %v", coords, want)
	}
	precision := time.Second
	if c.features.DateTime64 {
		precision = time.Microsecond
	}
	w := b.Events[1] // t/0/3/1
	g := got[2]
	if !g.Time.Equal(w.Time.Truncate(precision)) || g.Job != w.Job || g.Namespace != w.Namespace || g.Cluster != w.Cluster ||
		g.Pod != w.Pod || g.Container != w.Container || g.Node != w.Node || g.Host != w.Host || g.PID != w.PID ||
		g.Dev != w.Dev || g.Rank != w.Rank || g.Kind != w.Kind || g.Warn != w.Warn || g.Line != w.Line {
		t.Errorf("LoadEvents row = %+v; want %+v (time at %v)", g, w, precision)
	}

	// fn's error stops the stream.
	stop := errors.New("stop")
	n := 0
	err := c.LoadEvents(ctx, "t", []int32{0, 1}, since, func(pipeline.EventRow) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("LoadEvents with a failing fn = %v after %d rows; want stop after 1", err, n)
	}
	if err := c.LoadEvents(ctx, "t", nil, since, func(pipeline.EventRow) error { t.Error("row for no partitions"); return nil }); err != nil {
		t.Errorf("LoadEvents(no partitions) = %v", err)
	}
	// Nothing was stored after a time in the future.
	if err := c.LoadEvents(ctx, "t", []int32{0, 1}, time.Now().Add(time.Hour), func(pipeline.EventRow) error {
		t.Error("row stored before since")
		return nil
	}); err != nil {
		t.Errorf("LoadEvents(future since) = %v", err)
	}
}

func TestClickHousePermanent(t *testing.T) {
	c := migrated(t)
	ctx, db := t.Context(), c.cfg.Database
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

	if err := c.conn.Exec(ctx, "DROP TABLE "+db+".nccl_events"); err != nil {
		t.Fatal(err)
	}
	err := c.Consume(ctx, testBatch("job-p", t0))
	if !pipeline.IsPermanent(err) {
		t.Errorf("Consume() into a dropped table = %v; want a permanent error", err)
	}
	t.Logf("dropped table: %v", err)

	if err := c.conn.Exec(ctx, "ALTER TABLE "+db+".job_summaries DROP COLUMN fallback"); err != nil {
		t.Fatal(err)
	}
	jobs := testBatch("job-p", t0)
	jobs.Events, jobs.Comms, jobs.DeadLetters = nil, nil, nil
	err = c.Consume(ctx, jobs)
	if !pipeline.IsPermanent(err) {
		t.Errorf("Consume() naming a dropped column = %v; want a permanent error", err)
	}
	t.Logf("dropped column: %v", err)
	if s := c.Stats(); s.Failures != 2 {
		t.Errorf("Stats() = %+v; want 2 failures", s)
	}
}

// unreachable is a sink whose server refuses connections: port 1 on
// loopback has no listener. It needs no server.
func unreachable(t *testing.T, version string) *ClickHouse {
	t.Helper()
	cfg := DefaultClickHouseConfig()
	cfg.Addr = []string{"127.0.0.1:1"}
	cfg.DialTimeout, cfg.QueryTimeout = time.Second, 2*time.Second
	conn, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClickHouse(cfg, conn, version)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClickHouseUnreachable: the sink tries once and says the error is
// transient; retrying is the run loop's (pipeline.Runner).
func TestClickHouseUnreachable(t *testing.T) {
	for _, version := range []string{"18.16.1", "24.8.4.13"} {
		t.Run(version, func(t *testing.T) {
			c := unreachable(t, version)
			attempts := 0
			c.onInsert = func(table string, rows int, d time.Duration, err error) {
				attempts++
				if table != "nccl_events" || rows != 4 || err == nil {
					t.Errorf("OnInsert(%s, %d, %v, %v); want nccl_events, 4 rows, an error", table, rows, d, err)
				}
			}
			err := c.Consume(t.Context(), testBatch("job-r", time.Now()))
			if err == nil || pipeline.IsPermanent(err) {
				t.Fatalf("Consume() = %v; want a transient error", err)
			}
			if s := c.Stats(); attempts != 1 || s.Failures != 1 || s.Batches != 0 || s.Rows != 0 {
				t.Errorf("after %d attempts Stats() = %+v; want 1 attempt, 1 failure", attempts, s)
			}
		})
	}
}

func TestClickHouseCancelled(t *testing.T) {
	c := unreachable(t, "18.16.1")
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Consume(done, testBatch("job-c", time.Now())); !errors.Is(err, context.Canceled) || pipeline.IsPermanent(err) {
		t.Errorf("Consume(cancelled ctx) = %v; want context.Canceled, not permanent", err)
	}
}

// flakyProxy forwards loopback connections to target, except the first
// drop ones, which it closes at once: a server that went away mid-batch.
func flakyProxy(t *testing.T, target string, drop int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			if n < drop {
				down.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				down.Close()
				continue
			}
			track(down)
			track(up)
			wg.Add(2)
			go pipe(up, down)
			go pipe(down, up)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestClickHouseResendRecovers sends a batch through a proxy that drops
// the first two connections, as the run loop does: again after each
// transient error. The tables hold each row once.
func TestClickHouseResendRecovers(t *testing.T) {
	real := migrated(t)
	cfg := real.cfg
	cfg.Addr = []string{flakyProxy(t, real.cfg.Addr[0], 2)}
	conn, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClickHouse(cfg, conn, real.Version())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	b := testBatch("job-flaky", time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	var errs []error
	for range 5 {
		err := c.Consume(t.Context(), b)
		if err == nil {
			break
		}
		if pipeline.IsPermanent(err) {
			t.Fatalf("Consume() through a proxy that drops connections = %v; want transient", err)
		}
		errs = append(errs, err)
	}
	if s := c.Stats(); s.Batches != 1 || s.Failures != uint64(len(errs)) || len(errs) == 0 || s.Rows != uint64(b.Len()) {
		t.Errorf("Stats() = %+v after errors %v; want 1 batch after at least one failure, %d rows", s, errs, b.Len())
	}
	if n := queryInt(t, real, "SELECT count() FROM "+cfg.Database+".nccl_events FINAL"); n != uint64(len(b.Events)) {
		t.Errorf("nccl_events FINAL = %d rows; want %d", n, len(b.Events))
	}
	if n := queryInt(t, real, "SELECT count() FROM "+cfg.Database+".job_verdicts WHERE job = ?", "job-flaky"); n != 1 {
		t.Errorf("job_verdicts = %d rows for job-flaky; want 1", n)
	}
}
