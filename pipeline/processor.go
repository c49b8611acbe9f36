package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

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

// Processor classifies decoded records and feeds the assembler. It is the
// one path every front end (scan, run, demo) takes from a line to a
// summary. It is not safe for concurrent use.
type Processor struct {
	asm   NCCLAssembler
	cls   Classifier
	job   JobFunc
	tap   Tap
	split MessageSplitter // nil: one message per line
	ev    Event
	tl    TelemetryLine // the last record's telemetry, when telOK
	// training is the line Apply hands on for a training line a Parser
	// kept (trainingLine): blank but for the fields such lines carry.
	training TelemetryLine
	telOK    bool
	// gave: the last record's line was an NCCL line, named a launcher
	// host or was a telemetry line (what a Parser keeps of a record).
	gave  bool
	Stats ProcessorStats
}

// NewProcessor returns a processor feeding asm. job may be nil: every record
// then belongs to the job named "".
func NewProcessor(asm NCCLAssembler, cls Classifier, job JobFunc) *Processor {
	split, _ := cls.(MessageSplitter)
	return &Processor{asm: asm, cls: cls, job: job, split: split, training: blankTelemetryLine}
}

// SetTap installs fn to see every NCCL event.
func (p *Processor) SetTap(fn Tap) { p.tap = fn }

// Assembler returns the assembler the processor feeds.
func (p *Processor) Assembler() NCCLAssembler { return p.asm }

// Record parses one decoded record with one Classifier call. An NCCL line
// with further NCCL messages glued behind it (MessageSplitter) gives one
// event per message. Its telemetry, read in the same call, is what
// Telemetry returns until the next Record.
func (p *Processor) Record(rec *Record) {
	p.Stats.Records++
	p.Stats.Bytes += int64(len(rec.Text))
	nccl, tel := p.cls.Line(rec.Text, &p.ev, &p.tl)
	p.telOK = tel
	p.gave = nccl || tel || len(p.ev.LauncherHost) > 0
	if !p.took(rec, nccl) {
		return
	}
	if p.split != nil {
		if i := p.split.NextMessage(rec.Text); i > 0 {
			p.messages(rec, i)
			return
		}
	}
	p.take(rec)
}

// maxMessagesPerLine bounds the messages read from one physical line; the
// rest of a longer one is read as one.
const maxMessagesPerLine = 64

// messages reads each message of rec's line on its own, the second one
// starting at i.
func (p *Processor) messages(rec *Record, i int) {
	part := *rec
	splitMessages(p.split, rec.Text, i, func(msg []byte) {
		part.Text = msg
		if p.classify(&part) {
			p.take(&part)
		}
	})
}

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
func (p *Processor) Telemetry() (tl *TelemetryLine, ok bool) { return &p.tl, p.telOK }

// classify parses the text of rec, one message of a line, into p.ev (no
// telemetry: that is read once per line) and reports whether it is an NCCL
// message.
func (p *Processor) classify(rec *Record) bool {
	nccl, _ := p.cls.Line(rec.Text, &p.ev, nil)
	return p.took(rec, nccl)
}

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

// Parsed is records read by a Parser, in input order: what
// Processor.Apply needs to feed the assembler in their place, with the
// bytes it needs copied out of the decoder's and the parser's buffers.
// Records without an NCCL event or a launcher host are only counted.
type Parsed struct {
	records, bytes int64
	msgs           []parsedMsg
	evs            []Event         // msgs[i].ev indexes it
	tls            []TelemetryLine // msgs[i].tl indexes it, unless msgs[i].training
	training       []trainingLine  // msgs[i].tl indexes it when msgs[i].training
	arena          []byte          // the copied bytes
}

// trainingLine is a training-progress line (step, amend, summary) as a
// Parsed keeps it: the fields those kinds carry (TelemetryLine), a quarter
// of the whole line's bytes. A scan of trainer output is mostly such
// lines; copying each whole to the batch and back cost ~10 % of its time.
type trainingLine struct {
	kind      TelemetryKind
	framework string
	rank      int
	figures   TrainingFigures
}

