package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
)

// readmeBlock is one fenced block of README.md or of a docs/*.md file,
// marked for this test by an HTML comment on the line before it:
//
//	<!-- readme-test: NAME [skip="PREFIX"] [expect="TEXT"]... [needs="servers"] -->
//
// sh blocks run in bash -e; sql blocks run through clickhouse-client.
// skip drops the lines starting with PREFIX (make test cannot run itself);
// every expect must appear in the block's output; needs="servers" marks a
// block that needs the Kafka broker and the ClickHouse server (sql blocks
// always do).
type readmeBlock struct {
	file, name, lang, text string
	line                   int
	skip, expect           []string
	servers                bool
}

// where names the block by file and line for failures.
func (b readmeBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// needsServers says whether the block can run only against real servers.
func (b readmeBlock) needsServers() bool { return b.servers || b.lang == "sql" }

// readmeBlocks extracts the marked blocks of one file, named file in
// errors; a marker not followed by a fenced block is an error, so a marker
// cannot silently stop testing.
func readmeBlocks(file string, readme []byte) ([]readmeBlock, error) {
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
				return nil, fmt.Errorf("%s:%d: readme-test marker %q not followed by a ```sh or ```sql block", file, pending.line, pending.name)
			}
			pending.lang = l[3:]
			cur, pending = pending, nil
		case strings.HasPrefix(l, "<!-- readme-test:"):
			b, err := parseMarker(strings.TrimSuffix(strings.TrimPrefix(l, "<!-- readme-test:"), "-->"))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", file, n, err)
			}
			b.file, b.line = file, n
			pending = &b
		}
	}
	if pending != nil || cur != nil {
		return nil, fmt.Errorf("%s: unterminated readme-test block", file)
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
		case "needs":
			if val != "servers" {
				return b, fmt.Errorf("readme-test %s: needs=%q: only \"servers\" is known", name, val)
			}
			b.servers = true
		default:
			return b, fmt.Errorf("readme-test %s: unknown attribute %q", name, key)
		}
		rest = v[len(q):]
	}
	return b, nil
}

// readmeBlockTimeout bounds one block, background processes included.
const readmeBlockTimeout = 3 * time.Minute

// TestREADME runs the marked command blocks of README.md and then of
// docs/*.md (scan, demo, guard, replay / run / migrate / query, rules)
// exactly as written, in that order, in a fresh directory holding a copy of
// the repository's tracked files. Only the server ports come from the
// environment, through the ${KAFKA_PORT:-9092}-style defaults the blocks
// themselves write. Their `ncclwatch` is this package built into a
// directory put first on PATH. Whatever a block leaves running (the
// backgrounded `run`) is stopped with its process group when the block
// ends. Without the test servers the blocks that need none still run and
// the others are skipped; under make test (NCCLWATCH_REQUIRE_SERVERS=1)
// every block runs. No block may leave a file in the copy: examples write
// into temporary directories.
func TestREADME(t *testing.T) {
	blocks := loadDocBlocks(t)
	env := os.Environ()
	chport := ""
	servers := os.Getenv("NCCLWATCH_TEST_KAFKA") != "" && os.Getenv("NCCLWATCH_TEST_CLICKHOUSE") != ""
	if servers || os.Getenv("NCCLWATCH_REQUIRE_SERVERS") == "1" {
		var kport string
		kport, chport = readmeServerEnv(t)
		env = append(env, "KAFKA_PORT="+kport, "CLICKHOUSE_PORT="+chport,
			// run's /metrics on a free port instead of :9464.
			"NCCLWATCH_LISTEN="+fmt.Sprintf("127.0.0.1:%d", freePort(t)))
		servers = true
	}
	tools := []string{"bash", "git", "go"}
	if servers {
		tools = append(tools, "clickhouse-client")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("README test needs %s: %v", tool, err)
		}
	}

	dir := copyTracked(t, "../..")
	before := treeFiles(t, dir)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "ncclwatch"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if servers {
		// A clean state: the database of an earlier run is gone.
		drop := exec.Command("clickhouse-client", "--port", chport, "--query", "DROP DATABASE IF EXISTS ncclwatch")
		if out, err := drop.CombinedOutput(); err != nil {
			t.Fatalf("drop database: %v\n%s", err, out)
		}
	}
	t.Logf("%d marked blocks", len(blocks))
	for _, b := range blocks {
		ok := t.Run(b.name, func(t *testing.T) {
			if b.needsServers() && !servers {
				t.Skipf("%s block %q needs the test servers (NCCLWATCH_TEST_KAFKA, NCCLWATCH_TEST_CLICKHOUSE)", b.where(), b.name)
			}
			out, err := runReadmeBlock(b, dir, env, chport)
			if err != nil {
				t.Fatalf("%s block %q: %v\n--- block ---\n%s--- output ---\n%s", b.where(), b.name, err, b.text, out)
			}
			for _, w := range b.expect {
				if !strings.Contains(out, w) {
					t.Errorf("%s block %q: output lacks %q\n--- output ---\n%s", b.where(), b.name, w, out)
				}
			}
			for _, f := range newFiles(before, treeFiles(t, dir)) {
				t.Errorf("%s block %q left %s in the working tree; write into a temporary directory", b.where(), b.name, f)
			}
			t.Logf("output:\n%s", out)
		})
		if !ok {
			break // later blocks build on earlier ones
		}
	}
}

