package parsers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Telemetry lines: what trainers print about their progress and what
// nccl-tests prints about the fabric. Every format named here cites the
// sample in testdata/telemetry (SOURCES.md) that shows it.

// maxTelemetryLine caps the text Telemetry.Parse looks at: progress lines
// are under 1 KiB; longer ones are tqdm bars joined by carriage returns
// (only the last update is read) or dumps that hold no figures.
const maxTelemetryLine = 16 << 10

// ErrTelemetryConfig is wrapped by TelemetryConfig.Validate errors.
var ErrTelemetryConfig = errors.New("invalid telemetry config")

// TelemetryConfig configures the telemetry line parser.
type TelemetryConfig struct {
	// JSON names the fields of generic JSON progress lines.
	JSON JSONFields `yaml:"json"`
	// Formats are progress-line formats users declare (declared.go,
	// docs/telemetry.md).
	Formats []FormatConfig `yaml:"formats"`
}

// JSONFields names the fields a generic JSON progress line
// ({"step": 12, "step_time": 1.5, …}, one object per line) may use for each
// figure; the first name present wins. A line counts as a step when it
// has a step field and at least one figure.
type JSONFields struct {
	Step        []string `yaml:"step"`
	StepTime    []string `yaml:"step_time_s"`  // seconds
	StepTimeMS  []string `yaml:"step_time_ms"` // milliseconds
	TokensPerS  []string `yaml:"tokens_per_s"`
	SamplesPerS []string `yaml:"samples_per_s"`
	TFLOPs      []string `yaml:"tflops"`
	MFU         []string `yaml:"mfu"`
	Loss        []string `yaml:"loss"`
	// MFUFraction says MFU fields hold a fraction (0.41) rather than a
	// percent (41).
	MFUFraction bool `yaml:"mfu_fraction"`
}

// DefaultTelemetryConfig returns the field names of common JSON metric
// loggers (Megatron's and torchtitan's JSONL exporters, custom trainers).
// Every figure's name holds a finder token ("_time", "_per_s", "tflops",
// "mfu": TestJSONNamesHoldTokens), so the finder finds their lines; names
// configured otherwise are read where every line is (run), not by scan's
// finder.
func DefaultTelemetryConfig() TelemetryConfig {
	return TelemetryConfig{JSON: JSONFields{
		Step:        []string{"step", "global_step", "iteration", "iter"},
		StepTime:    []string{"step_time", "step_time_s", "iteration_time", "iter_time", "elapsed_time_per_iteration"},
		StepTimeMS:  []string{"step_time_ms", "iteration_time_ms", "iter_time_ms", "elapsed_time_per_iteration_ms"},
		TokensPerS:  []string{"tokens_per_sec", "tokens_per_second", "tokens_per_s"},
		SamplesPerS: []string{"samples_per_sec", "samples_per_second", "samples_per_s"},
		TFLOPs:      []string{"tflops", "tflops_per_gpu"},
		MFU:         []string{"mfu"},
		Loss:        []string{"loss", "lm_loss"},
	}}
}

// Validate reports every invalid field name, by configuration path.
func (c TelemetryConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		path  string
		names []string
	}{
		{"step", c.JSON.Step}, {"step_time_s", c.JSON.StepTime}, {"step_time_ms", c.JSON.StepTimeMS},
		{"tokens_per_s", c.JSON.TokensPerS}, {"samples_per_s", c.JSON.SamplesPerS}, {"tflops", c.JSON.TFLOPs},
		{"mfu", c.JSON.MFU}, {"loss", c.JSON.Loss},
	} {
		for i, n := range f.names {
			if n == "" || strings.ContainsAny(n, "\"\\\n") {
				errs = append(errs, fmt.Errorf("%w: telemetry.json.%s[%d]: %q must be non-empty, without quotes, backslashes or line breaks", ErrTelemetryConfig, f.path, i, n))
			}
		}
	}
	if len(c.JSON.Step) == 0 {
		errs = append(errs, fmt.Errorf("%w: telemetry.json.step: must name at least one field", ErrTelemetryConfig))
	}
	errs = append(errs, validateFormats(c.Formats)...)
	return errors.Join(errs...)
}

// Telemetry parses job-telemetry lines into pipeline.TelemetryLine:
// training progress of Megatron-LM (and Megatron-DeepSpeed), torchtitan,
// the Hugging Face Trainer, PyTorch Lightning (and NeMo 1 bars), DeepSpeed,
// NeMo 2, Composer and generic JSON lines, nccl-tests output, and the two
// NCCL lines nccl-tests runs and step-time segments need. It keeps no state
// between lines (runs and series are assembled by pipeline.
// TelemetryAssembler), only a buffer; it is not safe for concurrent use.
type Telemetry struct {
	cfg     TelemetryConfig
	formats []declaredFormat // cfg.Formats, compiled (declared.go)
	ansi    []byte
	ev      pipeline.Event
	ckpt    Checkpoint // checkpoint save and load lines (checkpoint.go)
	// pre, when usePre is set, is the NCCL parse of the line (nil: not an
	// NCCL line), done by Lines on the same stripped text.
	pre    *pipeline.Event
	usePre bool
}

// NewTelemetry returns a parser; cfg must be valid.
func NewTelemetry(cfg TelemetryConfig) *Telemetry {
	return &Telemetry{cfg: cfg, formats: compileFormats(cfg.Formats)}
}

// Parse classifies one decoded log line (envelope removed; launcher
// prefixes, timestamps and ANSI colours are tolerated). It reports whether
// the line is a telemetry line; when it is, tl holds its figures, with byte
// slices aliasing line or the parser's buffer, valid until the next call.
// A line of tqdm updates joined by carriage returns is read by its last
// update.
func (t *Telemetry) Parse(line []byte, tl *pipeline.TelemetryLine) bool {
	tl.Reset()
	line = lastUpdate(line)
	if len(line) > maxTelemetryLine {
		return false
	}
	if bytes.IndexByte(line, 0x1b) >= 0 {
		// torchtitan colours every field (reference run logs): strip them all.
		t.ansi = StripANSI(t.ansi[:0], line)
		line = t.ansi
	}
	rest, p := StripPrefix(line)
	t.usePre = false
	return t.telemetry(rest, p, tl)
}

// parseStripped is Parse of a line Lines has stripped of colours and its
// launcher prefix, with the line's NCCL event (nil when it is none).
func (t *Telemetry) parseStripped(rest []byte, p Prefix, pre *pipeline.Event, tl *pipeline.TelemetryLine) bool {
	tl.Reset()
	// NCCL.Parse trims the right as parseNCCL does: its event is the
	// one parseNCCL would make.
	t.usePre, t.pre = true, pre
	ok := t.telemetry(rest, p, tl)
	t.usePre, t.pre = false, nil
	return ok
}

// parseMarked is parseStripped of body, the stripped line already trimmed
// on the right (trimRightSpace), whose markers (lineSet.mask(body)) are m.
func (t *Telemetry) parseMarked(body []byte, p Prefix, pre *pipeline.Event, tl *pipeline.TelemetryLine, m uint64) bool {
	tl.Reset()
	if len(body) == 0 {
		return false
	}
	t.usePre, t.pre = true, pre
	ok := t.marked(body, p, tl, m)
	t.usePre, t.pre = false, nil
	return ok
}

func (t *Telemetry) telemetry(rest []byte, p Prefix, tl *pipeline.TelemetryLine) bool {
	rest = trimRightSpace(rest)
	if len(rest) == 0 {
		return false
	}
	// One pass finds the markers of the checkpoint and progress parsers.
	return t.marked(rest, p, tl, lineSet.mask(rest))
}

// marked is telemetry of rest (trimmed, not empty) with its markers m.
func (t *Telemetry) marked(rest []byte, p Prefix, tl *pipeline.TelemetryLine, m uint64) bool {
	if t.ckpt.parse(rest, &tl.Checkpoint, m) {
		tl.Kind, tl.Rank = pipeline.TelemetryCheckpoint, p.Rank
		return true
	}
	if !t.parse(rest, tl, m) {
		tl.Reset()
		return false
	}
	tl.Rank = p.Rank
	return true
}

// lastUpdate returns the last non-empty carriage-return-separated part of
// line: what a terminal shows of a progress bar redrawn in place.
func lastUpdate(line []byte) []byte {
	for {
		i := bytes.LastIndexByte(line, '\r')
		if i < 0 {
			return line
		}
		if len(bytes.TrimSpace(line[i+1:])) > 0 {
			return line[i+1:]
		}
		line = line[:i]
	}
}

