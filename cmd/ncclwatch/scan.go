package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
	"github.com/ncclwatch/ncclwatch/rules"
)

// scanJob is the job name scan gives its whole input.
const scanJob = "scan"

// scanResult is the document `scan --json` prints; its summary object is a
// documented contract (README.md, "The `--json` contract").
type scanResult struct {
	Communicators []pipeline.CommSummary `json:"communicators"`
	Summary       pipeline.JobSummary    `json:"summary"`
	// NCCLTests and Training are a contract too (docs/telemetry.md): one entry
	// per nccl-tests run and per training series found. Null when telemetry
	// was off for this scan (input.telemetry says why).
	NCCLTests []pipeline.NCCLTestReport `json:"nccl_tests"`
	Training  []pipeline.TrainingReport `json:"training"`
	// Checkpoints has one entry per checkpoint series (job and framework)
	// found; null when telemetry was off.
	Checkpoints []pipeline.CheckpointReport `json:"checkpoints"`
	// Collectives has one entry per communicator and collective of the
	// NCCL Inspector records found (docs/inspector.md); null when
	// telemetry was off.
	Collectives []pipeline.CollectiveReport `json:"collectives"`
	Input       scanInput                   `json:"input"`
	// Alerts are the alerts `--rules` would fire; absent without --rules.
	Alerts []pipeline.Alert `json:"alerts,omitzero"`
}

type scanInput struct {
	Files      []string `json:"files"`
	Bytes      int64    `json:"bytes"`
	Candidates int64    `json:"candidate_lines"` // lines handed to the line parser: the prefilter's candidates, every line of a dense stretch (pipeline.BlockScanner)
	NCCLLines  int64    `json:"nccl_lines"`
	Oversized  int64    `json:"oversized_lines"`
	Malformed  int64    `json:"malformed_records"`
	Telemetry  bool     `json:"telemetry"` // step-time and nccl-tests extraction ran
}

// scanner is scan's chain: the files are its source, read in blocks
// whose candidate lines are decoded and parsed on the search goroutines
// (pipeline.BlockScanner.ScanParsed), then applied in input order to the
// assembly stage (pipeline.Assembly.Apply, the stage the run loop feeds),
// whose enriched summary, telemetry reports and rules make the table or
// JSON document.
type scanner struct {
	dcfg  parsers.DecoderConfig // for the search goroutines' decoders
	dec   *parsers.Decoder      // guard's, which reads line by line (Assembly.Line)
	stage *pipeline.Assembly
	max   int
	input scanInput
	prog  *progress
	// telA is the stage's telemetry assembler; nil when telemetry is off.
	telA *pipeline.TelemetryAssembler
}

// newScanner returns a scanner whose stage judges by expect, refined by
// the facts of inv (nil: none) where the job's nodes are in it; with
// telemetry it also extracts training progress and nccl-tests results.
func newScanner(expect pipeline.Expectation, maxLine int, inv *pipeline.Inventory, telemetry bool) *scanner {
	cfg := pipeline.DefaultAssemblerConfig()
	cfg.Expect = expect
	dcfg := parsers.DefaultDecoderConfig()
	dcfg.MaxLineBytes = maxLine
	s := &scanner{dcfg: dcfg, dec: parsers.NewDecoder(dcfg), max: maxLine}
	lines := &parsers.Lines{}
	if telemetry {
		lines = parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
		s.telA = pipeline.NewTelemetryAssembler(pipeline.DefaultTelemetryAssemblerConfig(), nil)
		s.input.Telemetry = true
	}
	s.stage = pipeline.NewFileAssembly(assemble.New(cfg), lines, scanJob, s.telA,
		pipeline.Enricher{Inventory: inv, Default: expect})
	return s
}