// readmeServerEnv returns the Kafka and ClickHouse ports of the test
// servers, or skips (fails under NCCLWATCH_REQUIRE_SERVERS=1) when the
// blocks could not find them.
func readmeServerEnv(t *testing.T) (kport, chport string) {
	t.Helper()
	brokers, chAddr := itServers(t)
	_, kport, err := net.SplitHostPort(brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	_, chport, err = net.SplitHostPort(chAddr)
	if err != nil {
		t.Fatal(err)
	}
	// deploy/local's start commands in the blocks must find the running
	// servers, not start others on default ports: they need every port.
	testenv.Servers(t, "make test exports them", "KAFKA_CONTROLLER_PORT", "CLICKHOUSE_HTTP_PORT")
	return kport, chport
}

// treeFiles lists every file and directory under dir, relative to it.
func treeFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files[rel] = true
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// newFiles returns the paths of after that before lacks, sorted.
func newFiles(before, after map[string]bool) []string {
	var out []string
	for f := range after {
		if !before[f] {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
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

// docFiles are the files whose marked blocks are run: README.md first,
// then docs/*.md in name order.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(docs)
	return append([]string{"../../README.md"}, docs...)
}

// loadDocBlocks returns the marked blocks of README.md and docs/*.md, each
// named by its path from the repository root.
func loadDocBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	for _, path := range docFiles(t) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := readmeBlocks(strings.TrimPrefix(path, "../../"), text)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md and docs/*.md have no readme-test blocks")
	}
	return blocks
}

// TestREADMEBlocksParse checks that every block the documentation is known
// to mark is found, wherever it lives, and that a marker without a block
// or with an unknown attribute is an error.
func TestREADMEBlocksParse(t *testing.T) {
	blocks := loadDocBlocks(t)
	names := map[string]string{}
	for _, b := range blocks {
		if w, dup := names[b.name]; dup {
			t.Errorf("%s: block name %q also marks %s", b.where(), b.name, w)
		}
		names[b.name] = b.where()
		t.Logf("%s: block %q (%s)", b.where(), b.name, b.lang)
	}
	for _, want := range []string{"newcomer", "scan", "guard", "run", "sql", "rules"} {
		if names[want] == "" {
			t.Errorf("README.md and docs/*.md have no readme-test block %q", want)
		}
	}
	if !strings.HasPrefix(names["newcomer"], "README.md:") {
		t.Errorf("the newcomer block (ncclwatch demo, make test) is at %s; it belongs in README.md", names["newcomer"])
	}
	for _, b := range blocks {
		if b.name != "newcomer" {
			continue
		}
		for _, cmd := range []string{"go run ./cmd/ncclwatch demo", "\nmake test "} {
			if !strings.Contains("\n"+b.text, cmd) {
				t.Errorf("%s: the newcomer block lacks %q", b.where(), strings.TrimSpace(cmd))
			}
		}
	}
	if _, err := readmeBlocks("x.md", []byte("<!-- readme-test: x -->\ntext\n")); err == nil {
		t.Error("a marker without a block was accepted")
	} else if !strings.HasPrefix(err.Error(), "x.md:1:") {
		t.Errorf("error %q does not name file:line", err)
	}
	if _, err := readmeBlocks("x.md", []byte("<!-- readme-test: x needs=\"gpu\" -->\n```sh\ntrue\n```\n")); err == nil {
		t.Error("needs=\"gpu\" was accepted")
	}
	b, err := readmeBlocks("x.md", []byte("text\n<!-- readme-test: x needs=\"servers\" expect=\"y\" -->\n```sh\necho y\n```\n"))
	if err != nil || len(b) != 1 || !b[0].needsServers() || b[0].where() != "x.md:2" || b[0].text != "echo y\n" {
		t.Errorf("blocks = %+v, %v; want one at x.md:2 needing servers", b, err)
	}
	t.Logf("%d marked blocks", len(blocks))
}
