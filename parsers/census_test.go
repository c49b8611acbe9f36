package parsers

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The census (testdata/nccl-formats/census.tsv) lists every INFO/WARN format
// string that carries a fact ncclwatch reads, as NCCL (v2.3.7-1 … v2.30.7-1),
// aws-ofi-nccl, nccl-rdma-sharp-plugins and nccl-fastsocket print it, with the
// first and last release that has it. TestCensus renders each format with
// realistic values, in every suffix variant its arguments allow, prefixes it
// as NCCL prints it, and checks the parser's reading. A census kind without a
// case below, or a format its case does not understand, fails the test.

// censusFormat is one row of census.tsv.
type censusFormat struct {
	ID, Source, Kind, Level, First, Last string
	Releases                             int
	Files                                []string
	Format                               string // the C literal's text, escapes as written
}

func loadCensus(t testing.TB) []censusFormat {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "nccl-formats", "census.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []censusFormat
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		c := strings.Split(line, "\t")
		if len(c) != 9 {
			t.Fatalf("census.tsv: %d columns in %q; want 9", len(c), line)
		}
		n, err := strconv.Atoi(c[6])
		if err != nil {
			t.Fatalf("census.tsv: releases %q: %v", c[6], err)
		}
		out = append(out, censusFormat{ID: c[0], Source: c[1], Kind: c[2], Level: c[3], First: c[4], Last: c[5],
			Releases: n, Files: strings.Split(c[7], ","), Format: c[8]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// cConv is one printf conversion of a C format string.
type cConv struct {
	verb  byte // d i u x X o s c f e g p
	sIdx  int  // index among the %s conversions, -1 for others
	index int  // index among all conversions
}

// renderC expands a C printf format. val returns the argument for each
// conversion given the text rendered so far. Length modifiers (l, ll, z, h)
// are dropped, %p prints 0x-hex as glibc does, %.*s prints the whole string.
func renderC(format string, val func(prev string, c cConv) any) (string, error) {
	var b strings.Builder
	f := unescapeC(format)
	nconv, ns := 0, 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			b.WriteByte('%')
			continue
		}
		spec := "%"
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			spec += string(f[i])
			i++
		}
		for i < len(f) && (f[i] >= '0' && f[i] <= '9') {
			spec += string(f[i])
			i++
		}
		star := false
		if i < len(f) && f[i] == '.' {
			i++
			if i < len(f) && f[i] == '*' {
				star = true
				i++
			} else {
				spec += "."
				for i < len(f) && f[i] >= '0' && f[i] <= '9' {
					spec += string(f[i])
					i++
				}
			}
		}
		for i < len(f) && strings.IndexByte("hlzjtLq", f[i]) >= 0 {
			i++
		}
		if i >= len(f) {
			return "", fmt.Errorf("format %q ends inside a conversion", format)
		}
		c := cConv{verb: f[i], sIdx: -1, index: nconv}
		nconv++
		if c.verb == 's' {
			c.sIdx = ns
			ns++
		}
		v := val(b.String(), c)
		switch c.verb {
		case 'd', 'i', 'u':
			fmt.Fprintf(&b, spec+"d", v)
		case 'x', 'X', 'o', 'e', 'f', 'g', 'c':
			fmt.Fprintf(&b, spec+string(c.verb), v)
		case 'p':
			fmt.Fprintf(&b, "%#x", v)
		case 's':
			if star {
				fmt.Fprintf(&b, "%s", v)
			} else {
				fmt.Fprintf(&b, spec+"s", v)
			}
		default:
			return "", fmt.Errorf("format %q: conversion %%%c not handled", format, c.verb)
		}
	}
	return b.String(), nil
}

