package parsers

import (
	"bytes"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

func parseVersion(msg []byte, ev *pipeline.Event) bool {
	// msg starts with "version ".
	v := msg[len("version "):]
	end := 0
	for end < len(v) && (isDigit(v[end]) || v[end] == '.') {
		end++
	}
	if end == 0 {
		return false
	}
	ev.Kind = pipeline.EventVersion
	ev.Name = v[:end]
	return true
}

// parseEnv reads "NCCL_X set by environment to V." and "NCCL_X set to V".
// Integer parameters end with a period, string ones do not (NCCL-FORMATS §9).
func parseEnv(msg []byte, ev *pipeline.Event) bool {
	sp := bytes.IndexByte(msg, ' ')
	if sp < 0 {
		return false
	}
	rest := msg[sp:]
	var v []byte
	switch {
	case hasPrefix(rest, " set by environment to "):
		v = rest[len(" set by environment to "):]
	case hasPrefix(rest, " set to "):
		v = rest[len(" set to "):]
	case hasPrefix(rest, " set from environment to "):
		// 2.6.4's wording for string parameters.
		v = rest[len(" set from environment to "):]
	default:
		return false
	}
	v = trimSpace(v)
	if n := len(v); n > 1 && v[n-1] == '.' && isNumber(v[:n-1]) {
		v = v[:n-1]
	}
	ev.Kind = pipeline.EventEnv
	ev.Name = msg[:sp]
	ev.Value = v
	return true
}

// parseNetIB reads the text after "NET/IB :".
func parseNetIB(rest []byte, ev *pipeline.Event) bool {
	rest = trimSpace(rest)
	switch {
	case hasPrefix(rest, "No device found"), hasPrefix(rest, "call to devices() returned 0"):
		ev.Kind = pipeline.EventIBNoDevice
		return true
	case hasPrefix(rest, "Using"):
		if bytes.Contains(rest, tokSideband) {
			// ≤ 2.3: "NET/IB : Using interface enp3s0 for sideband communication"
			// names the bootstrap NIC; it is not IB use (corpus README traps).
			ev.Kind = pipeline.EventIBSideband
			return true
		}
		ev.Kind = pipeline.EventIBDevices
		list := rest[len("Using"):]
		if i := bytes.Index(list, tokOOB); i >= 0 {
			parseIfaceIP(list[i+len(tokOOB):], ev)
			list = list[:i]
		}
		list = bytes.TrimRight(trimSpace(list), ";")
		ev.Value = trimSpace(list)
		ev.Name = nameIB
		return true
	case hasPrefix(rest, "GPU Direct RDMA "):
		parseGDR(rest, ev)
		return true
	case len(rest) > 3 && rest[0] == '[' && isDigit(rest[1]):
		// ≤ 2.3 prints one line per device it found, as the ≥ 2.4 list does
		// in one: "NET/IB: [0] mlx5_1:1/IB" (corpus 264).
		if e := bytes.IndexByte(rest, ']'); e > 1 && isNumber(rest[1:e]) && bytes.IndexByte(rest[e:], ':') > 0 {
			ev.Kind = pipeline.EventIBDevices
			ev.Value = rest
			ev.Name = nameIB
			return true
		}
	}
	return false
}

// parseNetOther reads NET/<name> lines other than NET/IB and NET/Plugin:
// sockets, OFI, gIB, FastSocket, GPUDirectTCPX, FasTrak.
func parseNetOther(rest []byte, ev *pipeline.Event) bool {
	// Name up to " :", ":" or " ".
	end := 0
	for end < len(rest) && rest[end] != ' ' && rest[end] != ':' {
		end++
	}
	name := rest[:end]
	body := trimSpace(bytes.TrimLeft(rest[end:], " :"))
	switch {
	case bytes.Contains(body, tokGDREnable) || bytes.Contains(body, tokGDRDisabl):
		parseGDR(body, ev)
		return true
	case hasPrefix(body, "Using [") || (hasPrefix(body, "Using ") && bytes.IndexByte(body, '<') > 0 && !bytes.Contains(body, []byte("threads"))):
		// NET/Socket : Using [0]eth0:10.0.0.1<0> ; NET/FastSocket : Using [0]ens8:…
		ev.Kind = pipeline.EventSocketDevices
		ev.Name = name
		parseIfaceIP(body[len("Using "):], ev)
		return true
	case hasPrefix(body, "Initializing") || hasPrefix(body, "plugin initialized") || bytes.Contains(body, []byte("Initializing network ")),
		bytes.Equal(name, []byte("OFI")) && (hasPrefix(body, "Selected Provider is ") || hasPrefix(body, "Selected provider is ") || hasPrefix(body, "Using aws-ofi-nccl")):
		// aws-ofi-nccl also says it loaded with "Selected Provider is
		// efa" (v0.9–v1.13), "Selected provider is efa, fabric is efa"
		// (v1.14+) and "Using aws-ofi-nccl 1.6.0" (v1.1.4–v1.7.0). Only
		// "plugin initialized" says init completed; the others load a
		// plugin that may still be rejected (corpus 247, 250).
		// NET/gIB : Initializing gIB v1.0.6 ; NET/FastSocket plugin initialized ;
		// NET/FasTrak <ts>: Initializing network FasTrak (corpus 047, 034, 052).
		// The name is kept as printed ("OFI" for aws-ofi-nccl, which the
		// assembler maps to "AWS Libfabric"); a constant here would allocate
		// and would not alias the line.
		ev.Kind = pipeline.EventPluginLoaded
		if hasPrefix(body, "plugin initialized") {
			ev.Flags |= pipeline.FlagInitOK
		}
		ev.Name = name
		return true
	}
	return false
}

// parsePlugin reads NET/Plugin lines. A loaded plugin is not necessarily the
// one used (2.27.5 loads aws-ofi-nccl, then falls back to internal IB,
// corpus 068–069); the assembler decides from "Using network".
func parsePlugin(msg []byte, ev *pipeline.Event) {
	switch {
	case bytes.Contains(msg, []byte("Loaded net plugin ")):
		ev.Kind = pipeline.EventPluginLoaded
		n := msg[bytes.Index(msg, []byte("Loaded net plugin "))+len("Loaded net plugin "):]
		if i := bytes.Index(n, []byte(" (v")); i >= 0 {
			n = n[:i]
		}
		ev.Name = trimSpace(n)
	case bytes.Contains(msg, []byte("Failed to find ncclNetPlugin symbol")),
		bytes.Contains(msg, []byte("returned")) && !bytes.Contains(msg, []byte("cannot open shared object")):
		// A plugin was found and rejected (2.19.3, corpus 058), or failed to
		// load for another reason than being absent.
		ev.Kind = pipeline.EventPluginFailed
	case pluginLibError(msg):
		// ≥ 2.28: "NET/Plugin: libnccl-net.so: <dlerror>" when the library
		// exists but does not load (absent libraries are listed as "Could not
		// find: …" instead).
		ev.Kind = pipeline.EventPluginFailed
	default:
		ev.Kind = pipeline.EventOther
	}
}

// pluginLibError reports whether msg is "NET/Plugin: <lib>.so…: <error>".
func pluginLibError(msg []byte) bool {
	rest := msg[len("NET/Plugin"):]
	if !hasPrefix(rest, ": ") {
		return false
	}
	rest = rest[2:]
	c := bytes.Index(rest, []byte(": "))
	if c <= 0 {
		return false
	}
	lib := rest[:c]
	return bytes.IndexByte(lib, ' ') < 0 && bytes.Contains(lib, []byte(".so"))
}

// parseGDR reads "GPU Direct RDMA Enabled|Disabled for HCA n 'dev'" and the
// per-GPU "… for GPU 81000 / HCA 1 (distance 6 <= 7), read 0" forms.
func parseGDR(msg []byte, ev *pipeline.Event) {
	ev.Kind = pipeline.EventGDR
	if bytes.Contains(msg, tokGDREnable) || bytes.Contains(msg, []byte(") enabled for ")) {
		// nccl-rdma-sharp-plugins: "GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0".
		ev.Flags |= pipeline.FlagEnabled
	}
	if i := bytes.Index(msg, []byte(" for HCA ")); i >= 0 {
		ev.Flags |= pipeline.FlagHCA
		ev.NetDev = leadingInt(msg[i+len(" for HCA "):])
		if q := bytes.IndexByte(msg[i:], '\''); q >= 0 {
			n := msg[i+q+1:]
			if e := bytes.IndexByte(n, '\''); e >= 0 {
				ev.Name = n[:e]
			} else {
				// The sharp plugin's format lacks the closing quote.
				ev.Name = n
			}
		}
	}
}

// parseIfaceIP reads the first "[0]eth0:10.0.0.1<0>" or "eth0:10.0.0.1<0>"
// entry of an interface list. IPv6 addresses keep their colons.
func parseIfaceIP(b []byte, ev *pipeline.Event) {
	b = trimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		if i := bytes.IndexByte(b, ']'); i >= 0 {
			b = b[i+1:]
		}
	}
	c := bytes.IndexByte(b, ':')
	if c <= 0 {
		return
	}
	ev.Iface = b[:c]
	ip := b[c+1:]
	if e := indexEither(ip, '<', ' '); e >= 0 {
		ip = ip[:e]
	}
	ev.IP = ip
}

// parseNetPath reads "<name>/<dev>[/GDRDMA][/Shared][(PCI)]" where name may
// hold spaces ("AWS Libfabric").
func parseNetPath(p []byte, ev *pipeline.Event) {
	for i := 0; i+1 < len(p); i++ {
		if p[i] == '/' && isDigit(p[i+1]) {
			ev.Name = p[:i]
			ev.NetDev = leadingInt(p[i+1:])
			suffix := p[i+1:]
			if bytes.Contains(suffix, []byte("/GDRDMA")) {
				ev.Flags |= pipeline.FlagGDR
			}
			if bytes.Contains(suffix, []byte("/Shared")) {
				ev.Flags |= pipeline.FlagShared
			}
			return
		}
	}
	ev.Name = p
}
