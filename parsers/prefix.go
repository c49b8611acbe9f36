package parsers

import (
	"bytes"
	"strconv"
)

// PrefixKind names one kind of text that launchers, log collectors and
// people put in front of a log line.
type PrefixKind uint8

// The prefixes StripPrefix removes. Examples cite the corpus file in
// testdata/corpus (or NCCL-FORMATS.md §12 where the corpus has none).
const (
	PrefixNone PrefixKind = iota
	// PrefixTorchrun is torchrun's "[rank3]:" (089) or "[default0]:", or a
	// custom "[trainer3]:" / "[trainer0|0]:" (NCCL-FORMATS.md §12, 099).
	PrefixTorchrun
	// PrefixSrun is Slurm's "srun -l" task label "0: ".
	PrefixSrun
	// PrefixMPI is Open MPI's --tag-output "[1,0]<stdout>:" (081).
	PrefixMPI
	// PrefixHost is a pdsh or mpirun host label "10.3.35.83: " (038, 075).
	PrefixHost
	// PrefixRay is a Ray worker tag "(RayTrainWorker pid=3704, ip=10.52.3.7) "
	// (047, 048, 055).
	PrefixRay
	// PrefixRankTag is a bare rank "[155] " before the hostname (006).
	PrefixRankTag
	// PrefixTimestamp is a timestamp: "[2026-04-28 14:14:49] " (083, 084),
	// "[2023-12-20 16:35:35,473] " (016), an ISO timestamp, or a CloudWatch
	// console row "  | 2025-05-16T16:39:51.208-07:00 | " (013).
	PrefixTimestamp
	// PrefixANSI is an ANSI escape sequence, or the "[0m" left of one whose
	// ESC byte was lost (NCCL-FORMATS.md §12, 095).
	PrefixANSI
	// PrefixMarkdown is a markdown quote marker "> " from an issue paste (064).
	PrefixMarkdown
	// PrefixRayDedup is the suffix Ray's log deduplication (on by default
	// since Ray 2.x) appends to the line it keeps: " [repeated 15x across
	// cluster]" (266), possibly followed by its one-time notice "(Ray
	// deduplicates logs by default. …)". The only decoration at a line's
	// end: it is the one kind StripPrefix removes from the right.
	PrefixRayDedup
	// PrefixKubectl is "kubectl logs --prefix"'s "[pod/name/container] ".
	PrefixKubectl
	// PrefixJournald is journald's syslog-style "Dec 04 07:19:43 host
	// unit[pid]: " (journalctl's default short output).
	PrefixJournald
	// PrefixPane is the border of a terminal log pane copied with its rows
	// (k9s, 285-287): "│ " (U+2502) before a row and, after the row's
	// padding blanks, " │" at its end.
	PrefixPane
)

// String returns the kind's name as used in metrics and logs.
func (k PrefixKind) String() string {
	switch k {
	case PrefixNone:
		return "none"
	case PrefixTorchrun:
		return "torchrun"
	case PrefixSrun:
		return "srun"
	case PrefixMPI:
		return "mpi"
	case PrefixHost:
		return "host"
	case PrefixRay:
		return "ray"
	case PrefixRankTag:
		return "rank-tag"
	case PrefixTimestamp:
		return "timestamp"
	case PrefixANSI:
		return "ansi"
	case PrefixMarkdown:
		return "markdown"
	case PrefixRayDedup:
		return "ray-dedup"
	case PrefixKubectl:
		return "kubectl"
	case PrefixJournald:
		return "journald"
	case PrefixPane:
		return "pane"
	}
	return "prefix(" + strconv.Itoa(int(k)) + ")"
}

// Prefix describes what StripPrefix removed.
type Prefix struct {
	// Kinds has bit 1<<k set for every PrefixKind k removed; several may
	// stack (a timestamp, then a torchrun rank). Test it with Has.
	Kinds uint16
	// Rank is the rank the outermost rank-bearing prefix gave (torchrun,
	// srun, mpirun, rank tag), or -1.
	Rank int
	// Host is the host the outermost host-bearing prefix gave (a pdsh or
	// mpirun label, a Ray ip=), or nil. It aliases the line.
	Host []byte
}

