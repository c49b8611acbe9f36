package main

// Delivery under faults on the real ClickHouse server: a crash between the
// inserts of one batch, for every table, compared with a fault-free run.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
	"github.com/ncclwatch/ncclwatch/rules"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// storedTables are the tables a batch writes, in the order the ClickHouse
// sink inserts them, with the columns a comparison leaves out: ingest
// times, which say when a row was written, not what it holds.
var storedTables = []string{"nccl_events", "dead_letters", "comm_summaries", "job_summaries", "alerts",
	"training_steps", "nccl_test_results"}

// volatile are the columns a comparison with a fault-free run leaves out:
// ingest times say when a row was written, not what it holds; an alert
// re-raised after a restart carries the times of the evaluation that
// raised it again (the rules engine's state is not restored from storage)
// and annotations that describe the summary as it was then, so of alerts
// the subject, rule, state and labels count.
var volatile = map[string]bool{"inserted_at": true, "updated_at": true, "alerts.annotation_values": true,
	"alerts.active_at": true, "alerts.fired_at": true, "alerts.resolved_at": true, "alerts.eval_time": true, "alerts.version": true}

// tableRows returns every row of db.table FINAL as text, sorted, without
// the volatile columns.
func tableRows(t *testing.T, ch *sinks.ClickHouse, db, table string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cols, err := ch.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ? ORDER BY name", db, table)
	if err != nil {
		t.Fatalf("columns of %s: %v", table, err)
	}
	var names []string
	for cols.Next() {
		var n string
		if err := cols.Scan(&n); err != nil {
			t.Fatal(err)
		}
		if !volatile[n] && !volatile[table+"."+n] {
			names = append(names, "`"+n+"`")
		}
	}
	cols.Close()
	rows, err := ch.Query(ctx, "SELECT "+strings.Join(names, ", ")+" FROM "+db+"."+table+" FINAL")
	if err != nil {
		t.Fatalf("rows of %s: %v", table, err)
	}
	defer rows.Close()
	var out []string
	types := rows.ColumnTypes()
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		var b strings.Builder
		for i, d := range dest {
			v := reflect.ValueOf(d).Elem()
			for v.Kind() == reflect.Pointer && !v.IsNil() {
				v = v.Elem()
			}
			if tm, ok := v.Interface().(time.Time); ok {
				v = reflect.ValueOf(tm.UTC())
			}
			fmt.Fprintf(&b, "%s=%v ", names[i], v.Interface())
		}
		out = append(out, b.String())
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// deliveryInput is a stream that writes a row into every table: NCCL init
// of a healthy and a socket-fallback job (events, summaries, an alert of the
// built-in rules), a Megatron run (training steps), an nccl-tests table
// (test results), an EFA job with a named communicator and poison records
// (dead letters).
func deliveryInput(t *testing.T, topic string, now time.Time) []pipeline.Message {
	t.Helper()
	type file struct {
		path, job string
		from      int // the round of its first line
	}
	// The nccl-tests run starts in the second batch: an open run holds the
	// commit back to its first line (see pipeline.Runner), which the first
	// batch's commit must not meet.
	files := []file{
		{corpus + "083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log", "crash-ib", 0},
		{"../../testdata/telemetry/026_megatron_core_moe_ep8_throughput_params_norm_warnings_interleaved_a100.log", "crash-megatron", 0},
		{corpus + "022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log", "crash-sock", 0},
		// Banners and plugin lines before the lines that name the
		// communicator: processes unattributed for a while.
		{corpus + "080_efa_ofi_libfabric_no_gdr_g7e_2node_nccl2.29.2.log", "crash-efa", 0},
		{"../../testdata/telemetry/017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log", "crash-tests", 15},
	}
	var msgs []pipeline.Message
	add := func(job string, v []byte) {
		msgs = append(msgs, pipeline.Message{Topic: topic, Partition: 0, Offset: int64(len(msgs)), Key: []byte(job), Value: v, Time: now})
	}
	// Round robin over the files, so that every batch writes every table.
	var lines [][]string
	for _, f := range files {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(strings.TrimRight(string(b), "\n"), "\n"))
	}
	for j := 0; ; j++ {
		more := false
		for i, f := range files {
			l := j - f.from
			if l >= len(lines[i]) {
				continue
			}
			more = true
			if l < 0 {
				continue
			}
			m := replayMeta{Job: f.job, Namespace: "it", Pod: f.job + "-worker-0", Container: "trainer", Node: "node-" + f.job}
			add(f.job, fluentBitJSON(nil, []byte(lines[i][l]), now.Add(time.Duration(j)*time.Millisecond), m))
		}
		if !more {
			break
		}
		if j%20 == 0 {
			// Poison: a bad escape and an oversized record.
			add("poison", []byte(fmt.Sprintf(`{"log":"h:1:1 [0] NCCL INFO Using network IB\q %d","kubernetes":{"pod_name":1}}`, j)))
			add("poison", []byte(`{"log":"`+strings.Repeat("NCCL ", 1000)+`"}`))
		}
	}
	return msgs
}

