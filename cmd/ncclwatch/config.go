package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/rules"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// serviceConfig is the whole configuration of `ncclwatch run`: defaults,
// then the YAML file (--config), then NCCLWATCH_* environment variables,
// then flags, each overriding the one before. docs/configuration.md
// documents it.
type serviceConfig struct {
	Kafka      kafka.Config           `yaml:"kafka"`
	ClickHouse sinks.ClickHouseConfig `yaml:"clickhouse"`
	Pipeline   pipeline.RunnerConfig  `yaml:"pipeline"`
	Inventory  string                 `yaml:"inventory"`
	Migrate    bool                   `yaml:"migrate"`
	HTTP       httpConfig             `yaml:"http"`
	Log        logConfig              `yaml:"log"`
	Tracing    tracingConfig          `yaml:"tracing"`
	Decoder    decoderSettings        `yaml:"decoder"`
	Expect     pipeline.Expectation   `yaml:"expect"`
	Rules      rules.ServiceConfig    `yaml:"rules"`
	// Telemetry configures the telemetry line parser: JSON field names
	// and declared progress-line formats (docs/telemetry.md).
	Telemetry parsers.TelemetryConfig `yaml:"telemetry"`
}

type httpConfig struct {
	// Listen serves /metrics, /healthz and /readyz; ":9464" is free of
	// the usual exporters' ports.
	Listen string `yaml:"listen"`
	// APITokenFile holds the bearer token the read API (/api/v1) requires;
	// empty: no authentication (api.go).
	APITokenFile string `yaml:"api_token_file"`
}

type logConfig struct {
	Level string `yaml:"level"` // debug, info, warn, error
}

type tracingConfig struct {
	// OTLPEndpoint enables OpenTelemetry spans per batch over OTLP/HTTP
	// (host:port); empty = off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	Insecure     bool   `yaml:"insecure"`
}

type decoderSettings struct {
	// MaxLineBytes caps one decoded line (64 KiB: far above any NCCL line).
	MaxLineBytes int `yaml:"max_line_bytes"`
	// NoTelemetry turns off training-progress and nccl-tests extraction,
	// keeping the prefilter to NCCL lines only.
	NoTelemetry bool `yaml:"no_telemetry"`
}

func defaultServiceConfig() serviceConfig {
	c := serviceConfig{
		Kafka:      kafka.DefaultConfig(),
		ClickHouse: sinks.DefaultClickHouseConfig(),
		Pipeline:   pipeline.DefaultRunnerConfig(),
		HTTP:       httpConfig{Listen: ":9464"},
		Log:        logConfig{Level: "info"},
		Decoder:    decoderSettings{MaxLineBytes: 64 << 10},
		Rules:      rules.DefaultServiceConfig(),
		Telemetry:  parsers.DefaultTelemetryConfig(),
		// Migrations apply at start: a fresh database works without a
		// separate step; `migrate: false` leaves the schema to its owner.
		Migrate: true,
	}
	c.Kafka.GroupID = "ncclwatch"
	c.Kafka.Topics = []string{"training-logs"}
	c.Kafka.Brokers = []string{"127.0.0.1:9092"}
	return c
}

// loadFile merges a YAML file over c. Unknown keys, at any depth, are an
// error naming each by its full path: a typo must not silently fall back to
// a default.
func (c *serviceConfig) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := unknownKeys(&doc, reflect.TypeFor[serviceConfig]()); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := yaml.Unmarshal(b, c); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// envOverrides reads NCCLWATCH_* variables.
func (c *serviceConfig) envOverrides(getenv func(string) string) error {
	set := func(name string, fn func(string) error) error {
		if v := getenv(name); v != "" {
			if err := fn(v); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}
	list := func(dst *[]string) func(string) error {
		return func(v string) error { *dst = splitList(v); return nil }
	}
	str := func(dst *string) func(string) error { return func(v string) error { *dst = v; return nil } }
	return errors.Join(
		set("NCCLWATCH_BROKERS", list(&c.Kafka.Brokers)),
		set("NCCLWATCH_TOPICS", list(&c.Kafka.Topics)),
		set("NCCLWATCH_GROUP", str(&c.Kafka.GroupID)),
		set("NCCLWATCH_SASL_USERNAME", func(v string) error { c.sasl().Username = v; return nil }),
		set("NCCLWATCH_SASL_PASSWORD", func(v string) error { c.sasl().Password = v; return nil }),
		set("NCCLWATCH_SASL_PASSWORD_FILE", func(v string) error { c.sasl().PasswordFile = v; return nil }),
		set("NCCLWATCH_SASL_MECHANISM", func(v string) error { c.sasl().Mechanism = v; return nil }),
		set("NCCLWATCH_CLICKHOUSE", list(&c.ClickHouse.Addr)),
		set("NCCLWATCH_DATABASE", str(&c.ClickHouse.Database)),
		set("NCCLWATCH_CLICKHOUSE_USER", str(&c.ClickHouse.Username)),
		set("NCCLWATCH_CLICKHOUSE_PASSWORD", str(&c.ClickHouse.Password)),
		set("NCCLWATCH_CLICKHOUSE_PASSWORD_FILE", str(&c.ClickHouse.PasswordFile)),
		set("NCCLWATCH_INVENTORY", str(&c.Inventory)),
		set("NCCLWATCH_CLUSTER", str(&c.Pipeline.Cluster)),
		set("NCCLWATCH_CLICKHOUSE_CLUSTER", str(&c.ClickHouse.Cluster)),
		set("NCCLWATCH_LISTEN", str(&c.HTTP.Listen)),
		set("NCCLWATCH_API_TOKEN_FILE", str(&c.HTTP.APITokenFile)),
		set("NCCLWATCH_LOG_LEVEL", str(&c.Log.Level)),
		set("NCCLWATCH_OTLP_ENDPOINT", str(&c.Tracing.OTLPEndpoint)),
		set("NCCLWATCH_MIGRATE", func(v string) error {
			b, err := strconv.ParseBool(v)
			c.Migrate = b
			return err
		}),
	)
}

func (c *serviceConfig) sasl() *kafka.SASLConfig {
	if c.Kafka.SASL == nil {
		c.Kafka.SASL = &kafka.SASLConfig{Mechanism: "PLAIN"}
	}
	return c.Kafka.SASL
}

// validate checks every component's configuration once at start.
func (c *serviceConfig) validate() error {
	errs := []error{c.Kafka.Validate(), c.ClickHouse.Validate(), c.Pipeline.Validate(), c.Rules.Validate(), c.Telemetry.Validate()}
	if c.Decoder.MaxLineBytes <= 0 {
		errs = append(errs, errors.New("decoder.max_line_bytes: must be > 0"))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not debug, info, warn or error", c.Log.Level))
	}
	return errors.Join(errs...)
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// durationFlag lets a flag.FlagSet set a time.Duration field in place.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err == nil {
		*f.d = d
	}
	return err
}

// listFlag sets a []string from a comma-separated value.
type listFlag struct{ l *[]string }

func (f listFlag) String() string {
	if f.l == nil {
		return ""
	}
	return strings.Join(*f.l, ",")
}

func (f listFlag) Set(s string) error { *f.l = splitList(s); return nil }
