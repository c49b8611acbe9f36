package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// collTables is finalTables with collective_perf as its
// ReplacingMergeTree shows it after FINAL: per source coordinate, the row
// with the highest count (of equal ones the last written).
type collTables struct {
	finalTables
	colls map[pipeline.Source]pipeline.CollectivePerf
}

func (s *collTables) Consume(ctx context.Context, b *pipeline.Batch) error {
	if err := s.finalTables.Consume(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.colls == nil {
		s.colls = map[pipeline.Source]pipeline.CollectivePerf{}
	}
	for _, r := range b.Collectives {
		if old, ok := s.colls[r.Source]; !ok || r.Count >= old.Count {
			s.colls[r.Source] = r
		}
	}
	return nil
}

// dumpColls lists collective_perf in key order, one line per row.
func (s *collTables) dumpColls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.colls {
		out = append(out, fmt.Sprintf("%s/%d/%06d/%d %s %s %s %s %d %s n=%d bus=[%g %g %g] p50=%.3f exec p50=%.1f p99=%.1f hist=%v/%v %v/%v",
			r.Source.Topic, r.Source.Partition, r.Source.Offset, r.Source.Line, r.Job, r.Pod, r.CommID, r.Op, r.SizeBucket,
			r.Minute.Format(time.TimeOnly), r.Count, r.BusBWMin, r.BusBWMax, r.BusBWSum, r.BusBWP50, r.ExecUSP50, r.ExecUSP99,
			r.BusBWHist.Buckets, r.BusBWHist.Counts, r.ExecHist.Buckets, r.ExecHist.Counts))
	}
	slices.Sort(out)
	return out
}

// inspectorRecord is an Inspector record as NCCL's writer prints it
// (testdata/inspector/derive.py: the same fields, order and conversions).
func inspectorRecord(comm string, rank, nranks, nnodes int, ts int64, host, op string, sn, size, us int64, bus float64) string {
	return fmt.Sprintf(`{"header":{"id":"%s","rank":%d,"n_ranks":%d,"nnodes":%d},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":%d,"hostname":"%s","pid":%d},"coll_perf":{"coll":"%s","coll_sn":%d,"coll_msg_size_bytes":%d,"coll_exec_time_us":%d,"coll_timing_source":"kernel_gpu","coll_algobw_gbs":%f,"coll_busbw_gbs":%f}}`,
		comm, rank, nranks, nnodes, ts, host, 4000+rank, op, sn, size, us, bus/1.875, bus)
}

// collInput is a stream on two partitions: partition 0 holds a two-node
// job's NCCL init lines, then the Inspector records of its four ranks
// (AllReduce of two sizes and AllGather, dump times crossing a minute),
// interleaved with noise; partition 1 another job's records. Records
// arrive through the Fluent Bit envelope, as a dump directory's tail
// sends them.
func collInput(t *testing.T) []pipeline.Message {
	t.Helper()
	nccl := testdataLines(t, "corpus", healthy)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var msgs []pipeline.Message
	next := map[int32]int64{}
	add := func(part int32, key string, value []byte) {
		msgs = append(msgs, pipeline.Message{Topic: "logs", Partition: part, Offset: next[part], Key: []byte(key),
			Value: value, Time: t0.Add(time.Duration(len(msgs)) * time.Millisecond)})
		next[part]++
	}
	for i, l := range nccl[:min(len(nccl), 8)] {
		add(0, "llm", fluentBit(t, l, "llm", fmt.Sprintf("llm-worker-%d", i%2), "n0"))
	}
	// 12:00:58.5 on: the records of sn 0..13 cross into the next minute.
	base := int64(1764417658500000)
	for sn := range int64(14) {
		for rank := range 4 {
			op, size, us, bus := "AllReduce", int64(268435456), int64(1893+rank*7), 265.9-float64(rank)-float64(sn%3)
			if sn%3 == 2 {
				op, size, us, bus = "AllGather", 33554432+sn, 402+int64(rank), 78.2+float64(rank)/2
			} else if sn%3 == 1 {
				size = 134217728
			}
			ts := base + sn*250000 + int64(rank)*37
			line := inspectorRecord("0x4f2a9c31d07e15", rank, 4, 2, ts, fmt.Sprintf("gpu-node-%d", rank/2), op, sn, size, us, bus)
			add(0, "llm", fluentBit(t, line, "llm", fmt.Sprintf("llm-worker-%d", rank/2), fmt.Sprintf("n%d", rank/2)))
			if (int(sn)+rank)%3 == 0 {
				add(0, "noise", fluentBit(t, "epoch 1 dataloader ready", "other", "other-0", "n1"))
			}
		}
		line := inspectorRecord("0x77aa01", 0, 2, 1, base+sn*300000, "gpu-node-9", "ReduceScatter", sn, 1<<26, 900, 40.5+float64(sn%4))
		add(1, "small", fluentBit(t, line, "small", "small-0", "n9"))
	}
	return msgs
}

