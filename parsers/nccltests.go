package parsers

import (
	"bytes"
	"math"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

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