// read scans one input. name is shown in errors and progress. Only the
// lines around candidate tokens are decoded (pipeline.BlockScanner); each is
// decoded on its own, so a partial CRI or Docker line is emitted as it is
// rather than joined to an unrelated later candidate. Each search goroutine
// also decodes and parses the candidate lines it found, with its own
// decoder and line parser (pipeline.Parser); this goroutine hands the
// parsed records to the assembly stage in input order, so which goroutine
// read a line changes nothing.
func (s *scanner) read(name string, r io.Reader, size int64) error {
	s.input.Files = append(s.input.Files, name)
	// Reports are per input file: runs and series do not continue from
	// one file into the next.
	s.stage.SetSource(name)
	telemetry := s.telA != nil
	finder := &parsers.Finder{}
	if telemetry {
		finder = parsers.NewTelemetryFinder()
	}
	bs := pipeline.NewBlockScanner(r, finder, s.max)
	err := bs.ScanParsed(s.newStep(telemetry), func(c *pipeline.Chunk, out *pipeline.ParsedChunk) {
		s.input.Candidates += int64(len(c.Lines))
		s.input.Oversized += out.Oversized
		s.input.Malformed += out.Malformed
		s.stage.Apply(&out.Parsed)
		if s.prog != nil && len(c.Offs) > 0 {
			s.prog.update(name, c.Offs[len(c.Offs)-1], size)
		}
	})
	s.input.Bytes += bs.Bytes
	s.input.Oversized += bs.Oversized
	if s.prog != nil {
		s.prog.done()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// newStep returns the decode and parse step of each search goroutine: a
// decoder and a line parser of its own read a chunk's candidate lines
// into a ParsedChunk.
func (s *scanner) newStep(telemetry bool) func() func(*pipeline.Chunk, *pipeline.ParsedChunk) {
	pre := parsers.Prefilter(telemetry) // what the finder finds, line by line
	return func() func(*pipeline.Chunk, *pipeline.ParsedChunk) {
		dec := parsers.NewDecoder(s.dcfg)
		lines := &parsers.Lines{}
		if telemetry {
			lines = parsers.NewLines(parsers.NewTelemetry(parsers.DefaultTelemetryConfig()))
		}
		pr := pipeline.NewParser(lines, telemetry)
		var out *pipeline.ParsedChunk
		var dense []byte // the line of a dense stretch being decoded
		var denseOK int  // whether it holds a token: 0 not known yet, 1, -1
		emit := func(rec *pipeline.Record) {
			if dense != nil && dec.Last() != parsers.EnvelopeRaw && dec.Last() != parsers.EnvelopeCRI {
				// A JSON record's text may hold a token only once its
				// escapes are undone ("NC\u0043L", "TFLOP\/s"); the
				// finder, searching the record's bytes, would not have
				// handed it on.
				if denseOK == 0 {
					denseOK = -1
					if pre(dense) {
						denseOK = 1
					}
				}
				if denseOK < 0 {
					return
				}
			}
			pr.Parse(rec, &out.Parsed)
		}
		return func(c *pipeline.Chunk, o *pipeline.ParsedChunk) {
			out = o
			for i, line := range c.Lines {
				dense, denseOK = nil, 0
				if i >= c.Searched {
					dense = line
				}
				if err := dec.DecodeLine(line, emit); err != nil && (i < c.Searched || pre(line)) {
					// A line of a dense stretch is counted only if the
					// finder would have handed it on.
					if errors.Is(err, parsers.ErrOversized) {
						out.Oversized++
					} else {
						out.Malformed++
					}
				}
				dec.Flush(emit)
			}
			out = nil
		}
	}
}

// result is the scan's document without rules (judge).
func (s *scanner) result() scanResult {
	res, _ := s.judge(nil, time.Time{}, zerolog.Nop())
	return res
}

// judge is the scan's document: the batch of the job's enriched
// summaries (the assembly stage's SummaryBatch) handed through the rules
// stage (rs nil: none) to the scan sink, whose summaries and alerts it
// holds, and the telemetry reports of each input. now is the rules'
// evaluation time when the log carried none; their errors go to log.
func (s *scanner) judge(rs *rules.RuleSet, now time.Time, log zerolog.Logger) (scanResult, error) {
	b, ok := s.stage.SummaryBatch(scanJob)
	if !ok {
		b = &pipeline.Batch{Jobs: []pipeline.JobSummary{{Verdict: pipeline.VerdictOK, Intra: []string{},
			Reasons: []string{"no NCCL evidence"}}}}
	}
	sink, err := fileChain(rs, b, now, log)
	comms := sink.comms
	if !ok {
		comms = []pipeline.CommSummary{}
	}
	in := s.input
	in.NCCLLines = s.stage.Stats().NCCLLines
	res := scanResult{Communicators: comms, Summary: sink.sum, Input: in, Alerts: sink.alerts}
	if s.telA != nil {
		res.NCCLTests, res.Training = []pipeline.NCCLTestReport{}, []pipeline.TrainingReport{}
		res.Checkpoints = []pipeline.CheckpointReport{}
		res.Collectives = []pipeline.CollectiveReport{}
		seen := map[string]bool{}
		for _, f := range in.Files {
			if seen[f] {
				continue
			}
			seen[f] = true
			tests, training := s.telA.Report(f)
			res.NCCLTests = append(res.NCCLTests, tests...)
			res.Training = append(res.Training, training...)
			res.Checkpoints = append(res.Checkpoints, s.telA.Checkpoints(f)...)
			res.Collectives = append(res.Collectives, s.telA.Collectives(f)...)
		}
	}
	return res, err
}

// readDir reads the regular files of a directory, in name order, as one
// input named after it: an NCCL Inspector dump directory
// (NCCL_INSPECTOR_DUMP_DIR) holds one file per process of one job, whose
// records sum up together. Subdirectories are not read.
func (s *scanner) readDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	before := len(s.input.Files)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		var size int64
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		err = s.read(dir, f, size)
		f.Close()
		if err != nil {
			return err
		}
	}
	s.input.Files = append(s.input.Files[:before], dir)
	return nil
}

