package assemble

import (
	"bytes"
	"errors"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// parsedHCAs is parseHCAs of list, parsed again only when it is not the
// list last read. The slice returned is shared: read it, never change it.
func (a *Assembler) parsedHCAs(list []byte) []pipeline.HCA {
	if a.hcas == nil || a.hcaList != string(list) {
		a.hcaList = string(list)
		a.hcas = parseHCAs(a.hcaList)
	}
	return a.hcas
}

// parseHCAs reads the HCA list of "NET/IB : Using": "[0]mlx5_0:1/IB
// [1]mlx5_1:1/RoCE/SHARP [RO]", 2.23+ merged virtual NICs "[0]={[0]
// mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}" (corpus 251) and the ≤ 2.3 one-device
// lines "[0] mlx5_1:1/IB" (corpus 264).
func parseHCAs(list string) []pipeline.HCA {
	var out []pipeline.HCA
	for _, f := range strings.Fields(list) {
		for {
			g := strings.TrimLeft(f, "={")
			if strings.HasPrefix(g, "[") {
				if e := strings.IndexByte(g, ']'); e > 0 && isDigits(g[1:e]) {
					g = g[e+1:]
				}
			}
			if g == f {
				break
			}
			f = g
		}
		f = strings.TrimRight(f, ",}")
		if f == "" || f == "[RO]" || !strings.Contains(f, ":") {
			continue
		}
		parts := strings.Split(f, "/")
		dev, port, _ := strings.Cut(parts[0], ":")
		h := pipeline.HCA{Device: dev, Port: atoiOr(port, 0)}
		for _, s := range parts[1:] {
			switch s {
			case "IB", "RoCE":
				h.LinkLayer = s
			case "SHARP":
				h.SHARP = true
			}
		}
		out = append(out, h)
		if len(out) >= 64 {
			break
		}
	}
	if out == nil {
		out = []pipeline.HCA{}
	}
	return out
}

// parseRankList reads a ring-order rank list "0   7   6   5" (possibly cut
// with "..." at 128 characters).
func parseRankList(b []byte) []int {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		v, err := atoiStrict(f)
		if err != nil {
			break
		}
		out = append(out, v)
		if len(out) >= maxMembers {
			break
		}
	}
	return out
}

func atoiStrict(s string) (int, error) {
	if !isDigits(s) {
		return 0, errors.New("not a number")
	}
	return atoiOr(s, 0), nil
}

func atoiOr(s string, def int) int {
	if !isDigits(s) || len(s) > 9 {
		return def
	}
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validIP rejects addresses mangled in a paste ("10.10.10..2", corpus 064)
// or redacted ("X.X.X.X", corpus 010) so that they do not split a host.
func validIP(ip []byte) bool {
	if len(ip) == 0 {
		return false
	}
	if bytes.IndexByte(ip, ':') >= 0 {
		return true // IPv6
	}
	octets, n := 0, 0
	for _, c := range ip {
		switch {
		case c == '.':
			if n == 0 {
				return false
			}
			octets, n = octets+1, 0
		case c >= '0' && c <= '9':
			n++
		default:
			return false
		}
	}
	return n > 0 && octets == 3
}

func isLoopback(ip []byte) bool {
	s := string(ip)
	return strings.HasPrefix(s, "127.") || s == "::1"
}

// looksLikeIP reports whether b is a dotted IPv4 address (launcher labels
// such as pdsh "10.3.35.83: " and Ray "ip=10.52.3.7").
func looksLikeIP(b []byte) bool {
	dots := 0
	for _, c := range b {
		switch {
		case c == '.':
			dots++
		case c < '0' || c > '9':
			return false
		}
	}
	return dots == 3
}

// hpcxPlugin reports whether name is the HPC-X RDMA plugin
// (nccl-rdma-sharp-plugins), which prints NET/IB device lines of its own.
func hpcxPlugin(name string) bool {
	return name == "IBext" || strings.HasPrefix(name, "NCCL RDMA Plugin")
}
