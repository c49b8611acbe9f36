package parsers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
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
// ncclwatch_dead_letters_total and of the dead_letters table. README.md
// ("Poison records") lists them with an example each.
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
	// valid holds the last top-level object or array values found valid
	// (the "kubernetes" objects of the pods of a partition, in practice):
	// the same bytes again are valid again, so a record's metadata is
	// compared, not re-validated. nextValid is the slot to fill next.
	valid     [validSlots][]byte
	nextValid int
	// validMeta is the metadata entry built from each valid slot's bytes,
	// when that value was a "kubernetes" object (nil until looked up):
	// a record whose object matched a slot needs no second comparison.
	validMeta [validSlots]*metaEntry
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

// metaEntry is one cached *pipeline.Meta with the raw JSON it was built
// from, compared byte for byte on lookup.
type metaEntry struct {
	k8s, cluster, job []byte
	meta              *pipeline.Meta
}

// jsonString is a JSON string value: raw is the text between the quotes,
// esc says whether it holds escapes. ok is false when the key was absent
// or its value was not a string; set says the key was present.
type jsonString struct {
	raw     []byte
	esc     bool
	ok, set bool
}

// jsonTime is a time value: a string (RFC 3339) or a number (epoch seconds).
type jsonTime struct {
	raw []byte
	esc bool
	str bool
	ok  bool
}

