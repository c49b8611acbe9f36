package pipeline

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Classifier turns one log line into an NCCL event; parsers.Lines is the
// implementation. It reports whether the line was an NCCL line; a line that
// was not may still set ev.LauncherHost.
type Classifier interface {
	Classify(text []byte, ev *Event) bool
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
	NCCLLines int64 // lines that were NCCL lines
}

// Processor classifies decoded records and feeds the assembler. It is the
// one path every front end (scan, run, demo) takes from a line to a
// summary. It is not safe for concurrent use.
type Processor struct {
	asm   *Assembler
	cls   Classifier
	job   JobFunc
	tap   Tap
	ev    Event
	Stats ProcessorStats
}

// NewProcessor returns a processor feeding asm. job may be nil: every record
// then belongs to the job named "".
func NewProcessor(asm *Assembler, cls Classifier, job JobFunc) *Processor {
	return &Processor{asm: asm, cls: cls, job: job}
}

// SetTap installs fn to see every NCCL event.
func (p *Processor) SetTap(fn Tap) { p.tap = fn }

// Assembler returns the assembler the processor feeds.
func (p *Processor) Assembler() *Assembler { return p.asm }

// Record classifies one decoded record.
func (p *Processor) Record(rec *Record) {
	p.Stats.Records++
	p.Stats.Bytes += int64(len(rec.Text))
	if !p.cls.Classify(rec.Text, &p.ev) {
		if len(p.ev.LauncherHost) > 0 {
			p.asm.AddLauncher(p.jobOf(rec), rec.Meta, p.ev.LauncherHost, rec.Time)
		}
		return
	}
	p.Stats.NCCLLines++
	job := p.jobOf(rec)
	p.asm.Add(job, rec.Meta, &p.ev, rec.Time)
	if p.tap != nil {
		p.tap(job, rec, &p.ev)
	}
}

func (p *Processor) jobOf(rec *Record) string {
	if p.job == nil {
		return ""
	}
	return p.job(rec)
}

// ErrLineTooLong is returned for (and counted against) a line longer than
// the reader's cap; the reader skips it and goes on.
var ErrLineTooLong = errors.New("line exceeds the size cap")

// LineReader splits a byte stream into lines without copying them, with a
// cap on line length. Lines over the cap are skipped and counted, never
// fatal.
type LineReader struct {
	r         *bufio.Reader
	max       int
	Oversized int64
	Offset    int64 // byte offset of the line last returned
	next      int64
}

// NewLineReader reads from r with lines capped at max bytes.
func NewLineReader(r io.Reader, max int) *LineReader {
	size := 1 << 20
	if max+1 > size {
		size = max + 1
	}
	return &LineReader{r: bufio.NewReaderSize(r, size), max: max}
}

// Next returns the next line without its newline. The slice is valid until
// the next call. It returns io.EOF at the end.
func (l *LineReader) Next() ([]byte, error) {
	for {
		l.Offset = l.next
		line, err := l.r.ReadSlice('\n')
		l.next += int64(len(line))
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > l.max+1 {
			l.Oversized++
			// Skip the rest of the long line.
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = l.r.ReadSlice('\n')
				l.next += int64(len(line))
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("read: %w", err)
			}
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read: %w", err)
		}
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return line, nil
	}
}
