package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/rules"
)

// exitGuardStopped is guard's exit status when it stopped the job because
// the negotiated fabric broke the policy (README.md, "`ncclwatch guard`").
const exitGuardStopped = 3

// guardPolicy is what guard enforces, from flags and NCCLWATCH_GUARD_* env.
type guardPolicy struct {
	forbid    []pipeline.Verdict
	kill      bool          // stop the job; false: only warn
	settle    time.Duration // decide this long after the first NCCL line even without Init COMPLETE
	grace     time.Duration // SIGTERM → SIGKILL
	expect    pipeline.Expectation
	inventory *pipeline.Inventory
	ncclDebug bool // set NCCL_DEBUG=INFO when the job's env lacks it
	report    string
}

func (p guardPolicy) forbids(v pipeline.Verdict) bool { return slices.Contains(p.forbid, v) }

// envOr returns the environment variable key, or def when unset or empty.
func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

func parseGuardPolicy(args []string, getenv func(string) string, stderr io.Writer) (guardPolicy, []string, int, bool) {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	expectNet := fs.String("expect", envOr(getenv, "NCCLWATCH_GUARD_EXPECT", "rdma"), "network class multi-node communicators should use: rdma, tcp or tcpx (env NCCLWATCH_GUARD_EXPECT)")
	noGDR := fs.Bool("no-gdr-expected", false, "do not count RDMA without GPUDirect RDMA as gdr_off")
	hcas := fs.Int("hcas", 0, "HCAs each node provides; fewer in use is degraded (0: unknown)")
	inventory := fs.String("inventory", getenv("NCCLWATCH_GUARD_INVENTORY"), "node inventory (YAML or CSV), as for scan (env NCCLWATCH_GUARD_INVENTORY)")
	forbid := fs.String("forbid", envOr(getenv, "NCCLWATCH_GUARD_FORBID", "socket_fallback"), "verdicts that break the policy, comma-separated: socket_fallback, gdr_off, degraded (env NCCLWATCH_GUARD_FORBID)")
	onFallback := fs.String("on-fallback", envOr(getenv, "NCCLWATCH_GUARD_ON_FALLBACK", "kill"), "what to do when a forbidden verdict settles: kill (stop the job, exit 3) or warn (env NCCLWATCH_GUARD_ON_FALLBACK)")
	settle := fs.Duration("settle", 120*time.Second, "decide this long after the first NCCL line even if no communicator printed Init COMPLETE (env NCCLWATCH_GUARD_SETTLE)")
	grace := fs.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL to the job's process group")
	noDebug := fs.Bool("no-nccl-debug", false, "leave NCCL_DEBUG alone when the job's environment does not set it")
	report := fs.String("report", getenv("NCCLWATCH_GUARD_REPORT"), "also send the job's NCCL lines to the service: kafka://BROKER[,BROKER]/TOPIC (env NCCLWATCH_GUARD_REPORT)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch guard [flags] -- COMMAND [ARG]...\n\nRun COMMAND (torchrun, srun, mpirun, python ...) in its own process group, pass its output through\nunchanged, classify its NCCL init live and stop it when the negotiated fabric breaks the policy.\n\nExit status: the command's own (128+N when killed by signal N), 3 when guard stopped it, 2 usage error.\n\nflags:")
		fs.PrintDefaults()
	}
	if v := getenv("NCCLWATCH_GUARD_SETTLE"); v != "" {
		if err := fs.Set("settle", v); err != nil {
			fmt.Fprintln(stderr, "ncclwatch guard: NCCLWATCH_GUARD_SETTLE:", err)
			return guardPolicy{}, nil, exitUsage, false
		}
	}
	if code, ok := parseArgs(fs, args); !ok {
		return guardPolicy{}, nil, code, false
	}
	fail := func(format string, a ...any) (guardPolicy, []string, int, bool) {
		fmt.Fprintf(stderr, "ncclwatch guard: "+format+"\n", a...)
		return guardPolicy{}, nil, exitUsage, false
	}
	p := guardPolicy{settle: *settle, grace: *grace, ncclDebug: !*noDebug, report: *report,
		expect: pipeline.Expectation{Network: *expectNet, HCAs: *hcas}}
	if *noGDR {
		f := false
		p.expect.GDR = &f
	}
	acfg := pipeline.DefaultAssemblerConfig()
	acfg.Expect = p.expect
	if err := acfg.Validate(); err != nil {
		return fail("%s", strings.Replace(err.Error(), "assembler.expect.network", "--expect", 1))
	}
	for _, v := range splitList(*forbid) {
		switch vv := pipeline.Verdict(v); vv {
		case pipeline.VerdictSocketFallback, pipeline.VerdictGDROff, pipeline.VerdictDegraded:
			p.forbid = append(p.forbid, vv)
		default:
			return fail("--forbid: %q is not one of socket_fallback, gdr_off, degraded", v)
		}
	}
	switch *onFallback {
	case "kill":
		p.kill = true
	case "warn":
	default:
		return fail("--on-fallback: want kill or warn, not %q", *onFallback)
	}
	if p.settle <= 0 || p.grace <= 0 {
		return fail("--settle and --grace: must be > 0")
	}
	if *inventory != "" {
		inv, err := pipeline.LoadInventory(*inventory)
		if err != nil {
			return fail("%v", err)
		}
		p.inventory = inv
	}
	if p.report != "" {
		if _, err := parseGuardReport(p.report); err != nil {
			return fail("--report: %v", err)
		}
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		return fail("no command: ncclwatch guard [flags] -- COMMAND [ARG]...")
	}
	return p, cmd, 0, true
}