// jsonFields holds what one scan of a top-level object found. Slices point
// into the record.
type jsonFields struct {
	log, message, stream, cluster, job, partial jsonString
	time, timestamp, date                       jsonTime
	k8s                                         []byte // raw "kubernetes" object, nil when absent
	notDocker                                   bool   // a key Docker's json-file never writes
	// k8sSlot is 1 + the Decoder.valid slot holding the bytes of k8s, 0
	// when none does.
	k8sSlot int
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
		case (c == '{' || c == '[') && looksJSON(data, i):
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
	// stalled its loads (BenchmarkDecodeRaw 19.8 → 14.1 ns; scan of a
	// trainer log 5 % faster).
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

// decodeJSON decodes a record that looks like JSON; data[i] is its first
// non-space byte. Anything but a JSON object with a string "log" or
// "message" is a *MalformedError.
func (d *Decoder) decodeJSON(data []byte, i int, emit func(*pipeline.Record)) error {
	d.last = EnvelopeRaw
	var hi bool
	d.ctl, hi = suspectBytes(data)
	if data[i] == '[' {
		end, _, err := d.skipValue(data, i)
		if err != nil {
			return err
		}
		if j := skipWS(data, end); j != len(data) {
			return malformed(ReasonJSONSyntax, "data after array", j)
		}
		return malformed(ReasonJSONNoText, "array, not an object", i)
	}
	if err := d.scanTop(data); err != nil {
		return err
	}
	f := &d.f
	var src jsonString
	complete := true
	switch {
	case f.log.set:
		src = f.log
	case f.message.set:
		src = f.message
	default:
		return malformed(ReasonJSONNoText, `no "log" or "message"`, i)
	}
	if !src.ok {
		name := "log"
		if !f.log.set {
			name = "message"
		}
		return malformed(ReasonJSONType, fmt.Sprintf("%q is not a string", name), i)
	}
	d.hi = hi
	text := src.raw
	newline := false // text had a final newline, now removed
	if n := len(text); src.esc && n >= 2 && text[n-2] == '\\' && text[n-1] == 'n' &&
		bytes.IndexByte(text[:n-2], '\\') < 0 {
		// The common case: the only escape is the line's final "\n". Keep
		// pointing into the record instead of copying.
		text, newline = text[:n-2], true
	} else if src.esc {
		var ok bool
		if d.text, ok = unescape(d.text[:0], text); !ok {
			// scanString validated the escapes; this cannot happen.
			return malformed(ReasonJSONSyntax, "bad escape", i)
		}
		text = d.text
	}
	if n := len(text); !newline && n > 0 && text[n-1] == '\n' {
		text, newline = text[:n-1], true
	}
	switch {
	case f.partial.ok:
		// Fluent Bit's CRI parsers keep the runtime's P/F tag ("_p" from
		// the multiline parser, "logtag" from the classic regex parser)
		// and drop the newline.
		complete = string(f.partial.raw) != "P"
	case f.log.ok:
		// Docker ends every complete line with "\n" and splits longer ones
		// into records without it.
		complete = newline
	default:
		// An untagged "message" is always a whole line.
	}
	env := EnvelopeFluentBit
	if !f.notDocker {
		env = EnvelopeDocker
	}
	d.last = env
	stream := d.streamName(f.stream)
	var meta *pipeline.Meta
	if f.k8s != nil || f.cluster.ok || f.job.ok {
		meta = d.slotMeta(f.k8sSlot, f.k8s, f.cluster, f.job)
	}
	t := d.recordTime()
	return d.deliver(text, complete, env, t, stream, meta, emit)
}

// recordTime returns the record's time: "time" (the container runtime's,
// nanosecond precision) before "@timestamp" and "date" (Fluent Bit's).
// An unparsable time is ignored.
func (d *Decoder) recordTime() time.Time {
	for _, v := range [...]*jsonTime{&d.f.time, &d.f.timestamp, &d.f.date} {
		if !v.ok {
			continue
		}
		raw := v.raw
		if v.esc {
			var ok bool
			if d.val, ok = unescape(d.val[:0], raw); !ok {
				continue
			}
			raw = d.val
		}
		var t time.Time
		var ok bool
		if v.str {
			var f dateTime
			var n int
			f, n, ok = scanDateTime(raw, false)
			if ok = ok && n == len(raw); ok {
				// Records of one stream share their day: build its
				// midnight once.
				if k := f.dayKey(); k != d.dayKey {
					d.dayKey, d.dayStart = k, f.midnight()
				}
				t = d.dayStart.Add(f.clock)
			}
		} else {
			t, ok = parseEpoch(raw)
		}
		if ok {
			return t
		}
	}
	return time.Time{}
}

// streamName returns the stream as a string without allocating for the two
// names that occur.
func (d *Decoder) streamName(s jsonString) string {
	if !s.ok {
		return ""
	}
	switch string(s.raw) {
	case "stdout":
		return "stdout"
	case "stderr":
		return "stderr"
	}
	raw := s.raw
	if s.esc {
		d.val, _ = unescape(d.val[:0], raw)
		raw = d.val
	}
	if d.stream != string(raw) {
		d.stream = string(raw)
	}
	return d.stream
}

// scanTop walks the top-level object of data, validating it and recording
// the keys the decoder wants in d.f. Duplicate keys: the last one wins, as
// in encoding/json.
func (d *Decoder) scanTop(data []byte) error {
	d.f = jsonFields{}
	i := skipWS(data, 0)
	i++ // '{', checked by the caller
	i = skipWS(data, i)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return malformed(syntaxOrEnd(data, i), "object key expected", i)
			}
			ke, kesc, ok := scanStringCtl(data, i, d.ctl)
			if !ok {
				return badString(data, i)
			}
			key := data[i+1 : ke-1]
			if kesc {
				d.key, _ = unescape(d.key[:0], key)
				key = d.key
			}
			i = skipWS(data, ke)
			if i >= len(data) || data[i] != ':' {
				return malformed(syntaxOrEnd(data, i), "':' expected", i)
			}
			i = skipWS(data, i+1)
			vs := i
			ve, vesc, slot, err := d.topValue(data, i)
			if err != nil {
				return err
			}
			d.setField(key, data[vs:ve], vesc, slot)
			i = skipWS(data, ve)
			if i >= len(data) {
				return malformed(ReasonJSONTruncated, "unterminated object", i)
			}
			if data[i] == ',' {
				i = skipWS(data, i+1)
				continue
			}
			if data[i] != '}' {
				return malformed(ReasonJSONSyntax, "',' or '}' expected", i)
			}
			i++
			break
		}
	}
	if skipWS(data, i) != len(data) {
		return malformed(ReasonJSONSyntax, "data after object", i)
	}
	return nil
}

