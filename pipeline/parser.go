package pipeline

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
// lines; copying each whole to the batch and back was a large share of
// its time.
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

// Parser is the one parsing half of every path from a line to the
// assembler: it reads records into Parsed values that a Processor applies
// (Apply) in input order, on the goroutine that parsed them or another
// (parse workers, scan's block scanner). Processor.Record is a Parser
// and Apply on one goroutine. Not safe for concurrent use: one per
// goroutine.
type Parser struct {
	cls       Classifier
	split     MessageSplitter
	ev        Event
	tl        TelemetryLine
	telemetry bool
	telOK     bool // the last line was a telemetry line, in tl
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
	if len(tl.Earlier) > 0 {
		// Rare (R9): a copy of the slice, whose backing array the
		// parser reuses.
		e := append([]CheckpointLine(nil), tl.Earlier...)
		for i := range e {
			e[i].Path = p.keep(e[i].Path)
		}
		tl.Earlier = e
	}
	c := &tl.Coll
	c.Comm, c.CommName, c.Version, c.Host = p.keep(c.Comm), p.keep(c.CommName), p.keep(c.Version), p.keep(c.Host)
	c.Op, c.Timing = p.keep(c.Op), p.keep(c.Timing)
}

// keepEvent copies the byte fields of ev.
func (p *Parsed) keepEvent(ev *Event) {
	ev.Host, ev.PID, ev.TID = p.keep(ev.Host), p.keep(ev.PID), p.keep(ev.TID)
	ev.LauncherHost = p.keep(ev.LauncherHost)
	ev.Name, ev.Value, ev.Iface, ev.IP = p.keep(ev.Name), p.keep(ev.Value), p.keep(ev.Iface), p.keep(ev.IP)
	ev.CommPtr, ev.CommID = p.keep(ev.CommPtr), p.keep(ev.CommID)
}

// Parse reads rec and appends what Apply needs of it to out: its NCCL
// messages and launcher hosts, then its telemetry line.
func (p *Parser) Parse(rec *Record, out *Parsed) { p.parse(rec, out, true) }

// parse is Parse; without keepTel the line's telemetry stays in p.tl
// (Processor.Record hands it on from there) and out gets none.
func (p *Parser) parse(rec *Record, out *Parsed, keepTel bool) {
	out.records++
	out.bytes += int64(len(rec.Text))
	text := rec.Text
	var tlp *TelemetryLine
	if p.telemetry {
		tlp = &p.tl
	}
	nccl, tel := p.cls.Line(text, &p.ev, tlp)
	p.telOK = tel
	p.messages(out, rec, nccl)
	if tel && keepTel {
		// After the messages, as Record's caller reads it; the messages
		// were read without telemetry (once per line), p.tl is the line's.
		if isTraining(p.tl.Kind) && len(p.tl.Earlier) == 0 {
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
// nccl: the line, or each message glued in it (splitMessages).
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
