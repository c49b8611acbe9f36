package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Compression codecs for ProducerConfig.Compression.
const (
	CompressionNone   = "none"
	CompressionGzip   = "gzip"
	CompressionSnappy = "snappy"
	CompressionLZ4    = "lz4"
	CompressionZstd   = "zstd"
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string `yaml:"brokers"`
	// Topic is the topic every message goes to.
	Topic string      `yaml:"topic"`
	TLS   *TLSConfig  `yaml:"tls"`
	SASL  *SASLConfig `yaml:"sasl"`
	// BatchSize caps the messages in one produce request per partition.
	BatchSize int `yaml:"batch_size"`
	// BatchTimeout is how long a partially filled batch waits for more
	// messages before it is sent. Produce waits for it too.
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// Compression is none, gzip, snappy, lz4 or zstd.
	Compression string `yaml:"compression"`
}

// DefaultProducerConfig returns the configuration replay runs with; Brokers
// and Topic are left to set.
func DefaultProducerConfig() ProducerConfig {
	return ProducerConfig{
		// 1000 Fluent Bit records (1–2 KiB each) fill about one produce
		// request of Kafka's default 1 MiB message.max.bytes.
		BatchSize: 1000,
		// Produce is synchronous and waits for partially filled batches:
		// 10 ms keeps small calls (tests, a trickle of replayed lines) fast,
		// while replay's large calls fill batches long before.
		BatchTimeout: 10 * time.Millisecond,
		// NCCL log lines repeat heavily; lz4 shrinks them several-fold for
		// little CPU, and every broker since 0.10 reads it.
		Compression: CompressionLZ4,
	}
}

// Validate checks the configuration once at start; errors name the field
// path.
func (c ProducerConfig) Validate() error {
	var errs []error
	errs = append(errs, validateBrokers("kafka.producer.brokers", c.Brokers)...)
	if c.Topic == "" {
		errs = append(errs, errors.New("kafka.producer.topic: must not be empty"))
	}
	errs = append(errs, c.TLS.Validate("kafka.producer.tls")...)
	errs = append(errs, c.SASL.validate("kafka.producer.sasl")...)
	if c.BatchSize <= 0 {
		errs = append(errs, errors.New("kafka.producer.batch_size: must be > 0"))
	}
	if c.BatchTimeout <= 0 {
		errs = append(errs, errors.New("kafka.producer.batch_timeout: must be > 0"))
	}
	if _, err := compression(c.Compression); err != nil {
		errs = append(errs, fmt.Errorf("kafka.producer.compression: %w", err))
	}
	return errors.Join(errs...)
}

func compression(name string) (kafka.Compression, error) {
	switch name {
	case CompressionNone:
		return 0, nil
	case CompressionGzip:
		return kafka.Gzip, nil
	case CompressionSnappy:
		return kafka.Snappy, nil
	case CompressionLZ4:
		return kafka.Lz4, nil
	case CompressionZstd:
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("%q is not none, gzip, snappy, lz4 or zstd", name)
}

// ProducerMessage is one record to produce. Messages with the same Key go
// to the same partition.
type ProducerMessage struct {
	Key   []byte
	Value []byte
	// Time is the record timestamp; zero means now.
	Time time.Time
}

// Producer writes records to one topic. It is safe for concurrent use.
type Producer struct {
	w         *kafka.Writer
	transport *kafka.Transport
}

// NewProducer checks cfg and loads its TLS files. It does not connect:
// the first Produce does.
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sec, err := newSecurity("kafka.producer", cfg.TLS, cfg.SASL)
	if err != nil {
		return nil, err
	}
	codec, _ := compression(cfg.Compression) // checked by Validate
	t := sec.transport()
	return &Producer{
		transport: t,
		w: &kafka.Writer{
			Addr:  kafka.TCP(cfg.Brokers...),
			Topic: cfg.Topic,
			// CRC32 of the key, as librdkafka's default partitioner (and so
			// Fluent Bit) computes it: a job's records land on one
			// partition, the same one Fluent Bit would have chosen.
			Balancer: &kafka.CRC32Balancer{},
			// Every in-sync replica has the record before Produce returns:
			// replay must not lose what it reported as written.
			RequiredAcks: kafka.RequireAll,
			BatchSize:    cfg.BatchSize,
			BatchTimeout: cfg.BatchTimeout,
			Compression:  codec,
			Transport:    t,
			// A typo in the topic must fail, not create a one-partition
			// topic on brokers that allow auto-creation.
			AllowAutoTopicCreation: false,
		},
	}, nil
}