// topValue is skipValue for a member of the top-level object. A container
// value whose bytes equal the last one found valid ends where that one
// did: JSON is read left to right, so the same bytes parse the same way,
// and the value's end does not depend on what follows it. slot is 1 + the
// valid slot that holds a container value's bytes now, 0 when none does.
func (d *Decoder) topValue(data []byte, i int) (end int, esc bool, slot int, err error) {
	if i < len(data) && (data[i] == '{' || data[i] == '[') {
		for k, v := range &d.valid {
			// Values of different pods differ within their first bytes.
			if n := len(v); n > 0 && n <= len(data)-i && bytes.Equal(data[i:i+n], v) {
				return i + n, false, k + 1, nil
			}
		}
		end, esc, err = d.skipValue(data, i)
		if err == nil && end-i <= maxMetaKeyBytes {
			k := d.nextValid
			d.valid[k] = append(d.valid[k][:0], data[i:end]...)
			d.validMeta[k] = nil
			d.nextValid = (k + 1) % validSlots
			slot = k + 1
		}
		return end, esc, slot, err
	}
	if i < len(data) {
		// The scalars of skipValue, without its container stack.
		switch c := data[i]; {
		case c == '"':
			e, sesc, ok := scanStringCtl(data, i, d.ctl)
			if !ok {
				return 0, false, 0, badString(data, i)
			}
			return e, sesc, 0, nil
		case c == '-' || c >= '0' && c <= '9':
			n := scanNumber(data[i:])
			if n == 0 {
				return 0, false, 0, badNumber(data, i)
			}
			return i + n, false, 0, nil
		}
	}
	end, esc, err = d.skipValue(data, i)
	return end, esc, 0, err
}

// validSlots is how many valid values Decoder.topValue remembers: a Kafka
// partition interleaves the pods of a few jobs (the load benchmark's two
// nodes alternate record by record).
const validSlots = 8

// setField records one member of the top-level object; val is its raw
// JSON value, slot its valid slot (topValue).
func (d *Decoder) setField(key, val []byte, esc bool, slot int) {
	f := &d.f
	str := func(s *jsonString) {
		*s = jsonString{set: true}
		if val[0] == '"' {
			*s = jsonString{raw: val[1 : len(val)-1], esc: esc, ok: true, set: true}
		}
	}
	tm := func(t *jsonTime) {
		*t = jsonTime{}
		switch c := val[0]; {
		case c == '"':
			*t = jsonTime{raw: val[1 : len(val)-1], esc: esc, str: true, ok: true}
		case c == '-' || c >= '0' && c <= '9':
			*t = jsonTime{raw: val, ok: true}
		}
	}
	switch string(key) {
	case "log":
		str(&f.log)
		return
	case "stream":
		str(&f.stream)
		return
	case "time":
		tm(&f.time)
		return
	case "attrs": // Docker's --log-opt labels/env; not used.
		return
	case "message":
		str(&f.message)
	case "@timestamp":
		tm(&f.timestamp)
	case "date":
		tm(&f.date)
	case "cluster":
		str(&f.cluster)
	case "job":
		str(&f.job)
	case "_p", "logtag":
		str(&f.partial)
	case "kubernetes":
		f.k8s, f.k8sSlot = nil, 0
		if val[0] == '{' {
			f.k8s, f.k8sSlot = val, slot
		}
	}
	f.notDocker = true
}

// slotMeta is lookupMeta of a record whose "kubernetes" object is the
// bytes of valid slot slot-1 (0: none): the entry last built from that
// slot serves without comparing the object again, when the top-level
// cluster and job match too.
func (d *Decoder) slotMeta(slot int, k8s []byte, cluster, job jsonString) *pipeline.Meta {
	if slot == 0 {
		return d.lookupMeta(k8s, cluster, job)
	}
	if e := d.validMeta[slot-1]; e != nil && bytes.Equal(e.cluster, cluster.raw) && bytes.Equal(e.job, job.raw) {
		return e.meta
	}
	m := d.lookupMeta(k8s, cluster, job)
	if e := d.recent[0]; e != nil && e.meta == m {
		d.validMeta[slot-1] = e
	}
	return m
}

