package parsers

import (
	"errors"
	"fmt"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// NCCL Inspector records: the JSON objects NCCL's Inspector profiler
// plugin (ext-profiler/inspector in NCCL 2.28.3–2.29.3,
// plugins/profiler/inspector from 2.29.7) writes to
// NCCL_INSPECTOR_DUMP_DIR/<hostname>-pid<pid>.log, one per completed
// collective (and, from 2.30.3, point-to-point operation) per rank, one
// object per line:
//
//	{"header":{"id":"0x…","comm_name":"…","rank":2,"n_ranks":8,"nnodes":1},
//	 "metadata":{"inspector_output_format_version":"v4.0","git_rev":"…",
//	  "rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":…,
//	  "hostname":"…","pid":…},
//	 "coll_perf":{"coll":"AllReduce","coll_sn":1407,"coll_msg_size_bytes":…,
//	  "coll_exec_time_us":61974,"coll_timing_source":"kernel_gpu",
//	  "coll_algobw_gbs":277.210914,"coll_busbw_gbs":485.119099}}
//
// (p2p records carry "p2p_perf" with p2p, p2p_sn, p2p_peer, p2p_msg_size_
// bytes, …). Every tag writes format version "v4.0"; header.comm_name
// came with 2.30.3, p2p_perf records too; NCCL_INSPECTOR_DUMP_VERBOSE=1
// adds event_trace_sn and event_trace_ts objects inside coll_perf or
// p2p_perf. testdata/nccl-formats/inspector.tsv is the census of the
// writer's shapes per tag; testdata/inspector/ holds NVIDIA's published
// examples and records derived from the writer (SOURCES.md).

// MaxInspectorRecord caps the bytes ParseInspector reads: a plain record
// is ~400 bytes; a verbose one adds ~250 bytes per channel, and NCCL runs
// at most 64 channels (MAXCHANNELS), ~16 KiB. 64 KiB leaves room for long
// host and communicator names.
const MaxInspectorRecord = 64 << 10

// Errors of ParseInspector.
var (
	// ErrNotInspector: the text is not an Inspector record (it does not
	// start with {"header": or has no coll_perf or p2p_perf object).
	ErrNotInspector = errors.New("not an NCCL Inspector record")
	// ErrInspectorTooLong: the record exceeds MaxInspectorRecord.
	ErrInspectorTooLong = fmt.Errorf("NCCL Inspector record over %d bytes", MaxInspectorRecord)
	// ErrInspectorRecord: the record is malformed JSON or lacks a field
	// every writer writes (header.id, coll/p2p, the size, the busbw).
	ErrInspectorRecord = errors.New("malformed NCCL Inspector record")
)

// inspectorPrefix starts every record the writer makes (the header object
// is written first at every tag); the JSON scanner accepts blanks around
// it, as in NVIDIA's pretty-printed documentation examples.
const inspectorPrefix = `"header"`

// IsInspector reports whether b looks like an Inspector record: '{' and
// then, after blanks, "header". It is the cheap check before
// ParseInspector.
func IsInspector(b []byte) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	return hasPrefix(b[i:], inspectorPrefix)
}

// ParseInspector parses one Inspector record into r. The byte slices of r
// alias b. Unknown keys are skipped (later writers add some), so are the
// verbose event traces, whose presence sets r.Verbose. String values are
// returned as written, escapes included (the writer escapes only
// quotes, backslashes and control bytes, which hostnames and names of
// communicators do not hold).
func ParseInspector(b []byte, r *pipeline.CollectiveRecord) error {
	r.Reset()
	if len(b) > MaxInspectorRecord {
		return ErrInspectorTooLong
	}
	if !IsInspector(b) {
		return ErrNotInspector
	}
	var s inspScan
	s.b = b
	i := skipWS(b, 0)
	perf := false
	end, err := s.object(i, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "header":
			return s.object(v, func(k []byte, v int) (int, error) { return s.header(k, v, r) })
		case "metadata":
			return s.object(v, func(k []byte, v int) (int, error) { return s.metadata(k, v, r) })
		case "coll_perf":
			perf = true
			return s.object(v, func(k []byte, v int) (int, error) { return s.perf(k, v, r, "coll") })
		case "p2p_perf":
			perf, r.P2P = true, true
			return s.object(v, func(k []byte, v int) (int, error) { return s.perf(k, v, r, "p2p") })
		}
		return s.skip(v)
	})
	if err != nil {
		return err
	}
	if end = skipWS(b, end); end != len(b) {
		return fmt.Errorf("%w: bytes after the record at %d", ErrInspectorRecord, end)
	}
	if !perf {
		return ErrNotInspector
	}
	switch {
	case len(r.Comm) == 0:
		return fmt.Errorf("%w: no header.id", ErrInspectorRecord)
	case len(r.Op) == 0:
		return fmt.Errorf("%w: no coll or p2p name", ErrInspectorRecord)
	case r.Bytes < 0:
		return fmt.Errorf("%w: no message size", ErrInspectorRecord)
	case !s.busbw:
		// The finder finds records by "busbw" (TelemetryTokens): a record
		// without the key is no record it would hand on.
		return fmt.Errorf("%w: no busbw", ErrInspectorRecord)
	}
	return nil
}

