package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/internal/testenv"
)

// readmeBlock is one fenced block of README.md marked for this test by an
// HTML comment on the line before it:
//
//	<!-- readme-test: NAME [skip="PREFIX"] [expect="TEXT"]... -->
//
// sh blocks run in bash -e; sql blocks run through clickhouse-client.
// skip drops the lines starting with PREFIX (make test cannot run itself);
// every expect must appear in the block's output.
type readmeBlock struct {
	name, lang, text string
	line             int
	skip, expect     []string
}

// readmeBlocks extracts the marked blocks; a marker not followed by a
// fenced block is an error, so a marker cannot silently stop testing.
func readmeBlocks(readme []byte) ([]readmeBlock, error) {
	var out []readmeBlock
	sc := bufio.NewScanner(bytes.NewReader(readme))
	n := 0
	var cur *readmeBlock
	var pending *readmeBlock
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case cur != nil:
			if strings.HasPrefix(l, "```") {
				out = append(out, *cur)
				cur = nil
				continue
			}
			cur.text += l + "\n"
		case pending != nil:
			if !strings.HasPrefix(l, "```") || len(l) == 3 {
				return nil, fmt.Errorf("README.md:%d: readme-test marker %q not followed by a ```sh or ```sql block", pending.line, pending.name)
			}
			pending.lang = l[3:]
			cur, pending = pending, nil
		case strings.HasPrefix(l, "<!-- readme-test:"):
			b, err := parseMarker(strings.TrimSuffix(strings.TrimPrefix(l, "<!-- readme-test:"), "-->"))
			if err != nil {
				return nil, fmt.Errorf("README.md:%d: %w", n, err)
			}
			b.line = n
			pending = &b
		}
	}
	if pending != nil || cur != nil {
		return nil, errors.New("README.md: unterminated readme-test block")
	}
	return out, sc.Err()
}

func parseMarker(s string) (readmeBlock, error) {
	s = strings.TrimSpace(s)
	name, rest, _ := strings.Cut(s, " ")
	b := readmeBlock{name: name}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		key, v, ok := strings.Cut(rest, "=")
		if !ok || !strings.HasPrefix(v, `"`) {
			return b, fmt.Errorf("readme-test %s: bad attribute %q", name, rest)
		}
		q, err := strconv.QuotedPrefix(v)
		if err != nil {
			return b, fmt.Errorf("readme-test %s: %w", name, err)
		}
		val, _ := strconv.Unquote(q)
		switch key {
		case "skip":
			b.skip = append(b.skip, val)
		case "expect":
			b.expect = append(b.expect, val)
		default:
			return b, fmt.Errorf("readme-test %s: unknown attribute %q", name, key)
		}
		rest = v[len(q):]
	}
	return b, nil
}

// readmeBlockTimeout bounds one block, background processes included.
const readmeBlockTimeout = 3 * time.Minute

// TestREADME runs the README's marked command blocks (scan, demo, replay /
// run / migrate / query, rules) exactly as written, in order, in a fresh
// directory holding a copy of the repository's tracked files, against the
// real servers. Only the server ports come from the environment, through
// the ${KAFKA_PORT:-9092}-style defaults the README itself writes. The
// README's `ncclwatch` is this package built into a directory put first on
// PATH. Whatever a block leaves running (the backgrounded `run`) is stopped
// with its process group when the block ends.
func TestREADME(t *testing.T) {
	brokers, chAddr := itServers(t)
	for _, tool := range []string{"bash", "git", "clickhouse-client"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("README test needs %s: %v", tool, err)
		}
	}
	_, kport, err := net.SplitHostPort(brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	_, chport, err := net.SplitHostPort(chAddr)
	if err != nil {
		t.Fatal(err)
	}
	// deploy/local's start commands in the README must find the running
	// servers, not start others on default ports: they need every port.
	testenv.Servers(t, "make test exports them", "KAFKA_CONTROLLER_PORT", "CLICKHOUSE_HTTP_PORT")
	blocks := loadReadmeBlocks(t)

	dir := copyTracked(t, "../..")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "ncclwatch"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	env := append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KAFKA_PORT="+kport, "CLICKHOUSE_PORT="+chport,
		// run's /metrics on a free port instead of :9464.
		"NCCLWATCH_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)),
	)
	// A clean state: the README's database from an earlier run is gone.
	drop := exec.Command("clickhouse-client", "--port", chport, "--query", "DROP DATABASE IF EXISTS ncclwatch")
	if out, err := drop.CombinedOutput(); err != nil {
		t.Fatalf("drop database: %v\n%s", err, out)
	}
	t.Logf("%d README blocks", len(blocks))
	for _, b := range blocks {
		ok := t.Run(b.name, func(t *testing.T) {
			out, err := runReadmeBlock(b, dir, env, chport)
			if err != nil {
				t.Fatalf("README.md:%d block %q: %v\n--- block ---\n%s--- output ---\n%s", b.line, b.name, err, b.text, out)
			}
			for _, w := range b.expect {
				if !strings.Contains(out, w) {
					t.Errorf("README.md:%d block %q: output lacks %q\n--- output ---\n%s", b.line, b.name, w, out)
				}
			}
			t.Logf("output:\n%s", out)
		})
		if !ok {
			break // later blocks build on earlier ones
		}
	}
}

func runReadmeBlock(b readmeBlock, dir string, env []string, chport string) (string, error) {
	var lines []string
	for _, l := range strings.SplitAfter(b.text, "\n") {
		drop := false
		for _, p := range b.skip {
			drop = drop || strings.HasPrefix(l, p)
		}
		if !drop {
			lines = append(lines, l)
		}
	}
	text := strings.Join(lines, "")
	ctx, cancel := context.WithTimeout(context.Background(), readmeBlockTimeout)
	defer cancel()
	var cmd *exec.Cmd
	switch b.lang {
	case "sh":
		cmd = exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", text)
	case "sql":
		cmd = exec.CommandContext(ctx, "clickhouse-client", "--port", chport, "--multiquery", "--query", text)
	default:
		return "", fmt.Errorf("language %q: want sh or sql", b.lang)
	}
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that everything it started can be stopped.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return "", err
	}
	pgid := cmd.Process.Pid
	err := cmd.Wait()
	stopGroup(pgid)
	if ctx.Err() != nil {
		err = fmt.Errorf("not done within %s: %w", readmeBlockTimeout, err)
	}
	return out.String(), err
}

// stopGroup ends what a block left running: SIGTERM (run flushes and
// exits), then SIGKILL after a bounded wait.
func stopGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // nothing left
	}
	for range 100 {
		time.Sleep(100 * time.Millisecond)
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// copyTracked copies the files git tracks in root (with the working tree's
// content) into a fresh directory: what a clean clone holds.
func copyTracked(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dir := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if err != nil {
			continue // deleted in the working tree
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// loadReadmeBlocks returns the repository README's marked blocks.
func loadReadmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(readme)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no readme-test blocks")
	}
	return blocks
}

func TestREADMEBlocksParse(t *testing.T) {
	blocks := loadReadmeBlocks(t)
	names := map[string]bool{}
	for _, b := range blocks {
		names[b.name] = true
	}
	for _, want := range []string{"newcomer", "scan", "run", "sql", "rules"} {
		if !names[want] {
			t.Errorf("README.md has no readme-test block %q", want)
		}
	}
	if _, err := readmeBlocks([]byte("<!-- readme-test: x -->\ntext\n")); err == nil {
		t.Error("a marker without a block was accepted")
	}
}