// lookupMeta returns the shared Meta for the given raw metadata, building
// it on first sight.
func (d *Decoder) lookupMeta(k8s []byte, cluster, job jsonString) *pipeline.Meta {
	for i, e := range &d.recent {
		if e == nil {
			break
		}
		if bytes.Equal(e.k8s, k8s) && bytes.Equal(e.cluster, cluster.raw) && bytes.Equal(e.job, job.raw) {
			if i > 0 {
				copy(d.recent[1:i+1], d.recent[:i])
				d.recent[0] = e
			}
			return e.meta
		}
	}
	if len(k8s)+len(cluster.raw)+len(job.raw) > maxMetaKeyBytes {
		return d.buildMeta(k8s, cluster, job)
	}
	h := maphash.Bytes(d.seed, k8s)
	h = h*0x9E3779B97F4A7C15 ^ maphash.Bytes(d.seed, cluster.raw)
	h = h*0x9E3779B97F4A7C15 ^ maphash.Bytes(d.seed, job.raw)
	if e := d.metas[h]; e != nil && bytes.Equal(e.k8s, k8s) &&
		bytes.Equal(e.cluster, cluster.raw) && bytes.Equal(e.job, job.raw) {
		d.remember(e)
		return e.meta
	}
	if d.metas == nil || len(d.metas) >= maxMetaEntries {
		d.metas = make(map[uint64]*metaEntry)
		// Only the last entry outlives the cache it was in, as before
		// there were recent entries: a dropped one is built again.
		clear(d.recent[1:])
	}
	// One allocation holds the three keys.
	buf := make([]byte, 0, len(k8s)+len(cluster.raw)+len(job.raw))
	buf = append(buf, k8s...)
	buf = append(buf, cluster.raw...)
	buf = append(buf, job.raw...)
	a, b := len(k8s), len(k8s)+len(cluster.raw)
	e := &metaEntry{k8s: buf[:a:a], cluster: buf[a:b:b], job: buf[b:], meta: d.buildMeta(k8s, cluster, job)}
	d.metas[h] = e
	d.remember(e)
	return e.meta
}

// metaSlots is how many metadata entries Decoder.recent holds.
const metaSlots = 4

// remember makes e the most recent metadata entry.
func (d *Decoder) remember(e *metaEntry) {
	copy(d.recent[1:], d.recent[:metaSlots-1])
	d.recent[0] = e
}

// buildMeta builds a Meta from a validated "kubernetes" object (may be nil)
// and the top-level cluster and job strings.
func (d *Decoder) buildMeta(k8s []byte, cluster, job jsonString) *pipeline.Meta {
	m := &pipeline.Meta{Cluster: d.str(cluster), Job: d.str(job)}
	if k8s == nil {
		return m
	}
	d.eachMember(k8s, func(key, val []byte, esc bool) {
		s := jsonString{esc: esc}
		if val[0] == '"' {
			s.raw, s.ok = val[1:len(val)-1], true
		}
		switch string(key) {
		case "pod_name":
			m.Pod = d.str(s)
		case "namespace_name":
			m.Namespace = d.str(s)
		case "host":
			m.Node = d.str(s)
		case "container_name":
			m.Container = d.str(s)
		case "labels":
			if val[0] != '{' {
				return
			}
			labels := make(map[string]string)
			d.eachMember(val, func(k, v []byte, esc bool) {
				if v[0] == '"' {
					// k lives in d.key, which the next member overwrites.
					labels[string(k)] = d.str(jsonString{raw: v[1 : len(v)-1], esc: esc, ok: true})
				}
			})
			if len(labels) > 0 {
				m.Labels = labels
			}
		}
	})
	return m
}

// str returns a JSON string value as a new Go string.
func (d *Decoder) str(s jsonString) string {
	if !s.ok {
		return ""
	}
	raw := s.raw
	if s.esc {
		d.val, _ = unescape(d.val[:0], s.raw)
		raw = d.val
	}
	if d.hi && !utf8.Valid(raw) {
		d.fixed = appendValidUTF8(d.fixed[:0], raw)
		raw = d.fixed
		if d.cfg.InvalidUTF8 != nil {
			d.cfg.InvalidUTF8.Inc()
		}
	}
	return string(raw)
}

