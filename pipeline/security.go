package pipeline

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// TLSConfig is the client side of TLS towards a server (a Kafka broker, a
// ClickHouse native port). Files are PEM. The server's certificate is
// verified against CAFile (or the system pool) and must name the host that
// is dialled, or ServerName when set.
type TLSConfig struct {
	// CAFile holds the CAs that sign the servers' certificates; empty
	// means the system pool.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key for mutual
	// TLS; both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry when it
	// differs from the dialled host (e.g. an IP address behind a proxy).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Validate reports inconsistent fields; path names the config section
// ("kafka.tls"). A nil c is valid: TLS is off.
func (c *TLSConfig) Validate(path string) []error {
	if c == nil {
		return nil
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return []error{fmt.Errorf("%s.cert_file, %s.key_file: set both or neither", path, path)}
	}
	return nil
}

// Build loads the certificate files; nil when c is nil. path names the
// config section in errors.
func (c *TLSConfig) Build(path string) (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // opt-in, documented as tests only
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", path, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file: no PEM certificate in %s", path, c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.cert_file: %w", path, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// maxSecretBytes caps a secret file: a password or token is far shorter,
// and a bigger file is a wrong path (a key, a log), not a secret.
const maxSecretBytes = 4096

// ErrSecretFile is wrapped by every error of ReadSecret about the file's
// content.
var ErrSecretFile = errors.New("not a secret file")

// ReadSecret returns the secret a config section holds either inline
// (value, e.g. from an environment variable) or in a file (file, e.g. a
// mounted Kubernetes secret); setting both is an error. One trailing
// newline ("\n" or "\r\n") of the file is dropped, as `echo` and editors
// write it. path names the field in errors ("kafka.sasl.password"); errors
// name the file, never its content.
func ReadSecret(path, value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", fmt.Errorf("%s, %s_file: set one, not both", path, path)
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("%s_file: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("%s_file: %w", path, err)
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("%s_file: %s is over %d bytes: %w", path, file, maxSecretBytes, ErrSecretFile)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s_file: %s is empty: %w", path, file, ErrSecretFile)
	}
	return s, nil
}
