// Command ncclwatch reads the logs of GPU training jobs and tells, for every
// job, which fabric NCCL really used. Subcommands:
//
//	ncclwatch scan [--json] [--expect rdma|tcp|tcpx] [FILE|-]...
//
// See README.md for the full list and the exit statuses.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

const usage = `usage: ncclwatch <command> [flags] [args]

commands:
  demo     run the whole pipeline on bundled real logs (needs nothing but Go)
  scan     classify NCCL logs from files or stdin and print the verdict
  guard    run a training launcher, pass its output through, stop it on a socket fallback (exit 3)
  run      the service: Kafka → classify → ClickHouse, with /metrics
  migrate  apply the ClickHouse schema migrations
  rules    check rule files and run rule scenarios (rules check|test FILE...)
  telemetry  show what each log line gives as telemetry (telemetry test --config FILE LOG...)
  inventory  turn kubectl get nodes -o json into the node inventory (inventory import)
  replay   produce log files into Kafka as Fluent Bit records
  version  print the version

Run 'ncclwatch <command> -h' for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// NCCLWATCH_CPUPROFILE=FILE: a CPU profile, as the load benchmark
	// (cmd/ncclwatch-load --cpuprofile) takes of `ncclwatch run`, the
	// process it measures. NCCLWATCH_TRACE=FILE: a Go execution trace (go
	// tool trace FILE): where a profile shows what the process computes,
	// the trace shows when its goroutines wait, which is what limits `run`
	// when it uses less than the cores it has. NCCLWATCH_HEAPPROFILE=FILE:
	// the heap profile at the largest live heap (go tool pprof
	// -sample_index=inuse_space FILE).
	os.Exit(underFile("NCCLWATCH_CPUPROFILE", pprof.StartCPUProfile, pprof.StopCPUProfile, func() int {
		return underFile("NCCLWATCH_TRACE", trace.Start, trace.Stop, func() int {
			return underHeapProfile("NCCLWATCH_HEAPPROFILE", func() int {
				return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
			})
		})
	}))
}

// underFile runs fn between start and stop of a recorder writing to the
// file the environment variable env names, or just fn when it is unset.
func underFile(env string, start func(io.Writer) error, stop func(), fn func() int) int {
	file := os.Getenv(env)
	if file == "" {
		return fn()
	}
	f, err := os.Create(file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ncclwatch: %s: %v\n", env, err)
		return exitUsage
	}
	defer f.Close()
	if err := start(f); err != nil {
		fmt.Fprintf(os.Stderr, "ncclwatch: %s: %v\n", env, err)
		return exitUsage
	}
	defer stop()
	return fn()
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "scan":
		return runScan(args[1:], stdin, stdout, stderr)
	case "guard":
		return runGuard(args[1:], stdin, stdout, stderr)
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "run":
		return runService(args[1:], stderr)
	case "migrate":
		return runMigrate(args[1:], stdout, stderr)
	case "rules":
		return runRules(args[1:], stdout, stderr)
	case "telemetry":
		return runTelemetry(args[1:], stdin, stdout, stderr)
	case "inventory":
		return runInventory(args[1:], stdin, stdout, stderr)
	case "replay":
		return runReplay(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, versionString())
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "ncclwatch: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// parseArgs parses a command's flags; when it returns false the command
// ends with code (0 after -h, 2 for a usage error the flag set printed).
func parseArgs(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// Exit statuses, documented in README.md; scripts rely on them.
const (
	exitOK      = 0 // every verdict ok, or no NCCL evidence
	exitFinding = 1 // some verdict is socket_fallback, gdr_off or degraded
	exitUsage   = 2 // usage or I/O error
)