// crashAfter is a sink that stores its first batch, then of the second
// only the first k non-empty tables (in the ClickHouse sink's order), and
// then fails for good, as a process killed between two inserts (or after
// the last insert, before the commit) would.
func crashAfter(ch *sinks.ClickHouse, k int) pipeline.Consumer {
	calls := 0
	return pipeline.ConsumerFunc(func(ctx context.Context, b *pipeline.Batch) error {
		if calls++; calls == 1 {
			return ch.Consume(ctx, b)
		}
		parts := []pipeline.Batch{{Events: b.Events}, {DeadLetters: b.DeadLetters}, {Comms: b.Comms}, {Jobs: b.Jobs},
			{Alerts: b.Alerts}, {Steps: b.Steps}, {TestRuns: b.TestRuns}}
		done := 0
		for i := range parts {
			p := &parts[i]
			if p.Len() == 0 {
				continue
			}
			if done == k {
				break
			}
			p.Offsets = b.Offsets
			if err := ch.Consume(ctx, p); err != nil {
				return err
			}
			done++
		}
		return pipeline.Permanent(fmt.Errorf("killed after %d inserts", done))
	})
}

type offsetLog struct{ next int64 }

func (c *offsetLog) Commit(_ context.Context, offs []pipeline.Offset) error {
	for _, o := range offs {
		c.next = o.Next
	}
	return nil
}

// deliveryLife is one process: a runner with the built-in rules in front of
// sink, assigned partition 0 at committed, fed msgs from committed on and
// flushed after every split records (and at the end). The clock is fixed
// per flush so that alert rows of two runs are comparable. It returns the
// last committed offset and Flush's first error.
func deliveryLife(t *testing.T, e *itEnv, sink pipeline.Consumer, msgs []pipeline.Message, committed int64, split int, t0 time.Time) (int64, error) {
	t.Helper()
	ctx := t.Context()
	now := t0
	clock := func() time.Time { return now }
	rcfg := rules.DefaultServiceConfig()
	stage, err := rules.Setup(rcfg, sink, rules.SetupDeps{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t).Pipeline
	dcfg := parsers.DefaultDecoderConfig()
	cfg.MaxRecordBytes = 4096
	com := &offsetLog{next: committed}
	r := pipeline.NewRunner(cfg, pipeline.RunnerDeps{NewAssembler: assemble.Factory,
		NewDecoder: func() pipeline.Decoder { return parsers.NewDecoder(dcfg) }, Classifier: parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig())),
		Candidate: parsers.Prefilter(true), Observe: true,
		Sink: stage, Committer: com, Loader: e.ch, Folds: e.ch, Logger: zerolog.Nop(), Now: clock,
	})
	if err := r.Assigned(ctx, []pipeline.Partition{{Topic: e.topic, Partition: 0, Committed: committed}}); err != nil {
		t.Fatalf("Assigned: %v", err)
	}
	for i := committed; i < int64(len(msgs)); i++ {
		if err := r.Message(ctx, msgs[i]); err != nil {
			t.Fatalf("Message: %v", err)
		}
		if (i+1)%int64(split) == 0 || i == int64(len(msgs))-1 {
			// Batch n is flushed at t0 + n minutes, however it was reached.
			now = t0.Add(time.Duration((i+1+int64(split)-1)/int64(split)) * time.Minute)
			if err := r.Flush(ctx); err != nil {
				return com.next, err
			}
		}
	}
	return com.next, nil
}