func unescapeC(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		default: // \" \\ \'
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// Values the renderer puts in, and the checks read back.
const (
	cRank, cNRanks, cNNodes, cLocalRanks, cCudaDev = 3, 16, 2, 8, 3
	cBusFrom, cBusTo                               = 0x1b000, 0xdb000
	cCommID                                        = uint64(0x7e5a1b2c3d4e5f60)
	cPtr                                           = uint64(0x55d0c8a3e2a0)
)

// defaultValue picks an argument from the words before the conversion, the
// way NCCL's own comm and init lines label their numbers.
func defaultValue(prev string, c cConv) any {
	if c.verb == 'p' {
		return cPtr
	}
	has := func(s string) bool { return strings.HasSuffix(prev, s) }
	switch {
	case has("commId 0x"):
		return cCommID
	case has("busId "):
		return uint64(cBusFrom)
	case has("[Rank "):
		return cRank
	case has("nranks "), has("nRanks "), has("nranks="):
		return cNRanks
	case has("rank "):
		return cRank
	case has("nNodes "):
		return cNNodes
	case has("localRanks "):
		return cLocalRanks
	case has("localRank "):
		return cRank
	case has("cudaDev "), has("nvmlDev "):
		return cCudaDev
	case has("MNNVL "):
		return 0
	}
	switch c.verb {
	case 's':
		return "x"
	case 'f', 'e', 'g':
		return 0.12
	case 'c':
		return 'x'
	}
	return 1
}

// censusVariant is one rendering of a format and what Parse must read.
type censusVariant struct {
	name string
	val  func(prev string, c cConv) any // nil: defaultValue for every conversion
	want func(t *testing.T, ev *pipeline.Event)
}

// lines renders f with v's values and prefixes it as NCCL prints it.
func (v censusVariant) lines(t *testing.T, f censusFormat) []string {
	t.Helper()
	val := v.val
	if val == nil {
		val = defaultValue
	}
	msg, err := renderC(f.Format, val)
	if err != nil {
		t.Fatal(err)
	}
	return censusLines(f, msg)
}

// strs renders the %s conversions from a list (in order) and the others
// with defaultValue.
func strs(s ...string) func(string, cConv) any {
	return func(prev string, c cConv) any {
		if c.sIdx >= 0 && c.sIdx < len(s) {
			return s[c.sIdx]
		}
		return defaultValue(prev, c)
	}
}

// withInts overrides numbers by conversion index.
func withInts(base func(string, cConv) any, ints map[int]any) func(string, cConv) any {
	return func(prev string, c cConv) any {
		if v, ok := ints[c.index]; ok {
			return v
		}
		if base == nil {
			return defaultValue(prev, c)
		}
		return base(prev, c)
	}
}

type censusCase func(t *testing.T, f censusFormat) []censusVariant

// censusCases maps every census kind to its parser case.
var censusCases = map[string]censusCase{
	"version":          censusVersion,
	"network":          censusNetwork,
	"ib_devices":       censusIBDevices,
	"ib_nodevice":      only(pipeline.EventIBNoDevice),
	"ib_sideband":      only(pipeline.EventIBSideband),
	"socket_devices":   censusSocketDevices,
	"socket_threads":   only(pipeline.EventOther),
	"bootstrap":        censusBootstrap,
	"noverbs":          censusNoVerbs,
	"plugin_loaded":    censusPluginLoaded,
	"plugin_nondevice": censusSelected,
	"plugin_not_net":   only(pipeline.EventOther),
	"plugin_assigned":  censusAssigned,
	"plugin_failed":    censusPluginFailed,
	"plugin_absent":    only(pipeline.EventOther),
	"plugin_probe":     only(pipeline.EventOther),
	"connection":       censusConnection,
	"collnet":          censusCollNet,
	"collnet_off":      only(pipeline.EventOther),
	"ring_order":       censusRingOrder,
	"trees":            censusTrees,
	"nvls":             censusNVLS,
	"nvls_setup":       only(pipeline.EventOther),
	"connected":        censusConnected,
	"comm_nodes":       censusComm,
	"comm":             censusComm,
	"coll_trace":       censusCollTrace,
	"init_timings":     censusInitTimings,
	"env":              censusEnv,
	"gdr":              censusGDR,
	"gdr_plugin_off":   only(pipeline.EventOther),
	"channel_counts":   censusChannelCounts,
	"net_trace":        censusNetTrace,
}

// censusSelected: "Using non-device net plugin version N" (2.19–2.26) names
// no net, but says the one that loaded last is selected.
func censusSelected(t *testing.T, f censusFormat) []censusVariant {
	return []censusVariant{{name: "default", want: all(kind(pipeline.EventPluginLoaded),
		flag(pipeline.FlagAssigned, true), field("Name", name, ""))}}
}

// censusAssigned: "Assigned NET plugin X to comm" (2.27+).
func censusAssigned(t *testing.T, f censusFormat) []censusVariant {
	return []censusVariant{{name: "ib", val: strs("IB"), want: all(kind(pipeline.EventPluginLoaded),
		flag(pipeline.FlagAssigned, true), field("Name", name, "IB"))}}
}

func wantKind(k pipeline.EventKind) func(*testing.T, *pipeline.Event) {
	return func(t *testing.T, ev *pipeline.Event) {
		t.Helper()
		// WARN lines of a kind the parser does not interpret are EventWarn.
		if k == pipeline.EventOther && ev.IsWarn() {
			k = pipeline.EventWarn
		}
		if ev.Kind != k {
			t.Errorf("Kind = %v; want %v", ev.Kind, k)
		}
	}
}

// only is the case for kinds whose facts are the kind alone.
func only(k pipeline.EventKind) censusCase {
	return func(t *testing.T, f censusFormat) []censusVariant {
		return []censusVariant{{name: "default", want: wantKind(k)}}
	}
}

func censusVersion(t *testing.T, f censusFormat) []censusVariant {
	return []censusVariant{
		{name: "2.18.5", val: withInts(strs(""), map[int]any{0: 2, 1: 18, 2: 5, 4: 12, 5: 2}),
			want: all(kind(pipeline.EventVersion), field("Name", name, "2.18.5"))},
		{name: "2.30.7-suffix", val: withInts(strs("a"), map[int]any{0: 2, 1: 30, 2: 7, 4: 13, 5: 0}),
			want: all(kind(pipeline.EventVersion), field("Name", name, "2.30.7"))},
	}
}

func censusNetwork(t *testing.T, f censusFormat) []censusVariant {
	var vs []censusVariant
	for _, n := range []string{"IB", "Socket", "AWS Libfabric", "IBext_v8", "NCCL RDMA Plugin v8", "GPUDirectTCPX_v7", "FasTrak"} {
		vs = append(vs, censusVariant{name: n, val: strs(n), want: all(kind(pipeline.EventNetwork), field("Name", name, n))})
	}
	return vs
}

func censusIBDevices(t *testing.T, f censusFormat) []censusVariant {
	// "NET/IB : Using%s ; OOB %s:%s" (≤ 2.11) and "NET/IB : Using%s %s; OOB
	// %s:%s" (≥ 2.12, the second %s is " [RO]" or empty).
	if strings.HasPrefix(f.Format, "NET/IB: [%d] ") {
		// ≤ 2.3: one line per device, "NET/IB: [%d] %s:%d/%s " (trailing
		// space as printed).
		var vs []censusVariant
		for _, ll := range []string{"IB", "RoCE"} {
			vs = append(vs, censusVariant{name: ll, val: withInts(strs("mlx5_1", ll), map[int]any{0: 2, 2: 1}),
				want: all(kind(pipeline.EventIBDevices), field("Name", name, "IB"), field("Value", value, "[2] mlx5_1:1/"+ll))})
		}
		return vs
	}
	ro := strings.Contains(f.Format, "Using%s %s;")
	type dl struct{ list, want string }
	lists := []dl{
		{" [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE", "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE"},
		{" [0]mlx5_2:1/IB/SHARP", "[0]mlx5_2:1/IB/SHARP"},
	}
	var vs []censusVariant
	for _, l := range lists {
		if ro {
			vs = append(vs,
				censusVariant{name: "ro", val: strs(l.list, "[RO]", "ib0", "192.168.11.1<0>"),
					want: all(kind(pipeline.EventIBDevices), field("Value", value, l.want+" [RO]"), field("Iface", iface, "ib0"), field("IP", ip, "192.168.11.1"))},
				censusVariant{name: "no-ro", val: strs(l.list, "", "ib0", "192.168.11.1<0>"),
					want: all(kind(pipeline.EventIBDevices), field("Value", value, l.want), field("Iface", iface, "ib0"), field("IP", ip, "192.168.11.1"))})
		} else {
			vs = append(vs, censusVariant{name: "list", val: strs(l.list, "eth0", "10.0.0.4<0>"),
				want: all(kind(pipeline.EventIBDevices), field("Value", value, l.want), field("Iface", iface, "eth0"), field("IP", ip, "10.0.0.4"))})
		}
	}
	if ro {
		// After "No device found." 2.26 prints an empty list (corpus 107).
		vs = append(vs, censusVariant{name: "empty", val: strs("", "[RO]", "podnet1", "10.0.123.96<0>"),
			want: all(kind(pipeline.EventIBDevices), field("Value", value, "[RO]"), field("IP", ip, "10.0.123.96"))})
	}
	return vs
}

func censusSocketDevices(t *testing.T, f censusFormat) []censusVariant {
	n := "Socket"
	if strings.HasPrefix(f.Format, "NET/FastSocket") {
		n = "FastSocket"
	}
	return []censusVariant{
		{name: "one", val: strs(" [0]eth0:10.0.0.4<0>"),
			want: all(kind(pipeline.EventSocketDevices), field("Name", name, n), field("Iface", iface, "eth0"), field("IP", ip, "10.0.0.4"))},
		{name: "ipv6", val: strs(" [0]ens8:fe80::4001:aff:fe80:2%ens8<0> [1]veth0:10.1.0.2<0>"),
			want: all(kind(pipeline.EventSocketDevices), field("Name", name, n), field("Iface", iface, "ens8"), field("IP", ip, "fe80::4001:aff:fe80:2%ens8"))},
	}
}

func censusBootstrap(t *testing.T, f censusFormat) []censusVariant {
	switch {
	case strings.HasSuffix(f.Format, "Using %s:%d"):
		// ≥ 2.24 with NCCL_OOB_NET_ENABLE: a net device and port, no IP.
		return []censusVariant{{name: "oob-net", val: withInts(strs("mlx5_0"), map[int]any{1: 1}),
			want: all(kind(pipeline.EventBootstrap), field("IP", ip, ""), field("Iface", iface, ""), field("Name", name, "mlx5_0"))}}
	case strings.HasPrefix(f.Format, "NET : Using interface %s:%s"):
		return []censusVariant{{name: "iface", val: strs("enp0s31f6", "10.92.42.96<0>"),
			want: all(kind(pipeline.EventBootstrap), field("Iface", iface, "enp0s31f6"), field("IP", ip, "10.92.42.96"))}}
	}
	return []censusVariant{
		{name: "indexed", val: strs(" [0]eth0:10.38.10.4<0>"),
			want: all(kind(pipeline.EventBootstrap), field("Iface", iface, "eth0"), field("IP", ip, "10.38.10.4"))},
		{name: "single", val: strs(" podnet1:10.0.123.96<0>"),
			want: all(kind(pipeline.EventBootstrap), field("Iface", iface, "podnet1"), field("IP", ip, "10.0.123.96"))},
	}
}

func censusNoVerbs(t *testing.T, f censusFormat) []censusVariant {
	if strings.Contains(f.Format, "%s") {
		// 2.30: "Count not open %s" (sic) once per library tried; the last
		// one tried is libibverbs.so.1.
		return []censusVariant{
			{name: "last", val: strs("libibverbs.so.1"), want: kind(pipeline.EventNoVerbs)},
			{name: "first", val: strs("libibverbs.so"), want: kind(pipeline.EventOther)},
			{name: "env", val: strs("/opt/rdma/lib/libibverbs.so"), want: kind(pipeline.EventOther)},
		}
	}
	return []censusVariant{{name: "default", want: kind(pipeline.EventNoVerbs)}}
}

func censusPluginLoaded(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventPluginLoaded)
	switch {
	case strings.Contains(f.Format, "Loaded net plugin %s"):
		var vs []censusVariant
		for _, n := range []string{"AWS Libfabric", "Libfabric", "NCCL RDMA Plugin", "IBext_v8", "GPUDirectTCPX_v7"} {
			vs = append(vs, censusVariant{name: n, val: strs(n), want: all(k, field("Name", name, n))})
		}
		return vs
	case strings.HasPrefix(f.Format, "Initialized NET plugin %s"):
		return []censusVariant{
			{name: "ib", val: strs("IB"), want: all(k, field("Name", name, "IB"))},
			{name: "ofi", val: strs("Libfabric"), want: all(k, field("Name", name, "Libfabric"))},
		}
	case strings.HasPrefix(f.Format, "P2P plugin"):
		return []censusVariant{{name: "ibext", val: strs("IBext_v8"), want: all(k, field("Name", name, "IBext_v8"))}}
	case strings.HasPrefix(f.Format, "NET/FastSocket"):
		return []censusVariant{{name: "default", want: all(k, field("Name", name, "FastSocket"))}}
	case strings.HasPrefix(f.Format, "NET/OFI "):
		// aws-ofi-nccl: "Initializing aws-ofi-nccl 1.18.0", "Using aws-ofi-nccl
		// 1.6.0", "Selected Provider is efa (found 4 nics)". The name stays
		// as printed; the assembler maps "OFI" to "AWS Libfabric".
		if strings.HasSuffix(f.Format, "Initializing %s") || strings.HasSuffix(f.Format, "Using %s") {
			return []censusVariant{{name: "version", val: strs("aws-ofi-nccl 1.6.0"), want: all(k, field("Name", name, "OFI"))}}
		}
		return []censusVariant{
			{name: "efa", val: strs("efa", "efa"), want: all(k, field("Name", name, "OFI"))},
			{name: "verbs", val: strs("verbs;ofi_rxm", "mlx5"), want: all(k, field("Name", name, "OFI"))},
		}
	case strings.HasPrefix(f.Format, "Successfully loaded external"):
		return []censusVariant{{name: "path", val: strs("/opt/aws-ofi-nccl/lib/libnccl-net.so"), want: k}}
	}
	t.Errorf("plugin_loaded format %q has no case", f.Format)
	return nil
}