// Produce writes msgs and returns when all are acknowledged by every
// in-sync replica, or with the first error. Messages with the same key keep
// their order. The producer does not keep msgs or their slices.
func (p *Producer) Produce(ctx context.Context, msgs []ProducerMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	kms := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		kms[i] = kafka.Message{Key: m.Key, Value: m.Value, Time: m.Time}
	}
	if err := p.w.WriteMessages(ctx, kms...); err != nil {
		return fmt.Errorf("kafka produce %s: %w", p.w.Topic, err)
	}
	return nil
}

// Close flushes nothing (Produce is synchronous) and releases the
// producer's connections.
func (p *Producer) Close() error {
	err := p.w.Close()
	p.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("kafka producer close: %w", err)
	}
	return nil
}

// CreateTopic creates topic with the given number of partitions and the
// brokers' default replication factor, and waits until every partition has
// a leader. An existing topic with that many partitions is fine; one with
// a different count is an error. It uses plain connections; see
// CreateTopicWith for TLS or SASL.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int) error {
	return CreateTopicWith(ctx, ProducerConfig{Brokers: brokers, Topic: topic}, partitions)
}

// DeleteTopic deletes cfg.Topic (the load benchmark's, at its end),
// connecting as CreateTopicWith does; a topic that does not exist is no
// error.
func DeleteTopic(ctx context.Context, cfg ProducerConfig) error {
	c, _, done, err := topicAdmin(cfg)
	if err != nil {
		return err
	}
	defer done()
	res, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{cfg.Topic}})
	if err != nil {
		return fmt.Errorf("kafka delete topic %s: %w", cfg.Topic, err)
	}
	if err := res.Errors[cfg.Topic]; err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka delete topic %s: %w", cfg.Topic, err)
	}
	return nil
}

// topicAdmin checks cfg's brokers, TLS, SASL and topic, and returns a
// client on them with its security and the function that closes its
// connections.
func topicAdmin(cfg ProducerConfig) (*kafka.Client, security, func(), error) {
	errs := validateBrokers("kafka.producer.brokers", cfg.Brokers)
	errs = append(errs, cfg.TLS.Validate("kafka.producer.tls")...)
	errs = append(errs, cfg.SASL.validate("kafka.producer.sasl")...)
	if cfg.Topic == "" {
		errs = append(errs, errors.New("kafka.producer.topic: must not be empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, security{}, nil, err
	}
	sec, err := newSecurity("kafka.producer", cfg.TLS, cfg.SASL)
	if err != nil {
		return nil, security{}, nil, err
	}
	t := sec.transport()
	return &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: t}, sec, t.CloseIdleConnections, nil
}

// CreateTopicWith is CreateTopic for cfg.Topic, connecting with cfg's
// brokers, TLS and SASL (other fields are ignored).
func CreateTopicWith(ctx context.Context, cfg ProducerConfig, partitions int) error {
	c, sec, done, err := topicAdmin(cfg)
	if partitions <= 0 {
		err = errors.Join(err, fmt.Errorf("kafka create topic: partitions must be > 0, got %d", partitions))
	}
	if done != nil {
		defer done()
	}
	if err != nil {
		return err
	}
	res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{
			Topic:             cfg.Topic,
			NumPartitions:     partitions,
			ReplicationFactor: -1, // the brokers' default.replication.factor
		}},
	})
	if err != nil {
		return fmt.Errorf("kafka create topic %s: %w", cfg.Topic, err)
	}
	if err := res.Errors[cfg.Topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("kafka create topic %s: %w", cfg.Topic, err)
	}
	return waitTopic(ctx, sec.dialer(), cfg.Brokers, cfg.Topic, partitions)
}

