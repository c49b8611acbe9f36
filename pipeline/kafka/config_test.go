package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func validConfig() Config {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:9092"}
	cfg.Topics = []string{"nccl-logs"}
	cfg.GroupID = "ncclwatch"
	return cfg
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: Validate() = %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no brokers", func(c *Config) { c.Brokers = nil }, "kafka.brokers: must not be empty"},
		{"bad broker", func(c *Config) { c.Brokers = []string{"127.0.0.1:9092", "kafka"} }, `kafka.brokers[1]: "kafka" is not host:port`},
		{"no topics", func(c *Config) { c.Topics = nil }, "kafka.topics: must not be empty"},
		{"empty topic", func(c *Config) { c.Topics = []string{""} }, "kafka.topics[0]: must not be empty"},
		{"no group", func(c *Config) { c.GroupID = "" }, "kafka.group_id: must not be empty"},
		{"start offset", func(c *Config) { c.StartOffset = "beginning" }, `kafka.start_offset: "beginning" is not earliest or latest`},
		{"tls half", func(c *Config) { c.TLS = &TLSConfig{CertFile: "c.pem"} }, "kafka.tls.cert_file, kafka.tls.key_file: set both or neither"},
		{"sasl mechanism", func(c *Config) { c.SASL = &SASLConfig{Mechanism: "GSSAPI", Username: "u"} }, `kafka.sasl.mechanism: "GSSAPI" is not PLAIN`},
		{"sasl user", func(c *Config) { c.SASL = &SASLConfig{Mechanism: MechanismPlain} }, "kafka.sasl.username: must not be empty"},
		{"sasl password twice", func(c *Config) {
			c.SASL = &SASLConfig{Mechanism: MechanismSCRAMSHA512, Username: "u", Password: "p", PasswordFile: "f"}
		}, "kafka.sasl.password, kafka.sasl.password_file: set one, not both"},
		{"min bytes", func(c *Config) { c.MinBytes = 0 }, "kafka.min_bytes: must be > 0"},
		{"max bytes", func(c *Config) { c.MaxBytes = 0 }, "kafka.max_bytes: must be >= kafka.min_bytes"},
		{"max wait", func(c *Config) { c.MaxWait = 0 }, "kafka.max_wait: must be > 0"},
		{"session", func(c *Config) { c.SessionTimeout = 0 }, "kafka.session_timeout: must be between"},
		{"rebalance", func(c *Config) { c.RebalanceTimeout = 1 << 62 }, "kafka.rebalance_timeout: must be between"},
		{"heartbeat", func(c *Config) { c.HeartbeatInterval = c.SessionTimeout }, "kafka.heartbeat_interval: must be < kafka.session_timeout"},
		{"queue", func(c *Config) { c.QueueCapacity = 0 }, "kafka.queue_capacity: must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v; want an error containing %q", err, tc.want)
			}
			if _, err := NewSource(cfg); err == nil {
				t.Errorf("NewSource accepted an invalid config")
			}
		})
	}
	// Every problem is reported at once.
	if err := (Config{}).Validate(); err == nil || strings.Count(err.Error(), "\n") < 5 {
		t.Errorf("Config{}.Validate() = %v; want every problem listed", err)
	}
}

func TestProducerConfigValidate(t *testing.T) {
	valid := DefaultProducerConfig()
	valid.Brokers, valid.Topic = []string{"[::1]:9092"}, "nccl-logs"
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: Validate() = %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*ProducerConfig)
		want   string
	}{
		{"no brokers", func(c *ProducerConfig) { c.Brokers = nil }, "kafka.producer.brokers: must not be empty"},
		{"no topic", func(c *ProducerConfig) { c.Topic = "" }, "kafka.producer.topic: must not be empty"},
		{"batch size", func(c *ProducerConfig) { c.BatchSize = 0 }, "kafka.producer.batch_size: must be > 0"},
		{"batch timeout", func(c *ProducerConfig) { c.BatchTimeout = 0 }, "kafka.producer.batch_timeout: must be > 0"},
		{"compression", func(c *ProducerConfig) { c.Compression = "brotli" }, `kafka.producer.compression: "brotli" is not none`},
		{"sasl", func(c *ProducerConfig) { c.SASL = &SASLConfig{Mechanism: "plain", Username: "u"} }, "kafka.producer.sasl.mechanism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.change(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v; want an error containing %q", err, tc.want)
			}
			if _, err := NewProducer(cfg); err == nil {
				t.Errorf("NewProducer accepted an invalid config")
			}
		})
	}
	for _, name := range []string{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd} {
		if _, err := compression(name); err != nil {
			t.Errorf("compression(%q) = %v", name, err)
		}
	}
}

