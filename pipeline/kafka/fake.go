package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Fake is an in-process Kafka-protocol broker (franz-go's kfake) listening
// on 127.0.0.1: what `ncclwatch demo` runs against so that it needs nothing
// but Go, and what unit tests use. It is never the only proof: the
// integration tests run the real Kafka broker of deploy/local.
type Fake struct {
	c *kfake.Cluster
}

// NewFake starts a one-broker cluster with topic created with the given
// number of partitions.
func NewFake(topic string, partitions int) (*Fake, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		return nil, fmt.Errorf("in-process kafka: %w", err)
	}
	return &Fake{c: c}, nil
}

// Addrs returns the broker addresses.
func (f *Fake) Addrs() []string { return f.c.ListenAddrs() }

// Close stops the broker.
func (f *Fake) Close() { f.c.Close() }
