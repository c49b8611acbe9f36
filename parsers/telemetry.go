package parsers

import (
	"bytes"
	"errors"
	"fmt"
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
	ckpt    Checkpoint                // checkpoint save and load lines (checkpoint.go)
	earlier []pipeline.CheckpointLine // checkpoint lines of earlier carriage-return updates
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
// update; the checkpoint lines of its earlier updates are in tl.Earlier
// (docs/checkpoints.md, R9), and when the last update is no telemetry line
// the last of them is tl's own.
func (t *Telemetry) Parse(line []byte, tl *pipeline.TelemetryLine) bool {
	last := lastUpdate(line)
	var earlier []pipeline.CheckpointLine
	if lo, ok := offsetIn(line, last); ok && lo > 0 {
		earlier = t.crCheckpoints(line[:lo])
	}
	ok := t.parseLast(last, tl)
	if len(earlier) == 0 {
		return ok
	}
	if !ok {
		tl.Reset()
		tl.Kind, tl.Checkpoint = pipeline.TelemetryCheckpoint, earlier[len(earlier)-1]
		earlier = earlier[:len(earlier)-1]
	}
	if len(earlier) > 0 {
		tl.Earlier = earlier
	}
	return true
}

// parseLast is Parse of the line's last update.
func (t *Telemetry) parseLast(line []byte, tl *pipeline.TelemetryLine) bool {
	tl.Reset()
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

// maxEarlierCheckpoints bounds the checkpoint lines read from the earlier
// updates of one carriage-return line; past it, updates are not read (a
// bar redrawn that often between two newlines holds no more saves).
const maxEarlierCheckpoints = 64

// checkpointMarks are lineSet's checkpoint marker bits.
const checkpointMarks = 1<<markCheckpointLower | 1<<markCheckpointUpper | 1<<markSavingModelTo | 1<<markRestoringParameters

// crCheckpoints reads the checkpoint lines of head, the carriage-return
// updates of a line before its last one, in order (R9). Only a head that
// holds a checkpoint marker is split. The lines alias head or buffers of
// their own, valid until the next call.
func (t *Telemetry) crCheckpoints(head []byte) []pipeline.CheckpointLine {
	t.earlier = t.earlier[:0]
	if lineSet.mask(head)&checkpointMarks == 0 {
		return nil
	}
	var cl pipeline.CheckpointLine
	for len(head) > 0 && len(t.earlier) < maxEarlierCheckpoints {
		seg := head
		if k := bytes.IndexByte(head, '\r'); k >= 0 {
			seg, head = head[:k], head[k+1:]
		} else {
			head = nil
		}
		if len(seg) == 0 || len(seg) > maxTelemetryLine {
			continue
		}
		if bytes.IndexByte(seg, 0x1b) >= 0 {
			// Its own copy: the paths of earlier updates stay valid.
			seg = StripANSI(nil, seg)
		}
		rest, _ := StripPrefix(seg)
		if rest = trimRightSpace(rest); len(rest) == 0 {
			continue
		}
		if m := lineSet.mask(rest); m&checkpointMarks != 0 && t.ckpt.parse(rest, &cl, m) {
			t.earlier = append(t.earlier, cl)
		}
	}
	return t.earlier
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
	// tl is reset: a line without a checkpoint marker leaves tl.Checkpoint
	// as the checkpoint parser would (blank), without its resets.
	if m&checkpointMarks != 0 && t.ckpt.parse(rest, &tl.Checkpoint, m) {
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
		if IsInspector(b) {
			return inspectorLine(b, tl)
		}
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
	// The generic reader last, and its markers searched only here: on
	// the lines every named reader declined (holdsProgressMarker).
	return holdsProgressMarker(b) && parseGenericProgress(b, tl)
}

// lineSet finds the markers of a telemetry line's named parsers in one
// pass: bit markCheckpointLower… of its mask for the checkpoint markers,
// bit markNCCLInfo for tokNCCLInfo and bit markProgress+i for
// progressParsers[i].marker. The generic reader's markers are not among
// them (holdsProgressMarker).
var lineSet = newTokenSet2(lineSpecs()...)

const (
	markCheckpointLower = iota
	markCheckpointUpper
	markSavingModelTo
	markRestoringParameters
	markNCCLInfo
	markProgress
)

func lineSpecs() []tokenSpec {
	specs := []tokenSpec{{tok: tokCheckpointLower}, {tok: tokCheckpointUpper}, {tok: tokSavingModelTo}, {tok: tokRestoringParameters}, {tok: tokNCCLInfo}}
	for _, p := range progressParsers {
		specs = append(specs, tokenSpec{tok: p.marker})
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
	[]byte("6ms"), []byte("7ms"), []byte("8ms"), []byte("9ms"), []byte("[step="),
}

// telemetrySlowTokens find what TelemetryTokens do not, at a cost: their
// first bytes are common in trainer output, so bytes.Index over a block
// stops often and runs several times slower than for the others
// (BenchmarkTelemetryTokens).
// TelemetryCandidate, which looks at one line, uses them too.
var telemetrySlowTokens = [...][]byte{
	[]byte("iter latency"), // DeepSpeed flops profiler step time
	[]byte("int8"),         // nccl-tests rows of int8 and uint8 (018)
	[]byte("int32"),
	[]byte("int64"),
	[]byte("nccl-tests"), // nccl-tests 2.18+ version line
	// Checkpoint lines (checkpoint.go: CheckpointTokens).
	tokCheckpointLower, tokCheckpointUpper, tokSavingModelTo, tokRestoringParameters,
}

// TelemetryCandidate reports whether line may be a telemetry line: the
// prefilter for one record or line (NCCL lines are found by Candidate). It
// never allocates and errs on the side of yes; Parse decides.
func TelemetryCandidate(line []byte) bool { return telemetrySet.contains(line) }