func runGuard(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	p, argv, code, ok := parseGuardPolicy(args, os.Getenv, stderr)
	if !ok {
		return code
	}
	g := &guard{policy: p, stdout: stdout, stderr: &lockedWriter{w: stderr}}
	return g.run(argv, stdin, os.Environ())
}

// lockedWriter serialises writes of the child's stderr copy and guard's own
// messages, so guard's block never lands inside one of the child's writes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type guard struct {
	policy guardPolicy
	stdout io.Writer
	stderr *lockedWriter
}

func (g *guard) say(format string, a ...any) {
	fmt.Fprintf(g.stderr, "ncclwatch guard: "+format+"\n", a...)
}

// guardEnv returns the job's environment: env, plus NCCL_DEBUG=INFO and
// NCCL_DEBUG_SUBSYS=INIT,NET,ENV when NCCL_DEBUG is unset and allowed.
func guardEnv(env []string, allowed bool) (out []string, added bool) {
	if !allowed {
		return env, false
	}
	has := func(k string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	if has("NCCL_DEBUG") {
		return env, false
	}
	out = append(slices.Clip(env), "NCCL_DEBUG=INFO")
	if !has("NCCL_DEBUG_SUBSYS") {
		out = append(out, "NCCL_DEBUG_SUBSYS=INIT,NET,ENV")
	}
	return out, true
}

// guardLine is one complete line of the job's output, owned by the receiver.
type guardLine []byte

// guardDecision is what the classifier concluded once the job settled.
type guardDecision struct {
	comms  []pipeline.CommSummary
	sum    pipeline.JobSummary
	why    string // "Init COMPLETE" or "--settle 2m0s after the first NCCL line"
	at     time.Time
	first  time.Time
	lines  int64
	alerts []pipeline.Alert
}

func (g *guard) run(argv []string, stdin io.Reader, environ []string) int {
	env, added := guardEnv(environ, g.policy.ncclDebug)
	if added {
		g.say("NCCL_DEBUG was not set; running the job with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV (--no-nccl-debug to leave it unset)")
	}
	var rep *guardReporter
	if g.policy.report != "" {
		var err error
		if rep, err = newGuardReporter(g.policy.report, argv); err != nil {
			g.say("--report: %v", err)
			return exitUsage
		}
		defer rep.close(g)
	}
	// Signals arrive while the job starts; forward them all once it runs.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	cmd, outR, errR, tty, code := g.start(argv, stdin, env)
	if cmd == nil {
		return code
	}
	if tty {
		defer takeForeground()
	}
	pgid := cmd.Process.Pid

	lines := make(chan guardLine, 256)
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() { defer copiers.Done(); teeLines(outR, g.stdout, lines) }()
	go func() { defer copiers.Done(); teeLines(errR, g.stderr, lines) }()
	copied := make(chan struct{})
	go func() { copiers.Wait(); close(lines); close(copied) }()

	decided := make(chan guardDecision, 1)
	finalc := make(chan *guardDecision, 1)
	go func() { finalc <- g.classify(lines, decided, rep) }()

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	start := time.Now()
	stopped, waitErr := g.supervise(pgid, sigs, decided, exited, start)
	if stopped {
		// Stragglers of the group (a launcher's workers) go too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	// The output pipes reach EOF when every holder closed them; a daemon the
	// job left behind may keep them open, so wait a bounded time.
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
		outR.Close()
		errR.Close()
		<-copied
	}
	final := <-finalc
	if final != nil && !stopped {
		g.say("the job ended before its communicators settled")
		g.block(*final, start, 0)
	}
	if stopped {
		g.say("job stopped after %s; exit status %d", time.Since(start).Round(time.Millisecond), exitGuardStopped)
		return exitGuardStopped
	}
	return exitStatus(waitErr)
}

// start starts the job in a process group of its own, its output into two
// pipes; with the terminal as stdin it gets the foreground (tty). A job
// that did not start gives a nil cmd and guard's exit code.
func (g *guard) start(argv []string, stdin io.Reader, env []string) (cmd *exec.Cmd, outR, errR *os.File, tty bool, code int) {
	outR, outW, err := os.Pipe()
	if err != nil {
		g.say("%v", err)
		return nil, nil, nil, false, exitUsage
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		g.say("%v", err)
		return nil, nil, nil, false, exitUsage
	}
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if f, ok := stdin.(*os.File); ok && f.Fd() == 0 && isTTY(0) {
		// A job in a background process group stops on its first read
		// from the terminal (SIGTTIN): give it the foreground, and take it
		// back when it ends. Ctrl-C then reaches it from the terminal.
		tty = true
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = 0
	}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		g.say("start %s: %v", argv[0], err)
		return nil, nil, nil, false, 127
	}
	return cmd, outR, errR, tty, 0
}