// len returns the number of messages p holds; taken after a record was
// parsed, it marks where the record's messages end (Processor.applyRange).
func (p *Parsed) len() int { return len(p.msgs) }

// Reset empties p for reuse, keeping its buffers: what it held before is
// no longer valid.
func (p *Parsed) Reset() {
	*p = Parsed{msgs: p.msgs[:0], evs: p.evs[:0], tls: p.tls[:0], training: p.training[:0], arena: p.arena[:0]}
}

// parsedMsg is one message of a parsed record's line that Apply has
// something to do with: its record (Text the message's text), whether it
// is an NCCL message and its event (Parsed.evs[ev]); or, when tl >= 0, the
// record's telemetry line (Parsed.tls[tl], or Parsed.training[tl] when
// training, after its messages, as Record's caller reads it). Events and
// telemetry lines live in slices of their own: a message has one or the
// other, and copying both would double the bytes moved per line.
type parsedMsg struct {
	rec      Record
	nccl     bool
	training bool
	ev, tl   int32
}

// Parser is the parsing half of Processor.Record, for another goroutine:
// it reads records into Parsed values that a Processor applies (Apply) in
// input order. Not safe for concurrent use: one per goroutine.
type Parser struct {
	cls       Classifier
	split     MessageSplitter
	ev        Event
	tl        TelemetryLine
	telemetry bool
}

// NewParser returns a parser reading lines with cls, which must not be
// shared with another goroutine; with telemetry it also reads their
// telemetry (cls must be a telemetry parser then, parsers.NewLines).
func NewParser(cls Classifier, telemetry bool) *Parser {
	split, _ := cls.(MessageSplitter)
	return &Parser{cls: cls, split: split, telemetry: telemetry}
}

// parsedArena is the least size of a Parsed's copy buffer: one allocation
// per many lines (an NCCL line and its event's fields take ~300 bytes).
const parsedArena = 64 << 10

// keep returns a copy of b that stays valid until p's next Reset (nil for
// nil, so that nil and empty fields stay apart). A full buffer is replaced,
// never grown in place: the copies made in it stay where they are.
func (p *Parsed) keep(b []byte) []byte {
	if b == nil {
		return nil
	}
	if p.arena == nil || cap(p.arena)-len(p.arena) < len(b) {
		p.arena = make([]byte, 0, max(parsedArena, 2*cap(p.arena), len(b)))
	}
	n := len(p.arena)
	p.arena = append(p.arena, b...)
	return p.arena[n:len(p.arena):len(p.arena)]
}

// keepTelemetry copies the byte fields of tl.
func (p *Parsed) keepTelemetry(tl *TelemetryLine) {
	tl.Collective, tl.Version = p.keep(tl.Collective), p.keep(tl.Version)
	tl.Host, tl.GPU, tl.Name = p.keep(tl.Host), p.keep(tl.GPU), p.keep(tl.Name)
	tl.Row.Type, tl.Row.Redop = p.keep(tl.Row.Type), p.keep(tl.Row.Redop)
	tl.Checkpoint.Path = p.keep(tl.Checkpoint.Path)
}

// keepEvent copies the byte fields of ev.
func (p *Parsed) keepEvent(ev *Event) {
	ev.Host, ev.PID, ev.TID = p.keep(ev.Host), p.keep(ev.PID), p.keep(ev.TID)
	ev.LauncherHost = p.keep(ev.LauncherHost)
	ev.Name, ev.Value, ev.Iface, ev.IP = p.keep(ev.Name), p.keep(ev.Value), p.keep(ev.Iface), p.keep(ev.IP)
	ev.CommPtr, ev.CommID = p.keep(ev.CommPtr), p.keep(ev.CommID)
}

