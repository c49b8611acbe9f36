package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Unit tests against kfake, an in-process Kafka-protocol broker: they
// always run.

func TestConsumeAll(t *testing.T) { testConsumeAll(t, newFake(t)) }

func TestResumeAfterCommit(t *testing.T) { testResume(t, newFake(t)) }

func TestRebalance(t *testing.T) { testRebalance(t, newFake(t)) }

func TestEmit(t *testing.T) { testEmit(t, newFake(t)) }

func TestCodecs(t *testing.T) { testCodecs(t, newFake(t)) }

// TestBackpressure blocks the handler with a one-message queue: nothing is
// delivered meanwhile, delivery resumes when the handler does, and a
// handler blocked on a slow sink lets Run stop promptly.
func TestBackpressure(t *testing.T) {
	const n, blockAt = 300, 200
	brokers := newFake(t)
	topic := newTopic(t, brokers, 3)
	produce(t, brokers, topic, 0, n)
	cfg := testConfig(brokers, topic, uniq("group"))
	cfg.QueueCapacity = 1

	var count atomic.Int64
	release := make(chan struct{})
	r := &recorder{t: t}
	r.onMessage = func(ctx context.Context, m Message) error {
		switch count.Add(1) {
		case 1: // a sink that stalls, then recovers
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		case blockAt: // a sink that stalls until shutdown
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	src := mustSource(t, cfg)
	stop := run(t, src, r)
	waitFor(t, waitLong, "the first message", func() bool { return count.Load() >= 1 })
	time.Sleep(waitQuiet)
	if got := count.Load(); got != 1 {
		t.Fatalf("%d messages delivered while the handler was blocked; want 1", got)
	}
	if n, c := src.QueueLen(); n != 1 || c != 1 {
		t.Errorf("QueueLen() while blocked = %d, %d; want a full queue 1, 1", n, c)
	}
	close(release)
	waitFor(t, waitLong, "delivery to resume", func() bool { return count.Load() >= blockAt })
	time.Sleep(waitQuiet)
	if got := count.Load(); got != blockAt {
		t.Fatalf("%d messages delivered while the handler was blocked; want %d", got, blockAt)
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Errorf("Run = %v; want nil (the handler returned ctx's error)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %v to return after cancel; want < 5s", d)
	}
	if got, want := r.eventLog(), []string{"assigned", "message", "revoked"}; !slices.Equal(got, want) {
		t.Errorf("events = %v; want %v", got, want)
	}
	checkContiguous(t, "consumer", r.messages(), nil)
}

// TestCommitInRevoked commits from Revoked, checks the commit errors, and
// checks that a new member resumes after what Revoked committed.
func TestCommitInRevoked(t *testing.T) {
	const n = 90
	brokers := newFake(t)
	topic := newTopic(t, brokers, 3)
	group := uniq("group")
	produce(t, brokers, topic, 0, n)

	src1 := mustSource(t, testConfig(brokers, topic, group))
	r1 := &recorder{t: t}
	var revokeErr error
	r1.onRevoked = func(ctx context.Context, parts []Partition) {
		if err := src1.Commit(ctx, []pipeline.Offset{{Topic: topic, Partition: 7, Next: 1}}); !errors.Is(err, ErrNotAssigned) {
			t.Errorf("Commit of an unassigned partition = %v; want ErrNotAssigned", err)
		}
		if err := src1.Commit(ctx, []pipeline.Offset{{Topic: "other", Partition: 0, Next: 1}}); !errors.Is(err, ErrNotAssigned) {
			t.Errorf("Commit of another topic = %v; want ErrNotAssigned", err)
		}
		if err := src1.Commit(ctx, []pipeline.Offset{{Topic: topic, Partition: 0, Next: -5}}); err == nil {
			t.Error("Commit of a negative offset = nil; want an error")
		}
		// The pipeline's final flush: commit everything delivered.
		revokeErr = src1.Commit(ctx, offsetsOf(r1.messages()))
	}
	stop1 := run(t, src1, r1)
	waitFor(t, waitLong, "all messages", func() bool { return len(r1.messages()) >= n })
	if err := stop1(); err != nil {
		t.Fatalf("Run = %v; want nil", err)
	}
	if revokeErr != nil {
		t.Fatalf("Commit in Revoked = %v; want nil", revokeErr)
	}
	ctx := context.Background()
	if err := src1.Commit(ctx, offsetsOf(r1.messages())); !errors.Is(err, ErrGenerationEnded) {
		t.Errorf("Commit after Run returned = %v; want ErrGenerationEnded", err)
	}
	if err := src1.Commit(ctx, nil); err != nil {
		t.Errorf("Commit(nil) = %v; want nil", err)
	}

	hwm := make(map[int32]int64)
	for p, ms := range byPartition(r1.messages()) {
		hwm[p] = ms[len(ms)-1].Offset + 1
	}
	src2 := mustSource(t, testConfig(brokers, topic, group))
	r2 := &recorder{t: t}
	stop2 := run(t, src2, r2)
	waitFor(t, waitLong, "the second member's assignment", func() bool {
		a, _ := r2.generations()
		return len(a) > 0
	})
	time.Sleep(waitQuiet)
	if err := stop2(); err != nil {
		t.Fatalf("second Run = %v; want nil", err)
	}
	if got := r2.messages(); len(got) != 0 {
		t.Errorf("second member got %d messages; want none (all were committed in Revoked)", len(got))
	}
	a, _ := r2.generations()
	for _, p := range a[0] {
		if want, ok := hwm[p.Partition]; ok && p.CommittedOffset != want {
			t.Errorf("Assigned partition %d CommittedOffset = %d; want %d", p.Partition, p.CommittedOffset, want)
		}
	}
}

// TestHandlerError checks that a failing handler stops Run with its error,
// after Revoked, and that a context error from a live generation is a
// failure too.
func TestHandlerError(t *testing.T) {
	brokers := newFake(t)
	topic := newTopic(t, brokers, 1)
	produce(t, brokers, topic, 0, 5)
	sinkErr := errors.New("sink rejected the batch")

	for _, tc := range []struct {
		name string
		h    *recorder
	}{
		{"message", &recorder{onMessage: func(context.Context, Message) error { return sinkErr }}},
		{"assigned", &recorder{onAssigned: func(context.Context, []Partition) error { return sinkErr }}},
		{"deadline", &recorder{onMessage: func(context.Context, Message) error { return context.DeadlineExceeded }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.t = t
			src := mustSource(t, testConfig(brokers, topic, uniq("group")))
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			err := src.Run(ctx, tc.h)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Run = %v (ctx %v); want the handler's error before the timeout", err, ctx.Err())
			}
			if tc.name != "deadline" && !errors.Is(err, sinkErr) {
				t.Errorf("Run = %v; want it to wrap %v", err, sinkErr)
			}
			if a, r := tc.h.generations(); len(a) != 1 || len(r) != 1 {
				t.Errorf("%d Assigned, %d Revoked; want 1 and 1", len(a), len(r))
			}
			if err := src.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			if err := src.Run(ctx, tc.h); !errors.Is(err, ErrClosed) {
				t.Errorf("Run after Close = %v; want ErrClosed", err)
			}
		})
	}
}

// TestCloseStopsRun checks that Close stops a running Run, which returns
// nil.
func TestCloseStopsRun(t *testing.T) {
	brokers := newFake(t)
	topic := newTopic(t, brokers, 2)
	src := mustSource(t, testConfig(brokers, topic, uniq("group")))
	r := &recorder{t: t}
	errc := make(chan error, 1)
	go func() { errc <- src.Run(context.Background(), r) }()
	waitFor(t, waitLong, "the assignment", func() bool {
		a, _ := r.generations()
		return len(a) > 0
	})
	if err := src.Run(context.Background(), r); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second concurrent Run = %v; want an already running error", err)
	}
	if err := src.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run = %v; want nil after Close", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Run did not return after Close")
	}
	if _, rv := r.generations(); len(rv) != 1 {
		t.Errorf("%d Revoked calls; want 1", len(rv))
	}
}