// supervise forwards signals to the job's process group, shows the
// decision when it comes (and with --kill stops the job, SIGKILL after
// the grace time) until the job exits; stopped says guard stopped it.
func (g *guard) supervise(pgid int, sigs <-chan os.Signal, decided <-chan guardDecision, exited <-chan error,
	start time.Time) (stopped bool, waitErr error) {
	var killTimer <-chan time.Time
	for {
		select {
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case d := <-decided:
			g.block(d, start, pgid)
			if g.policy.kill && !stopped {
				stopped = true
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
				killTimer = time.After(g.policy.grace)
			}
		case <-killTimer:
			g.say("job still running %s after SIGTERM; sending SIGKILL to process group %d", g.policy.grace, pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case waitErr = <-exited:
			return stopped, waitErr
		}
	}
}

// exitStatus mirrors the job's: its code, or 128+N when signal N ended it.
func exitStatus(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitUsage
}

// isTTY reports whether fd is a terminal (a character device such as
// /dev/null is not).
func isTTY(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, uintptr(syscall.TCGETS), uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// takeForeground makes guard's process group the terminal's foreground group
// again after a job that held it ended.
func takeForeground() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := syscall.Getpgrp()
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&pgrp)))
}

// guardMaxLine caps the lines handed to the classifier (the output itself is
// never cut): as scan's --max-line-bytes default.
const guardMaxLine = 64 << 10