// parse reads b, whose markers (lineSet.mask) are m.
func (t *Telemetry) parse(b []byte, tl *pipeline.TelemetryLine, m uint64) bool {
	if len(t.formats) > 0 && t.parseDeclared(b, tl) {
		return true
	}
	switch c := b[0]; {
	case c == '#':
		return parseTestComment(trimBlank(b[1:]), tl)
	case isDigit(c):
		if parseTestRow(b, tl) {
			return true
		}
	case c == '{':
		if len(b) > 1 && b[1] == '"' {
			return t.parseJSON(b, tl)
		}
	case c == 'n':
		// Header lines that lost their '#' in a paste (009 in the reference
		// set shows "nThread …", "Rank …" bare).
		if hasPrefix(b, "nThread ") {
			return parseTestParams(b, tl)
		}
	case c == 'R':
		if hasPrefix(b, "Rank ") {
			return parseTestDevice(b[len("Rank "):], tl)
		}
	case c == 'E':
		if hasPrefix(b, "Epoch ") {
			if parseLightning(b, tl) {
				return true
			}
			tl.Reset() // mmcv's "Epoch [1][100/5005]" is a generic line (134)
		}
	case c == '[':
		if hasPrefix(b, "[epoch=") || hasPrefix(b, "[batch=") {
			return parseComposerStep(b, tl)
		}
	case c == 'T':
		if hasPrefix(b, "Train throughput/") {
			return parseComposerThroughput(b[len("Train throughput/"):], tl)
		}
	case c == 'i':
		if hasPrefix(b, "iter ") && parseNanoGPT(b, tl) {
			return true
		}
	case c == 't':
		if hasPrefix(b, "train_") && parseHFMetric(b, tl) {
			return true
		}
	}
	return t.parseProgress(b, tl, m)
}

var (
	tokNCCLInfo     = []byte("NCCL INFO ")
	tokSamplesPS    = []byte("SamplesPerSec=")
	tokMegatronIter = []byte("elapsed time per iteration")
	tokHFLoss       = []byte("'loss'")
	tokHFRuntime    = []byte("'train_runtime'")
	tokTitanStep    = []byte("step:")
	tokNeMoTiming   = []byte("train_step_timing in s")
	tokTeraFlops    = []byte("Effective Tera Flops per GPU:")
	tokProfile      = []byte("Profile Summary at step ")
	tokPerf         = []byte("_perf")
)

// parseProgress finds the trainer that wrote b by its marker text (m:
// the markers found in b, lineSet.mask); a marker whose parser rejects the
// line lets the next one try.
func (t *Telemetry) parseProgress(b []byte, tl *pipeline.TelemetryLine, m uint64) bool {
	if m&(1<<markNCCLInfo) != 0 {
		return t.parseNCCL(b, tl)
	}
	for i, p := range progressParsers {
		if m&(1<<(markProgress+i)) != 0 {
			if p.parse(b, tl) {
				return true
			}
			tl.Reset()
		}
	}
	return m&genericMarks != 0 && parseGenericProgress(b, tl)
}

// lineSet finds the markers of a telemetry line's parsers in one pass:
// bit markCheckpointLower… of its mask for the checkpoint markers, bit
// markNCCLInfo for tokNCCLInfo and bit markProgress+i for
// progressParsers[i].marker.
var lineSet = newTokenSet2(lineSpecs()...)

const (
	markCheckpointLower = iota
	markCheckpointUpper
	markSavingModelTo
	markNCCLInfo
	markProgress
)

func lineSpecs() []tokenSpec {
	specs := []tokenSpec{{tok: tokCheckpointLower}, {tok: tokCheckpointUpper}, {tok: tokSavingModelTo}, {tok: tokNCCLInfo}}
	for _, p := range progressParsers {
		specs = append(specs, tokenSpec{tok: p.marker})
	}
	for _, t := range progressMarkers {
		specs = append(specs, tokenSpec{tok: t})
	}
	return specs
}

// progressParsers are tried in order: NeMo's "global_step:" would pass for
// torchtitan's "step:", so NeMo comes first.
var progressParsers = [...]struct {
	marker []byte
	parse  func([]byte, *pipeline.TelemetryLine) bool
}{
	{tokSamplesPS, parseDeepSpeedTimer},
	{tokMegatronIter, parseMegatron},
	{tokHFLoss, parseHFDict},
	{tokHFRuntime, parseHFDict},
	{tokNeMoTiming, parseNeMo},
	{tokTitanStep, parseTorchtitan},
	{tokTeraFlops, parseTeraFlops},
	{tokProfile, parseProfileStep},
	{[]byte("iter latency:"), parseProfilerLine},
	{[]byte("samples/second:"), parseProfilerLine},
	{[]byte("fwd+bwd FLOPS per GPU"), parseProfilerLine},
	{tokPerf, parseTestCommand},
	{[]byte("completed step:"), parseMaxText},
}

// parseTeraFlops reads Megatron-DeepSpeed's "Effective Tera Flops per GPU:
// 41.31 and total parameters 52.005 B", printed (2021) on the line after
// the iteration it measures (reference 024).
func parseTeraFlops(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, tokTeraFlops) + len(tokTeraFlops)
	v, ok := parseNumber(firstField(b[i:]))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.TFLOPs = pipeline.TelemetryAmend, pipeline.FrameworkMegatron, v
	return true
}

// parseProfileStep reads the DeepSpeed flops profiler's "Profile Summary at
// step 10:" (reference 060), whose figures follow on later lines.
func parseProfileStep(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, tokProfile) + len(tokProfile)
	n, ok := atoi64(bytes.TrimRight(firstField(b[i:]), ":"))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkDeepSpeed, n
	return true
}

// parseNCCL reads the two NCCL lines telemetry needs: the communicator
// line (ranks and host of an nccl-tests run that prints no device list,
// 015) and "Using network" (a network change splits a step-time series).
func (t *Telemetry) parseNCCL(b []byte, tl *pipeline.TelemetryLine) bool {
	ev := t.pre
	if !t.usePre {
		if !ncclTelemetryText(b) {
			return false
		}
		var nccl NCCL
		if !nccl.Parse(b, &t.ev) {
			return false
		}
		ev = &t.ev
	} else if ev == nil {
		return false // the NCCL parser did not take the line
	}
	network := ev.Kind == pipeline.EventNetwork && len(ev.Name) > 0
	comm := (ev.Kind == pipeline.EventComm || ev.Kind == pipeline.EventCommNodes) && ev.NRanks > 0
	// The event first: most NCCL lines are neither, and the text is
	// searched only for those that are.
	if !network && !comm || t.usePre && !ncclTelemetryText(b) {
		return false
	}
	if network {
		tl.Kind, tl.Name = pipeline.TelemetryNCCLNetwork, ev.Name
	} else {
		tl.Kind, tl.NRanks, tl.Host = pipeline.TelemetryNCCLComm, ev.NRanks, ev.Host
	}
	return true
}

// ncclTelemetryText reports whether b says "Using network", "Using
// internal Network", "nranks" or "nRanks", each followed by a blank: the
// lines parseNCCL reads. The searches go by a rare byte of each (indexBy;
// for the two spellings of nranks one search for "anks " by its 'k').
func ncclTelemetryText(b []byte) bool {
	if indexBy(b, "Using network ", 0) >= 0 || indexBy(b, "Using internal Network ", 0) >= 0 {
		return true
	}
	for from := 0; ; {
		i := indexBy(b[from:], "anks ", 2)
		if i < 0 {
			return false
		}
		if i += from; i >= 2 && b[i-2] == 'n' && (b[i-1] == 'r' || b[i-1] == 'R') {
			return true
		}
		from = i + 1
	}
}

// --- nccl-tests ----------------------------------------------------------

// Table layouts of nccl-tests results, by the columns after type.
const (
	// FormatRedopRootWrong: redop root time algbw busbw #wrong ×2 (2.10+).
	FormatRedopRootWrong = "redop_root_wrong"
	// FormatRedopError: redop time algbw busbw error ×2 (2019–2021, 014).
	FormatRedopError = "old_redop_error"
	// FormatRootError: root time algbw busbw error ×2 (rooted
	// collectives before 2.10, nccl-tests issue 82).
	FormatRootError = "old_root_error"
	// FormatError: time algbw busbw error ×2 (before redop, 018).
	FormatError = "pre_redop_error"
)