// TestStartLatest checks that a new group with StartOffset latest skips
// what was there before it joined.
func TestStartLatest(t *testing.T) {
	brokers := newFake(t)
	topic := newTopic(t, brokers, 1)
	produce(t, brokers, topic, 0, 10)
	cfg := testConfig(brokers, topic, uniq("group"))
	cfg.StartOffset = StartLatest
	src := mustSource(t, cfg)
	r := &recorder{t: t}
	stop := run(t, src, r)
	waitFor(t, waitLong, "the assignment", func() bool {
		a, _ := r.generations()
		return len(a) > 0
	})
	time.Sleep(waitQuiet) // let the reader resolve "latest" before producing
	produce(t, brokers, topic, 10, 5)
	waitFor(t, waitLong, "new messages", func() bool { return len(r.messages()) >= 5 })
	time.Sleep(waitQuiet)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkContiguous(t, "consumer", r.messages(), map[int32]int64{0: 10})
	if got := len(r.messages()); got != 5 {
		t.Errorf("got %d messages; want the 5 produced after joining", got)
	}
}

// TestSASL produces and consumes through SCRAM and PLAIN authentication,
// and checks that a wrong password ends Run instead of retrying forever.
func TestSASL(t *testing.T) {
	for _, mech := range []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			brokers := newFake(t, kfake.EnableSASL(), kfake.Superuser(mech, "ncclwatch", "s3cret"))
			good := &SASLConfig{Mechanism: mech, Username: "ncclwatch", Password: "s3cret"}
			topic := uniq("sasl")
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			pcfg := DefaultProducerConfig()
			pcfg.Brokers, pcfg.Topic, pcfg.SASL = brokers, topic, good
			if err := CreateTopicWith(ctx, pcfg, 1); err != nil {
				t.Fatalf("CreateTopicWith: %v", err)
			}
			p, err := NewProducer(pcfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.Produce(ctx, []ProducerMessage{{Key: []byte("job-1"), Value: []byte("job-1:0")}}); err != nil {
				t.Fatalf("Produce: %v", err)
			}

			cfg := testConfig(brokers, topic, uniq("group"))
			cfg.SASL = good
			r := &recorder{t: t}
			stop := run(t, mustSource(t, cfg), r)
			waitFor(t, waitLong, "the message", func() bool { return len(r.messages()) >= 1 })
			if err := stop(); err != nil {
				t.Errorf("Run = %v", err)
			}

			cfg.SASL = &SASLConfig{Mechanism: mech, Username: "ncclwatch", Password: "wrong"}
			err = mustSource(t, cfg).Run(ctx, &recorder{t: t})
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Run with a wrong password = %v (ctx %v); want an error before the timeout", err, ctx.Err())
			}
		})
	}
}

