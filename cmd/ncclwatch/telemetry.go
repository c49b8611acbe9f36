package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
)

const telemetryUsage = `usage: ncclwatch telemetry test [--config FILE] LOG...

  test    read each LOG ('-' is standard input) with the telemetry line
          parser configured by FILE's telemetry section (declared formats,
          JSON field names; docs/telemetry.md) and print, for each line
          that gives telemetry, its number, the reader that took it
          (declared:NAME, progress, or a named reader) and its figures,
          then the lines read per reader, like 'rules test'

Exit status: 0, or 2 on a configuration, usage or I/O error.
`

// runTelemetry implements `ncclwatch telemetry test`.
func runTelemetry(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "test" {
		if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, telemetryUsage)
			return exitOK
		}
		fmt.Fprint(stderr, telemetryUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("telemetry test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, telemetryUsage) }
	config := fs.String("config", "", "configuration file (its telemetry section is used)")
	if code, ok := parseArgs(fs, args[1:]); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "ncclwatch telemetry test: no logs given\n\n%s", telemetryUsage)
		return exitUsage
	}
	cfg := defaultServiceConfig()
	if *config != "" {
		if err := cfg.loadFile(*config); err != nil {
			fmt.Fprintf(stderr, "ncclwatch telemetry test: %v\n", err)
			return exitUsage
		}
	}
	if err := cfg.Telemetry.Validate(); err != nil {
		for _, e := range splitJoined(err) {
			fmt.Fprintf(stderr, "ncclwatch telemetry test: %s\n", strings.TrimPrefix(e, parsers.ErrTelemetryConfig.Error()+": "))
		}
		return exitUsage
	}
	declared := map[string]bool{}
	for _, f := range cfg.Telemetry.Formats {
		declared[f.Name] = true
	}
	lines := parsers.NewLines(parsers.NewTelemetry(cfg.Telemetry))
	counts := map[string]int{}
	for _, name := range fs.Args() {
		if err := telemetryTestFile(name, stdin, stdout, lines, declared, counts); err != nil {
			fmt.Fprintf(stderr, "ncclwatch telemetry test: %v\n", err)
			return exitUsage
		}
	}
	readers := make([]string, 0, len(counts))
	total := 0
	for r, n := range counts {
		readers = append(readers, r)
		total += n
	}
	sort.Strings(readers)
	fmt.Fprintf(stdout, "%d telemetry lines", total)
	for i, r := range readers {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(stdout, "%s%s %d", sep, r, counts[r])
	}
	fmt.Fprintln(stdout)
	return exitOK
}

// telemetryTestFile prints what each line of one log gives.
func telemetryTestFile(name string, stdin io.Reader, stdout io.Writer, lines *parsers.Lines, declared map[string]bool, counts map[string]int) error {
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev pipeline.Event
	var tl pipeline.TelemetryLine
	for n := 1; sc.Scan(); n++ {
		if _, ok := lines.Line(sc.Bytes(), &ev, &tl); !ok {
			continue
		}
		reader := tl.Kind.String()
		switch {
		case declared[tl.Framework]:
			reader = "declared:" + tl.Framework
		case tl.Framework != "":
			reader = tl.Framework
		}
		counts[reader]++
		fmt.Fprintf(stdout, "%s:%d\t%s\t%s\n", name, n, reader, describeTelemetry(&tl))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// describeTelemetry renders a telemetry line's kind, step and figures.
func describeTelemetry(tl *pipeline.TelemetryLine) string {
	var b strings.Builder
	b.WriteString(tl.Kind.String())
	if tl.Step >= 0 {
		fmt.Fprintf(&b, " step=%d", tl.Step)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"step_time_s", tl.StepTime}, {"tokens_per_s", tl.TokensPerS}, {"samples_per_s", tl.SamplesPerS},
		{"it_per_s", tl.ItPerS}, {"tflops", tl.TFLOPs}, {"mfu", tl.MFU}, {"loss", tl.Loss}, {"runtime_s", tl.Runtime},
	} {
		if !math.IsNaN(f.v) {
			fmt.Fprintf(&b, " %s=%g", f.name, f.v)
		}
	}
	return b.String()
}