// waitTopic polls metadata, uncached, until topic has the given number of
// partitions, each with a leader.
func waitTopic(ctx context.Context, d *kafka.Dialer, brokers []string, topic string, partitions int) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		total, led, err := topicPartitions(ctx, d, brokers, topic)
		switch {
		case err != nil:
		case total == partitions && led == partitions:
			return nil
		case total > 0 && total != partitions:
			return fmt.Errorf("kafka create topic %s: exists with %d partitions, want %d", topic, total, partitions)
		default:
			err = fmt.Errorf("%d of %d partitions have a leader", led, partitions)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka create topic %s: %w (%w)", topic, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// topicPartitions returns how many partitions topic has and how many of
// them have a leader.
func topicPartitions(ctx context.Context, d *kafka.Dialer, brokers []string, topic string) (total, led int, err error) {
	var conn *kafka.Conn
	for _, b := range brokers {
		if conn, err = d.DialContext(ctx, "tcp", b); err == nil {
			break
		}
	}
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range ps {
		if p.Topic != topic {
			continue
		}
		total++
		if p.Leader.Host != "" {
			led++
		}
	}
	return total, led, nil
}

// ErrNoTopic reports a topic that does not exist and could not be created.
var ErrNoTopic = errors.New("topic does not exist and could not be created")

// autoCreateWait bounds how long EnsureTopic waits for a broker's
// auto-creation: a broker that auto-creates does so on the first metadata
// request, so a few seconds cover leader election on a loaded machine.
const autoCreateWait = 10 * time.Second

// EnsureTopic makes sure cfg.Topic exists, so that a producer (which never
// auto-creates; see NewProducer) can write to it. An existing topic is used
// as it is, whatever its partition count. A missing one is created with
// partitions partitions and a replication factor of 1 on a single-broker
// cluster (the brokers' default otherwise). When the brokers refuse to
// create it (no permission, say) it falls back to their auto-creation
// (auto.create.topics.enable); when that is off too the error wraps
// ErrNoTopic and says both. It returns the topic's partition count and
// whether this call created it.
func EnsureTopic(ctx context.Context, cfg ProducerConfig, partitions int) (n int, created bool, err error) {
	return ensureTopic(ctx, cfg, partitions, true)
}

// ensureTopic is EnsureTopic; create false skips the CreateTopics request,
// as a broker that refuses it would (tests of the fallback use it).
func ensureTopic(ctx context.Context, cfg ProducerConfig, partitions int, create bool) (n int, created bool, err error) {
	if partitions <= 0 {
		return 0, false, fmt.Errorf("kafka ensure topic: partitions must be > 0, got %d", partitions)
	}
	errs := validateBrokers("kafka.producer.brokers", cfg.Brokers)
	errs = append(errs, cfg.TLS.Validate("kafka.producer.tls")...)
	errs = append(errs, cfg.SASL.validate("kafka.producer.sasl")...)
	if cfg.Topic == "" {
		errs = append(errs, errors.New("kafka.producer.topic: must not be empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return 0, false, err
	}
	sec, err := newSecurity("kafka.producer", cfg.TLS, cfg.SASL)
	if err != nil {
		return 0, false, err
	}
	t := sec.transport()
	defer t.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: t}
	// A metadata request that does not auto-create: the topic must be
	// created with the wanted partitions, not the broker's num.partitions.
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{cfg.Topic}})
	if err != nil {
		return 0, false, fmt.Errorf("kafka metadata %s: %w", cfg.Topic, err)
	}
	for _, tp := range md.Topics {
		if tp.Name == cfg.Topic && tp.Error == nil && len(tp.Partitions) > 0 {
			return len(tp.Partitions), false, nil
		}
	}
	rf := -1 // the brokers' default.replication.factor
	if len(md.Brokers) == 1 {
		rf = 1
	}
	cerr := errors.New("not attempted")
	if create {
		var res *kafka.CreateTopicsResponse
		res, cerr = c.CreateTopics(ctx, &kafka.CreateTopicsRequest{
			Topics: []kafka.TopicConfig{{Topic: cfg.Topic, NumPartitions: partitions, ReplicationFactor: rf}},
		})
		if cerr == nil {
			cerr = res.Errors[cfg.Topic]
		}
	}
	switch {
	case cerr == nil:
		return partitions, true, waitTopic(ctx, sec.dialer(), cfg.Brokers, cfg.Topic, partitions)
	case errors.Is(cerr, kafka.TopicAlreadyExists):
		// Created by someone else since the metadata request.
		wctx, cancel := context.WithTimeout(ctx, autoCreateWait)
		defer cancel()
		n, err := waitAnyPartitions(wctx, sec.dialer(), cfg.Brokers, cfg.Topic)
		return n, false, err
	}
	// Creation refused: try the brokers' auto-creation (a metadata
	// request that allows it).
	wctx, cancel := context.WithTimeout(ctx, autoCreateWait)
	defer cancel()
	n, aerr := waitAnyPartitions(wctx, sec.dialer(), cfg.Brokers, cfg.Topic)
	if aerr == nil {
		return n, true, nil
	}
	return 0, false, fmt.Errorf("kafka topic %s: %w: creating it failed (%w) and the brokers did not auto-create it (%w); "+
		"create it (kafka-topics.sh --create --topic %s --partitions %d) or enable auto.create.topics.enable",
		cfg.Topic, ErrNoTopic, cerr, aerr, cfg.Topic, partitions)
}

// waitAnyPartitions polls metadata (allowing auto-creation) until topic has
// partitions, each with a leader, and returns their number.
func waitAnyPartitions(ctx context.Context, d *kafka.Dialer, brokers []string, topic string) (int, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		total, led, err := topicPartitions(ctx, d, brokers, topic)
		if err == nil && total > 0 && led == total {
			return total, nil
		}
		if errors.Is(err, kafka.InvalidTopic) || errors.Is(err, kafka.TopicAuthorizationFailed) {
			return 0, err // waiting will not help
		}
		if err == nil {
			err = fmt.Errorf("%d of %d partitions have a leader", led, total)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (%w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