// Has reports whether a prefix of kind k was removed.
func (p Prefix) Has(k PrefixKind) bool { return p.Kinds&(1<<k) != 0 }

// Bounds on what a prefix may look like; longer runs are message text.
const (
	maxRankDigits  = 9   // fits an int on every platform
	maxHostLabel   = 253 // DNS name length limit
	maxRayPrefix   = 256
	maxHeaderToken = 300 // hostname:pid:tid
	ncclBodyWindow = 256 // how far into a line to look for "NCCL INFO"
)

// StripPrefix removes the decorations launchers, log collectors and people
// add to a log line — launcher prefixes, ANSI colour codes, timestamps,
// console table columns, markdown quote markers and leading blanks from its
// start, repeatedly and in any order, and Ray's dedup suffix from its end —
// and returns the rest. A line without them comes back unchanged. It never
// allocates; rest and p.Host alias line. It is the one place decorations
// are removed; the forms it knows:
//
//	form                                   example                                        kind
//	torchrun / custom rank tag             [rank3]:  [default0]:  [trainer0|0]:           torchrun
//	Slurm srun -l                          0:                                             srun
//	Open MPI --tag-output                  [1,0]<stdout>:                                 mpi
//	pdsh / mpirun host label               10.3.35.83:  node01:                           host
//	Ray actor or task tag (stacked too)    (RayTrainWorker pid=3704, ip=10.52.3.7)        ray
//	  or one torn at its start             WorkerWrapper pid=2361)  (before a header)     ray
//	Ray Train v2 host tag                  [nccl-e9ef-7d4f-0:2]:                          rank-tag
//	bare rank tag                          [155]                                          rank-tag
//	bracketed / ISO / RFC 3339 time        [2026-04-28 14:14:49]  2024-12-04T07:19:43.480Z timestamp
//	  (kubectl logs --timestamps, Docker, DeepSpeed, logcli)
//	AWS CloudWatch console table row       | 2024-12-04T07:19:43.480Z | …                  timestamp
//	Loki logcli / Grafana label set        2024-…Z {pod="w-0", container="c"} …           timestamp
//	Kibana Discover table time column      Dec 4, 2024 @ 07:19:43.480 …                   timestamp
//	kubectl logs --prefix                  [pod/train-worker-0/pytorch]                   kubectl
//	journald short output                  Dec 04 07:19:43 gpu-1 python3[2201]:           journald
//	ANSI colour, or one that lost its ESC  \x1b[36m  [0m  ESC[36m (a paste's literal text)  ansi
//	markdown quote                         >                                              markdown
//	terminal pane border (k9s)             │ …message…<padding blanks> │                   pane
//	Ray log dedup (at the end)             … [repeated 14x across cluster]                ray-dedup
//
// After stripping, an NCCL line starts with its own header
// "host:pid:tid [dev] NCCL …", or with "NCCL version …" for the unprefixed
// banner. Each rule looks only at the bytes it strips and those after them
// (the CloudWatch '|' also at whether a timestamp came just before it), so
// StripPrefix(rest) returns rest again. rest is a suffix of line unless a
// decoration at the end was cut (p.Has(PrefixRayDedup) or PrefixPane, the
// two kinds suffixLen measures).
func StripPrefix(line []byte) (rest []byte, p Prefix) {
	p.Rank = -1
	rest = line
	afterTime := false
	for {
		rest = trimBlank(rest)
		if len(rest) == 0 {
			return rest, p
		}
		n, kind, rank, host := matchPrefix(rest, afterTime)
		if n == 0 {
			break
		}
		p.Kinds |= 1 << kind
		if rank >= 0 && p.Rank < 0 {
			p.Rank = rank
		}
		if host != nil && p.Host == nil {
			p.Host = host
		}
		afterTime = kind == PrefixTimestamp
		rest = rest[n:]
	}
	// The suffixes last: they follow a message, so only text left after
	// the prefixes can carry one.
	n, kinds := suffixLen(rest)
	rest = rest[:len(rest)-n]
	p.Kinds |= kinds
	return rest, p
}