// TestTLS produces and consumes over mutual TLS built from PEM files.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	tc := &TLSConfig{CAFile: ca, CertFile: cert, KeyFile: key}
	client, err := tc.Build("kafka.tls")
	if err != nil {
		t.Fatal(err)
	}
	server := &tls.Config{
		Certificates: client.Certificates,
		ClientCAs:    client.RootCAs,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	brokers := newFake(t, kfake.TLS(server))
	topic := uniq("tls")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	pcfg := DefaultProducerConfig()
	pcfg.Brokers, pcfg.Topic, pcfg.TLS = brokers, topic, tc
	if err := CreateTopicWith(ctx, pcfg, 2); err != nil {
		t.Fatalf("CreateTopicWith: %v", err)
	}
	p, err := NewProducer(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Produce(ctx, []ProducerMessage{{Key: []byte("job-1"), Value: []byte("job-1:0")}, {Key: []byte("job-2"), Value: []byte("job-2:1")}}); err != nil {
		t.Fatalf("Produce: %v", err)
	}
	cfg := testConfig(brokers, topic, uniq("group"))
	cfg.TLS = tc
	r := &recorder{t: t}
	stop := run(t, mustSource(t, cfg), r)
	waitFor(t, waitLong, "the messages", func() bool { return len(r.messages()) >= 2 })
	if err := stop(); err != nil {
		t.Errorf("Run = %v", err)
	}

	// A broker certificate the CA did not sign ends Run.
	other, _, _ := writeCerts(t, t.TempDir())
	cfg.TLS = &TLSConfig{CAFile: other, CertFile: cert, KeyFile: key}
	if err := mustSource(t, cfg).Run(ctx, &recorder{t: t}); err == nil || ctx.Err() != nil {
		t.Fatalf("Run with the wrong CA = %v (ctx %v); want an error before the timeout", err, ctx.Err())
	}
}

func TestCreateTopicIdempotent(t *testing.T) {
	brokers := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	topic := uniq("create")
	for range 2 {
		if err := CreateTopic(ctx, brokers, topic, 3); err != nil {
			t.Fatalf("CreateTopic(%s, 3) = %v; want nil", topic, err)
		}
	}
	if err := CreateTopic(ctx, brokers, topic, 5); err == nil || !strings.Contains(err.Error(), "exists with 3 partitions") {
		t.Errorf("CreateTopic(%s, 5) = %v; want an error about 3 existing partitions", topic, err)
	}
	if err := CreateTopic(ctx, brokers, "", 1); err == nil {
		t.Error("CreateTopic with an empty name = nil; want an error")
	}
}

// TestGoroutinesExit checks that every goroutine Run started has exited
// when it returns.
func TestGoroutinesExit(t *testing.T) {
	brokers := newFake(t)
	topic := newTopic(t, brokers, 3)
	produce(t, brokers, topic, 0, 30)
	time.Sleep(100 * time.Millisecond) // let the producer's connections wind down
	before := runtime.NumGoroutine()

	src, err := NewSource(testConfig(brokers, topic, uniq("group")))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{t: t}
	stop := run(t, src, r)
	waitFor(t, waitLong, "all messages", func() bool { return len(r.messages()) >= 30 })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if err := src.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			var buf strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Fatalf("%d goroutines after Run returned; %d before:\n%s", runtime.NumGoroutine(), before, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// batchRecorder is a recorder that takes runs of messages (BatchHandler).
type batchRecorder struct {
	*recorder
	mu   sync.Mutex
	runs []int
}

func (b *batchRecorder) Messages(ctx context.Context, ms []Message) error {
	// The recorder keeps copies of the records, as the run loop does.
	for i, m := range ms {
		m.Key, m.Value = bytes.Clone(m.Key), bytes.Clone(m.Value)
		if m.Partition != ms[0].Partition || m.Offset != ms[0].Offset+int64(i) {
			b.t.Errorf("run %v: %s/%d@%d is not the next record of the run's partition", i, m.Topic, m.Partition, m.Offset)
		}
		if err := b.recorder.Message(ctx, m); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.runs = append(b.runs, len(ms))
	b.mu.Unlock()
	return nil
}

// TestBatchHandler consumes through a BatchHandler (the run loop's way).
func TestBatchHandler(t *testing.T) { testConsumeAllWith(t, newFake(t), true) }

// TestFetchThrottle: a broker whose quota throttles this client answers a
// fetch at once with throttle_time_ms (Fetch v8+, KIP-219); the partition
// reader sends that broker no further fetch before the pause is over,
// counts the pause in Stats, and then reads every record.
func TestFetchThrottle(t *testing.T) {
	const n, throttle = 50, 600 * time.Millisecond
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	topic := newTopic(t, brokers, 1)
	produce(t, brokers, topic, 0, n)

	var (
		mu      sync.Mutex
		fetches []time.Time // of the topic's fetches, the throttled one first
	)
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		if len(fr.Topics) != 1 || fr.Topics[0].Topic != topic {
			return nil, nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		fetches = append(fetches, time.Now())
		if len(fetches) > 1 {
			return nil, nil, false // kfake answers with the records
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ThrottleMillis = int32(throttle / time.Millisecond)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition = fr.Topics[0].Partitions[0].Partition
		rp.HighWatermark = n
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})

	cfg := testConfig(brokers, topic, uniq("group"))
	r := &recorder{t: t}
	src := mustSource(t, cfg)
	stop := run(t, src, r)
	waitFor(t, waitLong, "all messages", func() bool { return len(r.messages()) >= n })
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkContiguous(t, "consumer", r.messages(), nil)
	mu.Lock()
	defer mu.Unlock()
	if len(fetches) < 2 {
		t.Fatalf("%d fetches of the topic; want the throttled one and more", len(fetches))
	}
	if gap := fetches[1].Sub(fetches[0]); gap < throttle {
		t.Errorf("next fetch %v after the throttled response; want >= %v", gap, throttle)
	}
	s := src.Stats()
	if s.ThrottledFetches != 1 || s.ThrottleTime != throttle {
		t.Errorf("Stats = %+v; want 1 fetch throttled for %v", s, throttle)
	}
}

// TestRetryReason: a broker's corrupt-message error is told apart from
// other fetch errors.
func TestRetryReason(t *testing.T) {
	if got := RetryReason(fmt.Errorf("kafka fetch logs/3: %w", kafka.InvalidMessage)); got != "corrupt_batch" {
		t.Errorf("RetryReason(corrupt message) = %q; want corrupt_batch", got)
	}
	for _, err := range []error{errors.New("connection reset"), fmt.Errorf("kafka fetch: %w", kafka.NotLeaderForPartition)} {
		if got := RetryReason(err); got != "fetch" {
			t.Errorf("RetryReason(%v) = %q; want fetch", err, got)
		}
	}
}