// parseTestComment reads an nccl-tests header or footer line, b being the
// text after its '#'.
func parseTestComment(b []byte, tl *pipeline.TelemetryLine) bool {
	switch {
	case hasPrefix(b, "Avg bus bandwidth"):
		i := bytes.IndexByte(b, ':')
		if i < 0 {
			return false
		}
		v, ok := parseNumber(firstField(b[i+1:]))
		if !ok {
			return false
		}
		tl.Kind, tl.Avg = pipeline.TelemetryTestAvg, v
		return true
	case hasPrefix(b, "Collective test starting:"):
		tl.Kind, tl.Collective = pipeline.TelemetryTestStart, firstField(b[len("Collective test starting:"):])
		return len(tl.Collective) > 0
	case hasPrefix(b, "Collective test concluded:"):
		tl.Kind, tl.Collective = pipeline.TelemetryTestEnd, firstField(b[len("Collective test concluded:"):])
		return true
	case hasPrefix(b, "nThread "):
		return parseTestParams(b, tl)
	case hasPrefix(b, "Rank "):
		return parseTestDevice(b[len("Rank "):], tl)
	case hasPrefix(b, "nccl-tests version "):
		// 2.18+ (reference 003).
		tl.Kind, tl.Version = pipeline.TelemetryTestVersion, firstField(b[len("nccl-tests version "):])
		return len(tl.Version) > 0
	}
	// The column header: "size count type redop root time algbw busbw
	// #wrong …"; the "(B) (elements)" units line and the "out-of-place
	// in-place" banner say nothing new.
	// The oldest releases name the first columns "bytes N type op".
	if !(hasPrefix(b, "size ") || hasPrefix(b, "bytes ")) || !bytes.Contains(b, []byte("busbw")) {
		return false
	}
	tl.Kind = pipeline.TelemetryTestHeader
	redop := bytes.Contains(b, []byte(" redop ")) || bytes.Contains(b, []byte(" op "))
	switch {
	case !redop && bytes.Contains(b, []byte(" root ")):
		tl.Format = FormatRootError
	case !redop:
		tl.Format = FormatError
	case !bytes.Contains(b, []byte(" root ")):
		tl.Format = FormatRedopError
	default:
		tl.Format = FormatRedopRootWrong
	}
	return true
}

// parseTestParams reads "nThread 1 nGpus 1 minBytes 8 maxBytes 134217728
// step: 2(factor) …".
func parseTestParams(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte("Bytes ")) {
		// Every release prints minBytes and maxBytes; without them it
		// is not the line (and the finder, whose token is "Bytes ",
		// would not hand it on: FuzzFinderCovers).
		return false
	}
	tl.Kind = pipeline.TelemetryTestParams
	if i := bytes.Index(b, []byte("minBytes ")); i >= 0 {
		tl.MinBytes, _ = atoi64(firstField(b[i+len("minBytes "):]))
	}
	if i := bytes.Index(b, []byte("maxBytes ")); i >= 0 {
		tl.MaxBytes, _ = atoi64(firstField(b[i+len("maxBytes "):]))
	}
	return true
}

// parseTestDevice reads the device list line after "Rank ": "0 Group 0 Pid
// 204199 on nid005471 device 0 [0009:01:00] NVIDIA GH200 120GB" (2.10+) or
// "0 Pid 30938 on gpu01 device 0 [0x00] Tesla T4" (before Group, 014).
func parseTestDevice(b []byte, tl *pipeline.TelemetryLine) bool {
	f, rest := nextField(b)
	rank, ok := atoi(f)
	if !ok {
		return false
	}
	on := bytes.Index(rest, []byte(" on "))
	if on < 0 || on > 64 || !bytes.Contains(rest[on:], []byte(" device ")) || !bytes.Contains(rest[:on], []byte(" Pid ")) {
		// Every release prints the rank's Pid before " on "; a line
		// without it is not the device table's (and the finder, whose
		// token is "Pid ", would not hand it on: FuzzFinderCovers).
		return false
	}
	host, after := nextField(rest[on+len(" on "):])
	if string(host) == "device" {
		// An empty hostname prints as blanks ("Pid 4349 on        device
		// 0", nccl issue 841): the host is unknown, not "device".
		if d, _ := nextField(after); isDigit(firstByte(d)) {
			host, after = nil, rest[on+len(" on "):]
		}
	}
	rest = after
	tl.Kind, tl.TestRank, tl.Host = pipeline.TelemetryTestDevice, rank, host
	if f, r := nextField(rest); string(f) == "device" {
		f, r = nextField(r)
		if d, ok := atoi(f); ok {
			tl.Dev = d
		}
		if r = trimBlank(r); len(r) > 0 && r[0] == '[' {
			if e := bytes.IndexByte(r, ']'); e >= 0 {
				tl.GPU = trimBlank(r[e+1:])
			}
		}
	}
	return true
}

// parseTestRow reads one results row: size count type, then by layout
// [redop [root]] and four out-of-place columns, usually four in-place ones.
// Layouts differ by nccl-tests version (FormatRedopRootWrong and the
// older ones); every row is checked for the shape, so trainer lines that
// start with a number are not rows.
func parseTestRow(b []byte, tl *pipeline.TelemetryLine) bool {
	var f [16][]byte
	n := fields(b, f[:])
	if n < 7 || n > len(f) {
		return false
	}
	size, ok1 := atoi64(f[0])
	count, ok2 := atoi64(f[1])
	if !ok1 || !ok2 || size < 0 || count < 0 || !isWord(f[2]) || !testRowType(f[2]) {
		return false
	}
	row := &tl.Row
	rest := f[3:n]
	format := FormatError
	switch len(rest) {
	case 10, 6:
		root, ok := atoi(rest[1])
		if !ok || !isWord(rest[0]) {
			return false
		}
		row.Redop, row.Root, rest, format = rest[0], root, rest[2:], FormatRedopRootWrong
	case 9, 5:
		if root, ok := atoi(rest[0]); ok {
			// broadcast and reduce before 2.10 print a root but no redop
			// column ("type root time …", nccl-tests issue 82).
			row.Root, rest, format = root, rest[1:], FormatRootError
			break
		}
		if !isWord(rest[0]) {
			return false
		}
		row.Redop, rest, format = rest[0], rest[1:], FormatRedopError
	case 8, 4:
	default:
		return false
	}
	if !parseResult(rest[:4], &row.OOP) {
		return false
	}
	if len(rest) == 8 && !parseResult(rest[4:], &row.IP) {
		return false
	}
	row.Bytes, row.Count, row.Type = size, count, f[2]
	tl.Kind, tl.Format = pipeline.TelemetryTestRow, format
	return true
}

// testRowTypes are the parts of the data type names nccl-tests prints
// (int8, uint8, int32, uint32, int64, uint64, half, float, bfloat16,
// double, f8e4m3, f8e5m2; rccl-tests fp8_e4m3, fp8_e5m2); each is a
// finder token (TelemetryTokens, telemetrySlowTokens), so a row the finder
// would not hand on is no row (FuzzFinderCovers). The "char" and "int"
// rows of the nccl-tests of NCCL 1 (2017) are not read: "int" is in too
// many words to search for.
var testRowTypes = [...]string{"float", "half", "double", "f8e", "fp8", "int8", "int32", "int64"}

// testRowType reports whether typ is the type column of an nccl-tests row.
func testRowType(typ []byte) bool {
	for _, t := range testRowTypes {
		if bytes.Contains(typ, []byte(t)) {
			return true
		}
	}
	return false
}

// parseResult reads time, algbw, busbw and #wrong; #wrong may be N/A
// (validation off, 014; alltoall in place, reference 010).
func parseResult(f [][]byte, r *pipeline.NCCLTestResult) bool {
	var ok bool
	if r.TimeUS, ok = parseNumber(f[0]); !ok {
		return false
	}
	if r.AlgBW, ok = parseNumber(f[1]); !ok {
		return false
	}
	if r.BusBW, ok = parseNumber(f[2]); !ok || r.BusBW < 0 {
		return false
	}
	if string(f[3]) == "N/A" {
		r.Wrong = math.NaN()
		return true
	}
	r.Wrong, ok = parseNumber(f[3])
	return ok
}