func runScan(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, code, ok := parseScanFlags(args, stderr)
	if !ok {
		return code
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "ncclwatch scan:", err)
			return exitUsage
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "ncclwatch scan:", err)
			return exitUsage
		}
		defer pprof.StopCPUProfile()
	}
	var ruleSet *rules.RuleSet
	if o.rules != "" {
		var err error
		if ruleSet, err = loadScanRules(o.rules); err != nil {
			fmt.Fprintln(stderr, "ncclwatch scan: --rules:", err)
			return exitUsage
		}
	}
	// The chain of scan: file source → decode + parse → assemble and
	// enrich (the assembly stage) → rules (rules.Stage) → the scan sink,
	// whose summaries and alerts make the table or JSON document.
	var inv *pipeline.Inventory
	if o.inventory != "" {
		var err error
		if inv, err = pipeline.LoadInventory(o.inventory); err != nil {
			fmt.Fprintln(stderr, "ncclwatch scan:", err)
			return exitUsage
		}
	}
	s := newScanner(o.expect, o.maxLine, inv, o.telemetry)
	if !o.quiet && isTerminal(os.Stderr) {
		s.prog = &progress{w: stderr, start: time.Now()}
	}
	if err := s.readAll(o.files, stdin); err != nil {
		fmt.Fprintln(stderr, "ncclwatch scan:", err)
		return exitUsage
	}
	res, err := s.judge(ruleSet, time.Now(), zerolog.New(errLineWriter{w: stderr, prefix: "ncclwatch scan: rules"}))
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch scan: rules:", err)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res.honest()); err != nil {
			fmt.Fprintln(stderr, "ncclwatch scan:", err)
			return exitUsage
		}
	} else {
		printTable(stdout, res)
		if ruleSet != nil {
			printAlerts(stdout, res.Alerts)
		}
	}
	if res.Summary.Verdict.Finding() || len(res.Alerts) > 0 {
		return exitFinding
	}
	return exitOK
}

// scanOptions are scan's flags, checked.
type scanOptions struct {
	json, quiet, telemetry bool
	expect                 pipeline.Expectation
	maxLine                int
	inventory, rules       string
	cpuprofile             string
	files                  []string // "-" is stdin
}