func censusPluginFailed(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventPluginFailed)
	switch {
	case f.Format == "Failed to initialize any NET plugin":
		return []censusVariant{{name: "default", want: kind(pipeline.EventWarn)}}
	case strings.HasPrefix(f.Format, "Failed to initialize NET plugin %s"):
		return []censusVariant{{name: "ib", val: strs("IB"), want: all(k, field("Name", name, "IB"))}}
	case strings.HasPrefix(f.Format, "%s/Plugin: %s: %s"):
		// ≥ 2.28: a library that exists but did not load.
		return []censusVariant{{name: "dep", val: strs("NET", "libnccl-net.so", "libfabric.so.1: cannot open shared object file: No such file or directory"), want: k}}
	case strings.Contains(f.Format, "returned %d : %s"):
		// The dlerror text decides: absent (ENOENT) is no failure.
		absent := "libnccl-net.so: cannot open shared object file: No such file or directory"
		broken := "/usr/lib/libnccl-net.so: undefined symbol: ncclNetPlugin_v6"
		return []censusVariant{
			{name: "absent", val: strs(absent, absent, "libnccl-net.so"), want: kind(pipeline.EventOther)},
			{name: "broken", val: strs(broken, broken, "libnccl-net.so"), want: k},
		}
	case strings.Contains(f.Format, "Plugin load (%s) returned"):
		return []censusVariant{
			{name: "absent", val: strs("libnccl-net.so", "libnccl-net.so: cannot open shared object file: No such file or directory"), want: kind(pipeline.EventOther)},
			{name: "broken", val: strs("libnccl-net.so", "undefined symbol: ncclNetPlugin_v6"), want: k},
		}
	case strings.Contains(f.Format, "Failed to find ncclNetPlugin symbol"):
		return []censusVariant{{name: "default", want: k}}
	}
	t.Errorf("plugin_failed format %q has no case", f.Format)
	return nil
}