// suffixLen returns how many bytes at the end of msg (a line without its
// prefixes) are decorations, and their kinds: a pane's right border (drawn
// last, around what Ray wrote), then Ray's dedup suffix, then a border
// again (a pane row whose tail was copied after the suffix). One dedup
// suffix at most: a second one is message text, as Ray wrote it.
func suffixLen(msg []byte) (n int, kinds uint16) {
	borders := func() {
		for {
			m := paneBorderSuffix(msg[:len(msg)-n])
			if m == 0 {
				return
			}
			n += m
			kinds |= 1 << PrefixPane
		}
	}
	borders()
	if m := rayDedupSuffix(msg[:len(msg)-n]); m > 0 {
		n += m
		kinds |= 1 << PrefixRayDedup
		borders()
	}
	return n, kinds
}

// paneBorder is the box-drawing bar a terminal pane draws at its sides.
var paneBorder = []byte("\u2502")

// paneBorderSuffix returns the length of a pane's right border at the end
// of line: blanks, "│", maybe blanks — after some text — or 0. The blanks
// before the bar are the row's padding.
func paneBorderSuffix(line []byte) int {
	end := trimRightSpace(line)
	if !bytes.HasSuffix(end, paneBorder) {
		return 0
	}
	i := len(end) - len(paneBorder)
	if i == 0 || line[i-1] != ' ' && line[i-1] != '\t' {
		return 0
	}
	if len(trimRightSpace(line[:i])) == 0 {
		return 0 // no message before it
	}
	return len(line) - len(trimRightSpace(line[:i]))
}

// matchPrefix returns the length of the prefix at the start of b (which
// does not start with a blank), its kind, and the rank and host it gives.
func matchPrefix(b []byte, afterTime bool) (n int, kind PrefixKind, rank int, host []byte) {
	rank = -1
	switch c := b[0]; {
	case c == 0x1b:
		if n = csiLen(b); n > 0 {
			return n, PrefixANSI, -1, nil
		}
	case c == '[':
		if n = ansiLeftover(b); n > 0 {
			return n, PrefixANSI, -1, nil
		}
		if n, rank = mpiTag(b); n > 0 {
			return n, PrefixMPI, rank, nil
		}
		if n, rank = torchrunTag(b); n > 0 {
			return n, PrefixTorchrun, rank, nil
		}
		if _, m, ok := scanDateTime(b[1:], true); ok && m+1 < len(b) && b[m+1] == ']' {
			return m + 2, PrefixTimestamp, -1, nil
		}
		if n = kubectlTag(b); n > 0 {
			return n, PrefixKubectl, -1, nil
		}
		if n, rank = rankTag(b); n > 0 {
			return n, PrefixRankTag, rank, nil
		}
		if n = hostRankTag(b); n > 0 {
			return n, PrefixRankTag, -1, nil
		}
	case c == '(':
		if n, host = rayTag(b); n > 0 {
			return n, PrefixRay, -1, host
		}
	case c == 'E':
		if n = literalESC(b); n > 0 {
			return n, PrefixANSI, -1, nil
		}
	case c == '{':
		if afterTime {
			if n = lokiLabels(b); n > 0 {
				return n, PrefixTimestamp, -1, nil
			}
		}
	case c == '>':
		if len(b) == 1 || b[1] == ' ' || b[1] == '\t' {
			return 1, PrefixMarkdown, -1, nil
		}
	case c == paneBorder[0]:
		if n = len(paneBorder); bytes.HasPrefix(b, paneBorder) && (len(b) == n || b[n] == ' ' || b[n] == '\t') {
			return n, PrefixPane, -1, nil
		}
	case c == '|':
		// A CloudWatch console row: "| <time> | <message>", where some rows
		// glue the message to the time (013).
		if rest := trimBlank(b[1:]); len(rest) < len(b)-1 {
			if afterTime {
				return 1, PrefixTimestamp, -1, nil
			}
			if _, _, ok := scanDateTime(rest, false); ok {
				return 1, PrefixTimestamp, -1, nil
			}
		}
	case c >= '0' && c <= '9':
		if _, m, ok := scanDateTime(b, true); ok {
			return m, PrefixTimestamp, -1, nil
		}
	case c >= 'A' && c <= 'S':
		if n = kibanaTime(b); n > 0 {
			return n, PrefixTimestamp, -1, nil
		}
		if n, host = journaldPrefix(b); n > 0 {
			return n, PrefixJournald, -1, host
		}
	}
	if n, host = tornRayTag(b); n > 0 {
		return n, PrefixRay, -1, host
	}
	return hostLabel(b)
}