// TestIntegrationCrashBetweenInserts kills a process after each possible
// number of table inserts of its second batch, then replays from the last
// commit with a fresh process on the same storage, and compares every
// table (FINAL, all columns but ingest times) with a fault-free run.
func TestIntegrationCrashBetweenInserts(t *testing.T) {
	brokers, chAddr := itServers(t)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	migrate := func(e *itEnv) {
		if _, err := e.ch.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate() = %v", err)
		}
	}
	control := newITEnv(t, brokers, chAddr, 1)
	migrate(control)
	msgs := deliveryInput(t, control.topic, t0)
	split := len(msgs) / 3
	if _, err := deliveryLife(t, control, control.ch, msgs, 0, split, t0); err != nil {
		t.Fatalf("fault-free run: %v", err)
	}
	want := map[string][]string{}
	for _, table := range storedTables {
		want[table] = tableRows(t, control.ch, control.db, table)
		if len(want[table]) == 0 {
			t.Fatalf("the fault-free run stored no %s rows; the input must write every table", table)
		}
	}

	for k := 0; k <= len(storedTables); k++ {
		e := newITEnv(t, brokers, chAddr, 1)
		e.topic = control.topic // the same coordinates as the control
		t.Run(fmt.Sprintf("after_%d_inserts", k), func(t *testing.T) {
			migrate(e)
			// First life: batch 1 stored and committed, batch 2 dies after
			// k table inserts.
			committed, err := deliveryLife(t, e, crashAfter(e.ch, k), msgs, 0, split, t0)
			if err == nil {
				t.Fatal("the crashing sink never crashed")
			}
			// Batch 1's commit, held back to the first line of a
			// training_steps row still open in its fold window
			// (pipeline.telemetry.fold_records): the replay folds it again.
			if committed > int64(split) {
				t.Fatalf("committed %d before the crash; want at most batch 1 (%d)", committed, split)
			}
			// Second life: replays from the commit.
			if _, err := deliveryLife(t, e, e.ch, msgs, committed, split, t0); err != nil {
				t.Fatalf("second life: %v", err)
			}
			for _, table := range storedTables {
				got := tableRows(t, e.ch, e.db, table)
				if d := diffRows(got, want[table]); d != "" {
					t.Errorf("%s after a crash after %d inserts differs from the fault-free run (%d rows, want %d):\n%s",
						table, k, len(got), len(want[table]), d)
				}
			}
		})
	}
}

// diffRows lists rows only in got (+) and only in want (-), at most 10.
func diffRows(got, want []string) string {
	var b strings.Builder
	n := 0
	count := map[string]int{}
	for _, r := range want {
		count[r]--
	}
	for _, r := range got {
		count[r]++
	}
	for _, r := range slices.Sorted(func(yield func(string) bool) {
		for r := range count {
			if !yield(r) {
				return
			}
		}
	}) {
		c := count[r]
		for ; c > 0 && n < 10; c-- {
			fmt.Fprintf(&b, "+ %s\n", r)
			n++
		}
		for ; c < 0 && n < 10; c++ {
			fmt.Fprintf(&b, "- %s\n", r)
			n++
		}
	}
	return b.String()
}

