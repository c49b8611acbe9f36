package parsers

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Errors returned by Decoder.Decode. They are returned wrapped with detail;
// test them with errors.Is. Both leave the decoder usable: the record is
// dropped and the next one is decoded normally.
var (
	// ErrOversized reports a line longer than DecoderConfig.MaxLineBytes
	// (after joining partial records). Nothing is emitted for it. It is
	// pipeline.ErrOversized, so the run loop can count it without
	// importing this package.
	ErrOversized = pipeline.ErrOversized
	// ErrMalformed reports a record that looks like JSON (see Decode) but
	// is not an envelope the decoder can read. The error is a
	// *MalformedError carrying the dead-letter reason.
	ErrMalformed = errors.New("malformed record")
)

// Dead-letter reasons of a MalformedError: the "reason" label of
// ncclwatch_dead_letters_total and of the dead_letters table.
// docs/delivery.md ("Poison records") lists them with an example each.
const (
	// ReasonJSONTruncated: the record ends inside the JSON document (an
	// unterminated string, object or array).
	ReasonJSONTruncated = "json_truncated"
	// ReasonJSONSyntax: invalid JSON (a bad token, escape or literal, a
	// missing ',' or ':', data after the document, nesting too deep).
	ReasonJSONSyntax = "json_syntax"
	// ReasonJSONControl: a raw control byte (U+0000 to U+001F, NUL
	// included) inside a JSON string, which JSON forbids.
	ReasonJSONControl = "json_control"
	// ReasonJSONType: the text field ("log", or "message" when there is no
	// "log") is not a string.
	ReasonJSONType = "json_type"
	// ReasonJSONNoText: a valid JSON object with neither "log" nor
	// "message", or a JSON document that is not an object.
	ReasonJSONNoText = "json_no_text"
)

// MalformedError is the error Decode returns for a record that looks like
// JSON and is not a readable envelope. It wraps ErrMalformed.
type MalformedError struct {
	// Reason is one of the Reason… constants.
	Reason string
	// What says what was wrong, Offset at which byte of the record.
	What   string
	Offset int
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("json record: %s at byte %d (%s)", e.What, e.Offset, e.Reason)
}

// Unwrap returns ErrMalformed.
func (e *MalformedError) Unwrap() error { return ErrMalformed }

// DeadLetterReason returns Reason; pipeline.DeadLetterReason reads it.
func (e *MalformedError) DeadLetterReason() string { return e.Reason }

// Counter counts events; prometheus.Counter satisfies it.
type Counter interface{ Inc() }

// Envelope is the kind of wrapper a record arrived in.
type Envelope uint8

// The envelopes a Decoder recognises.
const (
	// EnvelopeRaw is a plain text line: a record that does not look like
	// JSON and is not a CRI line.
	EnvelopeRaw Envelope = iota
	// EnvelopeFluentBit is a JSON object written by Fluent Bit: the text in
	// "log" or "message", usually with "kubernetes" metadata.
	EnvelopeFluentBit
	// EnvelopeDocker is a Docker json-file line: only "log", "stream",
	// "time" (and "attrs").
	EnvelopeDocker
	// EnvelopeCRI is a CRI (containerd, CRI-O) log line:
	// "<RFC3339Nano> stdout|stderr F|P <text>".
	EnvelopeCRI
)

// String returns the envelope's name as used in metrics and logs.
func (e Envelope) String() string {
	switch e {
	case EnvelopeRaw:
		return "raw"
	case EnvelopeFluentBit:
		return "fluent-bit"
	case EnvelopeDocker:
		return "docker"
	case EnvelopeCRI:
		return "cri"
	}
	return "envelope(" + strconv.Itoa(int(e)) + ")"
}

const (
	// defaultMaxLineBytes: NCCL lines are well under 1 KiB, the longest
	// real ones (channel lists of large jobs, topology dumps) a few KiB;
	// Docker splits lines at 16 KiB, so 64 KiB still joins four partial
	// records while bounding what one bad stream can make us buffer.
	defaultMaxLineBytes = 64 << 10
	// maxMaxLineBytes bounds the setting itself so that a typo cannot turn
	// the cap into "unbounded".
	maxMaxLineBytes = 1 << 30
	// maxJSONDepth matches encoding/json's nesting limit, so the two agree on
	// which documents are valid.
	maxJSONDepth = 10000
	// maxMetaEntries bounds the metadata cache: one entry per distinct
	// container seen, cleared when full.
	maxMetaEntries = 4096
	// maxMetaKeyBytes: a "kubernetes" object larger than this (huge
	// annotations) is not cached; its Meta is built for every record.
	maxMetaKeyBytes = 16 << 10
)