// ncclTestBinaries are the nccl-tests programs (nccl-tests src/*.cu).
var ncclTestBinaries = [...]string{"all_reduce", "all_gather", "alltoall", "broadcast", "gather", "hypercube",
	"reduce", "reduce_scatter", "scatter", "sendrecv"}

// parseTestCommand finds an nccl-tests binary on a command line ("$ srun
// … all_reduce_perf -b 100M", 014; "mpirun … /opt/nccl-tests/build/
// all_reduce_perf -b 8", 017), with the "_mpi" suffix some packages add.
func parseTestCommand(b []byte, tl *pipeline.TelemetryLine) bool {
	for off := 0; ; {
		i := bytes.Index(b[off:], tokPerf)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(tokPerf)
		if hasPrefix(b[end:], "_mpi") {
			end += len("_mpi")
		}
		off = end
		if end < len(b) && !isTokenEnd(b[end]) {
			continue
		}
		start := i
		for start > 0 && !isTokenStart(b[start-1]) {
			start--
		}
		name := b[start:i]
		for _, bin := range ncclTestBinaries {
			if string(name) == bin {
				tl.Kind, tl.Collective = pipeline.TelemetryTestCommand, b[start:i+len(tokPerf)]
				return true
			}
		}
	}
}

func isTokenEnd(c byte) bool { return c == ' ' || c == '\t' || c == '"' || c == '\'' || c == ';' }
func isTokenStart(c byte) bool {
	return c == ' ' || c == '\t' || c == '/' || c == '"' || c == '\'' || c == '='
}

// --- trainers ------------------------------------------------------------

// parseMegatron reads a Megatron-LM iteration line: " iteration 20/ 40000
// | consumed samples: … | elapsed time per iteration (ms): 3367.6 |
// throughput per GPU (TFLOP/s/GPU): 5.8 | …" (026). Megatron-DeepSpeed
// prints seconds and "samples per second", "TFLOPs" (reference 022) or
// "tokens per gpu per second (tgs)" (reference 027). Timer lines
// ("time (ms) | forward-compute: …") have no "elapsed time per iteration"
// and never get here.
func parseMegatron(b []byte, tl *pipeline.TelemetryLine) bool {
	it := bytes.Index(b, []byte("iteration "))
	if it < 0 {
		return false
	}
	step, ok := atoi64(trimStepCounter(trimBlank(b[it+len("iteration "):])))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkMegatron, step
	found := false
	eachPair(b, '|', func(key, val []byte) {
		var ok bool
		switch string(key) {
		case "elapsed time per iteration (ms)":
			tl.StepTime, ok = parseScaled(val, -3)
			found = found || ok
		case "elapsed time per iteration (s)":
			if !bytes.Contains(b, []byte("(s):")) {
				break // "(s) :": not the form printed, nor the finder's token
			}
			tl.StepTime, ok = parseNumber(val)
			found = found || ok
		case "throughput per GPU (TFLOP/s/GPU)", "TFLOPs", "tflops", "TFLOPS":
			tl.TFLOPs, _ = parseNumber(val)
		case "samples per second", "samples/sec":
			tl.SamplesPerS, _ = parseNumber(val)
		case "approx flops per GPU":
			// GPT-NeoX style Megatron-DeepSpeed: "112.9TFLOPS"
			// (deepspeedai/DeepSpeed issue 3742).
			tl.TFLOPs = flopsUnit(val)
		case "tokens per gpu per second (tgs)", "tokens per second", "tokens per sec":
			tl.TokensPerS, _ = parseNumber(val)
		case "lm loss", "lm_loss":
			tl.Loss, _ = parseNumber(val)
		case "MFU", "mfu":
			tl.MFU, _ = parseNumber(val)
		}
	})
	return found
}

// flopsUnit reads "112.9TFLOPS" (or GFLOPS, PFLOPS) as TFLOP/s; NaN for
// anything else.
func flopsUnit(b []byte) float64 {
	for _, u := range [...]struct {
		suffix string
		scale  float64
	}{{"TFLOPS", 1}, {"GFLOPS", 1e-3}, {"PFLOPS", 1e3}} {
		if v, ok := bytes.CutSuffix(b, []byte(u.suffix)); ok {
			if f, ok := parseNumber(bytes.TrimSpace(v)); ok {
				return f * u.scale
			}
		}
	}
	return math.NaN()
}

// trimStepCounter returns the step of "20/   40000" or "7/999".
func trimStepCounter(b []byte) []byte {
	for i, c := range b {
		if !isDigit(c) {
			return b[:i]
		}
	}
	return b
}

// parseNeMo reads a NeMo 2 step line: "Training epoch 2, iteration 7/999
// | lr: … | global_step: 45 | reduced_train_loss: 11.02 |
// train_step_timing in s: 47.12 | …" (reference 053). The step is the
// global step; "iteration" counts within the epoch.
func parseNeMo(b []byte, tl *pipeline.TelemetryLine) bool {
	tl.Framework = pipeline.FrameworkNeMo
	eachPair(b, '|', func(key, val []byte) {
		switch string(key) {
		case "global_step":
			tl.Step, _ = atoi64(val)
		case "train_step_timing in s":
			tl.StepTime, _ = parseNumber(val)
		case "reduced_train_loss":
			tl.Loss, _ = parseNumber(val)
		case "TFLOPS_per_GPU":
			tl.TFLOPs, _ = parseNumber(val)
		}
	})
	if math.IsNaN(tl.StepTime) {
		return false
	}
	tl.Kind = pipeline.TelemetryStep
	return true
}

// eachPair calls fn with the trimmed key and value of every "key: value"
// part of b, parts separated by sep.
func eachPair(b []byte, sep byte, fn func(key, val []byte)) {
	for len(b) > 0 {
		part := b
		if i := bytes.IndexByte(b, sep); i >= 0 {
			part, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		c := lastColonBlank(part)
		if c < 0 {
			continue
		}
		fn(bytes.TrimSpace(part[:c]), bytes.TrimSpace(part[c+2:]))
	}
}

// parseTorchtitan reads "step:  4  loss:  7.62585  grad_norm: 26.6250
// memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%"
// (032). Older releases print wps for tps (and no grad_norm, 034), newer
// ones tflops with a thousands separator and mfu N/A (reference 031).
func parseTorchtitan(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte("GiB(")) {
		// Every release prints "memory: 66.91GiB(37.51%)", the finder's
		// token for these lines (FuzzFinderCovers).
		return false
	}
	b = b[bytes.Index(b, tokTitanStep):]
	rate := false
	var f [24][]byte
	n := fields(b, f[:])
	if n > len(f) {
		n = len(f)
	}
	for i := 0; i+1 < n; i++ {
		key := f[i]
		if len(key) < 2 || key[len(key)-1] != ':' {
			continue
		}
		val := f[i+1]
		switch string(key[:len(key)-1]) {
		case "step":
			var ok bool
			if tl.Step, ok = atoi64(val); !ok {
				return false
			}
		case "loss":
			tl.Loss, _ = parseNumber(val)
		case "tps", "wps":
			tl.TokensPerS, _ = parseNumber(val)
			rate = true
		case "tflops":
			tl.TFLOPs, _ = parseNumber(val)
		case "mfu":
			tl.MFU, _ = parseNumber(val)
			rate = true
		}
		i++
	}
	if tl.Step < 0 || !rate {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryStep, pipeline.FrameworkTorchtitan
	return true
}

// parseHFDict reads a Hugging Face Trainer log dict: "{'loss': 0.392,
// 'grad_norm': …, 'learning_rate': …, 'epoch': 0.85, 'step': 8500}" (042,
// with a step key only where the script adds one), newer releases' quoted
// values ("'loss': '0.392'"), and the summary "{'train_runtime': 8754.1218,
// 'train_samples_per_second': 36.554, …}", also inside "TrainOutput(…,
// metrics={…})". Evaluation dicts are not training steps.
func parseHFDict(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, []byte("{'"))
	if i < 0 {
		return false
	}
	summary, loss, eval := false, false, false
	eachDictPair(b[i+1:], func(key, val []byte) {
		switch {
		case string(key) == "loss":
			tl.Loss, loss = parseNumber(val)
		case string(key) == "step":
			tl.Step, _ = atoi64(val)
		case string(key) == "train_runtime":
			tl.Runtime, summary = parseNumber(val)
		case string(key) == "train_samples_per_second":
			tl.SamplesPerS, _ = parseNumber(val)
		case string(key) == "train_tokens_per_second":
			tl.TokensPerS, _ = parseNumber(val)
		case string(key) == "global_step/max_steps":
			// ms-swift's dicts (Hugging Face Trainer underneath) count
			// steps as '295/4491' (ms-swift issue 4291).
			tl.Step = lastCounter(val)
		case string(key) == "train_speed(iter/s)":
			tl.ItPerS, _ = parseNumber(val)
		case hasPrefix(key, "eval_"):
			eval = true
		}
	})
	tl.Framework = pipeline.FrameworkHF
	switch {
	case summary:
		tl.Kind = pipeline.TelemetrySummary
		tl.Step, tl.Loss = -1, math.NaN()
	case loss && !eval:
		tl.Kind = pipeline.TelemetryStep
	default:
		return false
	}
	return true
}