// Parse reads rec as Processor.Record would and appends it to out.
func (p *Parser) Parse(rec *Record, out *Parsed) {
	out.records++
	out.bytes += int64(len(rec.Text))
	text := rec.Text
	var tlp *TelemetryLine
	if p.telemetry {
		tlp = &p.tl
	}
	nccl, tel := p.cls.Line(text, &p.ev, tlp)
	p.messages(out, rec, nccl)
	if tel {
		// After the messages, as Record's caller reads it; the messages
		// were read without telemetry (once per line), p.tl is the line's.
		if isTraining(p.tl.Kind) {
			out.msgs = append(out.msgs, parsedMsg{rec: *rec, training: true, ev: -1, tl: int32(len(out.training))})
			out.training = append(out.training, trainingLine{p.tl.Kind, p.tl.Framework, p.tl.Rank, p.tl.TrainingFigures})
		} else {
			out.msgs = append(out.msgs, parsedMsg{rec: *rec, ev: -1, tl: int32(len(out.tls))})
			out.tls = append(out.tls, p.tl)
			out.keepTelemetry(&out.tls[len(out.tls)-1])
		}
		out.msgs[len(out.msgs)-1].rec.Text = nil
	}
}

// messages appends rec's messages, whose line's first verdict (in p.ev) is
// nccl: the line, or each message glued in it (Processor.messages).
func (p *Parser) messages(out *Parsed, rec *Record, nccl bool) {
	if nccl && p.split != nil {
		if i := p.split.NextMessage(rec.Text); i > 0 {
			splitMessages(p.split, rec.Text, i, func(msg []byte) { p.message(out, rec, msg) })
			return
		}
	}
	p.add(out, rec, rec.Text, nccl)
}

// message classifies text, a message of rec's line.
func (p *Parser) message(out *Parsed, rec *Record, text []byte) {
	nccl, _ := p.cls.Line(text, &p.ev, nil)
	p.add(out, rec, text, nccl)
}