// DecoderConfig configures a Decoder.
type DecoderConfig struct {
	// MaxLineBytes caps one decoded line, after partial records are
	// joined, counted in bytes as received (before invalid UTF-8 is
	// replaced). A longer line is dropped with ErrOversized.
	MaxLineBytes int
	// InvalidUTF8, when set, counts lines of a JSON envelope whose text
	// held invalid UTF-8 (each bad byte is replaced by U+FFFD, as
	// encoding/json does) and metadata values repaired the same way.
	InvalidUTF8 Counter
}

// DefaultDecoderConfig returns the configuration ncclwatch runs with: 64 KiB
// lines.
func DefaultDecoderConfig() DecoderConfig {
	return DecoderConfig{MaxLineBytes: defaultMaxLineBytes}
}

// Validate reports the first invalid field, named by its configuration key.
func (c DecoderConfig) Validate() error {
	if c.MaxLineBytes <= 0 {
		return errors.New("max_line_bytes: must be > 0")
	}
	if c.MaxLineBytes > maxMaxLineBytes {
		return fmt.Errorf("max_line_bytes: must be <= %d", maxMaxLineBytes)
	}
	return nil
}

// Decoder turns records (lines of a file, Kafka message values) into log
// lines, removing the envelope: Fluent Bit JSON, Docker json-file, CRI or
// none. It joins partial lines (Docker records whose "log" does not end in a
// newline, CRI "P" records) and caps line length.
//
// A Decoder is reusable and keeps state between calls (the partial line in
// progress and a cache of metadata); it is not safe for concurrent use. Use
// one per stream of records: one file, one Kafka partition.
type Decoder struct {
	cfg  DecoderConfig
	last Envelope
	rec  pipeline.Record
	line int32

	f     jsonFields
	ctl   bool   // the record holds a byte < 0x20: check strings for it
	hi    bool   // the record is a JSON envelope holding a byte >= 0x80
	text  []byte // unescaped text of the current record
	fixed []byte // a line with invalid UTF-8 replaced
	key   []byte // unescaped object key
	val   []byte // unescaped string value (metadata, times)
	stack []byte // open containers while skipping a JSON value
	// valid holds top-level object or array values found valid (the
	// "kubernetes" objects of the pods of a partition, in practice): the
	// same bytes again are valid again, so a record's metadata is
	// compared, not re-validated. It is a set-associative table: a value's
	// first bytes choose its set (validSet), so the pods of many jobs
	// interleaved in one partition each keep their entry. validBytes is
	// the capacity its entries hold; validGen numbers the values stored.
	valid      [validSlots]validEntry
	validNext  [validSlots / validWays]uint8
	validBytes int
	validGen   uint32
	// dayStart is midnight of the day dayKey (dateTime.dayKey) of the
	// last record time.
	dayKey   int
	dayStart time.Time

	// The line in progress: partial holds its text so far; the pend*
	// fields say where it came from. skip means a line in progress was
	// dropped as oversized and its remaining pieces are being discarded.
	partial    []byte
	pend       bool
	skip       bool
	pendEnv    Envelope
	pendHi     bool // a piece of the line may hold invalid UTF-8
	pendTime   time.Time
	pendStream string
	pendMeta   *pipeline.Meta

	seed  maphash.Seed
	metas map[uint64]*metaEntry
	// recent are the last metaSlots entries looked up, most recent
	// first: the records of a partition alternate between a few pods
	// (the load benchmark's two nodes record by record), and comparing
	// their bytes is cheaper than hashing them.
	recent [metaSlots]*metaEntry
	stream string // last stream name that is not stdout/stderr
}

// NewDecoder returns a Decoder for cfg. Call cfg.Validate first; a
// non-positive MaxLineBytes is replaced by the default.
func NewDecoder(cfg DecoderConfig) *Decoder {
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = defaultMaxLineBytes
	}
	return &Decoder{cfg: cfg, seed: maphash.MakeSeed()}
}

// Last returns the envelope of the most recent record passed to Decode.
func (d *Decoder) Last() Envelope { return d.last }

// Reset drops the partial line in progress without emitting it. Cached
// metadata is kept.
func (d *Decoder) Reset() {
	d.pend, d.skip, d.pendHi = false, false, false
	d.partial = d.partial[:0]
	d.pendMeta = nil
}

// Pending reports whether a partial line is in progress: the records since
// its first piece must be decoded again to rebuild it.
func (d *Decoder) Pending() bool { return d.pend || d.skip }