// hfStep reads b, a stripped line, when it is a Hugging Face Trainer step
// dict in the plain form the Trainer prints on every rank at every logging
// step, "{'loss': 0.392, 'grad_norm': 0.644, 'learning_rate': 1.96e-05,
// 'epoch': 0.9}" (telemetry/hf-*.log; the trainer of about a fifth of
// the load benchmark's jobs): only the keys loss, grad_norm, learning_rate, epoch and
// step, each "'key': " then a plain number ([0-9.e+-]), ", " between
// pairs, '}' last. It gives what parseHFDict gives and reports whether b
// had that form and a loss it could read; for anything else the caller
// takes the full path (marker search, checkpoint parser, parseProgress).
//
// Such a line holds no marker but "'loss'" and no prefilter token: the
// others hold an upper-case letter or a byte outside the form's alphabet
// ("/", "=", "+"), a blank not after ':' or ',' ("elapsed time",
// "iter latency:"), "p:" (the form has "p':"), or letters no allowed key
// holds ("checkpoint", "_perf", "'train_runtime'"); TestHFStepMarkers
// checks this against the token sets, TestLineFastPath and FuzzLine
// compare Lines.Line with and without this path.
func hfStep(b []byte, tl *pipeline.TelemetryLine) bool {
	n := len(b)
	if n < 2 || b[0] != '{' || b[1] != '\'' || b[n-1] != '}' {
		return false
	}
	var loss, step []byte
	for i := 1; ; {
		// b[i] is the key's opening quote; the key with its closing
		// quote and ": " is one of hfStepKeys.
		k := hfStepKey(b[i+1:])
		if k < 0 {
			return false
		}
		v := i + 1 + len(hfStepKeys[k])
		e := v
		for e < n && numberByte[b[e]] {
			e++
		}
		if e == v || e == n {
			return false
		}
		switch k {
		case hfLoss:
			loss = b[v:e]
		case hfStepNo:
			step = b[v:e]
		}
		if b[e] == '}' {
			if e != n-1 {
				return false
			}
			break
		}
		if b[e] != ',' || e+2 >= n || b[e+1] != ' ' || b[e+2] != '\'' {
			return false
		}
		i = e + 2
	}
	v, ok := parseNumber(loss)
	if !ok {
		return false
	}
	tl.Reset()
	if step != nil {
		tl.Step, _ = atoi64(step)
	}
	tl.Kind, tl.Framework, tl.Loss = pipeline.TelemetryStep, pipeline.FrameworkHF, v
	return true
}

// numberByte holds the bytes of a number as Python prints it: digits, '.',
// 'e', '-', '+'.
var numberByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789.e-+") {
		t[c] = true
	}
	return t
}()

// hfStepKeys are the keys hfStep reads, each with its closing quote and
// ": ".
var hfStepKeys = [...]string{hfLoss: "loss': ", hfStepNo: "step': ", hfGradNorm: "grad_norm': ",
	hfLearningRate: "learning_rate': ", hfEpoch: "epoch': "}

const (
	hfLoss = iota
	hfStepNo
	hfGradNorm
	hfLearningRate
	hfEpoch
)

// hfStepKey returns the index in hfStepKeys of the key b starts with, or -1.
func hfStepKey(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	k := -1
	switch b[0] {
	case 'l':
		k = hfLoss
		if len(b) > 1 && b[1] == 'e' {
			k = hfLearningRate
		}
	case 's':
		k = hfStepNo
	case 'g':
		k = hfGradNorm
	case 'e':
		k = hfEpoch
	}
	if k < 0 {
		return -1
	}
	if len(b) >= 16 {
		// Two masked 8-byte compares instead of a call to compare
		// strings of a length the compiler does not know: a fifth of
		// the step dict's cost.
		w := &hfKeyWords[k]
		if binary.LittleEndian.Uint64(b)&w.mask[0] != w.word[0] || binary.LittleEndian.Uint64(b[8:])&w.mask[1] != w.word[1] {
			return -1
		}
		return k
	}
	if !hasPrefix(b, hfStepKeys[k]) {
		return -1
	}
	return k
}

// hfKeyWords are hfStepKeys as two little-endian words and the masks of
// their bytes (keys are at most 16 bytes).
var hfKeyWords = func() (ws [len(hfStepKeys)]struct{ word, mask [2]uint64 }) {
	for k, key := range hfStepKeys {
		if len(key) > 16 {
			panic("parsers: Hugging Face key over 16 bytes: " + key)
		}
		for i := 0; i < len(key); i++ {
			ws[k].word[i/8] |= uint64(key[i]) << (8 * (i % 8))
			ws[k].mask[i/8] |= 0xff << (8 * (i % 8))
		}
	}
	return ws
}()

// eachDictPair calls fn for every "'key': value" of a Python dict repr,
// b being the text after '{'; quotes around a value are removed.
func eachDictPair(b []byte, fn func(key, val []byte)) {
	for {
		b = trimBlank(b)
		if len(b) == 0 || b[0] != '\'' {
			return
		}
		e := bytes.IndexByte(b[1:], '\'')
		if e < 0 {
			return
		}
		key := b[1 : e+1]
		b = trimBlank(b[e+2:])
		if len(b) == 0 || b[0] != ':' {
			return
		}
		b = trimBlank(b[1:])
		var val []byte
		if len(b) > 0 && b[0] == '\'' {
			e := bytes.IndexByte(b[1:], '\'')
			if e < 0 {
				return
			}
			val, b = b[1:e+1], b[e+2:]
		} else {
			e := 0 // the value ends at ',' or '}' (bytes.IndexAny builds a set per call)
			for e < len(b) && b[e] != ',' && b[e] != '}' {
				e++
			}
			val, b = bytes.TrimSpace(b[:e]), b[e:]
		}
		fn(key, val)
		b = trimBlank(b)
		if len(b) == 0 || b[0] != ',' {
			return
		}
		b = b[1:]
	}
}

// parseLightning reads a PyTorch Lightning progress bar: "Epoch 0:  25%|…|
// 8/32 [00:00<00:00, 49.28it/s, loss=0.87, v_num=15]" (050, 051; NeMo 1
// bars, reference 052) or the rich bar "Epoch 0/9 ━━ 8/32 0:00:01 •
// 0:00:03 49.28it/s". The step is the bar's counter; a bar with no rate yet
// ("?it/s") is not a step. Slow bars print s/it, inverted here.
func parseLightning(b []byte, tl *pipeline.TelemetryLine) bool {
	k := bytes.Index(b, []byte("it/s"))
	inv := false
	if k < 0 {
		if k = bytes.Index(b, []byte("s/it")); k < 0 {
			return false
		}
		inv = true
	}
	s := k
	for s > 0 && (isDigit(b[s-1]) || b[s-1] == '.') {
		s--
	}
	rate, ok := parseNumber(b[s:k])
	if !ok || rate <= 0 {
		return false
	}
	if inv {
		rate = 1 / rate
	}
	step := lastCounter(b[:s])
	if step < 0 {
		return false
	}
	tl.Kind, tl.Framework, tl.Step, tl.ItPerS = pipeline.TelemetryStep, pipeline.FrameworkLightning, step, rate
	if i := bytes.Index(b[k:], []byte("loss=")); i >= 0 {
		tl.Loss, _ = parseNumber(trimAt(b[k+i+len("loss="):], ',', ']'))
	}
	// NeMo 1 bars carry the trainer's own step timing.
	if i := bytes.Index(b[k:], []byte("train_step_timing in s=")); i >= 0 {
		tl.StepTime, _ = parseNumber(trimAt(b[k+i+len("train_step_timing in s="):], ',', ']'))
	}
	return true
}

