package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The scenarios below run against the in-process broker (source_test.go)
// and against the real one (integration_test.go).

// testConsumeAll produces n keyed messages to a 3-partition topic and
// consumes them with one group member: every message arrives exactly once,
// in order within its partition, between Assigned and Revoked.
func testConsumeAll(t *testing.T, brokers []string) { testConsumeAllWith(t, brokers, false) }

// testConsumeAllWith is testConsumeAll, with batch through a BatchHandler
// that also checks its runs: consecutive records of one partition, none
// longer than the queue, some longer than one.
func testConsumeAllWith(t *testing.T, brokers []string, batch bool) {
	const n = 300
	topic := newTopic(t, brokers, 3)
	produce(t, brokers, topic, 0, n)

	cfg := testConfig(brokers, topic, uniq("group"))
	r := &recorder{t: t}
	var h Handler = r
	var b *batchRecorder
	if batch {
		cfg.QueueCapacity = 50
		b = &batchRecorder{recorder: r}
		h = b
	}
	src := mustSource(t, cfg)
	stop := run(t, src, h)
	waitFor(t, waitLong, "all messages", func() bool { return len(r.messages()) >= n })
	time.Sleep(waitQuiet) // a duplicate would show up now
	lag := src.Lag()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v; want nil", err)
	}

	msgs := r.messages()
	if len(msgs) != n {
		t.Errorf("delivered %d messages; want %d", len(msgs), n)
	}
	checkContiguous(t, "consumer", msgs, nil)
	checkKeyOrder(t, msgs)
	for p, ms := range byPartition(msgs) {
		last := ms[len(ms)-1]
		if last.HighWaterMark != last.Offset+1 {
			t.Errorf("partition %d: last message HighWaterMark = %d; want %d", p, last.HighWaterMark, last.Offset+1)
		}
		if l, ok := lag[TopicPartition{topic, p}]; !ok || l != 0 {
			t.Errorf("Lag()[%s/%d] = %d, %v; want 0, true", topic, p, l, ok)
		}
	}
	if got := src.Lag(); len(got) != 0 {
		t.Errorf("Lag() after Run = %v; want empty", got)
	}
	if b != nil {
		b.mu.Lock()
		if longest := slices.Max(b.runs); longest > cfg.QueueCapacity || longest < 2 {
			t.Errorf("longest run = %d; want 2..%d (the queue capacity)", longest, cfg.QueueCapacity)
		}
		b.mu.Unlock()
	}
	if got, want := r.eventLog(), []string{"assigned", "message", "revoked"}; !slices.Equal(got, want) {
		t.Errorf("events = %v; want %v", got, want)
	}
	assigned, revoked := r.generations()
	if len(assigned) != 1 || len(assigned[0]) != 3 {
		t.Fatalf("Assigned calls = %v; want one with 3 partitions", assigned)
	}
	for i, p := range assigned[0] {
		if p.Topic != topic || p.Partition != int32(i) || p.CommittedOffset != -1 {
			t.Errorf("Assigned partition %d = %+v; want {%s %d -1}", i, p, topic, i)
		}
	}
	if len(revoked) != 1 || !slices.Equal(revoked[0], assigned[0]) {
		t.Errorf("Revoked calls = %v; want one with %v", revoked, assigned[0])
	}
}