// Decode decodes one record (one line of a file or one Kafka message value,
// without its trailing newline; one trailing "\n" is tolerated) and calls
// emit once per complete log line it yields: zero times when the record was
// a partial line that is now buffered, several times when its text holds
// several newline-separated lines. A trailing "\r" is removed from every line.
//
// The *Record and its Text are owned by the decoder and valid only during
// emit. Record.Meta is shared and immutable: records with byte-identical
// metadata get the same pointer, which may be kept after emit returns but
// must not be modified. Record.Source is zero except Line, the index of the
// line among those emitted by this call; the caller fills in the rest.
//
// A line joined from several records carries the time, stream and metadata
// of its first piece and is emitted by the call that completes it. A pending
// partial line is emitted on its own when a record from another source (other
// envelope, stream, pod or container) arrives, so interleaved streams are
// never spliced together.
//
// The decoder decides once what a record is. A record that looks like JSON
// (its first non-space byte is '{' followed by '"' or '}', or '[' followed
// by '{', '[', '"' or ']', spaces allowed between) is decoded as JSON and
// nothing else: when it is not a readable envelope Decode emits nothing and
// returns a *MalformedError with the reason; it is never read as text. Other
// records are CRI lines or raw text, passed on byte for byte. Text from
// JSON strings is valid UTF-8: invalid bytes become U+FFFD and are counted
// in DecoderConfig.InvalidUTF8. Lines like "{'loss': 0.39}" (Python),
// "[rank0]: …" (torchrun) or "[1,0]<stdout>: …" (mpirun) are text.
//
// Errors wrap ErrOversized or ErrMalformed; after either the decoder goes on
// with the next record.
func (d *Decoder) Decode(data []byte, emit func(*pipeline.Record)) error {
	return d.decodeRecord(data, false, emit)
}

// DecodeLine is Decode of a record that holds no newline, such as a line
// pipeline.BlockScanner cut from a file: a raw line is passed on without
// searching it for one (deliver's first step, a pass over every line).
func (d *Decoder) DecodeLine(line []byte, emit func(*pipeline.Record)) error {
	return d.decodeRecord(line, true, emit)
}

// decodeRecord is Decode; single says data holds no newline (DecodeLine).
func (d *Decoder) decodeRecord(data []byte, single bool, emit func(*pipeline.Record)) error {
	d.line = 0
	if n := len(data); n > 0 && data[n-1] == '\n' {
		data = data[:n-1]
	}
	err := d.decode(data, single, emit)
	// Do not keep a buffer sized for one freak record.
	if cap(d.text) > 4*d.cfg.MaxLineBytes {
		d.text = nil
	}
	return err
}

func (d *Decoder) decode(data []byte, single bool, emit func(*pipeline.Record)) error {
	d.hi = false
	i := skipWS(data, 0)
	if i < len(data) {
		switch c := data[i]; {
		case (c == '{' || c == '[') && looksJSON(data, i) && !IsInspector(data[i:]):
			// An NCCL Inspector record (a line of a dump file, read raw)
			// is JSON but no envelope: it is the line itself.
			return d.decodeJSON(data, i, emit)
		case c >= '0' && c <= '9':
			if t, stream, partial, text, ok := parseCRI(data); ok {
				d.last = EnvelopeCRI
				return d.deliver(text, !partial, EnvelopeCRI, t, stream, nil, emit)
			}
		}
	}
	d.last = EnvelopeRaw
	if single && !d.pend && !d.skip && len(data) <= d.cfg.MaxLineBytes {
		// What deliver does with a complete line of one line.
		d.emit(data, d.hi, time.Time{}, "", nil, emit)
		return nil
	}
	return d.deliver(data, true, EnvelopeRaw, time.Time{}, "", nil, emit)
}

// Flush emits the partial line in progress, if any, as a complete line. Call
// it at the end of input.
func (d *Decoder) Flush(emit func(*pipeline.Record)) {
	d.line = 0
	d.skip = false
	d.flush(emit)
}

func (d *Decoder) flush(emit func(*pipeline.Record)) {
	if !d.pend {
		return
	}
	d.emit(d.partial, d.pendHi, d.pendTime, d.pendStream, d.pendMeta, emit)
	d.pend, d.pendHi = false, false
	d.partial = d.partial[:0]
	d.pendMeta = nil
}

// emit passes one finished line on. fix says the line is JSON text that
// may hold invalid UTF-8; checking the whole line, not each piece, keeps a
// character split across partial records intact.
func (d *Decoder) emit(line []byte, fix bool, t time.Time, stream string, meta *pipeline.Meta, emit func(*pipeline.Record)) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if fix && !utf8.Valid(line) {
		d.fixed = appendValidUTF8(d.fixed[:0], line)
		line = d.fixed
		if d.cfg.InvalidUTF8 != nil {
			d.cfg.InvalidUTF8.Inc()
		}
	}
	// Field by field, not as one composite literal: the literal's wide
	// stores, read back at once by the emit function's copy of the record,
	// stalled its loads (BenchmarkDecodeRaw shows it, and so does a scan
	// of a trainer log).
	d.rec.Text, d.rec.Time, d.rec.Stream, d.rec.Meta = line, t, stream, meta
	d.rec.Source = pipeline.Source{Line: d.line}
	d.line++
	emit(&d.rec)
}