// lastCounter returns N of the last "N/M" in b (digits on both sides of a
// slash), or -1.
func lastCounter(b []byte) int64 {
	for i := len(b) - 1; i > 0; i-- {
		if b[i] != '/' || i+1 >= len(b) || !isDigit(b[i+1]) || !isDigit(b[i-1]) {
			continue
		}
		s := i
		for s > 0 && isDigit(b[s-1]) {
			s--
		}
		n, ok := atoi64(b[s:i])
		if ok {
			return n
		}
	}
	return -1
}

// trimAt returns b up to its first a or c, without surrounding blanks
// (indexEither: bytes.IndexAny builds a byte set on every call).
func trimAt(b []byte, a, c byte) []byte {
	if i := indexEither(b, a, c); i >= 0 {
		return bytes.TrimSpace(b[:i])
	}
	return bytes.TrimSpace(b)
}

// parseDeepSpeedTimer reads DeepSpeed's throughput timer: "[timer.py:260:
// stop] epoch=0/micro_step=199/global_step=199, RunningAvgSamplesPerSec=
// 58.73, CurrSamplesPerSec=61.35, …" (reference 027), the 2022 form
// "0/20, RunningAvgSamplesPerSec=…, CurrSamplesPerSec=…" (reference 062)
// and the 2020 form "0/50, SamplesPerSec=1292.64" (reference 061), where
// 0/50 is epoch/step.
func parseDeepSpeedTimer(b []byte, tl *pipeline.TelemetryLine) bool {
	if i := bytes.Index(b, []byte("global_step=")); i >= 0 {
		tl.Step, _ = atoi64(trimAt(b[i+len("global_step="):], ',', ' '))
	} else {
		// The epoch/step pair is the field before the first rate; the
		// timestamp before it may hold a comma too ("08:26:26,101").
		k := bytes.Index(b, []byte("SamplesPerSec="))
		if r := bytes.Index(b, []byte("RunningAvgSamplesPerSec=")); r >= 0 && r < k {
			k = r
		}
		c := bytes.LastIndexByte(b[:k], ',')
		if c < 0 {
			return false
		}
		tok := b[bytes.LastIndexByte(b[:c], ' ')+1 : c]
		if s := bytes.IndexByte(tok, '/'); s >= 0 {
			tl.Step, _ = atoi64(tok[s+1:])
		}
	}
	v := math.NaN()
	if i := bytes.Index(b, []byte("CurrSamplesPerSec=")); i >= 0 {
		v, _ = parseNumber(trimAt(b[i+len("CurrSamplesPerSec="):], ',', ' '))
	} else if i := bytes.Index(b, []byte(" SamplesPerSec=")); i >= 0 {
		v, _ = parseNumber(trimAt(b[i+len(" SamplesPerSec="):], ',', ' '))
	} else if i := bytes.Index(b, []byte("RunningAvgSamplesPerSec=")); i >= 0 {
		v, _ = parseNumber(trimAt(b[i+len("RunningAvgSamplesPerSec="):], ',', ' '))
	}
	if math.IsNaN(v) || tl.Step < 0 {
		return false
	}
	tl.Kind, tl.Framework, tl.SamplesPerS = pipeline.TelemetryStep, pipeline.FrameworkDeepSpeed, v
	return true
}

// parseProfilerLine reads the DeepSpeed flops profiler's "iter latency:
// 184.73 ms", "samples/second: 433.07" and "fwd+bwd FLOPS per GPU = …:
// 102.0 TFLOPS" (reference 060), figures of the step its "Profile Summary
// at step N" names. "step latency" is the optimizer step, not a step time.
func parseProfilerLine(b []byte, tl *pipeline.TelemetryLine) bool {
	if !hasPrefix(b, "iter latency:") && !hasPrefix(b, "samples/second:") && !hasPrefix(b, "fwd+bwd FLOPS per GPU") {
		return false
	}
	c := bytes.LastIndexByte(b, ':')
	val, unit := nextField(b[c+1:])
	unit = trimBlank(unit)
	v, ok := parseNumber(val)
	if !ok {
		return false
	}
	switch {
	case hasPrefix(b, "iter latency:"):
		scale, ok := timeScale(unit)
		if !ok {
			return false
		}
		tl.StepTime = v * scale
		if scale == 1e-3 {
			tl.StepTime, _ = parseScaled(val, -3)
		}
	case hasPrefix(b, "samples/second:"):
		tl.SamplesPerS = v
	default:
		switch string(unit) {
		case "TFLOPS":
			tl.TFLOPs = v
		case "GFLOPS":
			tl.TFLOPs = v / 1e3
		case "PFLOPS":
			tl.TFLOPs = v * 1e3
		default:
			return false
		}
	}
	tl.Kind, tl.Framework = pipeline.TelemetryAmend, pipeline.FrameworkDeepSpeed
	return true
}

func timeScale(unit []byte) (float64, bool) {
	switch string(unit) {
	case "s":
		return 1, true
	case "ms":
		return 1e-3, true
	case "us":
		return 1e-6, true
	}
	return 0, false
}