// censusConnection renders "Channel/Ring … a[x] -> b[y] [send|receive] via
// TRANSPORT" in every suffix combination its %s slots allow.
func censusConnection(t *testing.T, f censusFormat) []censusVariant {
	via := strings.Index(f.Format, " via ")
	head, tail := f.Format[:via], f.Format[via+len(" via "):]
	bus := strings.Contains(head, "[%lx]") || strings.Contains(head, "[%x]")
	devs := strings.Contains(head, "[%")
	fromDev, toDev := cCudaDev, 5
	if bus {
		fromDev, toDev = cBusFrom, cBusTo
	}
	if !devs {
		fromDev, toDev = -1, -1
	}
	ints := func(prev string, c cConv) (any, bool) {
		if strings.Contains(prev, " via ") {
			return nil, false
		}
		switch {
		case c.index == 0:
			return 2, true // channel
		case strings.HasSuffix(prev, "/") && !strings.Contains(prev, " : "):
			return 1, true // connection set (p2p)
		case strings.HasSuffix(prev, "-> "):
			return 11, true
		case strings.HasSuffix(prev, "["):
			d := fromDev
			if strings.Contains(prev, "->") {
				d = toDev
			}
			if bus {
				return uint64(d), true
			}
			return d, true
		}
		return cRank, true // from rank
	}
	base := []func(*testing.T, *pipeline.Event){kind(pipeline.EventConnection), num("From", from, cRank), num("To", to, 11),
		num("FromDev", fdev, fromDev), num("ToDev", tdev, toDev), flag(pipeline.FlagBusID, bus),
		flag(pipeline.FlagSend, strings.Contains(head, "[send]")), flag(pipeline.FlagReceive, strings.Contains(head, "[receive]"))}
	mk := func(vname string, sv []string, extra ...func(*testing.T, *pipeline.Event)) censusVariant {
		return censusVariant{name: vname, val: func(prev string, c cConv) any {
			if v, ok := ints(prev, c); ok {
				return v
			}
			if c.sIdx >= 0 {
				if c.sIdx < len(sv) {
					return sv[c.sIdx]
				}
				return ""
			}
			switch {
			case strings.HasSuffix(prev, "("):
				return 9 // PXN proxy rank
			case strings.HasSuffix(prev, "indirect/"):
				return 4
			case strings.HasSuffix(prev, "["):
				if bus {
					return uint64(0x41000)
				}
				return 4
			}
			return 1 // net device
		}, want: all(append(append([]func(*testing.T, *pipeline.Event){}, base...), extra...)...)}
	}
	tr := func(want pipeline.Transport) func(*testing.T, *pipeline.Event) {
		return field("Transport", trans, want.String())
	}
	var vs []censusVariant
	switch {
	case strings.HasPrefix(tail, "NET/%s/%d"):
		rest := strings.TrimPrefix(strings.TrimPrefix(tail, "NET/%s/%d"), "(%d)")
		slots := strings.Count(rest, "%s")
		// What each trailing %s prints, by generation (transport/net.cc).
		var kinds []string
		switch {
		case strings.HasPrefix(f.Format, "Ring %02d : %d -> %d via"): // 2.3.7
			kinds = []string{"gdr", "gdcopy"}
		case slots == 1:
			kinds = []string{"gdr"}
		case slots == 2:
			kinds = []string{"gdr", "shared"}
		case slots == 3:
			kinds = []string{"gdr", "pci", "shared"}
		default:
			t.Errorf("NET connection %q: %d suffix slots", f.Format, slots)
			return nil
		}
		names := []string{"IB", "Socket", "AWS Libfabric", "IBext_v8", "NCCL RDMA Plugin v8", "gIB"}
		combos := []map[string]bool{{}, {"gdr": true}, {"shared": true}, {"gdr": true, "shared": true},
			{"gdr": true, "pci": true}, {"gdr": true, "pci": true, "shared": true}, {"gdr": true, "gdcopy": true}}
		text := map[string]string{"gdr": "/GDRDMA", "pci": "(PCI)", "shared": "/Shared", "gdcopy": "/GDCopy"}
		for ci, combo := range combos {
			avail := map[string]bool{}
			for _, k := range kinds {
				avail[k] = true
			}
			ok := true
			for k := range combo {
				ok = ok && avail[k]
			}
			if !ok {
				continue
			}
			n := names[ci%len(names)]
			sv := []string{n}
			label := n
			for _, k := range kinds {
				if combo[k] {
					sv = append(sv, text[k])
					label += text[k]
				} else {
					sv = append(sv, "")
				}
			}
			vs = append(vs, mk(label, sv, tr(pipeline.TransportNet), field("Name", name, n), num("NetDev", func(e *pipeline.Event) int { return e.NetDev }, 1),
				flag(pipeline.FlagGDR, combo["gdr"]), flag(pipeline.FlagShared, combo["shared"])))
		}
	case strings.HasPrefix(tail, "P2P/%s"):
		// ≥ 2.20: P2P/CUMEM or P2P/MNNVL, then "/read", then "/CE".
		vs = append(vs,
			mk("cumem", []string{"CUMEM", "", ""}, tr(pipeline.TransportP2PCUMEM)),
			mk("cumem-read-ce", []string{"CUMEM", "/read", "/CE"}, tr(pipeline.TransportP2PCUMEM)),
			mk("mnnvl", []string{"MNNVL", "/read", ""}, tr(pipeline.TransportP2PMNNVL)))
	case strings.HasPrefix(tail, "P2P/IPC"), strings.HasPrefix(tail, "P2P/CUMEM"):
		want := pipeline.TransportP2PIPC
		if strings.HasPrefix(tail, "P2P/CUMEM") {
			want = pipeline.TransportP2PCUMEM
		}
		vs = append(vs, mk("plain", nil, tr(want)), mk("read", []string{"/read", ""}, tr(want)), mk("read-ce", []string{"/read", "/CE"}, tr(want)))
	case strings.HasPrefix(tail, "P2P/direct pointer"), strings.HasPrefix(tail, "P2P/common device"):
		vs = append(vs, mk("plain", nil, tr(pipeline.TransportP2PDirect)), mk("ce", []string{"/CE"}, tr(pipeline.TransportP2PDirect)))
	case strings.HasPrefix(tail, "P2P/indirect/"):
		vs = append(vs, mk("plain", nil, tr(pipeline.TransportP2PIndirect)), mk("ce", []string{"/CE"}, tr(pipeline.TransportP2PIndirect)))
	case strings.HasPrefix(tail, "SHM/"), strings.HasPrefix(tail, "direct shared memory"):
		vs = append(vs, mk("direct", []string{"direct", "direct"}, tr(pipeline.TransportSHM)), mk("ce", []string{"CE", "direct"}, tr(pipeline.TransportSHM)))
	default:
		t.Errorf("connection format %q: transport has no case", f.Format)
	}
	return vs
}