// inspScan walks one record.
type inspScan struct {
	b     []byte
	depth int
	busbw bool // a *_busbw_gbs key was read
}

// maxInspectorDepth bounds nesting: records nest four deep (the verbose
// kernel_events lists' objects).
const maxInspectorDepth = 8

// object reads the object at b[i] (after blanks), calling fn with each key
// and the index of its value; fn returns the index past the value. It
// returns the index past the closing brace.
func (s *inspScan) object(i int, fn func(key []byte, v int) (int, error)) (int, error) {
	b := s.b
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, fmt.Errorf("%w: want an object at %d", ErrInspectorRecord, i)
	}
	if s.depth++; s.depth > maxInspectorDepth {
		return 0, fmt.Errorf("%w: nested too deep", ErrInspectorRecord)
	}
	defer func() { s.depth-- }()
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, fmt.Errorf("%w: want a key at %d", ErrInspectorRecord, i)
		}
		end, esc, ok := scanString(b, i)
		if !ok {
			return 0, fmt.Errorf("%w: bad key at %d", ErrInspectorRecord, i)
		}
		key := b[i+1 : end-1]
		if esc {
			key = nil // no key the writer writes has escapes
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, fmt.Errorf("%w: want ':' at %d", ErrInspectorRecord, i)
		}
		var err error
		if i, err = fn(key, skipWS(b, i+1)); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, fmt.Errorf("%w: unterminated object", ErrInspectorRecord)
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("%w: want ',' or '}' at %d", ErrInspectorRecord, i)
		}
	}
}

// skip returns the index past the value at b[i].
func (s *inspScan) skip(i int) (int, error) {
	b := s.b
	if i >= len(b) {
		return 0, fmt.Errorf("%w: missing value", ErrInspectorRecord)
	}
	switch c := b[i]; {
	case c == '{':
		return s.object(i, func(_ []byte, v int) (int, error) { return s.skip(v) })
	case c == '[':
		return s.list(i)
	case c == '"':
		end, _, ok := scanString(b, i)
		if !ok {
			return 0, fmt.Errorf("%w: bad string at %d", ErrInspectorRecord, i)
		}
		return end, nil
	case c == '-' || isDigit(c):
		n := scanNumber(b[i:])
		if n == 0 {
			return 0, fmt.Errorf("%w: bad number at %d", ErrInspectorRecord, i)
		}
		return i + n, nil
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if hasPrefix(b[i:], lit) {
			return i + len(lit), nil
		}
	}
	return 0, fmt.Errorf("%w: bad value at %d", ErrInspectorRecord, i)
}

// list returns the index past the list at b[i].
func (s *inspScan) list(i int) (int, error) {
	b := s.b
	if s.depth++; s.depth > maxInspectorDepth {
		return 0, fmt.Errorf("%w: nested too deep", ErrInspectorRecord)
	}
	defer func() { s.depth-- }()
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = s.skip(i); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, fmt.Errorf("%w: unterminated list", ErrInspectorRecord)
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("%w: want ',' or ']' at %d", ErrInspectorRecord, i)
		}
	}
}

// str reads the string value at b[i] (its contents, escapes as written).
func (s *inspScan) str(i int) ([]byte, int, error) {
	b := s.b
	if i >= len(b) || b[i] != '"' {
		return nil, 0, fmt.Errorf("%w: want a string at %d", ErrInspectorRecord, i)
	}
	end, _, ok := scanString(b, i)
	if !ok {
		return nil, 0, fmt.Errorf("%w: bad string at %d", ErrInspectorRecord, i)
	}
	return b[i+1 : end-1], end, nil
}