// eachMember calls fn for each member of the valid JSON object obj, with the
// unescaped key (valid only during fn), the raw value and whether a string
// value holds escapes.
func (d *Decoder) eachMember(obj []byte, fn func(key, val []byte, esc bool)) {
	i := skipWS(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		ke, kesc, ok := scanString(obj, i)
		if !ok {
			return
		}
		key := obj[i+1 : ke-1]
		i = skipWS(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipWS(obj, i+1)
		vs := i
		ve, vesc, err := d.skipValue(obj, i)
		if err != nil {
			return
		}
		if kesc {
			d.key, _ = unescape(d.key[:0], key)
			key = d.key
		}
		fn(key, obj[vs:ve], vesc)
		i = skipWS(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i = skipWS(obj, i+1)
	}
}

// skipValue validates the JSON value starting at b[i] and returns the index
// just past it; for a string value esc says whether it holds escapes.
// Nesting is tracked in d.stack, not on the Go stack.
func (d *Decoder) skipValue(b []byte, i int) (end int, esc bool, err error) {
	stack := d.stack[:0]
	defer func() { d.stack = stack[:0] }()
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return 0, false, malformed(ReasonJSONTruncated, "value expected", i)
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(stack) >= maxJSONDepth {
				return 0, false, malformed(ReasonJSONSyntax, "nested too deep", i)
			}
			stack = append(stack, c)
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' and ']' are two past '{' and '['
				i++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' {
				if i, err = d.objectKey(b, i); err != nil {
					return 0, false, err
				}
			}
			continue
		case '"':
			e, sesc, ok := scanStringCtl(b, i, d.ctl)
			if !ok {
				return 0, false, badString(b, i)
			}
			i, esc = e, sesc
		case 't':
			if !bytes.HasPrefix(b[i:], []byte("true")) {
				return 0, false, badLiteral(b, i, "true")
			}
			i += 4
		case 'f':
			if !bytes.HasPrefix(b[i:], []byte("false")) {
				return 0, false, badLiteral(b, i, "false")
			}
			i += 5
		case 'n':
			if !bytes.HasPrefix(b[i:], []byte("null")) {
				return 0, false, badLiteral(b, i, "null")
			}
			i += 4
		default:
			n := scanNumber(b[i:])
			if n == 0 {
				return 0, false, badNumber(b, i)
			}
			i += n
		}
		// A value ended at b[i]: close containers, or go on to the next
		// element.
		for {
			if len(stack) == 0 {
				return i, esc, nil
			}
			esc = false
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, false, malformed(ReasonJSONTruncated, "unterminated container", i)
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return 0, false, malformed(ReasonJSONSyntax, "',' expected", i)
			}
			i = skipWS(b, i+1)
			if top == '{' {
				if i, err = d.objectKey(b, i); err != nil {
					return 0, false, err
				}
			}
			break
		}
	}
}

// objectKey scans `"key" :` at b[i] and returns the index of the value.
func (d *Decoder) objectKey(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, malformed(syntaxOrEnd(b, i), "object key expected", i)
	}
	e, _, ok := scanStringCtl(b, i, d.ctl)
	if !ok {
		return 0, badString(b, i)
	}
	i = skipWS(b, e)
	if i >= len(b) || b[i] != ':' {
		return 0, malformed(syntaxOrEnd(b, i), "':' expected", i)
	}
	return skipWS(b, i+1), nil
}

func malformed(reason, what string, at int) error {
	return &MalformedError{Reason: reason, What: what, Offset: at}
}

// syntaxOrEnd is the reason for a token missing at b[i]: the record was cut
// off when it ended there.
func syntaxOrEnd(b []byte, i int) string {
	if i >= len(b) {
		return ReasonJSONTruncated
	}
	return ReasonJSONSyntax
}

// badString says why the string at b[i] did not scan. It runs only on the
// error path, so it may look at every byte.
func badString(b []byte, i int) error {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return malformed(ReasonJSONSyntax, "bad escape in string", i)
		case c < 0x20:
			return malformed(ReasonJSONControl, fmt.Sprintf("control byte 0x%02x in string", c), j)
		case c == '\\':
			if j+1 >= len(b) {
				return malformed(ReasonJSONTruncated, "unterminated string", i)
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+6 > len(b) {
					return malformed(ReasonJSONTruncated, "unterminated string", i)
				}
				if !isHex4(b[j+2 : j+6]) {
					return malformed(ReasonJSONSyntax, "bad \\u escape in string", j)
				}
				j += 5
			default:
				return malformed(ReasonJSONSyntax, "bad escape in string", j)
			}
		}
	}
	return malformed(ReasonJSONTruncated, "unterminated string", i)
}