// hostLabel matches "<label>: " where label is a hostname, an IP address
// (pdsh, mpirun; 038, 075) or a task number (srun -l). An NCCL header
// "host:pid:tid" has no blank after its colons and is never a label. A label
// that looks like a hostname (lower case, with a digit, dot or dash) is
// taken as one; any other word ("Warning: ", "torch.distributed.
// DistBackendError: ") counts only when an NCCL header follows.
func hostLabel(b []byte) (n int, kind PrefixKind, rank int, host []byte) {
	i := 0
	num, hosty, wordy := true, false, false
scan:
	for ; i < len(b) && i <= maxHostLabel; i++ {
		switch c := b[i]; {
		case c >= '0' && c <= '9':
			hosty = true
		case c == '.' || c == '-':
			hosty, num = true, false
		case c >= 'a' && c <= 'z':
			num = false
		case c >= 'A' && c <= 'Z' || c == '_':
			num, wordy = false, true
		default:
			break scan
		}
	}
	if i == 0 || i > maxHostLabel || i >= len(b) || b[i] != ':' {
		return 0, PrefixNone, -1, nil
	}
	if i+1 < len(b) && b[i+1] != ' ' && b[i+1] != '\t' {
		return 0, PrefixNone, -1, nil
	}
	if num {
		if i > maxRankDigits {
			return 0, PrefixNone, -1, nil
		}
		r, _ := digits(b[:i])
		return i + 1, PrefixSrun, r, nil
	}
	if (!hosty || wordy) && !isNCCLHeader(trimBlank(b[i+1:])) {
		return 0, PrefixNone, -1, nil
	}
	return i + 1, PrefixHost, -1, b[:i]
}

// csiLen returns the length of the ANSI CSI sequence (ESC '[' parameters
// intermediates final) at the start of b, or 0.
func csiLen(b []byte) int {
	if len(b) < 2 || b[0] != 0x1b || b[1] != '[' {
		return 0
	}
	i := 2
	for i < len(b) && b[i] >= 0x30 && b[i] <= 0x3f {
		i++
	}
	for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f {
		i++
	}
	if i < len(b) && b[i] >= 0x40 && b[i] <= 0x7e {
		return i + 1
	}
	return 0
}

// ansiLeftover matches "[0m", "[32m", "[1;32m": a colour code whose ESC
// byte was lost (Ray output pasted from a terminal, NCCL-FORMATS.md §12).
func ansiLeftover(b []byte) int {
	i := 1
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == ';') {
		i++
	}
	if i > 1 && i < len(b) && b[i] == 'm' {
		return i + 1
	}
	return 0
}