func censusCollNet(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventCollNet)
	if strings.Contains(f.Format, "via COLLNET/") {
		// "CollNet 05/0 : 5 [receive] via COLLNET/SHARP/5/GDRDMA" (corpus 041).
		slots := strings.Count(f.Format[strings.Index(f.Format, "COLLNET/"):], "%s") - 1
		vs := []censusVariant{
			{name: "plain", val: strs("SHARP", "", ""), want: all(k, flag(pipeline.FlagGDR, false))},
			{name: "gdr", val: strs("SHARP", "/GDRDMA", ""), want: all(k, flag(pipeline.FlagGDR, true))},
		}
		if slots == 2 {
			vs = append(vs, censusVariant{name: "gdr-pci", val: strs("SHARP", "/GDRDMA", "(PCI)"), want: all(k, flag(pipeline.FlagGDR, true))})
		}
		return vs
	}
	if strings.Contains(f.Format, "initialized on %s") {
		// "SHARP rank 0/4 initialized on mlx5_4:1" (corpus 041).
		return []censusVariant{{name: "default", val: withInts(strs("mlx5_4:1"), map[int]any{0: 0, 1: 4}), want: k}}
	}
	return []censusVariant{{name: "default", val: strs("[0] 3->4->-1"), want: k}}
}

func censusRingOrder(t *testing.T, f censusFormat) []censusVariant {
	// A fragment: NCCL appends the rank list and prints it with INFO("%s").
	n := -1
	if strings.Contains(f.Format, "/%02d") {
		n = 4
	}
	return []censusVariant{{name: "ranks", val: withInts(nil, map[int]any{0: 2, 1: 4}),
		want: all(kind(pipeline.EventRingOrder), num("Channels", func(e *pipeline.Event) int { return e.Channels }, n), field("Value", value, "0   1   2   3"))}}
}

func censusTrees(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventTrees)
	switch {
	case f.Format == "Trees%s":
		return []censusVariant{
			{name: "2.10", val: strs(" [0] 2/-1/-1->3->-1 [1] -1/-1/-1->3->2"), want: all(k, num("Rank", rank, cRank))},
			{name: "2.5-updown", val: strs(" [0] 2/-1/-1->3->1|1->3->2/-1/-1"), want: all(k, num("Rank", rank, cRank))},
			{name: "2.4", val: strs(" [0] 2->3->-1/-1/-1"), want: all(k, num("Rank", rank, cRank))},
		}
	case strings.HasPrefix(f.Format, "Tree %d : "), strings.HasPrefix(f.Format, "Ring %02d : "):
		return []censusVariant{{name: "graph", val: withInts(nil, map[int]any{0: 0, 1: 2, 2: cRank, 3: 4, 4: -1, 5: -1}), want: all(k, num("Rank", rank, cRank))}}
	}
	t.Errorf("trees format %q has no case", f.Format)
	return nil
}

func censusNVLS(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventNVLS)
	if strings.HasPrefix(f.Format, "NVLS multicast support is %savailable") {
		return []censusVariant{
			{name: "available", val: strs(""), want: all(k, flag(pipeline.FlagEnabled, true))},
			{name: "not", val: strs("not "), want: all(k, flag(pipeline.FlagEnabled, false))},
		}
	}
	return []censusVariant{{name: "default", want: all(k, flag(pipeline.FlagEnabled, true))}}
}

func censusConnected(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventConnected)
	switch {
	case strings.Contains(f.Format, "GDR %d"):
		return []censusVariant{
			{name: "gdr1", val: withInts(nil, map[int]any{0: 0, 1: 1}), want: all(k, flag(pipeline.FlagRings, true), flag(pipeline.FlagGDR, true), flag(pipeline.FlagNoGDR, false))},
			{name: "gdr0", val: withInts(nil, map[int]any{0: 1, 1: 0}), want: all(k, flag(pipeline.FlagRings, true), flag(pipeline.FlagGDR, false), flag(pipeline.FlagNoGDR, true))},
		}
	case strings.HasPrefix(f.Format, "Connected all rings"):
		return []censusVariant{{name: "default", want: all(k, flag(pipeline.FlagRings, true), flag(pipeline.FlagGDR, false), flag(pipeline.FlagNoGDR, false))}}
	case strings.HasPrefix(f.Format, "Connected all trees"):
		return []censusVariant{{name: "default", want: all(k, flag(pipeline.FlagTreesDone, true))}}
	case strings.HasPrefix(f.Format, "Connected NVLS tree"):
		return []censusVariant{{name: "default", want: all(k, flag(pipeline.FlagNVLSTree, true))}}
	}
	t.Errorf("connected format %q has no case", f.Format)
	return nil
}