// badLiteral: a cut-off "tr" is truncation, "trve" a syntax error.
func badLiteral(b []byte, i int, lit string) error {
	if rest := b[i:]; len(rest) < len(lit) && lit[:len(rest)] == string(rest) {
		return malformed(ReasonJSONTruncated, "cut-off literal", i)
	}
	return malformed(ReasonJSONSyntax, "bad literal", i)
}

// badNumber: a number cut off at the end of the record ("12.", "-",
// "1e") is truncation.
func badNumber(b []byte, i int) error {
	j := i
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		j++
	}
	if j == len(b) && j > i {
		return malformed(ReasonJSONTruncated, "cut-off number", i)
	}
	return malformed(ReasonJSONSyntax, "value expected", i)
}

// suspectBytes reports whether b holds a byte below 0x20 (ctl) or at or
// above 0x80 (hi), eight bytes at a time. Records from Fluent Bit hold
// neither, so the exact checks for control bytes and invalid UTF-8 in
// strings run only for the few that do.
func suspectBytes(b []byte) (ctl, hi bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// First whether there is either kind at all, two operations a word:
	// a byte below 0x20 borrows in w - 0x20… and sets its high bit
	// there (a borrow it passes on can set the next byte's too, but then
	// a byte below 0x20 exists anyway), a byte at or above 0x80 sets it
	// in w. Records from Fluent Bit hold neither (16 % of the decoder's
	// CPU on the load stream before, TestSuspectBytes).
	var any uint64
	rest := b
	for len(rest) >= 32 {
		w0 := binary.LittleEndian.Uint64(rest)
		w1 := binary.LittleEndian.Uint64(rest[8:])
		w2 := binary.LittleEndian.Uint64(rest[16:])
		w3 := binary.LittleEndian.Uint64(rest[24:])
		any |= (w0 - ones*0x20) | w0 | (w1 - ones*0x20) | w1 | (w2 - ones*0x20) | w2 | (w3 - ones*0x20) | w3
		rest = rest[32:]
	}
	for len(rest) >= 8 {
		w := binary.LittleEndian.Uint64(rest)
		any |= (w - ones*0x20) | w
		rest = rest[8:]
	}
	if any&highs == 0 {
		for _, c := range rest {
			if c < 0x20 || c >= 0x80 {
				return suspectBytesExact(b)
			}
		}
		return false, false
	}
	return suspectBytesExact(b)
}

// suspectBytesExact is suspectBytes telling the two kinds apart.
func suspectBytesExact(b []byte) (ctl, hi bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var lo, top uint64
	i := 0
	for ; i+32 <= len(b); i += 32 {
		// Four words per round: independent chains, one loop test.
		w0 := binary.LittleEndian.Uint64(b[i:])
		w1 := binary.LittleEndian.Uint64(b[i+8:])
		w2 := binary.LittleEndian.Uint64(b[i+16:])
		w3 := binary.LittleEndian.Uint64(b[i+24:])
		top |= w0 | w1 | w2 | w3
		lo |= (w0-ones*0x20)&^w0 | (w1-ones*0x20)&^w1 | (w2-ones*0x20)&^w2 | (w3-ones*0x20)&^w3
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		top |= w
		// A byte below 0x20 leaves its high bit set in (w - 0x20…) &^ w
		// (the "has less than" trick; exact as to whether one exists).
		lo |= (w - ones*0x20) &^ w
	}
	ctl, hi = lo&highs != 0, top&highs != 0
	for ; i < len(b); i++ {
		ctl = ctl || b[i] < 0x20
		hi = hi || b[i] >= 0x80
	}
	return ctl, hi
}

// appendValidUTF8 appends s to dst with each byte that is not part of a
// valid UTF-8 sequence replaced by U+FFFD, as encoding/json does.
func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString scans the JSON string whose opening quote is b[i] and returns
// the index just past its closing quote and whether it holds escapes. Escapes
// are validated; raw control bytes are rejected when ctl is set (the caller
// knows the record holds one somewhere).
func scanStringCtl(b []byte, i int, ctl bool) (end int, esc, ok bool) {
	if ctl {
		end, esc, ok = scanString(b, i)
		if ok {
			for _, c := range b[i+1 : end-1] {
				if c < 0x20 {
					return 0, false, false
				}
			}
		}
		return end, esc, ok
	}
	return scanString(b, i)
}