// mpiTag matches Open MPI's --tag-output "[job,rank]<stdout>:" (also
// <stderr>, <stddiag>) and returns its length and the rank.
func mpiTag(b []byte) (int, int) {
	i := skipDigits(b, 1)
	if i == 1 || i >= len(b) || b[i] != ',' {
		return 0, -1
	}
	j := skipDigits(b, i+1)
	if j == i+1 || j-i-1 > maxRankDigits || j >= len(b) || b[j] != ']' {
		return 0, -1
	}
	rank, _ := digits(b[i+1 : j])
	rest := b[j+1:]
	for _, tag := range [...]string{"<stdout>:", "<stderr>:", "<stddiag>:"} {
		if bytes.HasPrefix(rest, []byte(tag)) {
			return j + 1 + len(tag), rank
		}
	}
	return 0, -1
}

// torchrunTag matches "[rank3]:", "[default0]:", "[trainer0|0]:" and "[3]:":
// an optional name, a number, an optional "|number", then "]:". The rank
// is the first number.
func torchrunTag(b []byte) (int, int) {
	i := 1
	for i < len(b) && (b[i] >= 'a' && b[i] <= 'z' || b[i] >= 'A' && b[i] <= 'Z' || b[i] == '_') {
		i++
	}
	j := skipDigits(b, i)
	if j == i || j-i > maxRankDigits {
		return 0, -1
	}
	rank, _ := digits(b[i:j])
	if j < len(b) && b[j] == '|' {
		k := skipDigits(b, j+1)
		if k == j+1 {
			return 0, -1
		}
		j = k
	}
	if j+1 < len(b) && b[j] == ']' && b[j+1] == ':' {
		return j + 2, rank
	}
	return 0, -1
}

// rankTag matches a rank "[155] " at the start of a line (006). NCCL's own
// "[cudaDev]" field also looks like this when a paste lost the
// "host:pid:tid" before it (" [0] NCCL INFO …", 033; " [0] NCCL INFO …",
// 053), so the tag is stripped only when what follows is an NCCL header or
// is not the body of an NCCL line.
func rankTag(b []byte) (int, int) {
	j := skipDigits(b, 1)
	if j == 1 || j-1 > maxRankDigits || j+1 >= len(b) || b[j] != ']' || b[j+1] != ' ' {
		return 0, -1
	}
	rest := trimBlank(b[j+1:])
	if !isNCCLHeader(rest) && isNCCLBody(rest) {
		return 0, -1
	}
	rank, _ := digits(b[1:j])
	return j + 1, rank
}

// isNCCLBody reports whether b looks like the part of an NCCL line after
// "[cudaDev] ": "NCCL INFO …", "INFO …" (≤ 2.2), or
// "file.cc:63 NCCL WARN …" / "misc/ibvwrap.cu:63 WARN …" (≤ 2.2).
func isNCCLBody(b []byte) bool {
	for _, p := range [...]string{"NCCL INFO", "NCCL WARN", "NCCL TRACE", "INFO ", "WARN ", "TRACE "} {
		if bytes.HasPrefix(b, []byte(p)) {
			return true
		}
	}
	w := b[:min(len(b), ncclBodyWindow)]
	return bytes.Contains(w, []byte("NCCL INFO")) || bytes.Contains(w, []byte("NCCL WARN")) ||
		bytes.Contains(w, []byte("NCCL TRACE")) || bytes.Contains(w, []byte(" WARN "))
}

// isNCCLHeader reports whether b starts with an NCCL line header
// "host:pid:tid [dev]". The host may be empty (065) and pid and tid may be
// redacted to non-numbers (059), so it asks only for a blank-free token with
// two colons, not ending in one, then " [digits]".
func isNCCLHeader(b []byte) bool {
	sp := bytes.IndexByte(b[:min(len(b), maxHeaderToken)], ' ')
	if sp < 1 || b[sp-1] == ':' || bytes.Count(b[:sp], []byte(":")) < 2 {
		return false
	}
	j := skipDigits(b, sp+2)
	return sp+1 < len(b) && b[sp+1] == '[' && j > sp+2 && j < len(b) && b[j] == ']'
}