func censusComm(t *testing.T, f censusFormat) []censusVariant {
	fm := f.Format
	if !strings.Contains(fm, "comm %p") && !strings.HasPrefix(fm, "rank %d nranks %d") {
		// "nranks %d" (≤ 2.4) and bootstrapSplit without a comm pointer
		// (2.18–2.19) carry no communicator to key the facts on.
		return []censusVariant{{name: "default", want: kind(pipeline.EventOther)}}
	}
	k := pipeline.EventComm
	checks := []func(*testing.T, *pipeline.Event){num("Rank", rank, cRank)}
	if strings.Contains(fm, "nNodes %d") {
		k = pipeline.EventCommNodes
		checks = append(checks, num("NNodes", nn, cNNodes))
		if strings.Contains(fm, "localRanks %d") {
			checks = append(checks, num("LocalRanks", func(e *pipeline.Event) int { return e.LocalRanks }, cLocalRanks))
		}
	}
	if strings.Contains(strings.ToLower(fm), "nranks %d") {
		checks = append(checks, num("NRanks", nr, cNRanks))
	}
	if strings.Contains(fm, "comm %p") {
		checks = append(checks, field("CommPtr", func(e *pipeline.Event) string { return string(e.CommPtr) }, fmt.Sprintf("%#x", cPtr)))
	}
	if strings.Contains(fm, "cudaDev %d") {
		checks = append(checks, num("FromDev", fdev, cCudaDev))
	}
	if strings.Contains(fm, "commId 0x%llx") {
		checks = append(checks, field("CommID", cid, fmt.Sprintf("%#x", cCommID)))
	}
	checks = append(checks, flag(pipeline.FlagStart, strings.Contains(fm, "Init START")), flag(pipeline.FlagComplete, strings.Contains(fm, "Init COMPLETE")),
		flag(pipeline.FlagDestroy, strings.Contains(fm, "Destroy COMPLETE")))
	fn := "ncclCommInitRank"
	vs := []censusVariant{{name: "default", val: strs(fn), want: all(append([]func(*testing.T, *pipeline.Event){kind(k)}, checks...)...)}}
	if strings.HasPrefix(fm, "%s comm") {
		vs = append(vs, censusVariant{name: "config", val: strs("ncclCommInitRankConfig"), want: all(append([]func(*testing.T, *pipeline.Event){kind(k)}, checks...)...)},
			censusVariant{name: "split", val: strs("ncclCommSplit"), want: all(append([]func(*testing.T, *pipeline.Event){kind(k)}, checks...)...)})
	}
	if strings.HasSuffix(fm, "- %s COMPLETE") {
		// 2.22+: "Destroy" or "Abort".
		vs = []censusVariant{
			{name: "destroy", val: strs("Destroy"), want: all(kind(k), num("Rank", rank, cRank), flag(pipeline.FlagDestroy, true), flag(pipeline.FlagComplete, false))},
			{name: "abort", val: strs("Abort"), want: all(kind(k), num("Rank", rank, cRank), flag(pipeline.FlagDestroy, false), flag(pipeline.FlagComplete, false))},
		}
	}
	return vs
}

// censusCollTrace: the COLL trace of each collective call names its
// communicator and that communicator's size, "[nranks=%d]", but no rank.
func censusCollTrace(t *testing.T, f censusFormat) []censusVariant {
	want := all(kind(pipeline.EventComm), num("NRanks", nr, cNRanks), num("Rank", rank, -1),
		field("CommPtr", func(e *pipeline.Event) string { return string(e.CommPtr) }, fmt.Sprintf("%#x", cPtr)))
	if !strings.HasPrefix(f.Format, "%s: ") {
		return []censusVariant{{name: "default", want: want}}
	}
	var vs []censusVariant
	for _, op := range []string{"AllReduce", "ReduceScatter", "Send", "Recv", "AllToAll"} {
		vs = append(vs, censusVariant{name: op, val: strs(op), want: want})
	}
	return vs
}

func censusInitTimings(t *testing.T, f censusFormat) []censusVariant {
	return []censusVariant{{name: "default", val: strs("ncclCommInitRank"),
		want: all(kind(pipeline.EventInitTimings), num("Rank", rank, cRank), num("NRanks", nr, cNRanks))}}
}

func censusEnv(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventEnv)
	fm := f.Format
	named := !strings.HasPrefix(fm, "%s")
	varName := "NCCL_IB_DISABLE"
	if named {
		varName = fm[:strings.IndexByte(fm, ' ')]
	}
	last := strings.LastIndexByte(fm, '%')
	if last < 0 {
		// "NCCL_NET_MERGE_POLICY set by environment to RAIL" (2.30.7).
		return []censusVariant{{name: "literal", want: all(k, field("Name", name, varName), field("Value", value, fm[strings.LastIndexByte(fm, ' ')+1:]))}}
	}
	var val func(string, cConv) any
	want := "1"
	switch {
	case strings.HasPrefix(fm[last:], "%s") && strings.HasSuffix(fm, "%s."):
		// "NCCL_COLLNET_ENABLE set by environment to %s." (2.12–2.26): a
		// string printed with a period, so the value is a number.
		val = strs("1")
	case strings.HasPrefix(fm[last:], "%s"):
		want = "mlx5_0:1,mlx5_3:1"
		if named {
			val = strs(want)
		} else {
			varName = "NCCL_IB_HCA"
			val = strs(varName, want)
		}
	case named:
		val = withInts(nil, map[int]any{0: 1})
	default:
		val = withInts(strs(varName), map[int]any{1: 1})
	}
	return []censusVariant{{name: "default", val: val, want: all(k, field("Name", name, varName), field("Value", value, want))}}
}

func censusGDR(t *testing.T, f censusFormat) []censusVariant {
	k := kind(pipeline.EventGDR)
	fm := f.Format
	hca := strings.Contains(fm, "for HCA %d")
	switch {
	case strings.Contains(fm, "GPU Direct RDMA %s for HCA"):
		// ≥ 2.13: "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'".
		return []censusVariant{
			{name: "ib-enabled", val: strs("IB", "Enabled", "mlx5_0"), want: all(k, flag(pipeline.FlagEnabled, true), flag(pipeline.FlagHCA, true), field("Name", name, "mlx5_0"))},
			{name: "ib-disabled", val: strs("IB", "Disabled", "mlx5_0"), want: all(k, flag(pipeline.FlagEnabled, false), flag(pipeline.FlagHCA, true), field("Name", name, "mlx5_0"))},
			{name: "socket-disabled", val: strs("Socket", "Disabled", "eth0"), want: all(k, flag(pipeline.FlagEnabled, false), flag(pipeline.FlagHCA, true), field("Name", name, "eth0"))},
			{name: "plugin-enabled", val: strs("IBext_v8", "Enabled", "mlx5_2"), want: all(k, flag(pipeline.FlagEnabled, true), flag(pipeline.FlagHCA, true), field("Name", name, "mlx5_2"))},
		}
	case strings.Contains(fm, "GPU Direct RDMA %s"):
		t.Errorf("gdr format %q has no case", fm)
		return nil
	}
	enabled := strings.Contains(strings.ToLower(fm), "enabled")
	checks := []func(*testing.T, *pipeline.Event){k, flag(pipeline.FlagEnabled, enabled), flag(pipeline.FlagHCA, hca)}
	if hca && strings.Contains(fm, "'%s") {
		checks = append(checks, field("Name", name, "mlx5_0"))
	}
	sv := []string{"mlx5_0", "mlx5_0"}
	if strings.HasPrefix(fm, "NET/%s") {
		sv = []string{"IB", "mlx5_0"}
	}
	if strings.HasSuffix(fm, "for %s") {
		// 2.29: the GPU/HCA part is preformatted.
		sv = []string{"GPU 3 / HCA 0 (distance 4 <= 4), read 1 mode Default"}
	}
	return []censusVariant{{name: "default", val: strs(sv...), want: all(checks...)}}
}

