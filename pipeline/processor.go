package pipeline

// Classifier is the one line parser (parsers.Lines): Line parses a log
// line once, into the NCCL event ev and, when tl is not nil and the parser
// reads telemetry (parsers.NewLines), into the telemetry line tl. nccl
// reports an NCCL line; a line that is not one may still set
// ev.LauncherHost. telemetry reports a telemetry line (tl is left alone
// when it is nil or the parser reads no telemetry). A prefilter in front of
// it must pass the telemetry lines too (parsers.Prefilter(true)).
type Classifier interface {
	Line(text []byte, ev *Event, tl *TelemetryLine) (nccl, telemetry bool)
}

// MessageSplitter is implemented by a Classifier that finds a second
// message glued behind the first on one physical line (a terminal-wrapped
// paste joins several; corpus 210). NextMessage returns where the next
// message starts in text, or -1.
type MessageSplitter interface {
	NextMessage(text []byte) int
}

// JobFunc names the job a record belongs to.
type JobFunc func(*Record) string

// Tap is called for every NCCL event after the assembler took it (the
// events table, metrics). rec and ev are valid only during the call.
type Tap func(job string, rec *Record, ev *Event)

// ProcessorStats counts what a Processor saw.
type ProcessorStats struct {
	Records   int64 // decoded lines
	Bytes     int64 // bytes of decoded lines
	NCCLLines int64 // NCCL messages (a line may hold several, MessageSplitter)
}

// Processor feeds the assembler the records a Parser read (Apply), in
// input order: it is the one door every front end (scan, run, guard,
// demo) takes from a parsed line to a summary. Record parses and applies
// a record on the caller's goroutine with a Parser of its own. It is not
// safe for concurrent use.
type Processor struct {
	asm    NCCLAssembler
	job    JobFunc
	tap    Tap
	parser *Parser // Record's
	one    Parsed  // Record's record, parsed
	ev     Event
	// training is the line Apply hands on for a training line a Parser
	// kept (trainingLine): blank but for the fields such lines carry.
	training TelemetryLine
	telOK    bool // the last record passed to Record was a telemetry line (parser.tl)
	// gave: the last record's line was an NCCL line, named a launcher
	// host or was a telemetry line (what a Parser keeps of a record).
	gave  bool
	Stats ProcessorStats
}

// ProcessorOption sets up a Processor at construction.
type ProcessorOption func(*Processor)

// WithTap makes fn see every NCCL event after the assembler took it.
func WithTap(fn Tap) ProcessorOption { return func(p *Processor) { p.tap = fn } }

// NewProcessor returns a processor feeding asm; Record reads lines with
// cls. job may be nil: every record then belongs to the job named "".
func NewProcessor(asm NCCLAssembler, cls Classifier, job JobFunc, opts ...ProcessorOption) *Processor {
	p := &Processor{asm: asm, job: job, parser: NewParser(cls, true), training: blankTelemetryLine}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Assembler returns the assembler the processor feeds.
func (p *Processor) Assembler() NCCLAssembler { return p.asm }

// Record parses one decoded record (Parser) and applies it (Apply): one
// Classifier call per line; an NCCL line with further NCCL messages glued
// behind it (MessageSplitter) gives one event per message. Its telemetry,
// read in the same call, is what Telemetry returns until the next Record.
func (p *Processor) Record(rec *Record) {
	p.Stats.Records++
	p.Stats.Bytes += int64(len(rec.Text))
	p.one.Reset()
	p.parser.parse(rec, &p.one, false)
	n := p.one.len()
	p.gave = n > 0 || p.parser.telOK
	p.applyRange(&p.one, 0, n, nil)
	p.telOK = p.parser.telOK
}

// maxMessagesPerLine bounds the messages read from one physical line; the
// rest of a longer one is read as one.
const maxMessagesPerLine = 64

// splitMessages calls fn with each message of a line whose second message
// starts at i (split.NextMessage(text) > 0), at most maxMessagesPerLine;
// the rest of a longer line is its last message.
func splitMessages(split MessageSplitter, text []byte, i int, fn func(msg []byte)) {
	for n := 1; n < maxMessagesPerLine && i > 0; n++ {
		fn(text[:i])
		text = text[i:]
		i = split.NextMessage(text)
	}
	fn(text)
}

// Telemetry returns the telemetry line of the last record passed to
// Record, and false when that record was none. tl is valid until the next
// Record call.
func (p *Processor) Telemetry() (tl *TelemetryLine, ok bool) { return &p.parser.tl, p.telOK }

// took reports nccl, the verdict of the line in p.ev; a line that is not
// NCCL may still name a launcher host.
func (p *Processor) took(rec *Record, nccl bool) bool {
	if nccl {
		return true
	}
	if len(p.ev.LauncherHost) > 0 {
		p.asm.AddLauncher(p.jobOf(rec), rec.Meta, p.ev.LauncherHost, rec.Time)
	}
	return false
}

// take hands the NCCL event in p.ev to the assembler and the tap.
func (p *Processor) take(rec *Record) {
	p.Stats.NCCLLines++
	job := p.jobOf(rec)
	p.asm.Add(job, rec.Meta, &p.ev, rec.Time)
	if p.tap != nil {
		p.tap(job, rec, &p.ev)
	}
}

// Apply is the rest of Processor.Record for the records a Parser read:
// the assembler and the tap get their NCCL events, in the records' place,
// and tel (when not nil) each record's telemetry line after its events
// (what Telemetry returns after Record). rec and tl are valid only during
// the call and tel must not change them. A training line (step, amend,
// summary) carries its Kind, Framework, Rank and TrainingFigures; its other
// fields are blank. Telemetry reports false afterwards.
func (p *Processor) Apply(pr *Parsed, tel func(rec *Record, tl *TelemetryLine)) {
	p.Stats.Records += pr.records
	p.Stats.Bytes += pr.bytes
	p.applyRange(pr, 0, pr.len(), tel)
}

// applyRange is Apply for pr's messages from to to (pr.len marks taken
// between the records a Parser read), without counting Stats.Records and
// Stats.Bytes.
func (p *Processor) applyRange(pr *Parsed, from, to int, tel func(rec *Record, tl *TelemetryLine)) {
	p.telOK = false
	for i := from; i < to; i++ {
		m := &pr.msgs[i]
		if m.tl >= 0 {
			if tel == nil {
				continue
			}
			if !m.training {
				tel(&m.rec, &pr.tls[m.tl])
				continue
			}
			// The rest of p.training stays blank: nothing else writes it.
			tr, tl := &pr.training[m.tl], &p.training
			tl.Kind, tl.Framework, tl.Rank, tl.TrainingFigures = tr.kind, tr.framework, tr.rank, tr.figures
			tel(&m.rec, tl)
			continue
		}
		p.ev = pr.evs[m.ev]
		if p.took(&m.rec, m.nccl) {
			p.take(&m.rec)
		}
	}
}

func (p *Processor) jobOf(rec *Record) string {
	if p.job == nil {
		return ""
	}
	return p.job(rec)
}