// rayTag matches a Ray actor or task tag "(Name pid=N) " or
// "(Name pid=N, ip=A.B.C.D) " (047, 048, 055) and returns its length and the
// ip, if any.
func rayTag(b []byte) (int, []byte) {
	end := bytes.IndexByte(b[:min(len(b), maxRayPrefix)], ')')
	if end < 0 {
		return 0, nil
	}
	in := b[1:end]
	if bytes.IndexByte(in, '(') >= 0 {
		return 0, nil
	}
	ip, ok := rayAttrs(in)
	if !ok {
		return 0, nil
	}
	return end + 1, ip
}

// tornRayTag matches a Ray tag whose start a torn line lost:
// "WorkerWrapper pid=2361) " before an NCCL header (267). Only an NCCL
// header after it makes it one: without its '(' the tag is just text.
func tornRayTag(b []byte) (int, []byte) {
	end := bytes.IndexByte(b[:min(len(b), maxRayPrefix)], ')')
	if end < 5 || end+1 >= len(b) || b[end+1] != ' ' || bytes.IndexByte(b[:end], '(') >= 0 {
		return 0, nil
	}
	ip, ok := rayAttrs(b[:end])
	if !ok || !isNCCLHeader(trimBlank(b[end+1:])) {
		return 0, nil
	}
	return end + 1, ip
}

// rayAttrs reads the inside of a Ray tag: an optional actor name
// ("RayTrainWorker", or "head," in Ray Train v2's "(head, rank=0,
// pid=5634)" of 254), then ", "-separated key=value pairs, one of them
// "pid=N". It returns the ip, if any, and whether in is such a tag.
func rayAttrs(in []byte) ([]byte, bool) {
	if !bytes.HasPrefix(in, []byte("pid=")) {
		sp := bytes.IndexByte(in, ' ')
		if sp < 1 || bytes.IndexByte(in[:sp], '=') >= 0 {
			return nil, false
		}
		in = in[sp+1:]
	}
	attrs := in
	var ip []byte
	pid := false
	for len(attrs) > 0 {
		kv := attrs
		if c := bytes.Index(attrs, []byte(", ")); c >= 0 {
			kv, attrs = attrs[:c], attrs[c+2:]
		} else {
			attrs = nil
		}
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok || len(k) == 0 || len(v) == 0 || bytes.IndexByte(kv, ' ') >= 0 {
			return nil, false
		}
		switch string(k) {
		case "pid":
			if skipDigits(v, 0) != len(v) {
				return nil, false
			}
			pid = true
		case "ip":
			ip = v
		}
	}
	return ip, pid
}

// hostRankTag matches a "[host:N]:" tag glued to the NCCL header that
// follows it, as Ray Train v2 prints worker output (254:
// "[nccl-e9ef-7d4f-0:2]:nccl-e9ef-7d4f-0:11171:11240 [2] NCCL INFO …"). N is
// a local index, not a global rank, so no rank is returned.
func hostRankTag(b []byte) int {
	end := bytes.IndexByte(b[:min(len(b), maxRayPrefix)], ']')
	if end < 3 || end+1 >= len(b) || b[end+1] != ':' {
		return 0
	}
	c := bytes.LastIndexByte(b[1:end], ':') + 1
	if c < 2 || skipDigits(b, c+1) != end || c+1 == end || bytes.ContainsAny(b[1:c], " []") {
		return 0
	}
	if !isNCCLHeader(b[end+2:]) {
		return 0
	}
	return end + 2
}

