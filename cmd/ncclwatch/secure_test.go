package main

// Integration tests of `ncclwatch run` and `replay` on the secured
// listeners of deploy/local: Kafka's SASL_SSL listener (SCRAM-SHA-512 over
// TLS, StandardAuthorizer ACLs; kafka.sh with KAFKA_SASL_PORT) and
// ClickHouse's TLS native port with a password user (clickhouse.sh with
// CLICKHOUSE_TLS_PORT). `make test` sets NCCLWATCH_TEST_KAFKA_SASL,
// NCCLWATCH_TEST_KAFKA_SECURE_DIR, NCCLWATCH_TEST_CLICKHOUSE_TLS and
// NCCLWATCH_TEST_CLICKHOUSE_SECURE_DIR; the secure dirs hold the throwaway
// CA (ca.pem) and the users' password files the scripts made.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

// secureEnv is where the secured servers are and what a client needs.
type secureEnv struct {
	kafkaAddr, kafkaDir string // SASL_SSL listener; ca.pem, ncclwatch.password, nogroup.password
	chAddr, chDir       string // TLS native port; ca.pem, ncclwatch.password
}

func secureServers(t *testing.T) secureEnv {
	t.Helper()
	v := testenv.Servers(t, "secured servers", "NCCLWATCH_TEST_KAFKA_SASL", "NCCLWATCH_TEST_KAFKA_SECURE_DIR",
		"NCCLWATCH_TEST_CLICKHOUSE_TLS", "NCCLWATCH_TEST_CLICKHOUSE_SECURE_DIR")
	return secureEnv{kafkaAddr: v[0], kafkaDir: v[1], chAddr: v[2], chDir: v[3]}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// secureConfig is a `run` config through both secured servers. Fields left
// empty take the working defaults: user ncclwatch with its password file,
// the scripts' CAs.
type secureConfig struct {
	kafkaUser, kafkaPasswordFile, kafkaCA, kafkaServerName string
	chPasswordFile, chCA                                   string // chPasswordFile "" = from env
}

func (s secureEnv) write(t *testing.T, e *itEnv, dir, name string, c secureConfig) (path, addr string) {
	t.Helper()
	if c.kafkaUser == "" {
		c.kafkaUser = "ncclwatch"
	}
	if c.kafkaPasswordFile == "" {
		c.kafkaPasswordFile = filepath.Join(s.kafkaDir, c.kafkaUser+".password")
	}
	if c.kafkaCA == "" {
		c.kafkaCA = filepath.Join(s.kafkaDir, "ca.pem")
	}
	if c.chCA == "" {
		c.chCA = filepath.Join(s.chDir, "ca.pem")
	}
	serverName := ""
	if c.kafkaServerName != "" {
		serverName = "\n    server_name: " + c.kafkaServerName
	}
	chPassword := ""
	if c.chPasswordFile != "" {
		chPassword = "\n  password_file: " + c.chPasswordFile
	}
	port := freePort(t)
	path = filepath.Join(dir, name+".yaml")
	yaml := fmt.Sprintf(`kafka:
  brokers: [%q]
  topics: [%q]
  group_id: %q
  max_wait: 100ms
  heartbeat_interval: 500ms
  session_timeout: 6s
  rebalance_timeout: 10s
  tls:
    ca_file: %s%s
  sasl:
    mechanism: SCRAM-SHA-512
    username: %s
    password_file: %s
clickhouse:
  addr: [%q]
  database: %s
  username: ncclwatch%s
  tls:
    ca_file: %s
http:
  listen: 127.0.0.1:%d
migrate: true
`, s.kafkaAddr, e.topic, e.group, c.kafkaCA, serverName, c.kafkaUser, c.kafkaPasswordFile,
		s.chAddr, e.db, chPassword, c.chCA, port)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, fmt.Sprintf("127.0.0.1:%d", port)
}

// newSecureITEnv is an itEnv whose topic and group fall under the ACLs
// kafka.sh grants (prefix ncclwatch-sasl-); the topic is made over the
// plaintext listener.
func newSecureITEnv(t *testing.T) (*itEnv, secureEnv) {
	t.Helper()
	sec := secureServers(t)
	brokers, chAddr := itServers(t)
	e := newITEnv(t, brokers, chAddr, 1)
	suffix := randHex()
	e.topic, e.group = "ncclwatch-sasl-"+suffix, "ncclwatch-sasl-"+suffix
	ctx, cancel := context.WithTimeout(context.Background(), itWait)
	defer cancel()
	if err := kafka.CreateTopic(ctx, brokers, e.topic, 2); err != nil {
		t.Fatalf("CreateTopic(%s) = %v", e.topic, err)
	}
	return e, sec
}

// noSecret fails when any secret occurs in what a process wrote.
func noSecret(t *testing.T, what, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(out, s) {
			t.Errorf("%s contains a secret (%d bytes)", what, len(s))
		}
	}
}

