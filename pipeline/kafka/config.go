// Package kafka reads log records from a Kafka consumer group with explicit,
// caller-driven offset commits, and writes records to a topic (for `ncclwatch
// replay`, the demo and tests). It is the only package that imports
// github.com/segmentio/kafka-go.
package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Start offsets for a partition the group has committed nothing for.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// SASL mechanisms.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

const (
	// dialTimeout bounds one TCP+TLS+SASL connection set-up; a broker that
	// takes longer is treated as unreachable and retried.
	dialTimeout = 10 * time.Second
	// clientID names the process in broker logs, quotas and ACL audits.
	clientID = "ncclwatch"
)

// Config configures a Source: a member of one consumer group.
type Config struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string `yaml:"brokers"`
	// Topics are the topics the group consumes.
	Topics []string `yaml:"topics"`
	// GroupID names the consumer group; every ncclwatch process of one
	// deployment uses the same one so that Kafka spreads partitions.
	GroupID string `yaml:"group_id"`
	// StartOffset is where a partition starts when the group has no
	// committed offset for it: "earliest" or "latest".
	StartOffset string `yaml:"start_offset"`
	// TLS, when set, encrypts connections to the brokers.
	TLS *TLSConfig `yaml:"tls"`
	// SASL, when set, authenticates to the brokers.
	SASL *SASLConfig `yaml:"sasl"`
	// MinBytes is how much data a fetch waits for (up to MaxWait).
	MinBytes int `yaml:"min_bytes"`
	// MaxBytes caps one partition fetch. A single record batch larger than
	// this is still returned whole (KIP-74).
	MaxBytes int `yaml:"max_bytes"`
	// MaxWait is how long the broker holds a fetch that has less than
	// MinBytes. A rebalance or a shutdown does not wait for it: the
	// partition reader's connection is closed under the fetch.
	MaxWait time.Duration `yaml:"max_wait"`
	// SessionTimeout is how long the coordinator waits for a heartbeat
	// before it declares this member dead and rebalances.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RebalanceTimeout is how long the coordinator waits for every member
	// to rejoin during a rebalance; Handler.Revoked must finish within it.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// HeartbeatInterval is how often this member heartbeats, and so how soon
	// it learns of a rebalance.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// QueueCapacity is the number of fetched messages buffered between the
	// partition readers and the handler, all partitions together.
	QueueCapacity int `yaml:"queue_capacity"`
}

// TLSConfig enables TLS towards the brokers; the broker's certificate
// must name the dialled host (or tls.server_name).
type TLSConfig = pipeline.TLSConfig

// SASLConfig authenticates to the brokers.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	// Password, or PasswordFile naming a file that holds it (a mounted
	// secret; one trailing newline is dropped). One of them, not both.
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

// DefaultConfig returns the configuration ncclwatch runs with; Brokers,
// Topics and GroupID are left for the deployment to set.
func DefaultConfig() Config {
	return Config{
		// A new group must not miss the NCCL init lines a job printed
		// before ncclwatch started: they are the whole evidence.
		StartOffset: StartEarliest,
		// Answer a fetch as soon as anything is there: log lines trickle
		// in, and latency matters more than fetch efficiency.
		MinBytes: 1,
		// 1 MiB per partition fetch, Kafka's own max.partition.fetch.bytes
		// default: about a thousand Fluent Bit records.
		MaxBytes: 1 << 20,
		// 500 ms, Kafka's fetch.max.wait.ms default: an idle partition costs
		// two fetches a second.
		MaxWait: 500 * time.Millisecond,
		// 45 s, Kafka's session.timeout.ms default since 3.0: a GC pause or a
		// slow ClickHouse insert does not cost a rebalance, a dead process
		// does within a minute.
		SessionTimeout: 45 * time.Second,
		// 60 s for every member to rejoin: room for Revoked to flush one
		// batch to ClickHouse (seconds) before the group moves on without it.
		RebalanceTimeout: 60 * time.Second,
		// 3 s, Kafka's heartbeat.interval.ms default (a fifteenth of the
		// session timeout): a rebalance is noticed within 3 s.
		HeartbeatInterval: 3 * time.Second,
		// 1024 records of 1–2 KiB keep the parser busy across fetches while
		// holding a few MiB at most.
		QueueCapacity: 1024,
	}
}