// trimBlank removes leading spaces and tabs.
func trimBlank(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// StripANSI removes ANSI escape sequences (ESC '[' … final byte, colour
// codes among them) anywhere in line. It returns line itself when there are
// none, without allocating; otherwise it writes the cleaned text to dst[:0]
// and returns it (reusing dst when it is large enough).
func StripANSI(dst, line []byte) []byte {
	i := bytes.IndexByte(line, 0x1b)
	if i < 0 {
		return line
	}
	dst = dst[:0]
	for i >= 0 {
		dst = append(dst, line[:i]...)
		line = line[i:]
		n := csiLen(line)
		if n == 0 {
			// A lone ESC: keep it, it is not ours to judge.
			dst = append(dst, line[0])
			n = 1
		}
		line = line[n:]
		i = bytes.IndexByte(line, 0x1b)
	}
	return append(dst, line...)
}

// tokRepeated and tokAcross bound Ray's dedup suffix " [repeated Nx across
// cluster]"; tokRayNotice starts the notice Ray prints after the first one.
var (
	tokRepeated  = []byte(" [repeated ")
	tokAcross    = []byte("x across cluster]")
	tokRayNotice = []byte("(Ray deduplicates logs")
)

// maxRayNotice bounds the dedup notice and what a terminal put after it
// (its URL, padding and a pager's "[615/4138]").
const maxRayNotice = 512

// rayDedupSuffix returns the length of Ray's dedup suffix at the end of
// line (with the blanks around it and the notice that may follow it), or 0.
func rayDedupSuffix(line []byte) int {
	end := len(trimRightSpace(line))
	from := max(0, end-len(tokRepeated)-len(tokAcross)-maxRankDigits-maxRayNotice)
	// Every line comes here: the suffix is found by the ']' that closes
	// it (a vectorised byte search rules most lines out), not by a
	// substring search over the window.
	if bytes.IndexByte(line[from:end], ']') < 0 {
		return 0
	}
	i := -1
	for k := end; i < 0; {
		b := bytes.LastIndexByte(line[from:k], ']')
		if b < 0 {
			return 0
		}
		b += from
		k = b
		a := b + 1 - len(tokAcross)
		if a < from || !bytes.Equal(line[a:b+1], tokAcross) {
			continue
		}
		d := a
		for d > from && isDigit(line[d-1]) {
			d--
		}
		if r := d - len(tokRepeated) + 1; d < a && r >= from && bytes.Equal(line[r:d], tokRepeated[1:]) {
			i = r
		}
	}
	if i == 0 || line[i-1] != ' ' && line[i-1] != '\t' || len(trimRightSpace(line[:i])) == 0 {
		return 0 // no message before it, or glued to a word: message text
	}
	j := skipDigits(line, i+len(tokRepeated)-1)
	if j == i+len(tokRepeated)-1 || !bytes.HasPrefix(line[j:], tokAcross) {
		return 0
	}
	tail := trimBlank(line[j+len(tokAcross) : end])
	if len(tail) > 0 && !bytes.HasPrefix(tail, tokRayNotice) {
		return 0
	}
	// The blanks before "[repeated" go with it: the message's own trailing
	// blanks (266: "…/LOC)  [repeated 32x …]") are not part of it.
	return len(line) - len(trimRightSpace(line[:i]))
}

// literalESC matches a colour code whose ESC byte a paste turned into the
// text "ESC" (270: "ESC[36m(RayWorkerVllm pid=4095)ESC[0m ").
func literalESC(b []byte) int {
	if !bytes.HasPrefix(b, []byte("ESC[")) {
		return 0
	}
	if n := ansiLeftover(b[3:]); n > 0 {
		return 3 + n
	}
	return 0
}

// kubectlTag matches "kubectl logs --prefix"'s "[pod/name/container]"
// (also "[deployment/…]", "[job/…]"): a resource kind, a slash, a name with
// a slash and a container, and the ']' — followed by a blank.
func kubectlTag(b []byte) int {
	end := bytes.IndexByte(b[:min(len(b), maxRayPrefix)], ']')
	if end < 5 || end+1 >= len(b) || b[end+1] != ' ' {
		return 0
	}
	in := b[1:end]
	k := bytes.IndexByte(in, '/')
	if k < 1 || bytes.Count(in, []byte("/")) != 2 || in[len(in)-1] == '/' {
		return 0
	}
	for _, c := range in[:k] {
		if c < 'a' || c > 'z' {
			return 0
		}
	}
	for _, c := range in[k+1:] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '/' || c == '_') {
			return 0
		}
	}
	return end + 1
}