func TestSASLMechanism(t *testing.T) {
	for _, name := range []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512} {
		m, err := (&SASLConfig{Mechanism: name, Username: "u", Password: "p"}).mechanism("kafka.sasl")
		if err != nil {
			t.Errorf("mechanism(%s) error: %v", name, err)
			continue
		}
		if m.Name() != name {
			t.Errorf("mechanism(%s).Name() = %q", name, m.Name())
		}
	}
	if m, err := (*SASLConfig)(nil).mechanism("kafka.sasl"); m != nil || err != nil {
		t.Errorf("nil SASLConfig: mechanism = %v, %v; want nil, nil", m, err)
	}
	if _, err := (&SASLConfig{Mechanism: "OAUTHBEARER", Username: "u"}).mechanism("kafka.sasl"); err == nil ||
		!strings.HasPrefix(err.Error(), "kafka.sasl.mechanism: ") {
		t.Errorf("unknown mechanism: error = %v; want one naming kafka.sasl.mechanism", err)
	}
	// The dialer and the producer's transport carry it.
	sec, err := newSecurity("kafka", nil, &SASLConfig{Mechanism: MechanismSCRAMSHA512, Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if d := sec.dialer(); d.SASLMechanism == nil || d.SASLMechanism.Name() != MechanismSCRAMSHA512 || d.TLS != nil {
		t.Errorf("dialer SASL = %v, TLS = %v; want SCRAM-SHA-512 and no TLS", d.SASLMechanism, d.TLS)
	}
	if tr := sec.transport(); tr.SASL == nil || tr.SASL.Name() != MechanismSCRAMSHA512 {
		t.Errorf("transport SASL = %v; want SCRAM-SHA-512", tr.SASL)
	}
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)

	c, err := (&TLSConfig{CAFile: ca, CertFile: cert, KeyFile: key}).Build("kafka.tls")
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.InsecureSkipVerify || c.MinVersion != 0x0303 {
		t.Errorf("tls.Config = RootCAs %v, %d certificates, insecure %v, min %x; want a pool, 1, false, TLS 1.2",
			c.RootCAs != nil, len(c.Certificates), c.InsecureSkipVerify, c.MinVersion)
	}
	c, err = (&TLSConfig{InsecureSkipVerify: true}).Build("kafka.tls")
	if err != nil || c.RootCAs != nil || !c.InsecureSkipVerify {
		t.Errorf("insecure: build = %+v, %v", c, err)
	}

	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  TLSConfig
		want string
	}{
		{TLSConfig{CAFile: filepath.Join(dir, "missing.pem")}, "kafka.tls.ca_file: open"},
		{TLSConfig{CAFile: notPEM}, "kafka.tls.ca_file: no PEM certificate"},
		{TLSConfig{CertFile: cert, KeyFile: ca}, "kafka.tls.cert_file: "},
	} {
		if _, err := tc.cfg.Build("kafka.tls"); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("build(%+v) = %v; want an error starting %q", tc.cfg, err, tc.want)
		}
	}
	cfg := validConfig()
	cfg.TLS = &TLSConfig{CAFile: notPEM}
	if _, err := NewSource(cfg); err == nil || !strings.HasPrefix(err.Error(), "kafka.tls.ca_file") {
		t.Errorf("NewSource with a bad CA file = %v; want a kafka.tls.ca_file error", err)
	}
	cfg.TLS = &TLSConfig{CAFile: ca}
	src, err := NewSource(cfg)
	if err != nil {
		t.Fatalf("NewSource with TLS: %v", err)
	}
	if src.dialer.TLS == nil || src.dialer.TLS.RootCAs == nil {
		t.Error("NewSource with TLS: dialer has no TLS config")
	}
}

// writeCerts writes a CA, and a certificate and key signed by it for
// 127.0.0.1, usable by a client and a server.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ncclwatch test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "ncclwatch"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		// One leaf serves as the broker's certificate (127.0.0.1) and as
		// the client's, for mutual TLS.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caTmpl, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("client.pem", "CERTIFICATE", leafDER), write("client-key.pem", "EC PRIVATE KEY", keyDER)
}

func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{kafka.SASLAuthenticationFailed, true},
		{fmt.Errorf("kafka join group: %w", kafka.GroupAuthorizationFailed), true},
		{kafka.TopicAuthorizationFailed, true},
		{kafka.GroupCoordinatorNotAvailable, false},
		{kafka.RebalanceInProgress, false},
		{kafka.UnknownTopicOrPartition, false},
		{errors.New("dial tcp 127.0.0.1:9: connection refused"), false},
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), true},
	} {
		if got := permanent(tc.err); got != tc.want {
			t.Errorf("permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