func censusChannelCounts(t *testing.T, f censusFormat) []censusVariant {
	nvls := -1
	if strings.Contains(f.Format, "nvls channels") {
		nvls = 16
	}
	// 24 coll, (collnet 0), (nvls 16), 24 p2p, 2 per peer: by position.
	ints := map[int]any{0: 24}
	i := 1
	if strings.Contains(f.Format, "collnet channels") {
		ints[i] = 0
		i++
	}
	if nvls > 0 {
		ints[i] = 16
		i++
	}
	ints[i], ints[i+1] = 24, 2
	return []censusVariant{{name: "default", val: withInts(nil, ints),
		want: all(kind(pipeline.EventChannelCounts), num("Channels", func(e *pipeline.Event) int { return e.Channels }, 24),
			num("NVLSChannels", func(e *pipeline.Event) int { return e.NVLSChannels }, nvls))}}
}

func censusNetTrace(t *testing.T, f censusFormat) []censusVariant {
	return []censusVariant{
		{name: "net", val: withInts(strs("transport/net.cc", "sendProxyConnect"), map[int]any{1: 412}), want: kind(pipeline.EventNetTrace)},
		{name: "socket", val: withInts(strs("transport/net_socket.cc", "ncclNetSocketConnect"), map[int]any{1: 336}), want: kind(pipeline.EventNetTrace)},
		{name: "init", val: withInts(strs("init.cc", "ncclCommInitRankFunc"), map[int]any{1: 1358}), want: kind(pipeline.EventOther)},
	}
}

// censusLines prefixes a rendered message as NCCL prints it (src/debug.cc):
// INFO "host:pid:tid [dev] NCCL INFO msg"; WARN with the source location,
// "(func)" after it in 2.30, and the default "[%F %T] " timestamp that WARN
// lines carry since 2.26.
func censusLines(f censusFormat, msg string) []string {
	const hdr = "ip-172-31-0-11:4123:4190 [3] "
	switch f.Level {
	case "BANNER":
		return []string{msg}
	case "WARN":
		if f.Source == "aws-ofi-nccl" {
			return []string{hdr + "nccl_net_ofi_init:1354 NCCL WARN " + msg}
		}
		return []string{
			hdr + "transport/net_ib.cc:812 NCCL WARN " + msg,
			"[2026-07-28 11:09:08] " + hdr + "transport/net_ib.cc:812 NCCL WARN " + msg,
			"[2026-07-28 11:09:08] " + hdr + "plugin/net.cc:335 (ncclNetInit) NCCL WARN " + msg,
		}
	case "PART":
		return []string{hdr + "NCCL INFO " + msg + "   0   1   2   3"}
	}
	return []string{hdr + "NCCL INFO " + msg}
}

func TestCensus(t *testing.T) {
	rows := loadCensus(t)
	if len(rows) < 250 {
		t.Fatalf("census has %d formats; want the whole census (≥ 250)", len(rows))
	}
	var p NCCL
	var ev pipeline.Event
	lines := 0
	for _, f := range rows {
		t.Run(f.ID, func(t *testing.T) {
			c, ok := censusCases[f.Kind]
			if !ok {
				t.Fatalf("census format %s %q (kind %s, %s %s..%s) has no parser case", f.ID, f.Format, f.Kind, f.Source, f.First, f.Last)
			}
			vs := c(t, f)
			if len(vs) == 0 && !t.Failed() {
				t.Fatalf("case for kind %s gave no variant for %q", f.Kind, f.Format)
			}
			for _, v := range vs {
				for li, line := range v.lines(t, f) {
					lines++
					t.Run(fmt.Sprintf("%s/%d", v.name, li), func(t *testing.T) {
						for i := 0; i < 2; i++ { // twice: no state left over
							if !p.Parse([]byte(line), &ev) {
								t.Fatalf("Parse(%q) = false; want true", line)
							}
							v.want(t, &ev)
							if f.Level != "BANNER" {
								if string(ev.Host) != "ip-172-31-0-11" || string(ev.PID) != "4123" || ev.Dev != 3 {
									t.Errorf("Parse(%q) header = %q:%q [%d]; want ip-172-31-0-11:4123 [3]", line, ev.Host, ev.PID, ev.Dev)
								}
								if got, want := ev.IsWarn(), f.Level == "WARN"; got != want {
									t.Errorf("Parse(%q) IsWarn = %v; want %v", line, got, want)
								}
							}
							if !Candidate([]byte(line)) {
								t.Errorf("Candidate(%q) = false for an NCCL line", line)
							}
						}
						if t.Failed() {
							t.Logf("census %s (%s %s..%s): %q", f.ID, f.Source, f.First, f.Last, line)
						}
					})
				}
			}
		})
	}
	t.Logf("%d census formats, %d rendered lines", len(rows), lines)
}

// TestCensusReleases checks the census covers every NCCL release tag from
// v2.3.7-1 to v2.30.7-1: each release must print the core facts.
func TestCensusReleases(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "nccl-formats", "census-tags.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	rows := loadCensus(t)
	byRelease := map[string]map[string]bool{}
	for _, r := range rows {
		if r.Source != "nccl" {
			continue
		}
		// The tags of one id are the JSON array after its key.
		i := strings.Index(s, strconv.Quote(r.ID)+":")
		if i < 0 {
			t.Fatalf("census-tags.json has no %s", r.ID)
		}
		arr := s[i+len(r.ID)+3:]
		arr = arr[strings.IndexByte(arr, '[')+1 : strings.IndexByte(arr, ']')]
		n := 0
		for _, tag := range strings.Split(arr, ",") {
			tag = strings.Trim(strings.TrimSpace(tag), `"`)
			if tag == "" {
				continue
			}
			n++
			if byRelease[tag] == nil {
				byRelease[tag] = map[string]bool{}
			}
			byRelease[tag][r.Kind] = true
		}
		if n != r.Releases {
			t.Errorf("%s: %d tags in census-tags.json; census.tsv says %d", r.ID, n, r.Releases)
		}
	}
	if len(byRelease) != 61 {
		t.Errorf("census covers %d NCCL releases; want 61 (v2.3.7-1 … v2.30.7-1)", len(byRelease))
	}
	for tag, kinds := range byRelease {
		for _, k := range []string{"version", "connection", "comm", "env"} {
			if !kinds[k] {
				t.Errorf("release %s prints no %s format", tag, k)
			}
		}
		if !kinds["network"] && !kinds["ib_devices"] && !kinds["socket_devices"] {
			t.Errorf("release %s prints no network selection format", tag)
		}
	}
}