// parseScanFlags parses and checks scan's flags; ok false means stop with
// code.
func parseScanFlags(args []string, stderr io.Writer) (o scanOptions, code int, ok bool) {
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON document (communicators, summary, input)")
	expectNet := fs.String("expect", "rdma", "network class multi-node jobs should use: rdma, tcp or tcpx")
	noGDR := fs.Bool("no-gdr-expected", false, "do not report RDMA without GPUDirect RDMA as gdr_off")
	hcas := fs.Int("hcas", 0, "HCAs each node provides; fewer in use is degraded (0: unknown)")
	maxLine := fs.Int("max-line-bytes", 64<<10, "skip and count lines longer than this")
	inventory := fs.String("inventory", "", "node inventory (YAML or CSV): the expectation of the nodes the input's records name")
	quiet := fs.Bool("no-progress", false, "never draw a progress bar")
	rulesSpec := fs.String("rules", "", "evaluate alert rules: a rule file, several comma-separated, or builtin")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to this file (diagnostics)")
	telemetry := fs.String("telemetry", "auto", "report training step times and nccl-tests results: on, off, or auto (on)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ncclwatch scan [flags] [FILE|-]...\n\nExit status: 0 all ok or no NCCL evidence, 1 socket_fallback/gdr_off/degraded, 2 usage or I/O error.\n\nflags:")
		printFlags(stderr, fs, nil)
	}
	if code, ok := parseArgs(fs, args); !ok {
		return o, code, false
	}
	o = scanOptions{json: *asJSON, quiet: *quiet, maxLine: *maxLine, inventory: *inventory, rules: *rulesSpec,
		cpuprofile: *cpuprofile, files: fs.Args(), expect: pipeline.Expectation{Network: *expectNet, HCAs: *hcas}}
	if *noGDR {
		f := false
		o.expect.GDR = &f
	}
	acfg := pipeline.DefaultAssemblerConfig()
	acfg.Expect = o.expect
	if err := acfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "ncclwatch scan:", strings.Replace(err.Error(), "assembler.expect.network", "--expect", 1))
		return o, exitUsage, false
	}
	if *maxLine <= 0 {
		fmt.Fprintln(stderr, "ncclwatch scan: --max-line-bytes: must be > 0")
		return o, exitUsage, false
	}
	if len(o.files) == 0 {
		o.files = []string{"-"}
	}
	switch *telemetry {
	case "on", "auto":
		// auto is on for every input: with telemetry on scan is fast
		// enough on large inputs that a size cutoff is not worth its
		// surprise (docs/performance.md, "scan"). off keeps the
		// NCCL-only path, several times faster on trainer output.
		o.telemetry = true
	case "off":
	default:
		fmt.Fprintln(stderr, "ncclwatch scan: --telemetry: want on, off or auto")
		return o, exitUsage, false
	}
	return o, 0, true
}