// scanString scans the JSON string whose opening quote is b[i] and returns
// the index just past its closing quote and whether it holds escapes. Escapes
// are validated; raw control bytes are let through.
func scanString(b []byte, i int) (end int, esc, ok bool) {
	i++
	// Keys and metadata values are short: eight bytes at a time, the first
	// quote or backslash of the first 24 bytes ends them before two
	// bytes.IndexByte calls would have started.
	for j := i; j+8 <= len(b) && j < i+24; j += 8 {
		w := binary.LittleEndian.Uint64(b[j:])
		if m := hasByte(w, '"') | hasByte(w, '\\'); m != 0 {
			if k := j + bits.TrailingZeros64(m)/8; b[k] == '"' {
				return k + 1, false, true
			}
			break // an escape: the general path below
		}
	}
	q := -1 // index of the next '"' at or after i, not yet known to be escaped
	for {
		if q < i {
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				return 0, false, false
			}
			q = i + j
		}
		k := bytes.IndexByte(b[i:q], '\\')
		if k < 0 {
			return q + 1, esc, true
		}
		esc = true
		p := i + k + 1 // the byte after the backslash
		if p >= len(b) {
			return 0, false, false
		}
		switch b[p] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = p + 1
		case 'u':
			if p+5 > len(b) || !isHex4(b[p+1:p+5]) {
				return 0, false, false
			}
			i = p + 5
		default:
			return 0, false, false
		}
	}
}