// serveUntilError runs the service with cfg and returns serve's error and
// how long it ran; the test fails when it is still running after limit.
func serveUntilError(t *testing.T, cfg serviceConfig, limit time.Duration, during func(addr string)) (error, time.Duration, string) {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		t.Fatalf("listen %s: %v", cfg.HTTP.Listen, err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- serve(ctx, cfg, newLogger(log, "info"), serveOptions{listener: ln}) }()
	if during != nil {
		err, stopped := awaitHealthz(ln.Addr().String(), done, limit)
		if stopped {
			return err, time.Since(start), log.String()
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		during(ln.Addr().String())
		start = time.Now()
	}
	select {
	case err := <-done:
		return err, time.Since(start), log.String()
	case <-time.After(limit):
		cancel()
		<-done
		t.Fatalf("serve still running %v after the fault:\n%s", limit, log.String())
		return nil, 0, ""
	}
}

// TestIntegrationFatalStops: errors no retry fixes stop the service at
// once, with a message that says what to change.
func TestIntegrationFatalStops(t *testing.T) {
	brokers, chAddr := itServers(t)

	t.Run("schema missing with migrate off", func(t *testing.T) {
		e := newITEnv(t, brokers, chAddr, 1)
		cfg := e.config(t)
		cfg.Migrate = false
		err, took, log := serveUntilError(t, cfg, 10*time.Second, nil)
		if err == nil || !pipeline.IsPermanent(err) || !strings.Contains(err.Error(), "ncclwatch migrate") {
			t.Errorf("serve on a fresh database with migrate off = %v; want a permanent error naming `ncclwatch migrate`\n%s", err, log)
		}
		t.Logf("stopped after %v: %v", took.Round(time.Millisecond), err)
	})

	t.Run("schema older than the binary", func(t *testing.T) {
		e := newITEnv(t, brokers, chAddr, 1)
		if _, err := e.ch.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Forget the newest migration: the schema is then one version old.
		if err := e.exec(t.Context(), strings.ReplaceAll("DROP TABLE {db}.schema_migrations", "{db}", e.db)); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if err := e.exec(t.Context(), strings.ReplaceAll("CREATE TABLE {db}.schema_migrations (version UInt32, applied_at DateTime) ENGINE = ReplacingMergeTree ORDER BY version", "{db}", e.db)); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		cfg := e.config(t)
		cfg.Migrate = false
		err, _, log := serveUntilError(t, cfg, 10*time.Second, nil)
		if err == nil || !strings.Contains(err.Error(), "lacks migrations") || !strings.Contains(err.Error(), "ncclwatch migrate") {
			t.Errorf("serve on an old schema with migrate off = %v; want the missing migrations and the command\n%s", err, log)
		}
	})

	t.Run("topic does not exist", func(t *testing.T) {
		e := newITEnv(t, brokers, chAddr, 1)
		cfg := e.config(t)
		cfg.Kafka.Topics = []string{"ncclwatch-it-no-such-topic-" + randHex()}
		err, took, log := serveUntilError(t, cfg, 20*time.Second, nil)
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("serve on a missing topic = %v; want it to say the topic does not exist\n%s", err, log)
		}
		t.Logf("stopped after %v: %v", took.Round(time.Millisecond), err)
	})

	t.Run("table dropped while running", func(t *testing.T) {
		e := newITEnv(t, brokers, chAddr, 1)
		cfg := e.config(t)
		path := corpus + "022_socket_fallback_cudawrap_warn_gcp_nccl2.18.3.log"
		err, took, log := serveUntilError(t, cfg, 20*time.Second, func(addr string) {
			e.replayFile(t, "fatal-a", path)
			e.waitVerdicts(t, map[string]verdictRow{"fatal-a": want(t, path)}, func() string { return "" })
			if err := e.exec(t.Context(), strings.ReplaceAll("DROP TABLE {db}.nccl_events", "{db}", e.db)); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			e.replayFile(t, "fatal-b", path)
		})
		if err == nil || !pipeline.IsPermanent(err) || !strings.Contains(err.Error(), "nccl_events") ||
			!strings.Contains(err.Error(), "ncclwatch migrate") {
			t.Errorf("serve after its table was dropped = %v; want a permanent error naming the table and the fix\n%s", err, log)
		}
		if n := strings.Count(log, `"level":"error"`); n != 0 {
			t.Errorf("serve logged %d errors itself; the caller logs the error once\n%s", n, log)
		}
		t.Logf("stopped %v after the second replay: %v", took.Round(time.Millisecond), err)
	})
}