// TestCensusNetNames checks every network name NCCL and the plugins register
// (testdata/nccl-formats/net-names.tsv) reads back whole from "Using network"
// and from a connection line's "via NET/<name>/<dev>" token.
func TestCensusNetNames(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "nccl-formats", "net-names.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var p NCCL
	var ev pipeline.Event
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		c := strings.Split(line, "\t")
		if len(c) != 6 {
			t.Fatalf("net-names.tsv: %q has %d columns; want 6", line, len(c))
		}
		if c[1] != "net" {
			continue
		}
		nm := c[2]
		n++
		for _, in := range []string{
			"ip-172-31-0-11:4123:4190 [3] NCCL INFO Using network " + nm,
			"ip-172-31-0-11:4123:4190 [3] NCCL INFO Channel 00/0 : 3[3] -> 11[5] [send] via NET/" + nm + "/1/GDRDMA",
		} {
			if !p.Parse([]byte(in), &ev) {
				t.Errorf("Parse(%q) = false", in)
				continue
			}
			if string(ev.Name) != nm {
				t.Errorf("Parse(%q) Name = %q; want %q", in, ev.Name, nm)
			}
		}
	}
	if n < 10 {
		t.Fatalf("net-names.tsv lists %d net names; want at least 10", n)
	}
}

// TestCensusAllocs checks that parsing any census line allocates nothing.
func TestCensusAllocs(t *testing.T) {
	var lines [][]byte
	for _, f := range loadCensus(t) {
		c, ok := censusCases[f.Kind]
		if !ok {
			continue // TestCensus reports it
		}
		for _, v := range c(t, f) {
			for _, l := range v.lines(t, f) {
				lines = append(lines, []byte(l))
			}
		}
	}
	var p NCCL
	var ev pipeline.Event
	for _, l := range lines {
		if a := testing.AllocsPerRun(5, func() { p.Parse(l, &ev) }); a != 0 {
			t.Errorf("Parse(%q): %v allocations; want 0", l, a)
		}
	}
}

// matchC reports whether s could have been printed by the C format f: the
// literal parts appear in order, conversions match any text.
func matchC(f, s string) bool {
	f = unescapeC(f)
	var parts []string
	var lit strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			lit.WriteByte(f[i])
			continue
		}
		if i+1 < len(f) && f[i+1] == '%' {
			lit.WriteByte('%')
			i++
			continue
		}
		parts = append(parts, lit.String())
		lit.Reset()
		for i+1 < len(f) && strings.IndexByte("diuxXoscfegp", f[i+1]) < 0 {
			i++
		}
		i++
	}
	parts = append(parts, lit.String())
	return matchParts(parts, s, true)
}

func matchParts(parts []string, s string, first bool) bool {
	if len(parts) == 1 {
		if first {
			return s == parts[0]
		}
		return strings.HasSuffix(s, parts[0])
	}
	p := parts[0]
	if first {
		if !strings.HasPrefix(s, p) {
			return false
		}
		return matchParts(parts[1:], s[len(p):], false)
	}
	for i := 0; i+len(p) <= len(s); i++ {
		if s[i:i+len(p)] == p && matchParts(parts[1:], s[i+len(p):], false) {
			return true
		}
	}
	return false
}

// gluedHeader finds an NCCL header glued into a message ("localg183:1:2 [1]
// NCCL"): the tear takes the text before the host into it.
var gluedHeader = regexp.MustCompile(`[A-Za-z0-9._-]+:[0-9]+:[0-9]+ \[[0-9]+\] NCCL`)

// matchTornC reports whether s is what format f prints up to some point: f
// cut after one of its literal characters or conversions matches s.
func matchTornC(f, s string) bool {
	for k := len(f); k > 0; k-- {
		if f[k-1] == '%' || k < len(f) && f[k-1] != ' ' && f[k] != ' ' {
			continue // cut inside a conversion or a word: not a field's end
		}
		if matchC(f[:k], s) {
			return true
		}
	}
	return false
}

// closedPlugins print lines no public source has (NCCL-FORMATS.md §4f).
var closedPlugins = []string{"NET/FasTrak ", "NET/gIB ", "NET/GPUDirectTCPX ", "NET/TCPX"}

// TestCensusCoversCorpus checks the census from the other side: every real
// corpus line the parser reads a fact from was printed by a census format,
// unless it comes from a plugin whose source is not public.
func TestCensusCoversCorpus(t *testing.T) {
	rows := loadCensus(t)
	var p NCCL
	var ev pipeline.Event
	miss := map[string]int{}
	n, closed := 0, 0
	eachCorpusLine(t, func(line []byte) {
		rest, _ := StripPrefix(line)
		if !p.Parse(rest, &ev) {
			return
		}
		switch ev.Kind {
		case pipeline.EventOther, pipeline.EventWarn, pipeline.EventTestRank:
			return
		}
		s := string(rest)
		if i := strings.Index(s, "NCCL INFO "); i >= 0 {
			s = s[i+len("NCCL INFO "):]
		} else if i := strings.Index(s, "NCCL WARN "); i >= 0 {
			s = s[i+len("NCCL WARN "):]
		} else if !strings.HasPrefix(s, "NCCL version") {
			// A framework quoting the version ("NCCL error: …, NCCL version
			// 2.22.3", PyTorch) is not an NCCL format.
			return
		}
		// A message torn by another process's header glued into it (281:
		// "… nRanks 8 nNodes 1 localg183:161258:163308 [1] NCCL …") was
		// printed by a format it begins.
		torn := false
		if loc := gluedHeader.FindStringIndex(s); loc != nil && loc[0] > 0 {
			s, torn = s[:loc[0]], true
		}
		s = strings.TrimRight(s, " \r")
		n++
		for _, r := range rows {
			// s has its trailing spaces cut, so the format has too ("NET/IB:
			// [%d] %s:%d/%s ", 2.3.7).
			if fm := strings.TrimRight(r.Format, " "); matchC(fm, s) || (r.Level == "PART" && matchC(fm+"%s", s)) ||
				torn && matchTornC(fm, s) {
				return
			}
		}
		for _, c := range closedPlugins {
			if strings.HasPrefix(s, c) {
				closed++
				return
			}
		}
		miss[ev.Kind.String()+" | "+s]++
	})
	var keys []string
	for k := range miss {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("corpus fact line printed by no census format (%d×): %s", miss[k], k)
	}
	if n < 500 {
		t.Fatalf("only %d corpus fact lines; want at least 500", n)
	}
	t.Logf("%d corpus fact lines: %d match a census format, %d from closed-source plugins", n, n-closed-len(keys), closed)
}
