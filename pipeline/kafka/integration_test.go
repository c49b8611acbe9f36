package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// Integration tests against the real broker that deploy/local/kafka.sh
// starts (NCCLWATCH_TEST_KAFKA, set by the Makefile). They skip without it,
// and fail instead under NCCLWATCH_REQUIRE_SERVERS=1.

func TestIntegrationConsumeAll(t *testing.T) { testConsumeAll(t, realBrokers(t)) }

func TestIntegrationBatchHandler(t *testing.T) { testConsumeAllWith(t, realBrokers(t), true) }

func TestIntegrationEmit(t *testing.T) { testEmit(t, realBrokers(t)) }

func TestIntegrationResumeAfterCommit(t *testing.T) { testResume(t, realBrokers(t)) }

func TestIntegrationRebalance(t *testing.T) { testRebalance(t, realBrokers(t)) }

func TestIntegrationCodecs(t *testing.T) { testCodecs(t, realBrokers(t)) }

// TestIntegrationEnsureTopic: replay's topic set-up on the real broker
// (single node, auto.create.topics.enable=true as deploy/local configures).
func TestIntegrationEnsureTopic(t *testing.T) {
	brokers := realBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cfg := DefaultProducerConfig()
	cfg.Brokers, cfg.Topic = brokers, uniq("ncclwatch-ensure")

	n, created, err := EnsureTopic(ctx, cfg, 5)
	if err != nil || n != 5 || !created {
		t.Fatalf("EnsureTopic(new, 5) = %d, %v, %v; want 5, true, nil", n, created, err)
	}
	d := &kafka.Dialer{Timeout: 5 * time.Second}
	if total, led, err := topicPartitions(ctx, d, brokers, cfg.Topic); err != nil || total != 5 || led != 5 {
		t.Fatalf("after EnsureTopic: %d partitions, %d led, %v; want 5 with leaders", total, led, err)
	}
	// An existing topic is used as it is.
	if n, created, err := EnsureTopic(ctx, cfg, 8); err != nil || n != 5 || created {
		t.Fatalf("EnsureTopic(existing, 8) = %d, %v, %v; want 5, false, nil", n, created, err)
	}
	// A producer writes to it although it never auto-creates.
	prod, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.Produce(ctx, []ProducerMessage{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatalf("Produce after EnsureTopic: %v", err)
	}

	// Creation refused: the broker's auto-creation makes the topic.
	auto := cfg
	auto.Topic = uniq("ncclwatch-ensure-auto")
	if n, created, err := ensureTopic(ctx, auto, 3, false); err != nil || n < 1 || !created {
		t.Fatalf("ensureTopic(no create) = %d, %v, %v; want auto-created", n, created, err)
	}

	// Neither possible: a name the broker refuses either way.
	bad := cfg
	bad.Topic = "bad topic name!"
	_, _, err = EnsureTopic(ctx, bad, 2)
	if !errors.Is(err, ErrNoTopic) || !strings.Contains(err.Error(), "kafka-topics.sh --create") {
		t.Fatalf("EnsureTopic(invalid name) = %v; want ErrNoTopic saying how to create it", err)
	}
	t.Logf("invalid topic: %v", err)
}

// TestIntegrationDeleteTopic: the load benchmark's clean-up on the real
// broker; deleting a missing topic is no error.
func TestIntegrationDeleteTopic(t *testing.T) {
	brokers := realBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	topic := newTopic(t, brokers, 2)
	cfg := ProducerConfig{Brokers: brokers, Topic: topic}
	if err := DeleteTopic(ctx, cfg); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	d := &kafka.Dialer{Timeout: 5 * time.Second}
	waitFor(t, waitLong, "the topic gone", func() bool {
		total, _, err := topicPartitions(ctx, d, brokers, topic)
		return total == 0 || errors.Is(err, kafka.UnknownTopicOrPartition)
	})
	if err := DeleteTopic(ctx, cfg); err != nil {
		t.Fatalf("DeleteTopic of a deleted topic: %v", err)
	}
}