// TestIntegrationDeterministic consumes the same input twice without
// faults, flushing at different record counts and so at different batch
// boundaries and flush times, and requires every table to be identical,
// row for row: a folded row (training steps, communicator summaries) is a
// function of the input, not of when batches end. The input has NCCL
// lines outside any communicator for good (logs without commId lines) and
// for a while (the EFA job's banners before its communicator's lines).
func TestIntegrationDeterministic(t *testing.T) {
	brokers, chAddr := itServers(t)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var envs []*itEnv
	var msgs []pipeline.Message
	for i, split := range []int{0, 13} {
		e := newITEnv(t, brokers, chAddr, 1)
		if i > 0 {
			e.topic = envs[0].topic // the same coordinates
		}
		if _, err := e.ch.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate() = %v", err)
		}
		if msgs == nil {
			msgs = deliveryInput(t, e.topic, t0)
		}
		if split == 0 {
			split = len(msgs) / 3
		}
		if _, err := deliveryLife(t, e, e.ch, msgs, 0, split, t0); err != nil {
			t.Fatalf("run flushing every %d records: %v", split, err)
		}
		envs = append(envs, e)
	}
	for _, table := range storedTables {
		want := tableRows(t, envs[0].ch, envs[0].db, table)
		got := tableRows(t, envs[1].ch, envs[1].db, table)
		if d := diffRows(got, want); d != "" {
			t.Errorf("%s flushed every 13 records: %d rows, every %d: %d rows:\n%s", table, len(got), len(msgs)/3, len(want), d)
		}
	}
}

// TestIntegrationHandOverWhenQuiet: a member reads the stream up to a
// point where its partition is at its end, stays quiet for fold_idle and
// commits past the open training_steps rows with their fold snapshot; a
// second member goes on from the commit. Every table ends equal to one
// member's reading the whole stream, at every cut tried.
func TestIntegrationHandOverWhenQuiet(t *testing.T) {
	brokers, chAddr := itServers(t)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	control := newITEnv(t, brokers, chAddr, 1)
	if _, err := control.ch.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate() = %v", err)
	}
	msgs := deliveryInput(t, control.topic, t0)
	split := len(msgs) / 3
	if _, err := deliveryLife(t, control, control.ch, msgs, 0, split, t0); err != nil {
		t.Fatalf("one member: %v", err)
	}
	sealed := 0
	for _, cut := range []int{len(msgs) / 7, len(msgs) / 3, len(msgs) / 2, 2 * len(msgs) / 3, len(msgs) - 5} {
		e := newITEnv(t, brokers, chAddr, 1)
		e.topic = control.topic
		if _, err := e.ch.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate() = %v", err)
		}
		// The first member reads msgs[:cut], all the partition holds when
		// it reads it, and flushes once a minute later: quiet.
		first := slices.Clone(msgs[:cut])
		for i := range first {
			first[i].HighWaterMark = int64(cut)
		}
		committed, err := deliveryLife(t, e, e.ch, first, 0, cut, t0)
		if err != nil {
			t.Fatalf("first member: %v", err)
		}
		if committed != int64(cut) {
			t.Fatalf("cut %d: the quiet partition committed %d; want its end", cut, committed)
		}
		sealed += len(queryStrings(t, e.ch, "SELECT toString(`offset`) FROM "+e.db+".fold_snapshots"))
		if _, err := deliveryLife(t, e, e.ch, msgs, committed, split, t0); err != nil {
			t.Fatalf("second member: %v", err)
		}
		for _, table := range storedTables {
			want := tableRows(t, control.ch, control.db, table)
			got := tableRows(t, e.ch, e.db, table)
			if d := diffRows(got, want); d != "" {
				t.Errorf("handed over after %d records: %s has %d rows, one member %d:\n%s", cut, table, len(got), len(want), d)
			}
		}
	}
	if sealed == 0 {
		t.Fatal("no cut stored a fold snapshot: the test does not exercise the hand-over")
	}
}
