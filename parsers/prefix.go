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

// trimBlank removes leading spaces and tabs.
func trimBlank(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