// add appends the message text of rec with its event in p.ev, when Apply
// has something to do with it.
func (p *Parser) add(out *Parsed, rec *Record, text []byte, nccl bool) {
	if !nccl && len(p.ev.LauncherHost) == 0 {
		return
	}
	out.msgs = append(out.msgs, parsedMsg{rec: *rec, nccl: nccl, ev: int32(len(out.evs)), tl: -1})
	out.msgs[len(out.msgs)-1].rec.Text = out.keep(text)
	out.evs = append(out.evs, p.ev)
	out.keepEvent(&out.evs[len(out.evs)-1])
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

// Finder finds candidate lines in a block of text; parsers.Finder is the
// implementation. Clone returns an independent finder with the same
// tokens, for another goroutine.
type Finder interface {
	Reset(block []byte)
	Next(from int) int
	Clone() Finder
}

// BlockScanner reads a stream in large blocks and hands fn only the lines
// that hold a candidate token, found with one fast substring search per
// token over the whole block: the lines in between are never looked at.
// Where most lines hold a token (trainer output with telemetry on: nine
// lines in ten) the search stands aside for the rest of the block and
// every line is handed on (Chunk.Searched): the line parser rejects a line
// without a token at about what searching it costs, and the search's cost
// per found line is saved. Reading runs in its own goroutine, one block
// ahead of the search, so the read syscalls overlap the scanning. Lines
// over the cap are skipped and counted, never fatal; in a dense stretch
// only those holding a token are counted, as in a searched one.
type BlockScanner struct {
	r    io.Reader
	find Finder
	max  int
	size int
	// Oversized counts candidate lines longer than the cap (and lines too
	// long for the buffer).
	Oversized int64
	// Bytes counts the bytes read.
	Bytes int64
	// sample is how much of a block is searched before the dense stretch
	// may start (0: denseSample).
	sample int
}

// NewBlockScanner reads r with lines capped at max bytes.
func NewBlockScanner(r io.Reader, find Finder, max int) *BlockScanner {
	size := 1 << 20 // one read syscall per MiB keeps the syscall cost under the search cost
	if 4*max > size {
		size = 4 * max
	}
	return &BlockScanner{r: r, find: find, max: max, size: size}
}

// chunk is a run of complete lines and the buffer that holds it.
type chunk struct {
	region []byte
	base   int64
	buf    []byte
}

// Scan calls fn for every candidate line (without its newline; in a dense
// stretch every line), in input order, with the byte offset where it
// starts. line is valid only during the call. It returns nil at the end of
// the input. The token search runs on up to four goroutines (one block
// each, a clone of the finder per goroutine) while fn is called from Scan's own goroutine, so fn needs no
// locking. A few buffers of the block size are all the memory it holds,
// whatever the input length.
func (s *BlockScanner) Scan(fn func(line []byte, off int64)) error {
	return s.scan(nil, func(c *Chunk, _ any) {
		for i, l := range c.Lines {
			fn(l, c.Offs[i])
		}
	})
}

// Chunk is the candidate lines of one block (without their newlines) and
// the byte offsets where they start, in input order. Lines[:Searched]
// each hold a token the finder found; Lines[Searched:] are every line of
// the rest of the block, handed on unsearched because most lines of its
// start held a token (the dense stretch: BlockScanner). A step that counts
// something per candidate line (a malformed one) checks those lines itself.
type Chunk struct {
	Lines    [][]byte
	Offs     []int64
	Searched int
}

// ScanPrepared is Scan with a first step on the search goroutines: newStep
// is called once per search goroutine, on it, and returns that goroutine's
// step, which is called with each chunk of candidate lines it found and
// may keep no reference to them; what it returns is handed to fn with the
// chunk on Scan's own goroutine, chunk after chunk in input order. The
// lines are valid until fn returns. Parsing in the step spreads it over
// the cores while fn keeps what needs input order.
func (s *BlockScanner) ScanPrepared(newStep func() func(*Chunk) any, fn func(c *Chunk, v any)) error {
	return s.scan(newStep, fn)
}

func (s *BlockScanner) scan(newStep func() func(*Chunk) any, fn func(c *Chunk, v any)) error {
	workers := max(1, min(runtime.GOMAXPROCS(0), 4))
	free := make(chan []byte, workers+2)
	for i := 0; i < cap(free); i++ {
		free <- make([]byte, s.size)
	}
	type found struct {
		c         Chunk
		v         any
		oversized int64
	}
	type job struct {
		c   chunk
		out chan found
	}
	chunks := make(chan chunk, 1)
	// spare holds the line lists of chunks the caller is done with, for
	// the workers to fill again: a block's lists are ~0.3 MiB, made anew
	// per block they were most of a scan's garbage.
	spare := make(chan Chunk, cap(free)+workers)
	order := make(chan job, cap(free))
	work := make(chan job, cap(free))
	type result struct {
		oversized int64
		err       error
	}
	done := make(chan result, 1)
	go func() {
		n, err := s.produce(free, chunks)
		done <- result{n, err}
	}()
	go func() {
		// Hand each chunk to the workers and, in the same order, to the
		// caller's loop.
		for c := range chunks {
			j := job{c: c, out: make(chan found, 1)}
			order <- j
			work <- j
		}
		close(order)
		close(work)
	}()
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		f := s.find.Clone()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var step func(*Chunk) any
			if newStep != nil {
				step = newStep()
			}
			for j := range work {
				var r found
				select {
				case r.c = <-spare:
				default:
				}
				r.oversized = s.lines(f, j.c.region, j.c.base, &r.c)
				if step != nil {
					r.v = step(&r.c)
				}
				j.out <- r
			}
		}()
	}
	for j := range order {
		r := <-j.out
		fn(&r.c, r.v)
		s.Oversized += r.oversized
		free <- j.c.buf
		select {
		case spare <- r.c:
		default:
		}
	}
	wg.Wait()
	res := <-done
	s.Oversized += res.oversized
	return res.err
}