// hasByte returns a word whose high bit is set in each byte of w that
// equals c, and possibly in bytes above such a byte (a borrow): its lowest
// set bit is exact, which is all scanString uses.
func hasByte(w uint64, c byte) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ ones*uint64(c)
	return (x - ones) &^ x & highs
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func hex4(b []byte) rune {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

// unescape appends the unescaped content of a JSON string (without quotes)
// to dst. Like encoding/json it turns an unpaired surrogate into U+FFFD.
// ok is false on an invalid escape.
func unescape(dst, s []byte) ([]byte, bool) {
	for {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			return append(dst, s...), true
		}
		dst = append(dst, s[:k]...)
		s = s[k:]
		if len(s) < 2 {
			return dst, false
		}
		switch s[1] {
		case '"', '\\', '/':
			dst = append(dst, s[1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			if len(s) < 6 || !isHex4(s[2:6]) {
				return dst, false
			}
			r := hex4(s[2:6])
			s = s[6:]
			if r >= 0xD800 && r < 0xDC00 && len(s) >= 6 && s[0] == '\\' && s[1] == 'u' && isHex4(s[2:6]) {
				if r2 := hex4(s[2:6]); r2 >= 0xDC00 && r2 < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
					s = s[6:]
				}
			}
			dst = utf8.AppendRune(dst, r) // a lone surrogate becomes U+FFFD
			continue
		default:
			return dst, false
		}
		s = s[2:]
	}
}

// scanNumber returns the length of the JSON number at the start of b, or 0.
func scanNumber(b []byte) int {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0
		}
		i = j
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// parseEpoch parses a JSON number of seconds since the Unix epoch, exactly
// to the nanosecond when written as a decimal fraction (Fluent Bit writes
// "1732890000.123456"; a float64 would round it).
func parseEpoch(b []byte) (time.Time, bool) {
	n := scanNumber(b)
	if n == 0 || n != len(b) {
		return time.Time{}, false
	}
	if indexEither(b, 'e', 'E') >= 0 {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil || f != f || f > 1e15 || f < -1e15 {
			return time.Time{}, false
		}
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC(), true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var sec, nsec int64
	i := 0
	for ; i < len(b) && b[i] != '.'; i++ {
		if i >= 15 { // beyond year 30000000
			return time.Time{}, false
		}
		sec = sec*10 + int64(b[i]-'0')
	}
	if i < len(b) {
		scale := int64(1e8)
		for _, c := range b[i+1:] {
			nsec += int64(c-'0') * scale
			scale /= 10
		}
	}
	if neg {
		sec, nsec = -sec, -nsec
	}
	return time.Unix(sec, nsec).UTC(), true
}

// parseDateTime parses an RFC 3339 date-time at the start of b:
// YYYY-MM-DD, 'T', 't' or ' ', hh:mm:ss, an optional fraction ('.', or ','
// when comma is set, as Python's logging writes it), and an optional zone
// ('Z', 'z', ±hh:mm or ±hhmm; none means UTC). It returns the time in UTC
// and the number of bytes used.
func parseDateTime(b []byte, comma bool) (t time.Time, n int, ok bool) {
	f, n, ok := scanDateTime(b, comma)
	if !ok {
		return time.Time{}, 0, false
	}
	return f.midnight().Add(f.clock), n, true
}

// dateTime is a date-time read by scanDateTime: the calendar day and the
// time since its midnight (UTC, the zone offset applied; it may be
// negative or over a day).
type dateTime struct {
	year, month, day int
	clock            time.Duration
}

// midnight returns the start (UTC) of the day.
func (f dateTime) midnight() time.Time {
	return time.Date(f.year, time.Month(f.month), f.day, 0, 0, 0, 0, time.UTC)
}

// dayKey identifies the day, for a cache of midnight().
func (f dateTime) dayKey() int { return (f.year*100+f.month)*100 + f.day }

// scanDateTime is parseDateTime without building the time.Time: the
// checks, the fields and the length.
func scanDateTime(b []byte, comma bool) (f dateTime, n int, ok bool) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || b[13] != ':' || b[16] != ':' {
		return f, 0, false
	}
	switch b[10] {
	case 'T', 't', ' ':
	default:
		return f, 0, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	min, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || min > 59 || sec > 59 {
		return f, 0, false
	}
	n = 19
	nsec := 0
	if n < len(b) && (b[n] == '.' || comma && b[n] == ',') {
		j := skipDigits(b, n+1)
		if j == n+1 {
			return f, 0, false
		}
		// Nanoseconds: the first nine digits, the rest cut off.
		frac := b[n+1 : j]
		if len(frac) > 9 {
			frac = frac[:9]
		}
		for _, c := range frac {
			nsec = nsec*10 + int(c-'0')
		}
		nsec *= pow10[9-len(frac)]
		n = j
	}
	offset := 0
	if n < len(b) {
		switch c := b[n]; c {
		case 'Z', 'z':
			n++
		case '+', '-':
			z := b[n+1:]
			var hh, mm int
			var ok1, ok2 bool
			switch {
			case len(z) >= 5 && z[2] == ':':
				hh, ok1 = digits(z[0:2])
				mm, ok2 = digits(z[3:5])
				n += 6
			case len(z) >= 4:
				hh, ok1 = digits(z[0:2])
				mm, ok2 = digits(z[2:4])
				n += 5
			}
			if !ok1 || !ok2 || hh > 23 || mm > 59 {
				return f, 0, false
			}
			offset = (hh*60 + mm) * 60
			if c == '-' {
				offset = -offset
			}
		}
	}
	clock := time.Duration(hour*3600+min*60+sec-offset)*time.Second + time.Duration(nsec)
	return dateTime{year: year, month: month, day: day, clock: clock}, n, true
}

// digits parses a short run of decimal digits.
func digits(b []byte) (int, bool) {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// pow10 are the powers of ten up to 10^9.
var pow10 = [...]int{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// parseCRI parses a CRI log line: "<RFC3339Nano> <stream> <tag> <text>",
// where tag is "F" (full) or "P" (partial), possibly followed by further
// ':'-separated tags.
func parseCRI(b []byte) (t time.Time, stream string, partial bool, text []byte, ok bool) {
	t, n, ok := parseDateTime(b, false)
	if !ok || n >= len(b) || b[n] != ' ' {
		return time.Time{}, "", false, nil, false
	}
	b = b[n+1:]
	switch {
	case bytes.HasPrefix(b, []byte("stdout ")):
		stream = "stdout"
	case bytes.HasPrefix(b, []byte("stderr ")):
		stream = "stderr"
	default:
		return time.Time{}, "", false, nil, false
	}
	b = b[7:]
	tag := b
	if sp := bytes.IndexByte(b, ' '); sp >= 0 {
		tag, text = b[:sp], b[sp+1:]
	} else {
		text = b[len(b):]
	}
	if len(tag) == 0 || tag[0] != 'F' && tag[0] != 'P' || len(tag) > 1 && tag[1] != ':' {
		return time.Time{}, "", false, nil, false
	}
	return t, stream, tag[0] == 'P', text, true
}