// testResume consumes everything, commits half of each partition, and
// checks that a new member of the same group resumes exactly after the
// committed offsets: committed data is not delivered again, uncommitted
// data is.
func testResume(t *testing.T, brokers []string) {
	const n = 300
	topic := newTopic(t, brokers, 3)
	group := uniq("group")
	produce(t, brokers, topic, 0, n)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()

	src1 := mustSource(t, testConfig(brokers, topic, group))
	r1 := &recorder{t: t}
	stop1 := run(t, src1, r1)
	waitFor(t, waitLong, "first member to receive all messages", func() bool { return len(r1.messages()) >= n })
	committed := make(map[int32]int64)
	var offs []pipeline.Offset
	for p, ms := range byPartition(r1.messages()) {
		committed[p] = int64(len(ms) / 2)
		offs = append(offs, pipeline.Offset{Topic: topic, Partition: p, Next: committed[p]})
	}
	if err := src1.Commit(ctx, offs); err != nil {
		t.Fatalf("Commit(%v) = %v", offs, err)
	}
	if err := stop1(); err != nil {
		t.Fatalf("first Run = %v; want nil", err)
	}
	if err := src1.Commit(ctx, offs); !errors.Is(err, ErrGenerationEnded) {
		t.Errorf("Commit after Run returned = %v; want ErrGenerationEnded", err)
	}
	if err := src1.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	_, revoked := r1.generations()
	if len(revoked) != 1 {
		t.Fatalf("first member: %d Revoked calls; want 1", len(revoked))
	}
	for _, p := range revoked[0] {
		if want, ok := committed[p.Partition]; ok && p.CommittedOffset != want {
			t.Errorf("Revoked partition %d CommittedOffset = %d; want %d", p.Partition, p.CommittedOffset, want)
		}
	}

	want := 0
	for p, ms := range byPartition(r1.messages()) {
		want += len(ms) - int(committed[p])
	}
	src2 := mustSource(t, testConfig(brokers, topic, group))
	r2 := &recorder{t: t}
	stop2 := run(t, src2, r2)
	waitFor(t, waitLong, "second member to receive the uncommitted messages", func() bool { return len(r2.messages()) >= want })
	time.Sleep(waitQuiet) // committed data delivered again would show up now
	if err := stop2(); err != nil {
		t.Fatalf("second Run = %v; want nil", err)
	}
	msgs := r2.messages()
	if len(msgs) != want {
		t.Errorf("second member got %d messages; want %d (the uncommitted ones)", len(msgs), want)
	}
	checkContiguous(t, "second member", msgs, committed)
	checkKeyOrder(t, msgs)
	assigned, _ := r2.generations()
	if len(assigned) != 1 {
		t.Fatalf("second member: %d Assigned calls; want 1", len(assigned))
	}
	for _, p := range assigned[0] {
		want, ok := committed[p.Partition]
		if !ok {
			want = -1
		}
		if p.CommittedOffset != want {
			t.Errorf("second member: Assigned partition %d CommittedOffset = %d; want %d", p.Partition, p.CommittedOffset, want)
		}
	}
}