// lokiLabels matches the label set logcli and Grafana's Loki export print
// between the time and the line: "{container="c", pod="w-0"} ". It is
// taken only right after a timestamp.
func lokiLabels(b []byte) int {
	end := bytes.IndexByte(b[:min(len(b), maxRayPrefix)], '}')
	if end < 4 || end+1 < len(b) && b[end+1] != ' ' && b[end+1] != '\t' ||
		!bytes.Contains(b[1:end], []byte("=\"")) {
		return 0
	}
	return end + 1
}

// months are the English month abbreviations journald and Kibana print.
var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// monthAt reports whether b starts with a month abbreviation and a blank.
func monthAt(b []byte) bool {
	if len(b) < 4 || b[3] != ' ' {
		return false
	}
	for _, m := range months {
		if string(b[:3]) == m {
			return true
		}
	}
	return false
}

// clockAt returns the length of "HH:MM:SS" (with an optional ".fraction")
// at the start of b, or 0.
func clockAt(b []byte) int {
	if len(b) < 8 || b[2] != ':' || b[5] != ':' {
		return 0
	}
	for _, i := range [...]int{0, 1, 3, 4, 6, 7} {
		if !isDigit(b[i]) {
			return 0
		}
	}
	n := 8
	if n+1 < len(b) && b[n] == '.' && isDigit(b[n+1]) {
		n = skipDigits(b, n+1)
	}
	return n
}

// kibanaTime matches Kibana Discover's time column as a table copy gives it:
// "Dec 4, 2024 @ 07:19:43.480", then a blank or tab.
func kibanaTime(b []byte) int {
	if !monthAt(b) {
		return 0
	}
	i := skipDigits(b, 4)
	if i == 4 || i-4 > 2 || !bytes.HasPrefix(b[i:], []byte(", ")) {
		return 0
	}
	j := skipDigits(b, i+2)
	if j-i-2 != 4 || !bytes.HasPrefix(b[j:], []byte(" @ ")) {
		return 0
	}
	n := clockAt(b[j+3:])
	if n == 0 {
		return 0
	}
	end := j + 3 + n
	if end < len(b) && b[end] != ' ' && b[end] != '\t' {
		return 0
	}
	return end
}

// journaldPrefix matches journalctl's short output "Dec 04 07:19:43 host
// unit[pid]: " (or "unit: ") and returns its length and the host.
func journaldPrefix(b []byte) (int, []byte) {
	if !monthAt(b) {
		return 0, nil
	}
	i := 4
	if i < len(b) && b[i] == ' ' {
		i++ // "Dec  4"
	}
	j := skipDigits(b, i)
	if j == i || j-i > 2 || j >= len(b) || b[j] != ' ' {
		return 0, nil
	}
	n := clockAt(b[j+1:])
	if n == 0 || j+1+n >= len(b) || b[j+1+n] != ' ' {
		return 0, nil
	}
	h := j + 2 + n
	sp := bytes.IndexByte(b[h:min(len(b), h+maxHostLabel)], ' ')
	if sp < 1 {
		return 0, nil
	}
	host := b[h : h+sp]
	u := h + sp + 1
	c := bytes.Index(b[u:min(len(b), u+maxRayPrefix)], []byte(": "))
	if c < 1 {
		return 0, nil
	}
	unit := b[u : u+c]
	if o := bytes.IndexByte(unit, '['); o >= 0 {
		if o == 0 || unit[len(unit)-1] != ']' || skipDigits(unit, o+1) != len(unit)-1 {
			return 0, nil
		}
	} else if bytes.ContainsAny(unit, " []") {
		return 0, nil
	}
	return u + c + 2, host
}
