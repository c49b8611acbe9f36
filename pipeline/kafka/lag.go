package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// GroupOffsets reads a consumer group's committed offsets and the end
// offsets of a topic's partitions with two plain requests (OffsetFetch and
// ListOffsets) on one reused client: a lag poll costs a round trip, not a
// JVM tool per poll. The load benchmark uses it to time consumers that are
// not ncclwatch (ClickHouse's Kafka engine) the same way as ncclwatch.
type GroupOffsets struct {
	client     *kafka.Client
	transport  *kafka.Transport
	topic      string
	partitions int
}

// NewGroupOffsets reads offsets of topic's partitions 0..partitions-1 from
// brokers (plaintext; the load benchmark's local broker).
func NewGroupOffsets(brokers []string, topic string, partitions int) (*GroupOffsets, error) {
	errs := validateBrokers("brokers", brokers)
	if topic == "" {
		errs = append(errs, errors.New("topic: must not be empty"))
	}
	if partitions <= 0 {
		errs = append(errs, fmt.Errorf("partitions: must be > 0, got %d", partitions))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t := &kafka.Transport{DialTimeout: 5 * time.Second}
	return &GroupOffsets{client: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: t, Timeout: 10 * time.Second},
		transport: t, topic: topic, partitions: partitions}, nil
}

// End returns the end offset (the next offset to be written) of every
// partition, indexed by partition.
func (g *GroupOffsets) End(ctx context.Context) ([]int64, error) {
	reqs := make([]kafka.OffsetRequest, g.partitions)
	for p := range reqs {
		reqs[p] = kafka.LastOffsetOf(p)
	}
	res, err := g.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{g.topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("kafka list offsets %s: %w", g.topic, err)
	}
	end := make([]int64, g.partitions)
	for _, po := range res.Topics[g.topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka list offsets %s/%d: %w", g.topic, po.Partition, po.Error)
		}
		if po.Partition >= 0 && po.Partition < g.partitions {
			end[po.Partition] = po.LastOffset
		}
	}
	return end, nil
}

// Committed returns group's committed offset of every partition, indexed
// by partition; a partition without a commit reads 0 (the load
// benchmark's topics are fresh, so 0 is the first offset).
func (g *GroupOffsets) Committed(ctx context.Context, group string) ([]int64, error) {
	ps := make([]int, g.partitions)
	for p := range ps {
		ps[p] = p
	}
	res, err := g.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{g.topic: ps}})
	if err != nil {
		return nil, fmt.Errorf("kafka offset fetch %s: %w", group, err)
	}
	if res.Error != nil {
		return nil, fmt.Errorf("kafka offset fetch %s: %w", group, res.Error)
	}
	out := make([]int64, g.partitions)
	for _, po := range res.Topics[g.topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka offset fetch %s %s/%d: %w", group, g.topic, po.Partition, po.Error)
		}
		if po.Partition >= 0 && po.Partition < g.partitions {
			out[po.Partition] = max(po.CommittedOffset, 0)
		}
	}
	return out, nil
}

// Close closes the client's idle connections.
func (g *GroupOffsets) Close() error {
	g.transport.CloseIdleConnections()
	return nil
}