func collRunner(t *testing.T, tbl *collTables, commit pipeline.Committer, set func(*pipeline.RunnerDeps)) *pipeline.Runner {
	t.Helper()
	return foldRunnerWith(t, &tbl.finalTables, commit, 10, func(d *pipeline.RunnerDeps) {
		d.Sink, d.Loader = tbl, tbl
		if set != nil {
			set(d)
		}
	})
}

// TestCollectivePerfRows: the rows of the fault-free run fold the records
// (never a row per record), a row per job, communicator, operation, size
// bucket, minute and window, with counts summing to the records, and
// figures that agree with the records.
func TestCollectivePerfRows(t *testing.T) {
	msgs := collInput(t)
	tbl := &collTables{}
	feedAll(t, collRunner(t, tbl, nil, nil), msgs, func(int) bool { return false })
	records, rows := 0, 0
	var sum int64
	keys := map[string]bool{}
	for _, m := range msgs {
		if strings.Contains(string(m.Value), "coll_perf") {
			records++
		}
	}
	for _, r := range tbl.colls {
		rows++
		sum += r.Count
		keys[fmt.Sprint(r.Job, r.CommID, r.Op, r.SizeBucket, r.Minute)] = true
		if r.Count <= 0 || math.IsNaN(r.BusBWP50) || r.BusBWP50 < r.BusBWMin || r.BusBWP50 > r.BusBWMax ||
			r.ExecUSP50 > r.ExecUSP99 || r.ExecUSP50 < r.ExecUSMin || r.ExecUSP99 > r.ExecUSMax || r.SizeBucket&(r.SizeBucket-1) != 0 {
			t.Errorf("row %+v: inconsistent figures", r)
		}
		var n uint32
		for _, c := range r.BusBWHist.Counts {
			n += c
		}
		if int64(n) != r.Count {
			t.Errorf("row %s %s %d: histogram counts %d; want %d", r.CommID, r.Op, r.SizeBucket, n, r.Count)
		}
		if r.Job == "llm" && (r.NNodes != 2 || r.NRanks != 4 || r.CommID != "0x4f2a9c31d07e15") {
			t.Errorf("row %+v: want the header's communicator, 4 ranks on 2 nodes", r)
		}
	}
	if sum != int64(records) || rows >= records/2 {
		t.Fatalf("%d rows counting %d records of %d; want every record counted, in far fewer rows:\n%s",
			rows, sum, records, strings.Join(tbl.dumpColls(), "\n"))
	}
	// llm: AllReduce 256 MiB and 128 MiB, AllGather 32 MiB, each on both
	// sides of 12:01; small: ReduceScatter 64 MiB on both sides.
	if len(keys) != 8 {
		t.Errorf("%d distinct keys; want 8:\n%s", len(keys), strings.Join(tbl.dumpColls(), "\n"))
	}
}