// teeLines copies r to w as it arrives, byte for byte, and sends every
// complete line (without its newline) to lines. Lines over guardMaxLine are
// not classified. It returns at EOF or a read error; a write error to w
// (a closed terminal) stops the copy but not the reading, so the job never
// blocks on a full pipe.
func teeLines(r io.Reader, w io.Writer, lines chan<- guardLine) {
	buf := make([]byte, 32<<10)
	var part []byte
	over := false
	writeOK := true
	for {
		n, err := r.Read(buf)
		if n > 0 {
			b := buf[:n]
			if writeOK {
				if _, werr := w.Write(b); werr != nil {
					writeOK = false
				}
			}
			for len(b) > 0 {
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					if !over && len(part)+len(b) <= guardMaxLine {
						part = append(part, b...)
					} else {
						over, part = true, part[:0]
					}
					break
				}
				if !over && len(part)+i <= guardMaxLine {
					line := make(guardLine, 0, len(part)+i)
					line = append(append(line, part...), b[:i]...)
					lines <- line
				}
				part, over = part[:0], false
				b = b[i+1:]
			}
		}
		if err != nil {
			if len(part) > 0 && !over {
				lines <- guardLine(slices.Clone(part))
			}
			return
		}
	}
}

// guardTick is how often the classifier looks at the assembled summaries:
// often enough that a decision follows Init COMPLETE well within a second,
// rarely enough that a chatty job's summaries are not rebuilt per line.
const guardTick = 200 * time.Millisecond

// classify runs the scan path over the job's lines until lines closes. It
// sends the first settled decision whose verdict the policy forbids to
// decided (once) and returns the final state if the job ended with a
// forbidden verdict that never settled, else nil.
func (g *guard) classify(lines <-chan guardLine, decided chan<- guardDecision, rep *guardReporter) *guardDecision {
	s := newScanner(g.policy.expect, guardMaxLine, g.policy.inventory, false)
	emit := s.stage.Line
	if rep != nil {
		emit = func(rec *pipeline.Record) {
			n := s.stage.Stats().NCCLLines
			s.stage.Line(rec)
			if s.stage.Stats().NCCLLines > n {
				rep.add(rec.Text)
			}
		}
	}
	tick := time.NewTicker(guardTick)
	defer tick.Stop()
	var first time.Time
	var seen int64 // NCCL lines at the last evaluation
	sent, settleChecked := false, false
	evaluate := func(now time.Time, final bool) *guardDecision {
		changed := s.stage.Stats().NCCLLines != seen
		settleDue := !settleChecked && !first.IsZero() && now.Sub(first) >= g.policy.settle
		if !changed && !settleDue && !final {
			return nil
		}
		settleChecked = settleChecked || settleDue
		seen = s.stage.Stats().NCCLLines
		d, ok := g.decide(s, first, now, final)
		if !ok {
			return nil
		}
		return &d
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if sent {
					return nil
				}
				return evaluate(time.Now(), true)
			}
			if err := s.dec.Decode(line, emit); err != nil {
				if errors.Is(err, parsers.ErrOversized) {
					s.input.Oversized++
				} else {
					s.input.Malformed++
				}
			}
			s.dec.Flush(emit)
			if first.IsZero() && s.stage.Stats().NCCLLines > 0 {
				first = time.Now()
			}
		case now := <-tick.C:
			if sent {
				continue
			}
			if d := evaluate(now, false); d != nil {
				decided <- *d
				sent = true
			}
		}
	}
}