// num reads the number at b[i]. The writer prints a NaN double as the
// string "nan" (jsonDouble): that reads as NaN.
func (s *inspScan) num(i int) (float64, int, error) {
	b := s.b
	if i < len(b) && b[i] == '"' {
		v, end, err := s.str(i)
		if err != nil {
			return 0, 0, err
		}
		if string(v) == "nan" || string(v) == "-nan" {
			return math.NaN(), end, nil
		}
		return 0, 0, fmt.Errorf("%w: want a number at %d", ErrInspectorRecord, i)
	}
	n := scanNumber(b[i:])
	if n == 0 {
		return 0, 0, fmt.Errorf("%w: want a number at %d", ErrInspectorRecord, i)
	}
	v, ok := parseNumber(b[i : i+n])
	if !ok {
		return 0, 0, fmt.Errorf("%w: bad number at %d", ErrInspectorRecord, i)
	}
	return v, i + n, nil
}

// int reads an integer: a number without fraction that fits an int64.
func (s *inspScan) int(i int) (int64, int, error) {
	n := scanNumber(s.b[i:])
	v, ok := atoi64(s.b[i : i+n])
	if n == 0 || !ok {
		return 0, 0, fmt.Errorf("%w: want an integer at %d", ErrInspectorRecord, i)
	}
	return v, i + n, nil
}

func (s *inspScan) header(k []byte, i int, r *pipeline.CollectiveRecord) (int, error) {
	var err error
	var n int64
	switch string(k) {
	case "id":
		r.Comm, i, err = s.str(i)
		return i, err
	case "comm_name":
		r.CommName, i, err = s.str(i)
		return i, err
	case "rank":
		n, i, err = s.int(i)
		r.Rank = clampInt(n)
	case "n_ranks":
		n, i, err = s.int(i)
		r.NRanks = clampInt(n)
	case "nnodes":
		n, i, err = s.int(i)
		r.NNodes = clampInt(n)
	default:
		return s.skip(i)
	}
	return i, err
}

func (s *inspScan) metadata(k []byte, i int, r *pipeline.CollectiveRecord) (int, error) {
	var err error
	switch string(k) {
	case "inspector_output_format_version":
		r.Version, i, err = s.str(i)
	case "hostname":
		r.Host, i, err = s.str(i)
	case "pid":
		r.PID, i, err = s.int(i)
	case "dump_timestamp_us":
		r.DumpTimeUS, i, err = s.int(i)
	default:
		return s.skip(i)
	}
	return i, err
}

// perf reads a key of coll_perf (pre "coll") or p2p_perf (pre "p2p").
func (s *inspScan) perf(k []byte, i int, r *pipeline.CollectiveRecord, pre string) (int, error) {
	var err error
	var n int64
	if len(k) < len(pre) || string(k[:len(pre)]) != pre {
		if string(k) == "event_trace_sn" || string(k) == "event_trace_ts" {
			r.Verbose = true
		}
		return s.skip(i)
	}
	switch string(k[len(pre):]) {
	case "":
		r.Op, i, err = s.str(i)
	case "_sn":
		r.SN, i, err = s.int(i)
	case "_peer":
		n, i, err = s.int(i)
		r.Peer = clampInt(n)
	case "_msg_size_bytes":
		r.Bytes, i, err = s.int(i)
	case "_exec_time_us":
		r.ExecUS, i, err = s.num(i)
	case "_timing_source":
		r.Timing, i, err = s.str(i)
	case "_algobw_gbs":
		r.AlgBW, i, err = s.num(i)
	case "_busbw_gbs":
		r.BusBW, i, err = s.num(i)
		s.busbw = err == nil
	default:
		return s.skip(i)
	}
	return i, err
}

func clampInt(n int64) int {
	return int(min(max(n, math.MinInt32), math.MaxInt32))
}

// inspectorLine reads b, a whole line, as an Inspector record into tl:
// the telemetry parsers' dispatch to ParseInspector.
func inspectorLine(b []byte, tl *pipeline.TelemetryLine) bool {
	if ParseInspector(b, &tl.Coll) != nil {
		tl.Coll.Reset()
		return false
	}
	tl.Kind = pipeline.TelemetryCollective
	return true
}
