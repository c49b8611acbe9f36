package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

// Test bounds. Every wait in these tests is bounded by one of them.
const (
	waitLong  = 30 * time.Second // for messages or a rebalance to arrive
	waitQuiet = 500 * time.Millisecond
)

// newFake starts an in-process Kafka-protocol broker on 127.0.0.1 and
// returns its address.
func newFake(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// realBrokers returns the integration broker from NCCLWATCH_TEST_KAFKA, or
// skips (fails under NCCLWATCH_REQUIRE_SERVERS=1: CI never skips silently).
func realBrokers(t *testing.T) []string {
	t.Helper()
	return strings.Split(testenv.Server(t, "NCCLWATCH_TEST_KAFKA", ""), ",")
}

// uniq returns name with a random suffix: every test has its own topics
// and groups, on a shared broker too.
func uniq(name string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}

// testConfig is DefaultConfig tuned for fast rebalances and shutdowns.
func testConfig(brokers []string, topic, group string) Config {
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	cfg.Topics = []string{topic}
	cfg.GroupID = group
	cfg.MaxWait = 200 * time.Millisecond
	cfg.SessionTimeout = 6 * time.Second // the brokers' minimum
	cfg.RebalanceTimeout = 10 * time.Second
	cfg.HeartbeatInterval = 200 * time.Millisecond
	return cfg
}

func newTopic(t *testing.T, brokers []string, partitions int) string {
	t.Helper()
	topic := uniq("ncclwatch-test")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := CreateTopic(ctx, brokers, topic, partitions); err != nil {
		t.Fatalf("CreateTopic(%s): %v", topic, err)
	}
	return topic
}

// produce writes messages from..from+n-1: key "job-<i%jobs>", value
// "job-<i%jobs>:<i>", so that the order within a key can be checked.
func produce(t *testing.T, brokers []string, topic string, from, n int) {
	t.Helper()
	const jobs = 10
	cfg := DefaultProducerConfig()
	cfg.Brokers, cfg.Topic = brokers, topic
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	defer p.Close()
	msgs := make([]ProducerMessage, n)
	for i := range msgs {
		job := fmt.Sprintf("job-%d", (from+i)%jobs)
		msgs[i] = ProducerMessage{Key: []byte(job), Value: []byte(job + ":" + strconv.Itoa(from+i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := p.Produce(ctx, msgs); err != nil {
		t.Fatalf("Produce: %v", err)
	}
}

// recorder is a Handler that records every call; hooks run after
// recording.
type recorder struct {
	t  *testing.T
	mu sync.Mutex
	// events is the call sequence: "assigned", "revoked", and "message"
	// once for each run of messages.
	events   []string
	assigned [][]Partition
	revoked  [][]Partition
	msgs     []Message

	onAssigned func(ctx context.Context, parts []Partition) error
	onMessage  func(ctx context.Context, m Message) error
	onRevoked  func(ctx context.Context, parts []Partition)
}

func (r *recorder) Assigned(ctx context.Context, parts []Partition) error {
	r.mu.Lock()
	if len(r.assigned) != len(r.revoked) {
		r.t.Errorf("Assigned(%v) before Revoked of the previous generation", parts)
	}
	r.events = append(r.events, "assigned")
	r.assigned = append(r.assigned, parts)
	r.mu.Unlock()
	if r.onAssigned != nil {
		return r.onAssigned(ctx, parts)
	}
	return nil
}

func (r *recorder) Message(ctx context.Context, m Message) error {
	r.mu.Lock()
	if len(r.assigned) == len(r.revoked) {
		r.t.Errorf("Message(%s/%d@%d) outside a generation", m.Topic, m.Partition, m.Offset)
	}
	owned := slices.ContainsFunc(r.assigned[len(r.assigned)-1], func(p Partition) bool {
		return p.Topic == m.Topic && p.Partition == m.Partition
	})
	if !owned {
		r.t.Errorf("Message(%s/%d@%d) for a partition not assigned", m.Topic, m.Partition, m.Offset)
	}
	if r.events[len(r.events)-1] != "message" {
		r.events = append(r.events, "message")
	}
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	if r.onMessage != nil {
		return r.onMessage(ctx, m)
	}
	return nil
}

func (r *recorder) Revoked(ctx context.Context, parts []Partition) {
	r.mu.Lock()
	if len(r.assigned) != len(r.revoked)+1 {
		r.t.Errorf("Revoked(%v) without Assigned", parts)
	}
	r.events = append(r.events, "revoked")
	r.revoked = append(r.revoked, parts)
	r.mu.Unlock()
	if r.onRevoked != nil {
		r.onRevoked(ctx, parts)
	}
}

func (r *recorder) messages() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *recorder) generations() (assigned, revoked [][]Partition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.assigned), slices.Clone(r.revoked)
}

func (r *recorder) eventLog() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts src.Run(h) and returns a function that stops it and returns
// Run's error; the test fails if Run does not return within waitLong. It
// is also called at cleanup.
func run(t *testing.T, src *Source, h Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- src.Run(ctx, h) }()
	var (
		once sync.Once
		err  error
	)
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(waitLong):
				t.Errorf("Run did not return within %v of cancel", waitLong)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func mustSource(t *testing.T, cfg Config) *Source {
	t.Helper()
	src, err := NewSource(cfg)
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// byPartition groups messages by partition, in delivery order.
func byPartition(msgs []Message) map[int32][]Message {
	out := make(map[int32][]Message)
	for _, m := range msgs {
		out[m.Partition] = append(out[m.Partition], m)
	}
	return out
}

// checkContiguous checks that each partition's messages start at from[p]
// (0 when absent) and follow one another without gap or repeat.
func checkContiguous(t *testing.T, who string, msgs []Message, from map[int32]int64) {
	t.Helper()
	for p, ms := range byPartition(msgs) {
		want := from[p]
		for _, m := range ms {
			if m.Offset != want {
				t.Errorf("%s: partition %d delivered offset %d; want %d", who, p, m.Offset, want)
				break
			}
			want++
		}
	}
}

// checkKeyOrder checks that a key stays on one partition and its values
// arrive in the order produced.
func checkKeyOrder(t *testing.T, msgs []Message) {
	t.Helper()
	part := make(map[string]int32)
	last := make(map[string]int)
	for _, m := range msgs {
		k := string(m.Key)
		if p, ok := part[k]; ok && p != m.Partition {
			t.Errorf("key %s on partitions %d and %d", k, p, m.Partition)
		}
		part[k] = m.Partition
		job, seq, ok := strings.Cut(string(m.Value), ":")
		n, err := strconv.Atoi(seq)
		if !ok || err != nil || job != k {
			t.Errorf("message %s/%d@%d: value %q does not match key %q", m.Topic, m.Partition, m.Offset, m.Value, k)
			continue
		}
		if prev, ok := last[k]; ok && n <= prev {
			t.Errorf("key %s: %d delivered after %d", k, n, prev)
		}
		last[k] = n
	}
}

func offsetsOf(msgs []Message) []pipeline.Offset {
	out := make([]pipeline.Offset, len(msgs))
	for i, m := range msgs {
		out[i] = m.Next()
	}
	return out
}
