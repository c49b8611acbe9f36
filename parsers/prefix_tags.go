package parsers

import "bytes"

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