// sameSource reports whether a record belongs to the line in progress.
func (d *Decoder) sameSource(env Envelope, stream string, meta *pipeline.Meta) bool {
	if d.pendEnv != env || d.pendStream != stream {
		return false
	}
	if d.pendMeta == meta {
		return true
	}
	if d.pendMeta == nil || meta == nil {
		return false
	}
	a, b := d.pendMeta, meta
	return a.Pod == b.Pod && a.Namespace == b.Namespace && a.Container == b.Container &&
		a.Node == b.Node && a.Cluster == b.Cluster
}

// deliver splits text into lines, joins its first line to the line in
// progress and buffers its last one when complete is false.
func (d *Decoder) deliver(text []byte, complete bool, env Envelope, t time.Time, stream string,
	meta *pipeline.Meta, emit func(*pipeline.Record)) error {
	if (d.pend || d.skip) && !d.sameSource(env, stream, meta) {
		d.flush(emit)
		d.skip = false
	}
	max := d.cfg.MaxLineBytes
	carried := 0 // bytes of the line in progress that text's first line extends
	if d.pend {
		carried = len(d.partial)
	}
	if carried+len(text) > max {
		if n, ok := firstLongLine(text, carried, d.skip, complete, max); !ok {
			d.Reset()
			if !complete {
				// The rest of this line is still to come; drop it too.
				d.skip = true
				d.pendEnv, d.pendStream, d.pendMeta = env, stream, meta
			}
			return fmt.Errorf("%s record: line of at least %d bytes: %w", env, n, ErrOversized)
		}
	}
	var err error
	if d.skip {
		// text continues a line dropped as oversized: discard up to its end.
		nl := bytes.IndexByte(text, '\n')
		if nl < 0 && !complete {
			return fmt.Errorf("%s record: rest of an oversized line: %w", env, ErrOversized)
		}
		d.skip = false
		d.pendMeta = nil
		if nl < 0 {
			return fmt.Errorf("%s record: end of an oversized line: %w", env, ErrOversized)
		}
		text = text[nl+1:]
		err = fmt.Errorf("%s record: end of an oversized line: %w", env, ErrOversized)
	}
	for {
		nl := bytes.IndexByte(text, '\n')
		if nl < 0 && !complete {
			if !d.pend {
				d.pend = true
				d.partial = d.partial[:0]
				d.pendEnv, d.pendTime, d.pendStream, d.pendMeta = env, t, stream, meta
			}
			d.pendHi = d.pendHi || d.hi
			d.partial = append(d.partial, text...)
			return err
		}
		line := text
		if nl >= 0 {
			line, text = text[:nl], text[nl+1:]
		}
		if d.pend {
			d.pendHi = d.pendHi || d.hi
			d.partial = append(d.partial, line...)
			d.flush(emit)
		} else {
			d.emit(line, d.hi, t, stream, meta, emit)
		}
		if nl < 0 {
			return err
		}
	}
}

// firstLongLine checks every line of text against max; the first line is
// carried bytes longer than it looks, and is exempt when skipFirst is set
// (it belongs to a line already dropped). The "\r" that emit trims from a
// finished line does not count. It returns the length of the first line
// over max and false, or 0 and true.
func firstLongLine(text []byte, carried int, skipFirst, complete bool, max int) (int, bool) {
	for first := true; ; first = false {
		nl := bytes.IndexByte(text, '\n')
		n := nl
		if nl < 0 {
			n = len(text)
		}
		if n > 0 && text[n-1] == '\r' && (nl >= 0 || complete) {
			n--
		}
		if first {
			if skipFirst {
				n = 0
			}
			n += carried
		}
		if n > max {
			return n, false
		}
		if nl < 0 {
			return 0, true
		}
		text = text[nl+1:]
	}
}

// looksJSON reports whether the record whose first non-space byte data[i]
// is '{' or '[' is to be decoded as JSON: what follows can only start a JSON
// object or array. A '{' must be followed by '"' or '}'; a '[' by '{', '[',
// '"' or ']'. A record of a lone '{' or '[' is JSON too (cut off).
func looksJSON(data []byte, i int) bool {
	j := skipWS(data, i+1)
	if j == len(data) {
		return true
	}
	switch data[j] {
	case '"':
		return true
	case '}':
		return data[i] == '{'
	case '{', '[', ']':
		return data[i] == '['
	}
	return false
}