// produce reads blocks, cuts each at its last newline and sends the
// complete lines to work; the incomplete tail is copied to the front of the
// next buffer. It closes work when the input ends.
func (s *BlockScanner) produce(free chan []byte, work chan<- chunk) (oversized int64, err error) {
	defer close(work)
	buf := <-free
	carry := 0        // bytes of an incomplete line kept from the last block
	var base int64    // stream offset of buf[0]
	skipping := false // inside a line too long for the buffer
	for {
		n, rerr := io.ReadAtLeast(s.r, buf[carry:], len(buf)-carry)
		s.Bytes += int64(n)
		eof := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !eof {
			return oversized, fmt.Errorf("read: %w", rerr)
		}
		block := buf[:carry+n]
		skip := 0
		if skipping {
			nl := bytes.IndexByte(block, '\n')
			if nl < 0 {
				base += int64(len(block))
				carry = 0
				if eof {
					return oversized, nil
				}
				continue
			}
			skipping = false
			skip = nl + 1
			block = block[skip:]
		}
		region := block
		if !eof {
			last := bytes.LastIndexByte(block, '\n')
			switch {
			case last >= 0:
				region = block[:last+1]
			case len(block) == len(buf):
				// One line fills the buffer: skip it.
				oversized++
				skipping = true
				base += int64(len(block))
				carry = 0
				continue
			default:
				region = block[:0]
			}
		}
		if eof {
			work <- chunk{region: region, base: base + int64(skip), buf: buf}
			return oversized, nil
		}
		next := <-free
		carry = copy(next, block[len(region):])
		work <- chunk{region: region, base: base + int64(skip), buf: buf}
		base += int64(skip + len(region))
		buf = next
	}
}

// denseSample is how much of a block the finder searches before lines
// decides whether it searches the rest (BlockScanner): ~300 lines of
// trainer output, 3 % of a block.
const denseSample = 32 << 10

// lines sets c to the candidate lines of region, which starts at stream
// offset base (c's lists are reused), and returns the number of candidate
// lines over the cap (skipped). Once denseSample bytes are searched, the
// rest of the block is handed on line by line (every) when at least half
// the lines searched held a token.
func (s *BlockScanner) lines(f Finder, region []byte, base int64, c *Chunk) (oversized int64) {
	c.Lines, c.Offs, c.Searched = c.Lines[:0], c.Offs[:0], 0
	f.Reset(region)
	sample := s.sample
	if sample == 0 {
		sample = denseSample
	}
	pos, hits, sampled := 0, 0, false
	for pos < len(region) {
		if !sampled && pos >= sample {
			sampled = true
			if 2*hits >= bytes.Count(region[:pos], newline) {
				c.Searched = len(c.Lines)
				return oversized + s.every(f, region[pos:], base+int64(pos), c)
			}
		}
		h := f.Next(pos)
		if h < 0 {
			break
		}
		hits++
		start := bytes.LastIndexByte(region[:h], '\n') + 1
		end := len(region)
		if e := bytes.IndexByte(region[h:], '\n'); e >= 0 {
			end = h + e
		}
		if end-start > s.max {
			oversized++
		} else {
			c.Lines = append(c.Lines, region[start:end])
			c.Offs = append(c.Offs, base+int64(start))
		}
		pos = end + 1
	}
	c.Searched = len(c.Lines)
	return oversized
}

var newline = []byte{'\n'}

// every appends every line of region, which starts at stream offset base,
// to c, and returns the number of those over the cap that hold a token.
func (s *BlockScanner) every(f Finder, region []byte, base int64, c *Chunk) (oversized int64) {
	for pos := 0; pos < len(region); {
		end := len(region)
		if e := bytes.IndexByte(region[pos:], '\n'); e >= 0 {
			end = pos + e
		}
		if line := region[pos:end]; len(line) <= s.max {
			c.Lines = append(c.Lines, line)
			c.Offs = append(c.Offs, base+int64(pos))
		} else if f.Reset(line); f.Next(0) >= 0 {
			oversized++
		}
		pos = end + 1
	}
	return oversized
}