// testRebalance runs member A alone, then adds member B mid-stream: both see
// the rebalance, every message is seen at least once across A and B, and
// what A committed is not delivered to B.
func testRebalance(t *testing.T, brokers []string) {
	const half = 150
	topic := newTopic(t, brokers, 3)
	group := uniq("group")
	produce(t, brokers, topic, 0, half)

	var (
		mu         sync.Mutex
		committedA = make(map[int32]int64) // A's successful commits
		baseline   map[int32]int64         // committedA when B was first assigned
	)
	srcA := mustSource(t, testConfig(brokers, topic, group))
	rA := &recorder{t: t}
	rA.onMessage = func(ctx context.Context, m Message) error {
		// A commits every message as if its sink had accepted it.
		err := srcA.Commit(ctx, []pipeline.Offset{m.Next()})
		switch {
		case err == nil:
			mu.Lock()
			committedA[m.Partition] = m.Offset + 1
			mu.Unlock()
		case errors.Is(err, ErrGenerationEnded), ctx.Err() != nil:
			// The rebalance overtook this message: it stays uncommitted
			// and is delivered again.
		default:
			t.Errorf("A: Commit(%s/%d@%d) = %v", m.Topic, m.Partition, m.Next().Next, err)
		}
		return nil
	}
	var revokeCommits []error // A's commits from Revoked, one per generation
	rA.onRevoked = func(ctx context.Context, parts []Partition) {
		// The pipeline's final flush: commit the partitions' positions
		// again. The first Revoked is the rebalance; the coordinator must
		// still accept the old generation's commits then.
		next := make(map[int32]int64)
		for _, m := range rA.messages() {
			next[m.Partition] = max(next[m.Partition], m.Offset+1)
		}
		var offs []pipeline.Offset
		for _, p := range parts {
			if n, ok := next[p.Partition]; ok {
				offs = append(offs, pipeline.Offset{Topic: p.Topic, Partition: p.Partition, Next: n})
			}
		}
		err := srcA.Commit(ctx, offs)
		mu.Lock()
		revokeCommits = append(revokeCommits, err)
		if err == nil {
			for _, o := range offs {
				committedA[o.Partition] = o.Next
			}
		}
		mu.Unlock()
	}
	stopA := run(t, srcA, rA)
	waitFor(t, waitLong, "A to receive the first half", func() bool { return len(rA.messages()) >= half })

	srcB := mustSource(t, testConfig(brokers, topic, group))
	rB := &recorder{t: t}
	rB.onAssigned = func(context.Context, []Partition) error {
		mu.Lock()
		if baseline == nil {
			baseline = maps.Clone(committedA)
		}
		mu.Unlock()
		return nil
	}
	stopB := run(t, srcB, rB)
	waitFor(t, waitLong, "the rebalance", func() bool {
		aa, ar := rA.generations()
		ba, _ := rB.generations()
		if len(aa) < 2 || len(ar) < 1 || len(ba) < 1 {
			return false
		}
		// The latest generations split the 3 partitions between A and B.
		return len(aa[len(aa)-1])+len(ba[len(ba)-1]) == 3
	})
	produce(t, brokers, topic, half, half)
	seen := func() map[TopicPartition]map[int64]int {
		out := make(map[TopicPartition]map[int64]int)
		for _, m := range append(rA.messages(), rB.messages()...) {
			tp := TopicPartition{m.Topic, m.Partition}
			if out[tp] == nil {
				out[tp] = make(map[int64]int)
			}
			out[tp][m.Offset]++
		}
		return out
	}
	waitFor(t, waitLong, "all messages across A and B", func() bool {
		total := 0
		for _, offs := range seen() {
			total += len(offs)
		}
		return total >= 2*half
	})
	if err := stopB(); err != nil {
		t.Errorf("B: Run = %v; want nil", err)
	}
	if err := stopA(); err != nil {
		t.Errorf("A: Run = %v; want nil", err)
	}

	aa, ar := rA.generations()
	ba, br := rB.generations()
	t.Logf("A: %d Assigned, %d Revoked, %d messages; B: %d Assigned, %d Revoked, %d messages",
		len(aa), len(ar), len(rA.messages()), len(ba), len(br), len(rB.messages()))
	if len(aa) < 2 || len(ar) < 2 {
		t.Errorf("A: %d Assigned, %d Revoked; want >= 2 of each (start, rebalance, stop)", len(aa), len(ar))
	}
	if len(ba) < 1 || len(br) != len(ba) {
		t.Errorf("B: %d Assigned, %d Revoked; want >= 1 and equal", len(ba), len(br))
	}
	if len(aa) > 0 && len(aa[0]) != 3 {
		t.Errorf("A's first assignment = %v; want all 3 partitions", aa[0])
	}
	// Every produced offset was seen, none beyond.
	total, dups := 0, 0
	for tp, offs := range seen() {
		for off, c := range offs {
			total++
			dups += c - 1
			if off < 0 || int(off) >= 2*half {
				t.Errorf("%s/%d@%d seen: out of range", tp.Topic, tp.Partition, off)
			}
		}
	}
	if total != 2*half {
		t.Errorf("distinct messages seen = %d; want %d", total, 2*half)
	}
	t.Logf("delivered again after the rebalance: %d", dups)

	mu.Lock()
	base := maps.Clone(baseline)
	if len(revokeCommits) == 0 || revokeCommits[0] != nil {
		t.Errorf("A: Commit in Revoked during the rebalance = %v; want nil", revokeCommits)
	}
	mu.Unlock()
	if base == nil {
		t.Fatal("B was never assigned")
	}
	for _, p := range ba[0] {
		want, ok := base[p.Partition]
		if !ok {
			want = -1
		}
		if p.CommittedOffset != want {
			t.Errorf("B: Assigned partition %d CommittedOffset = %d; want A's commit %d", p.Partition, p.CommittedOffset, want)
		}
	}
	for _, m := range rB.messages() {
		if c, ok := base[m.Partition]; ok && m.Offset < c {
			t.Errorf("B got %s/%d@%d, which A had committed (up to %d)", m.Topic, m.Partition, m.Offset, c)
		}
	}
	checkKeyOrder(t, rB.messages())
}