// TestIntegrationSecured: replay produces and run consumes with SCRAM-SHA-512
// over TLS (CA verified, host name checked), and run stores through the
// ClickHouse TLS port as a password user; the end state equals scan. Then
// everything the process wrote — its log, /metrics, and the goroutine dump
// of SIGQUIT (what a panic prints) — is searched for both passwords.
func TestIntegrationSecured(t *testing.T) {
	e, sec := newSecureITEnv(t)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	kafkaPassword := readFile(t, filepath.Join(sec.kafkaDir, "ncclwatch.password"))
	chPassword := readFile(t, filepath.Join(sec.chDir, "ncclwatch.password"))
	// Kafka's password from a file, ClickHouse's from the environment.
	config, addr := sec.write(t, e, dir, "secure", secureConfig{})

	files := []string{
		"083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log",
		"107_silent_socket_fallback_cross_dc_h100nvl_a100_16rank_nccl2.26.2.log",
	}
	wantRows := map[string]verdictRow{}
	var replayOut bytes.Buffer
	for _, f := range files {
		job := "sec-" + f[:3]
		wantRows[job] = want(t, corpus+f)
		cmd := exec.Command(bin, "replay", "--config", config, "--topic", e.topic, "--job", job, corpus+f)
		cmd.Env = append(os.Environ(), "NCCLWATCH_BROKERS=")
		out, err := cmd.CombinedOutput()
		replayOut.Write(out)
		if err != nil {
			t.Fatalf("replay %s over SASL_SSL: %v\n%s", f, err, out)
		}
	}
	noSecret(t, "replay's output", replayOut.String(), kafkaPassword, chPassword)

	logPath := filepath.Join(dir, "run.log")
	p := startProcess(t, bin, config, logPath, addr, "NCCLWATCH_CLICKHOUSE_PASSWORD="+chPassword)
	e.waitVerdicts(t, wantRows, p.dump)
	code, metrics, err := httpGet("http://" + addr + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", code, err)
	}
	noSecret(t, "/metrics", metrics, kafkaPassword, chPassword)
	// SIGQUIT makes the Go runtime print every goroutine's stack, as a
	// panic does, and exit.
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not exit within 30s of SIGQUIT")
	}
	logged, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(logged, []byte("goroutine ")) {
		t.Fatalf("no goroutine dump after SIGQUIT:\n%s", tail(string(logged), 20))
	}
	noSecret(t, "run's log and goroutine dump", string(logged), kafkaPassword, chPassword)
}

// TestIntegrationSecuredRefused: each wrong credential or certificate ends
// `run` (or `replay`) at once with an error that says what is wrong, and
// the error shows no secret.
func TestIntegrationSecuredRefused(t *testing.T) {
	e, sec := newSecureITEnv(t)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	wrong := filepath.Join(dir, "wrong.password")
	const wrongPassword = "not-the-password-0123456789"
	if err := os.WriteFile(wrong, []byte(wrongPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherCA := writeOtherCA(t, dir)
	kafkaPassword := readFile(t, filepath.Join(sec.kafkaDir, "ncclwatch.password"))
	chPasswordFile := filepath.Join(sec.chDir, "ncclwatch.password")
	chPassword := readFile(t, chPasswordFile)
	tests := []struct {
		name   string
		replay bool // replay instead of run
		cfg    secureConfig
		want   string
	}{
		{"kafka wrong password", false, secureConfig{kafkaPasswordFile: wrong},
			"could not successfully authenticate to " + sec.kafkaAddr + " with SASL: [58] SASL Authentication Failed"},
		{"kafka unknown CA", false, secureConfig{kafkaCA: otherCA},
			"tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"kafka host name", false, secureConfig{kafkaServerName: "wrong.example"},
			"x509: certificate is valid for localhost, not wrong.example"},
		{"kafka no READ on group", false, secureConfig{kafkaUser: "nogroup"},
			"[30] Group Authorization Failed"},
		{"replay wrong password", true, secureConfig{kafkaPasswordFile: wrong},
			"[58] SASL Authentication Failed"},
		{"replay no WRITE on topic", true, secureConfig{kafkaUser: "nogroup"},
			"[29] Topic Authorization Failed"},
		{"clickhouse wrong password", false, secureConfig{chPasswordFile: wrong},
			"clickhouse ping " + sec.chAddr + ": code: 193, message: Wrong password for user ncclwatch (check clickhouse.username, clickhouse.password or clickhouse.password_file"},
		{"clickhouse unknown CA", false, secureConfig{chPasswordFile: chPasswordFile, chCA: otherCA},
			"x509: certificate signed by unknown authority"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.chPasswordFile == "" {
				tc.cfg.chPasswordFile = chPasswordFile
			}
			config, _ := sec.write(t, e, dir, fmt.Sprint("refused", i), tc.cfg)
			args := []string{"run", "--config", config}
			if tc.replay {
				args = []string{"replay", "--config", config, "--topic", e.topic, "--job", "refused", corpus + "083_bracket_timestamp_doublespaced_k8s_ib_gdrdma_2node_16rank.log"}
			}
			// Fail fast: well before any retry deadline (60 s) runs out.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), "NCCLWATCH_BROKERS=", "NCCLWATCH_CLICKHOUSE=")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case ctx.Err() != nil:
				t.Fatalf("%s did not exit within 30s:\n%s", args[0], tail(string(out), 10))
			case !errors.As(err, &exit):
				t.Fatalf("%s = %v; want a non-zero exit\n%s", args[0], err, tail(string(out), 10))
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("%s output does not say %q:\n%s", args[0], tc.want, tail(string(out), 10))
			}
			t.Logf("%s exited %d: %s", args[0], exit.ExitCode(), lastError(out))
			noSecret(t, args[0]+"'s output", string(out), kafkaPassword, chPassword, wrongPassword)
		})
	}
}

// lastError is the error field of the last log line that has one (or the
// last line).
func lastError(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if _, after, ok := strings.Cut(lines[i], `"error":`); ok {
			return after
		}
	}
	return lines[len(lines)-1]
}

// writeOtherCA writes a CA certificate that signed nothing the servers use.
func writeOtherCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "some other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