// Validate checks the configuration once at start. Errors name the field
// path, e.g. "kafka.group_id: must not be empty".
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, validateBrokers("kafka.brokers", c.Brokers)...)
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("kafka.topics: must not be empty"))
	}
	for i, t := range c.Topics {
		if t == "" {
			errs = append(errs, fmt.Errorf("kafka.topics[%d]: must not be empty", i))
		}
	}
	if c.GroupID == "" {
		errs = append(errs, errors.New("kafka.group_id: must not be empty"))
	}
	switch c.StartOffset {
	case StartEarliest, StartLatest:
	default:
		errs = append(errs, fmt.Errorf("kafka.start_offset: %q is not earliest or latest", c.StartOffset))
	}
	errs = append(errs, c.TLS.Validate("kafka.tls")...)
	errs = append(errs, c.SASL.validate("kafka.sasl")...)
	if c.MinBytes <= 0 {
		errs = append(errs, errors.New("kafka.min_bytes: must be > 0"))
	}
	if c.MaxBytes < c.MinBytes {
		errs = append(errs, errors.New("kafka.max_bytes: must be >= kafka.min_bytes"))
	}
	if c.MaxWait <= 0 {
		errs = append(errs, errors.New("kafka.max_wait: must be > 0"))
	}
	// The broker takes timeouts in int32 milliseconds.
	const maxMillis = time.Duration(1<<31-1) * time.Millisecond
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"kafka.session_timeout", c.SessionTimeout},
		{"kafka.rebalance_timeout", c.RebalanceTimeout},
		{"kafka.heartbeat_interval", c.HeartbeatInterval},
	} {
		if d.v < time.Millisecond || d.v > maxMillis {
			errs = append(errs, fmt.Errorf("%s: must be between 1ms and %v", d.name, maxMillis))
		}
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		errs = append(errs, errors.New("kafka.heartbeat_interval: must be < kafka.session_timeout (a third of it at most is usual)"))
	}
	if c.QueueCapacity <= 0 {
		errs = append(errs, errors.New("kafka.queue_capacity: must be > 0"))
	}
	return errors.Join(errs...)
}

func validateBrokers(path string, brokers []string) []error {
	if len(brokers) == 0 {
		return []error{fmt.Errorf("%s: must not be empty", path)}
	}
	var errs []error
	for i, b := range brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%s[%d]: %q is not host:port", path, i, b))
		}
	}
	return errs
}

func (c *SASLConfig) validate(path string) []error {
	if c == nil {
		return nil
	}
	var errs []error
	switch c.Mechanism {
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
	default:
		errs = append(errs, fmt.Errorf("%s.mechanism: %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", path, c.Mechanism))
	}
	if c.Username == "" {
		errs = append(errs, fmt.Errorf("%s.username: must not be empty", path))
	}
	if c.Password != "" && c.PasswordFile != "" {
		errs = append(errs, fmt.Errorf("%s.password, %s.password_file: set one, not both", path, path))
	}
	return errs
}

// mechanism returns the kafka-go SASL mechanism; nil when c is nil.
func (c *SASLConfig) mechanism(path string) (sasl.Mechanism, error) {
	if c == nil {
		return nil, nil
	}
	password, err := pipeline.ReadSecret(path+".password", c.Password, c.PasswordFile)
	if err != nil {
		return nil, err
	}
	var m sasl.Mechanism
	switch c.Mechanism {
	case MechanismPlain:
		m = plain.Mechanism{Username: c.Username, Password: password}
	case MechanismSCRAMSHA256:
		m, err = scram.Mechanism(scram.SHA256, c.Username, password)
	case MechanismSCRAMSHA512:
		m, err = scram.Mechanism(scram.SHA512, c.Username, password)
	default:
		err = fmt.Errorf("%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
	}
	if err != nil {
		return nil, fmt.Errorf("%s.mechanism: %w", path, err)
	}
	return m, nil
}

// security is the TLS and SASL set-up shared by the dialer (consumer group,
// readers, topic admin) and the producer's transport.
type security struct {
	tls  *tls.Config
	sasl sasl.Mechanism
}

func newSecurity(path string, t *TLSConfig, s *SASLConfig) (security, error) {
	tc, err := t.Build(path + ".tls")
	if err != nil {
		return security{}, err
	}
	m, err := s.mechanism(path + ".sasl")
	if err != nil {
		return security{}, err
	}
	return security{tls: tc, sasl: m}, nil
}

func (s security) dialer() *kafka.Dialer {
	return &kafka.Dialer{
		ClientID:      clientID,
		Timeout:       dialTimeout,
		DualStack:     true,
		TLS:           s.tls,
		SASLMechanism: s.sasl,
	}
}

func (s security) transport() *kafka.Transport {
	return &kafka.Transport{
		ClientID:    clientID,
		DialTimeout: dialTimeout,
		TLS:         s.tls,
		SASL:        s.sasl,
	}
}