// readAll reads every file in files, in order: "-" is stdin, a directory
// its files.
func (s *scanner) readAll(files []string, stdin io.Reader) error {
	for _, name := range files {
		if name == "-" {
			if err := s.read("stdin", stdin, 0); err != nil {
				return err
			}
			continue
		}
		if st, err := os.Stat(name); err == nil && st.IsDir() {
			if err := s.readDir(name); err != nil {
				return err
			}
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		var size int64
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		err = s.read(name, f, size)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// printTable writes the human-readable report.
func printTable(w io.Writer, res scanResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMM\tRANKS\tNODES\tNETWORK\tCLASS\tFABRIC\tGDR\tINTRA\tVERDICT")
	for _, c := range res.Communicators {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.CommID, intOrDash(c.NRanks), nodesCell(c),
			strOrDash(c.Network), c.NetworkClass, strOrDash(c.Fabric), boolOrDash(c.GDR), listOrDash(c.Intra), c.Verdict)
	}
	tw.Flush()
	s := res.Summary
	fmt.Fprintf(w, "\njob verdict: %s", s.Verdict)
	if s.Fallback != nil && *s.Fallback {
		fmt.Fprint(w, " (silent socket fallback)")
	}
	fmt.Fprintf(w, ", nodes %s, ranks %s\n", jobNodes(res), intOrDash(s.NRanks))
	for _, r := range s.Reasons {
		fmt.Fprintln(w, "  -", r)
	}
	if t := s.Topology; t != nil {
		fmt.Fprintf(w, "topology: %d nodes in the inventory (%d not), zones %s, blocks %s, racks %s, cliques %s; RDMA within one %s\n",
			t.Nodes, t.UnknownNodes, listOrDash(t.Zones), listOrDash(t.Blocks), listOrDash(t.Racks), listOrDash(t.Cliques), t.Within)
	}
	fmt.Fprintf(w, "nccl version %s, %d WARN lines, %d NCCL lines in %d bytes\n", strOrDash(s.NCCLVersion), s.Warns,
		res.Input.NCCLLines, res.Input.Bytes)
	for _, t := range res.NCCLTests {
		fmt.Fprintf(w, "nccl-tests %s: %s ranks on %s hosts, %d rows up to %s bytes, avg bus bandwidth %s GB/s, busbw at the largest size %s GB/s\n",
			strOrDash(t.Collective), intOrDash(t.NRanks), intOrDash(t.Hosts), t.Rows, int64OrDash(t.MaxBytes),
			floatOrDash(t.AvgBusBW), floatOrDash(t.MaxSizeBusBWOOP))
	}
	for _, tr := range res.Training {
		fmt.Fprintf(w, "training %s: %d step lines (steps %s to %s), median step time %s s, last %s s",
			tr.Framework, tr.Steps, int64OrDash(tr.FirstStep), int64OrDash(tr.LastStep),
			floatOrDash(tr.MedianStepTime), floatOrDash(tr.LastStepTime))
		if tr.TokensPerSLast != nil {
			fmt.Fprintf(w, ", %s tokens/s", floatOrDash(tr.TokensPerSLast))
		}
		if tr.SamplesPerSLast != nil {
			fmt.Fprintf(w, ", %s samples/s", floatOrDash(tr.SamplesPerSLast))
		}
		if tr.MFULast != nil {
			fmt.Fprintf(w, ", MFU %s %%", floatOrDash(tr.MFULast))
		}
		fmt.Fprintln(w)
	}
	for _, c := range res.Collectives {
		fmt.Fprintf(w, "collective %s on %s: %d records up to %d bytes, median bus bandwidth %s GB/s, of %d records of %d bytes and more %s GB/s\n",
			c.Op, c.CommID, c.Records, c.MaxBytes, floatOrDash(c.BusBWP50), c.LargeRecords, c.LargeBytes,
			floatOrDash(c.LargeBusBWP50))
	}
	if res.Input.Oversized > 0 || res.Input.Malformed > 0 {
		fmt.Fprintf(w, "skipped: %d oversized lines, %d malformed records\n", res.Input.Oversized, res.Input.Malformed)
	}
}

// nodesCell is the NODES column: the node count when it is known, else
// "≥N" when N distinct hosts were seen (what a reason such as "across nodes
// (2 hosts)" rests on), else "-".
func nodesCell(c pipeline.CommSummary) string {
	switch {
	case c.NNodes != nil:
		return strconv.Itoa(*c.NNodes)
	case len(c.Hosts) >= 2:
		return "≥" + strconv.Itoa(len(c.Hosts))
	}
	return "-"
}

// jobNodes is the job's node count as nodesCell says it, over the distinct
// hosts of all communicators.
func jobNodes(res scanResult) string {
	if res.Summary.NNodes != nil {
		return strconv.Itoa(*res.Summary.NNodes)
	}
	hosts := map[string]bool{}
	for _, c := range res.Communicators {
		for _, h := range c.Hosts {
			hosts[h] = true
		}
	}
	if len(hosts) >= 2 {
		return "≥" + strconv.Itoa(len(hosts))
	}
	return "-"
}

// jsonComm and jsonSummary are what scan --json writes for a communicator
// and the job: a time the input does not carry (raw files) is null, not
// 0001-01-01T00:00:00Z. The shallower fields shadow the embedded ones.
type jsonComm struct {
	pipeline.CommSummary
	FirstSeen *time.Time `json:"first_seen"`
	LastSeen  *time.Time `json:"last_seen"`
}

type jsonSummary struct {
	pipeline.JobSummary
	FirstSeen *time.Time `json:"first_seen"`
	LastSeen  *time.Time `json:"last_seen"`
}

type jsonResult struct {
	scanResult
	Communicators []jsonComm  `json:"communicators"`
	Summary       jsonSummary `json:"summary"`
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// honest returns res as scan --json writes it.
func (res scanResult) honest() jsonResult {
	out := jsonResult{scanResult: res, Communicators: make([]jsonComm, len(res.Communicators)),
		Summary: jsonSummary{JobSummary: res.Summary, FirstSeen: timeOrNull(res.Summary.FirstSeen), LastSeen: timeOrNull(res.Summary.LastSeen)}}
	for i, c := range res.Communicators {
		out.Communicators[i] = jsonComm{CommSummary: c, FirstSeen: timeOrNull(c.FirstSeen), LastSeen: timeOrNull(c.LastSeen)}
	}
	return out
}

func intOrDash(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func int64OrDash(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func floatOrDash(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'g', 6, 64)
}

func strOrDash(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

func boolOrDash(p *bool) string {
	if p == nil {
		return "-"
	}
	if *p {
		return "yes"
	}
	return "no"
}

func listOrDash(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

// progress draws a progress bar on a terminal for inputs over a few MB.
type progress struct {
	w     io.Writer
	start time.Time
	last  time.Time
	drawn bool
}

const progressMinBytes = 8 << 20

func (p *progress) update(name string, off, size int64) {
	if size < progressMinBytes || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	pct := float64(off) / float64(size)
	width := 30
	bar := strings.Repeat("#", int(pct*float64(width))) + strings.Repeat(".", width-int(pct*float64(width)))
	rate := float64(off) / time.Since(p.start).Seconds() / 1e6
	fmt.Fprintf(p.w, "\r%s [%s] %3.0f%% %.0f MB/s", name, bar, pct*100, rate)
	p.drawn = true
}

func (p *progress) done() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