// decide reports a decision when the job settled (or ended, when final) with
// a verdict the policy forbids.
func (g *guard) decide(s *scanner, first, now time.Time, final bool) (guardDecision, bool) {
	// The enriched summary (the inventory's expectation and topology);
	// the topology never changes the verdict.
	comms, sum, ok := s.stage.Summary(scanJob)
	if !ok || !g.policy.forbids(sum.Verdict) {
		return guardDecision{}, false
	}
	d := guardDecision{comms: comms, sum: sum, at: now, first: first, lines: s.stage.Stats().NCCLLines}
	complete := false
	for _, c := range comms {
		// NCCL prints a process's NET and channel lines before its Init
		// COMPLETE, and the job's verdict is the worst of its
		// communicators': once one completed, more lines only add ranks.
		complete = complete || c.InitComplete
	}
	switch {
	case complete:
		d.why = "a communicator printed Init COMPLETE"
	case !first.IsZero() && now.Sub(first) >= g.policy.settle:
		d.why = fmt.Sprintf("--settle %s passed since the first NCCL line", g.policy.settle)
	case final:
		d.why = "the job's output ended"
	default:
		return guardDecision{}, false
	}
	if rs, err := rules.Builtin(); err == nil {
		// The same batch through the rules stage to a scan sink, as scan
		// hands it.
		if b, ok := s.stage.SummaryBatch(scanJob); ok {
			sink, _ := fileChain(rs, b, now, zerolog.Nop())
			d.alerts = sink.alerts
		}
	}
	return d, true
}

// block prints the one block that says what NCCL negotiated, why that breaks
// the policy and what to check (the built-in rules' runbooks). pgid 0 means
// the job is no longer running.
func (g *guard) block(d guardDecision, start time.Time, pgid int) {
	var b strings.Builder
	bar := strings.Repeat("=", 72)
	fmt.Fprintf(&b, "ncclwatch guard: %s\n", bar)
	s := d.sum
	fmt.Fprintf(&b, "ncclwatch guard: verdict %s, %s after start (%s)\n", s.Verdict,
		d.at.Sub(start).Round(time.Millisecond), d.why)
	network := strOrDash(s.Network)
	if s.NetworkClass != nil {
		network += " (" + *s.NetworkClass + ")"
	}
	fmt.Fprintf(&b, "ncclwatch guard: negotiated: network %s, fabric %s, GDR %s, %s nodes, %s ranks, NCCL %s, %d NCCL lines\n",
		network, strOrDash(s.Fabric), boolOrDash(s.GDR), intOrDash(s.NNodes), intOrDash(s.NRanks),
		strOrDash(s.NCCLVersion), d.lines)
	for _, c := range d.comms {
		if !g.policy.forbids(c.Verdict) {
			continue
		}
		fmt.Fprintf(&b, "ncclwatch guard:   comm %s: %s on %s, %s ranks, hosts %s\n", orDash(c.CommID), c.Verdict,
			strOrDash(c.Network), intOrDash(c.NRanks), listOrDash(c.Hosts))
	}
	exp := g.policy.expect.Network
	fmt.Fprintf(&b, "ncclwatch guard: why: the policy (--expect %s, --forbid %s) forbids %s:\n", exp,
		joinVerdicts(g.policy.forbid), s.Verdict)
	for _, r := range s.Reasons {
		fmt.Fprintf(&b, "ncclwatch guard:   - %s\n", r)
	}
	for _, a := range d.alerts {
		if rb := a.Annotations["runbook"]; rb != "" {
			fmt.Fprintf(&b, "ncclwatch guard: check (%s): %s\n", a.Rule, rb)
		}
	}
	switch {
	case pgid == 0:
		fmt.Fprintf(&b, "ncclwatch guard: action: none, the job already ended\n")
	case g.policy.kill:
		fmt.Fprintf(&b, "ncclwatch guard: action: stopping the job: SIGTERM to process group %d, SIGKILL after %s; exit status %d\n",
			pgid, g.policy.grace, exitGuardStopped)
	default:
		fmt.Fprintf(&b, "ncclwatch guard: action: warn only (--on-fallback warn); the job keeps running\n")
	}
	fmt.Fprintf(&b, "ncclwatch guard: %s\n", bar)
	io.WriteString(g.stderr, b.String())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joinVerdicts(vs []pipeline.Verdict) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ",")
}