// parseComposerStep reads the Composer console logger's step header
// "[epoch=1][batch=5/5]:" (054); the figures follow on "Train …" lines.
func parseComposerStep(b []byte, tl *pipeline.TelemetryLine) bool {
	i := bytes.Index(b, []byte("[batch="))
	if i < 0 || !bytes.HasSuffix(b, []byte("]:")) {
		return false
	}
	n, ok := atoi64(trimStepCounter(b[i+len("[batch="):]))
	if !ok {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkComposer, n
	return true
}

// parseComposerThroughput reads "Train throughput/samples_per_sec: 2.7330",
// "…/tokens_per_sec: …" and "…/device/mfu: 0.41" (a fraction) of a
// Composer step block (054); per-device rates are not the job's.
func parseComposerThroughput(b []byte, tl *pipeline.TelemetryLine) bool {
	key, val, ok := bytes.Cut(b, []byte(": "))
	if !ok {
		return false
	}
	v, ok := parseNumber(bytes.TrimSpace(val))
	if !ok {
		return false
	}
	switch string(key) {
	case "samples_per_sec":
		tl.SamplesPerS = v
	case "tokens_per_sec":
		tl.TokensPerS = v
	case "device/mfu":
		tl.MFU = v * 100
	default:
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryAmend, pipeline.FrameworkComposer
	return true
}

// parseJSON reads a generic JSON progress line with the configured field
// names: one flat object; nested values are skipped.
func (t *Telemetry) parseJSON(b []byte, tl *pipeline.TelemetryLine) bool {
	c := &t.cfg.JSON
	var prio [8]int // index of the name that set each figure, lower wins
	for i := range prio {
		prio[i] = math.MaxInt
	}
	set := func(slot int, names []string, key []byte, fn func()) {
		for i, n := range names {
			if i < prio[slot] && string(key) == n {
				prio[slot] = i
				fn()
				return
			}
		}
	}
	figures := false
	ok := eachJSONPair(b, func(key, val []byte) {
		v, isNum := parseNumber(val)
		if !isNum {
			return
		}
		set(0, c.Step, key, func() {
			if v >= 0 && v == math.Trunc(v) && v < 1<<62 {
				tl.Step = int64(v)
			}
		})
		set(1, c.StepTime, key, func() { tl.StepTime, figures = v, true })
		set(2, c.StepTimeMS, key, func() {
			if math.IsNaN(tl.StepTime) || prio[1] == math.MaxInt {
				tl.StepTime, _ = parseScaled(val, -3)
				figures = true
			}
		})
		set(3, c.TokensPerS, key, func() { tl.TokensPerS, figures = v, true })
		set(4, c.SamplesPerS, key, func() { tl.SamplesPerS, figures = v, true })
		set(5, c.TFLOPs, key, func() { tl.TFLOPs, figures = v, true })
		set(6, c.MFU, key, func() {
			tl.MFU, figures = v, true
			if c.MFUFraction {
				tl.MFU = v * 100
			}
		})
		set(7, c.Loss, key, func() { tl.Loss = v })
	})
	if !ok || tl.Step < 0 || !figures {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryStep, pipeline.FrameworkJSON
	return true
}

// eachJSONPair calls fn for every member of the top-level object b whose
// value is a number or a string (without escapes); it reports whether b is
// a well-formed object as far as it looked.
func eachJSONPair(b []byte, fn func(key, val []byte)) bool {
	i := skipWS(b, 1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		if b[i] != '"' {
			return false
		}
		end, esc, ok := scanString(b, i)
		if !ok {
			return false
		}
		key := b[i+1 : end-1]
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return false
		}
		var val []byte
		switch c := b[i]; {
		case c == '"':
			e, vesc, ok := scanString(b, i)
			if !ok {
				return false
			}
			if !vesc {
				val = b[i+1 : e-1]
			}
			i = e
		case c == '{' || c == '[':
			e, ok := skipNested(b, i)
			if !ok {
				return false
			}
			i = e
		default:
			e := i
			for e < len(b) && b[e] != ',' && b[e] != '}' && b[e] != ' ' && b[e] != '\t' {
				e++
			}
			val, i = b[i:e], e
		}
		if val != nil && !esc {
			fn(key, val)
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

// skipNested returns the index after the object or array at b[i].
func skipNested(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case '"':
			e, _, ok := scanString(b, i)
			if !ok {
				return 0, false
			}
			i = e
			continue
		}
		i++
	}
	return 0, false
}

// parseNanoGPT reads nanoGPT's "iter 10: loss 3.2202, time 893.76ms, mfu
// 16.68%" (nanoGPT issue 178). The first iterations print mfu -100.00% as
// a placeholder: not a figure. Lines from before March 2023, without mfu,
// are not read: "mfu" is the finder's token for these lines, and a line
// the finder would not hand on must not be one (FuzzFinderCovers); their
// other words ("iter", "loss", "time") are too common to search for.
func parseNanoGPT(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte(", mfu ")) {
		return false
	}
	c := bytes.IndexByte(b, ':')
	if c < 0 {
		return false
	}
	step, ok := atoi64(b[len("iter "):c])
	if !ok {
		return false
	}
	for rest := b[c+1:]; len(rest) > 0; {
		var part []byte
		part, rest = cutAt(rest, ',')
		key, val := nextField(part)
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "loss":
			tl.Loss, _ = parseNumber(val)
		case "time":
			switch {
			case bytes.HasSuffix(val, []byte("ms")):
				tl.StepTime, _ = parseScaled(val[:len(val)-2], -3)
			case bytes.HasSuffix(val, []byte("s")):
				tl.StepTime, _ = parseNumber(val[:len(val)-1])
			}
		case "mfu":
			if v, ok := parseNumber(val); ok && v >= 0 {
				tl.MFU = v
			}
		}
	}
	if math.IsNaN(tl.StepTime) {
		return false
	}
	tl.Kind, tl.Framework, tl.Step = pipeline.TelemetryStep, pipeline.FrameworkNanoGPT, step
	return true
}

// parseMaxText reads MaxText's "completed step: 5, seconds: 1.234,
// TFLOP/s/device: 100.5, Tokens/s/device: 1234.5, total_weights: 65536,
// loss: 10.5" (JAX; NCCL underneath on GPUs).
func parseMaxText(b []byte, tl *pipeline.TelemetryLine) bool {
	if !bytes.Contains(b, []byte("TFLOP/s")) {
		// Every release prints TFLOP/s, the finder's token for these
		// lines (FuzzFinderCovers).
		return false
	}
	for rest := b[bytes.Index(b, []byte("completed step:")):]; len(rest) > 0; {
		var part []byte
		part, rest = cutAt(rest, ',')
		key, val, ok := bytes.Cut(part, []byte(": "))
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		switch string(bytes.TrimSpace(key)) {
		case "completed step":
			tl.Step, _ = atoi64(val)
		case "seconds":
			tl.StepTime, _ = parseNumber(val)
		case "TFLOP/s/device", "TFLOP/s": // TFLOP/s before per-device naming (2023)
			tl.TFLOPs, _ = parseNumber(val)
		case "Tokens/s/device":
			tl.TokensPerS, _ = parseNumber(val)
		case "loss":
			tl.Loss, _ = parseNumber(val)
		}
	}
	if tl.Step < 0 || math.IsNaN(tl.StepTime) {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetryStep, pipeline.FrameworkMaxText
	return true
}

// parseHFMetric reads a line of the Hugging Face Trainer's metrics block
// ("***** train metrics *****", then "  train_runtime            =
// 0:02:23.45", "  train_samples_per_second =     69.711", …), the
// summary the example scripts print with log_metrics.
func parseHFMetric(b []byte, tl *pipeline.TelemetryLine) bool {
	key, val, ok := bytes.Cut(b, []byte(" = "))
	if !ok {
		return false
	}
	key, val = bytes.TrimSpace(key), bytes.TrimSpace(val)
	switch string(key) {
	case "train_runtime":
		tl.Runtime, ok = parseDuration(val)
	case "train_samples_per_second":
		tl.SamplesPerS, ok = parseNumber(val)
	case "train_tokens_per_second":
		tl.TokensPerS, ok = parseNumber(val)
	default:
		return false
	}
	if !ok {
		return false
	}
	tl.Kind, tl.Framework = pipeline.TelemetrySummary, pipeline.FrameworkHF
	return true
}

// parseDuration reads seconds ("116.1914") or the metrics block's
// "h:mm:ss.ff" ("2:25:54.12").
func parseDuration(b []byte) (float64, bool) {
	total := 0.0
	for n := 0; len(b) > 0; n++ {
		var p []byte
		p, b = cutAt(b, ':')
		v, ok := parseNumber(p)
		if !ok || v < 0 || n == 3 {
			return math.NaN(), false
		}
		total = total*60 + v
	}
	return total, true
}

// cutAt splits b at the first sep: the part before it and the rest after
// it (nil when there is no sep).
func cutAt(b []byte, sep byte) (part, rest []byte) {
	if i := bytes.IndexByte(b, sep); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// --- small scanners ------------------------------------------------------

// fields splits b at blanks into dst and returns the number of fields,
// which may exceed len(dst) (only len(dst) are stored).
func fields(b []byte, dst [][]byte) int {
	n := 0
	for {
		b = trimBlank(b)
		if len(b) == 0 {
			return n
		}
		e := 0
		for e < len(b) && b[e] != ' ' && b[e] != '\t' {
			e++
		}
		if n < len(dst) {
			dst[n] = b[:e]
		}
		n++
		b = b[e:]
	}
}

// nextField returns the first blank-separated field of b and the rest.
func nextField(b []byte) (field, rest []byte) {
	b = trimBlank(b)
	e := 0
	for e < len(b) && b[e] != ' ' && b[e] != '\t' {
		e++
	}
	return b[:e], b[e:]
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func firstField(b []byte) []byte {
	f, _ := nextField(b)
	return f
}

// isWord reports whether b is a name: a letter, then letters, digits or
// '_' (nccl-tests types and reduction ops).
func isWord(b []byte) bool {
	if len(b) == 0 || !isLetter(b[0]) {
		return false
	}
	for _, c := range b[1:] {
		if !isLetter(c) && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// atoi64 parses an optionally negative decimal integer; it returns -1 and
// false for anything else, so that a count or step assigned from a failed
// parse stays absent.
func atoi64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return -1, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return -1, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// maxNumberLen bounds a number's text: longer runs of digits are not
// figures (and would not fit the stack buffer parseScaled uses).
const maxNumberLen = 40

// parseNumber reads a decimal number as trainers print it: optional sign,
// digits with optional thousands separators ("10,050", "1,017.04"), a
// fraction and exponent, an optional trailing '%'. "N/A", "nan" and the
// empty string are not numbers: it returns NaN and false for them, so
// that a figure assigned from a failed parse stays absent.
func parseNumber(b []byte) (float64, bool) { return parseScaled(b, 0) }

// parseScaled reads a number like parseNumber and multiplies it by
// 10^exp10 exactly as if the digits had been printed that way, so that
// 3367.6 ms is 3.3676 s to the last bit.
func parseScaled(b []byte, exp10 int) (float64, bool) {
	if n := len(b); n > 0 && b[n-1] == '%' {
		b = b[:n-1]
	}
	if len(b) == 0 || len(b) > maxNumberLen {
		return math.NaN(), false
	}
	if v, ok := exactDecimal(b, exp10); ok {
		return v, true
	}
	var buf [maxNumberLen + 8]byte
	n := 0
	digits, exp := false, false
	for i, c := range b {
		switch {
		case isDigit(c):
			digits = true
		case c == ',':
			// A thousands separator sits between digits, three before the
			// next separator or point.
			if !thousands(b, i) {
				return math.NaN(), false
			}
			continue
		case c == '.':
		case c == 'e' || c == 'E':
			exp = true
		case c == '+' || c == '-':
		default:
			return math.NaN(), false
		}
		buf[n] = c
		n++
	}
	if !digits {
		return math.NaN(), false
	}
	if n < len(b) {
		// Without its thousands separators it may take the fast path.
		if v, ok := exactDecimal(buf[:n], exp10); ok {
			return v, true
		}
	}
	return parseDecimal(buf[:n], exp, exp10)
}

// parseDecimal is parseScaled of b, the number's text without separators
// or '%' (exp: it has an exponent), by strconv.ParseFloat. b has room for
// an exponent behind it.
func parseDecimal(b []byte, exp bool, exp10 int) (float64, bool) {
	if exp10 != 0 {
		if exp {
			v, err := strconv.ParseFloat(string(b), 64)
			if err != nil {
				return math.NaN(), false
			}
			return v * math.Pow10(exp10), true
		}
		b = append(b, 'e')
		b = strconv.AppendInt(b, int64(exp10), 10)
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return math.NaN(), false
	}
	return v, true
}

// exactPow10 are the powers of ten a float64 holds exactly.
var exactPow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// decimalDigits reads the digits of b from i on into mant, returning
// where they end, or false when a 20th significant digit might overflow
// mant (19 digits: mant at least 1e18).
func decimalDigits(b []byte, i int, mant uint64) (int, uint64, bool) {
	for ; i < len(b); i++ {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		if mant >= 1e18 {
			return i, mant, false
		}
		mant = mant*10 + uint64(d)
	}
	return i, mant, true
}

// exactDecimal returns the value of the decimal number b ([sign] digits
// [. digits] [e|E [sign] digits], the exponent only when exp10 is 0)
// times 10^exp10 when float64 arithmetic gives it exactly, as
// strconv.ParseFloat would: a mantissa below 2^53 and
// a power of ten up to 10^22 are exact, and one multiply or divide rounds
// their product or quotient correctly (Clinger's fast path, which
// strconv takes too, after a slower general scan: about 40 of the 55 ns
// of a trainer figure). ok is false for any other text or value: then
// parseDecimal decides. TestExactDecimal and FuzzExactDecimal compare the
// two.
func exactDecimal(b []byte, exp10 int) (v float64, ok bool) {
	i, neg := 0, false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	// The digits before the point, then those after it, one loop each
	// (one loop testing for the point at every digit cost a third more).
	// A mantissa of 19 significant digits (at least 1e18) takes no more:
	// a 20th might overflow it.
	start := i
	i, mant, ok := decimalDigits(b, i, 0)
	if !ok {
		return 0, false
	}
	digit := i > start
	frac := 0 // digits after the point
	if i < len(b) && b[i] == '.' {
		start = i + 1
		if i, mant, ok = decimalDigits(b, start, mant); !ok {
			return 0, false
		}
		frac = i - start
		digit = digit || frac > 0
	}
	if !digit {
		return 0, false
	}
	e := 0
	if i < len(b) {
		if b[i] != 'e' && b[i] != 'E' || exp10 != 0 {
			return 0, false // parseDecimal scales such a number after reading it
		}
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		if i == len(b) || len(b)-i > 4 {
			return 0, false
		}
		for ; i < len(b); i++ {
			c := b[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			e = e*10 + int(c-'0')
		}
		if eneg {
			e = -e
		}
	}
	e += exp10 - frac
	if mant >= 1<<53 || e < -22 || e > 22 {
		return 0, false
	}
	v = float64(mant)
	if e > 0 {
		v *= exactPow10[e]
	} else if e < 0 {
		v /= exactPow10[-e]
	}
	if neg {
		v = -v
	}
	return v, true
}

// thousands reports whether the comma at b[i] separates thousands: a digit
// before it, exactly three digits after it, then the end, another
// separator or the fraction.
func thousands(b []byte, i int) bool {
	if i == 0 || !isDigit(b[i-1]) || i+3 >= len(b) {
		return false
	}
	for _, c := range b[i+1 : i+4] {
		if !isDigit(c) {
			return false
		}
	}
	return i+4 == len(b) || b[i+4] == ',' || b[i+4] == '.'
}

// --- prefilter -----------------------------------------------------------

// TelemetryTokens are the substrings that find telemetry lines in a block
// of log text, chosen so that bytes.Index runs fast over trainer output
// (their first bytes are rare there; BenchmarkTelemetryTokens measures
// each over a mixed stream). Each names the lines it finds:
var TelemetryTokens = [...][]byte{
	[]byte("(ms)"),            // Megatron "elapsed time per iteration (ms):"
	[]byte("(s):"),            // Megatron-DeepSpeed "elapsed time per iteration (s):"
	[]byte("Tera Flops"),      // Megatron-DeepSpeed "Effective Tera Flops per GPU"
	[]byte("_step_timing"),    // NeMo "train_step_timing in s"
	[]byte("GiB("),            // torchtitan "memory: 66.91GiB(37.51%)" on every step line
	[]byte("'loss'"),          // Hugging Face step dicts
	[]byte("_per_s"),          // Hugging Face summary, Composer throughput, JSON *_per_s, *_per_sec*
	[]byte("Epoch"),           // Lightning progress bars
	[]byte("SamplesPerSec"),   // DeepSpeed throughput timer
	[]byte("Profile Summary"), // DeepSpeed flops profiler step
	[]byte("FLOPS per GPU"),   // DeepSpeed flops profiler TFLOPs
	[]byte("/second"),         // DeepSpeed flops profiler "samples/second:"
	[]byte("[epoch="),         // Composer step header
	[]byte("[batch="),         // … of a run whose duration is in batches: "[batch=16/100]:"
	[]byte("Train throughput"),
	[]byte("_time"),           // JSON step_time, iteration_time
	[]byte("TFLOP/s"),         // MaxText "TFLOP/s/device", Megatron "(TFLOP/s/GPU)"
	[]byte("_runtime"),        // Hugging Face metrics block "train_runtime ="
	[]byte("busbw"),           // nccl-tests column header
	[]byte("Avg bus"),         // nccl-tests "# Avg bus bandwidth"
	[]byte("Collective test"), // nccl-tests 2.17+ start and end
	[]byte("Bytes "),          // nccl-tests "nThread … minBytes … maxBytes"
	[]byte("_perf"),           // a command line running an nccl-tests binary
	[]byte("float"),           // nccl-tests rows of float and bfloat16
	[]byte("half"),            // … half
	[]byte("double"),          // … double
	[]byte("f8e"),             // … f8e4m3, f8e5m2
	[]byte("fp8"),             // … fp8_e4m3, fp8_e5m2 (rccl-tests)
	[]byte("tflops"),          // JSON tflops, tflops_per_gpu; torchtitan "tflops:"
	[]byte("mfu"),             // JSON mfu; torchtitan "mfu:", nanoGPT ", mfu "
	// Generic progress lines (progress.go: progressMarkers).
	[]byte("loss:"), []byte("loss="), []byte("_loss"), []byte("Loss"), []byte("/sec"), []byte("sec/"), []byte("tok/s"),
	[]byte("-second"), []byte("0ms"), []byte("1ms"), []byte("2ms"), []byte("3ms"), []byte("4ms"), []byte("5ms"),
	[]byte("6ms"), []byte("7ms"), []byte("8ms"), []byte("9ms"),
}

// telemetrySlowTokens find what TelemetryTokens do not, at a cost: their
// first bytes are common in trainer output, so bytes.Index over a block
// runs at ~2.5 GB/s instead of 5–15 (BenchmarkTelemetryTokens).
// TelemetryCandidate, which looks at one line, uses them too.
var telemetrySlowTokens = [...][]byte{
	[]byte("iter latency"), // DeepSpeed flops profiler step time
	[]byte("int8"),         // nccl-tests rows of int8 and uint8 (018)
	[]byte("int32"),
	[]byte("int64"),
	[]byte("nccl-tests"), // nccl-tests 2.18+ version line
	// Checkpoint lines (checkpoint.go: CheckpointTokens).
	tokCheckpointLower, tokCheckpointUpper, tokSavingModelTo,
}

// TelemetryCandidate reports whether line may be a telemetry line: the
// prefilter for one record or line (NCCL lines are found by Candidate). It
// never allocates and errs on the side of yes; Parse decides.
func TelemetryCandidate(line []byte) bool { return telemetrySet.contains(line) }