// testEmit consumes a 2-partition topic through Emit, answering as the run
// loop does: every record reaches the loop once, with its high water mark,
// and each partition's last record says it is the end (Offset+1 ==
// HighWaterMark). Without the mark the loop never sees a partition read to
// its end and holds commits at an open fold window forever (the stall of
// the first fetch-in-runs version).
func testEmit(t *testing.T, brokers []string) {
	const n = 600
	topic := newTopic(t, brokers, 2)
	produce(t, brokers, topic, 0, n)
	src := mustSource(t, testConfig(brokers, topic, uniq("group")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := make(chan pipeline.Input, 2)
	stopped := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- src.Emit(ctx, in, stopped, nil) }()

	var msgs []pipeline.Message
	runs := 0
	deadline := time.After(waitLong)
loop:
	for len(msgs) < n {
		select {
		case x, ok := <-in:
			if !ok {
				break loop
			}
			switch x.Kind {
			case pipeline.InputAssigned, pipeline.InputRevoked:
				x.Done <- nil
			default:
				if x.Messages != nil {
					runs++
					msgs = append(msgs, x.Messages...)
				} else {
					msgs = append(msgs, x.Message)
				}
			}
		case <-deadline:
			t.Fatalf("%d of %d records within %v", len(msgs), n, waitLong)
		}
	}
	stopEmit(t, cancel, in, errc)
	if len(msgs) != n {
		t.Fatalf("%d records; want %d", len(msgs), n)
	}
	if runs == 0 {
		t.Errorf("no record came in a run (Input.Messages)")
	}
	last := map[int32]pipeline.Message{}
	for _, m := range msgs {
		if m.HighWaterMark <= m.Offset {
			t.Fatalf("%s/%d@%d: HighWaterMark = %d; want > offset", m.Topic, m.Partition, m.Offset, m.HighWaterMark)
		}
		if p, ok := last[m.Partition]; ok && m.Offset != p.Offset+1 {
			t.Errorf("partition %d: offset %d after %d", m.Partition, m.Offset, p.Offset)
		}
		last[m.Partition] = m
	}
	if len(last) != 2 {
		t.Errorf("records of %d partitions; want 2", len(last))
	}
	for p, m := range last {
		if m.Offset+1 != m.HighWaterMark {
			t.Errorf("partition %d: last record %d, HighWaterMark %d: not seen read to its end", p, m.Offset, m.HighWaterMark)
		}
	}
}

// testCodecs: records written with every compression codec, some with
// null keys, empty values and large values, read by the source: the same
// messages (key, value, a time), every one, in order within a partition.
func testCodecs(t *testing.T, brokers []string) {
	for _, codec := range []string{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd} {
		t.Run(codec, func(t *testing.T) {
			topic := newTopic(t, brokers, 2)
			p := newCompressingProducer(t, brokers, topic, codec)
			const n = 400
			msgs := make([]ProducerMessage, n)
			for i := range msgs {
				m := &msgs[i]
				if i%5 != 0 {
					m.Key = fmt.Appendf(nil, "pod-%d", i%9)
				}
				switch {
				case i%7 == 0:
					m.Value = []byte{}
				case i%50 == 3:
					m.Value = bytes.Repeat(fmt.Appendf(nil, "NCCL INFO record %d ", i), 5000) // ~100 KB
				default:
					m.Value = fmt.Appendf(nil, `{"log":"line %d"}`, i)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			if err := p.Produce(ctx, msgs); err != nil {
				t.Fatalf("Produce: %v", err)
			}
			p.Close()

			r := &batchRecorder{recorder: &recorder{t: t}}
			src := mustSource(t, testConfig(brokers, topic, uniq("group")))
			stop := run(t, src, r)
			waitFor(t, waitLong, "all messages", func() bool { return len(r.messages()) >= n })
			if err := stop(); err != nil {
				t.Fatalf("Run = %v", err)
			}
			got := r.messages()
			checkContiguous(t, codec, got, nil)
			if len(got) != n {
				t.Fatalf("read %d messages; want %d", len(got), n)
			}
			type kv struct{ key, value string }
			want := map[kv]int{}
			for _, m := range msgs {
				want[kv{string(m.Key), string(m.Value)}]++
			}
			for _, m := range got {
				k := kv{string(m.Key), string(m.Value)}
				if want[k] == 0 {
					t.Fatalf("%d/%d: key %q value %.40q not produced (or read twice)", m.Partition, m.Offset, m.Key, m.Value)
				}
				want[k]--
				if m.Time.IsZero() {
					t.Fatalf("%d/%d: no time", m.Partition, m.Offset)
				}
			}
		})
	}
}

// stopEmit ends an Emit through cancel and drains in until Emit closes it
// (the revocation waits for its answer); Emit's error fails t.
func stopEmit(t *testing.T, cancel context.CancelFunc, in <-chan pipeline.Input, errc <-chan error) {
	t.Helper()
	cancel()
	for x := range in {
		if x.Done != nil {
			x.Done <- nil
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("Emit = %v", err)
	}
}

// newCompressingProducer returns a producer to topic compressing with codec
// (CompressionNone: none).
func newCompressingProducer(t *testing.T, brokers []string, topic, codec string) *Producer {
	t.Helper()
	pc := DefaultProducerConfig()
	pc.Brokers, pc.Topic, pc.Compression = brokers, topic, codec
	p, err := NewProducer(pc)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	return p
}