// TestCollectivePerfIndependentOfBatches: collective_perf depends only on
// the input, never on where batches end.
func TestCollectivePerfIndependentOfBatches(t *testing.T) {
	msgs := collInput(t)
	control := &collTables{}
	feedAll(t, collRunner(t, control, nil, nil), msgs, func(int) bool { return false })
	want := control.dumpColls()
	if len(want) == 0 {
		t.Fatal("no collective_perf rows")
	}
	for cut := range len(msgs) - 1 {
		got := &collTables{}
		feedAll(t, collRunner(t, got, nil, nil), msgs, func(i int) bool { return i == cut })
		if d := diffLines(got.dumpColls(), want); d != "" {
			t.Fatalf("batch boundary after record %d: collective_perf differs from one batch:\n%s", cut, d)
		}
	}
	got := &collTables{}
	feedAll(t, collRunner(t, got, nil, nil), msgs, func(int) bool { return true })
	if d := diffLines(got.dumpColls(), want); d != "" {
		t.Fatalf("a batch per record: collective_perf differs from one batch:\n%s", d)
	}
}

// TestCollectivePerfIdempotentReplay: a process that stored batches up to
// any point and crashed (its last commit lost or not) is followed by a
// fresh one replaying from the committed offsets; collective_perf ends
// equal to the fault-free run's.
func TestCollectivePerfIdempotentReplay(t *testing.T) {
	msgs := collInput(t)
	control := &collTables{}
	feedAll(t, collRunner(t, control, nil, nil), msgs, func(int) bool { return false })
	want := control.dumpColls()
	for _, every := range []int{3, 7} {
		for crash := 1; crash < len(msgs); crash++ {
			for _, lostCommit := range []bool{false, true} {
				tbl := &collTables{}
				commits := &recordingCommitter{}
				feedAll(t, collRunner(t, tbl, commits, nil), msgs[:crash], func(i int) bool { return i%every == every-1 })
				committed := lastCommits(t, commits, lostCommit)
				r2 := collRunner(t, tbl, commits, nil)
				rest := resume(t, r2, msgs, committed)
				feedAll(t, r2, rest, func(i int) bool { return i%every == every-1 })
				if d := diffLines(tbl.dumpColls(), want); d != "" {
					t.Fatalf("flush every %d, crash after %d records (commit lost %v, committed %v): collective_perf differs:\n%s",
						every, crash, lostCommit, committed, d)
				}
			}
		}
	}
}

// TestCollectivePerfHandedOverWhenQuiet: a member reads up to any record,
// finds its partitions quiet, commits past the open rows with their
// snapshot and hands the partitions to another member; collective_perf
// ends equal to one member's. Without the snapshots some hand-over splits
// a row: the input exercises the seal.
func TestCollectivePerfHandedOverWhenQuiet(t *testing.T) {
	msgs := collInput(t)
	control := &collTables{}
	feedAll(t, collRunner(t, control, nil, nil), msgs, func(int) bool { return false })
	want := control.dumpColls()
	t0 := time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC)
	split := false
	for cut := 1; cut < len(msgs); cut++ {
		for _, restore := range []bool{true, false} {
			tbl := &collTables{}
			commits := &recordingCommitter{}
			now := t0
			clock := func(d *pipeline.RunnerDeps) { d.Now = func() time.Time { return now } }
			a := collRunner(t, tbl, commits, clock)
			end := map[int32]int64{}
			for _, m := range msgs[:cut] {
				end[m.Partition] = m.Offset + 1
			}
			for _, m := range msgs[:cut] {
				m.HighWaterMark = end[m.Partition]
				if err := a.Message(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(pipeline.DefaultRunnerConfig().FoldIdle + time.Second)
			if err := a.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			committed := lastCommits(t, commits, false)
			b := collRunner(t, tbl, commits, func(d *pipeline.RunnerDeps) {
				clock(d)
				if restore {
					d.Folds = tbl
				}
			})
			rest := resume(t, b, msgs, committed)
			feedAll(t, b, rest, func(int) bool { return false })
			d := diffLines(tbl.dumpColls(), want)
			switch {
			case restore && d != "":
				t.Fatalf("handed over after %d records (committed %v): collective_perf differs from one member's:\n%s", cut, committed, d)
			case !restore && d != "":
				split = true
			}
		}
	}
	if !split {
		t.Fatal("no hand-over split a row without the snapshots: the input must exercise the seal")
	}
}
