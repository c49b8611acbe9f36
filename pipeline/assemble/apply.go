package assemble

import (
	"slices"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// addCand records that process p showed network name initialized; a later
// candidate of the same name moves to the end (the last one wins).
func (p *proc) addCand(name, kind string) {
	p.dropCand(name)
	if len(p.netCands) < 16 {
		p.netCands = append(p.netCands, netCand{name, kind})
	}
}

// dropCand cancels a candidate: the plugin failed or found no device.
func (p *proc) dropCand(name string) {
	p.netCands = slices.DeleteFunc(p.netCands, func(c netCand) bool { return c.name == name })
}

// apply folds one event into a process and its communicators.
func (a *Assembler) apply(j *jobState, p *proc, ev *pipeline.Event) {
	if ev.IsWarn() {
		p.warns++
		if len(p.warnMsgs) < a.cfg.MaxWarnings {
			p.warnMsgs = append(p.warnMsgs, string(ev.Value))
		}
	}
	if ev.Kind == pipeline.EventTestRank {
		testRank(j, p, ev)
		return
	}
	p.linePrefix(ev)
	switch ev.Kind {
	case pipeline.EventVersion:
		v := string(ev.Name)
		j.addVersion(v)
		if !slices.Contains(p.versions, v) {
			p.versions = append(p.versions, v)
		}
	case pipeline.EventNetwork, pipeline.EventIBDevices, pipeline.EventIBNoDevice, pipeline.EventIBSideband,
		pipeline.EventSocketDevices, pipeline.EventNoVerbs, pipeline.EventPluginLoaded, pipeline.EventPluginFailed,
		pipeline.EventBootstrap:
		a.netSelection(p, ev)
	case pipeline.EventConnection:
		a.connection(p, ev)
	case pipeline.EventComm, pipeline.EventCommNodes, pipeline.EventInitTimings:
		a.commLine(j, p, ev)
	case pipeline.EventEnv:
		if p.env == nil {
			p.env = make(map[string]string)
		}
		if len(p.env) < maxSmall {
			p.env[string(ev.Name)] = string(ev.Value)
		}
	case pipeline.EventRingOrder, pipeline.EventTrees, pipeline.EventConnected, pipeline.EventNVLS,
		pipeline.EventCollNet, pipeline.EventGDR, pipeline.EventNetTrace, pipeline.EventChannelCounts:
		topology(j, p, ev)
	}
}

// testRank folds a row of the nccl-tests device table. The table is
// printed by one process about all ranks: its launcher prefix says
// nothing about the rank listed.
func testRank(j *jobState, p *proc, ev *pipeline.Event) {
	if ev.Rank >= 0 && ev.Rank < maxMembers {
		if j.test.hosts == nil {
			j.test.hosts = make(map[int]string)
		}
		j.test.hosts[ev.Rank] = string(ev.Host)
	}
	if ev.FromDev >= 0 && ev.FromDev < 64 {
		p.devs |= 1 << ev.FromDev
	}
	p.hostRank(ev.Rank, ev.FromDev)
}

// linePrefix folds what the line's header and launcher prefix say about
// the process: its device, the rank the launcher gave it, and the
// launcher's host label.
func (p *proc) linePrefix(ev *pipeline.Event) {
	if ev.Dev >= 0 && ev.Dev < 64 {
		p.devs |= 1 << ev.Dev
	}
	if ev.LauncherRank >= 0 && ev.Dev >= 0 {
		p.hostPrefixRank(ev.LauncherRank, ev.Dev)
	}
	if len(ev.LauncherHost) > 0 && p.launcherHost == "" {
		p.launcherHost = string(ev.LauncherHost)
		if looksLikeIP(ev.LauncherHost) {
			p.launcherIP = p.launcherHost
		}
	}
}

// netSelection folds the events that show which network a process
// initialized, selected or cancelled, and the interfaces it bound.
func (a *Assembler) netSelection(p *proc, ev *pipeline.Event) {
	switch ev.Kind {
	case pipeline.EventNetwork:
		p.usingNet = pipeline.NormalizeNetwork(string(ev.Name))
	case pipeline.EventIBDevices:
		a.ibDeviceList(p, ev)
	case pipeline.EventIBNoDevice:
		p.ibNoDevice = true
		p.dropCand("IB")
		if hpcxPlugin(p.loadedPlugin) {
			p.dropCand(p.loadedPlugin)
			p.loadedPlugin = ""
		}
	case pipeline.EventIBSideband:
		p.sideband = true
	case pipeline.EventSocketDevices:
		name := pipeline.NormalizeNetwork(string(ev.Name))
		if name == "Socket" {
			// Not a candidate on its own: 2.4 prints it on every rank
			// before IB (corpus README traps).
			p.socketName = name
		} else {
			p.addCand(name, KindDeviceList)
		}
		p.addIface(ev.Iface, ev.IP)
	case pipeline.EventNoVerbs:
		p.noVerbs = true
	case pipeline.EventPluginLoaded:
		p.pluginLoaded(ev)
	case pipeline.EventPluginFailed:
		p.pluginFailed = true
		if len(ev.Name) > 0 {
			name := pipeline.NormalizeNetwork(string(ev.Name))
			p.dropCand(name)
			if p.loadedPlugin == name {
				p.loadedPlugin = ""
			}
			if !slices.Contains(p.failedPlugins, name) && len(p.failedPlugins) < 8 {
				p.failedPlugins = append(p.failedPlugins, name)
			}
		}
	case pipeline.EventBootstrap:
		p.addIface(ev.Iface, ev.IP)
	}
}

// ibDeviceList folds a "NET/IB : Using" device list: its HCAs make IB (or
// the HPC-X plugin that printed it) a candidate; an empty one cancels it.
func (a *Assembler) ibDeviceList(p *proc, ev *pipeline.Event) {
	hcas := a.parsedHCAs(ev.Value)
	if len(hcas) == 0 {
		// "NET/IB : Using [RO]; OOB eth0…": IB found no device
		// (NCCL then prints Failed to initialize NET plugin IB).
		p.ibEmpty = true
		p.dropCand("IB")
		if hpcxPlugin(p.loadedPlugin) {
			p.dropCand(p.loadedPlugin)
			p.loadedPlugin = ""
		}
	} else {
		p.ibDevices = true
		for _, h := range hcas {
			if len(p.hcas) < 64 && !slices.Contains(p.hcas, h) {
				p.hcas = append(p.hcas, h)
			}
		}
		// An IB list printed after the HPC-X plugin loaded is that
		// plugin's (it prints NET/IB lines of its own).
		if hpcxPlugin(p.loadedPlugin) {
			p.addCand(p.loadedPlugin, KindPluginDeviceList)
		} else {
			p.addCand("IB", KindDeviceList)
		}
	}
	p.addIface(ev.Iface, ev.IP)
	if p.oobIface == "" && len(ev.Iface) > 0 {
		p.oobIface = string(ev.Iface)
	}
}

// pluginLoaded folds a net plugin that loaded, initialized or was
// assigned to a communicator.
func (p *proc) pluginLoaded(ev *pipeline.Event) {
	if len(ev.Name) == 0 {
		if ev.Flags&pipeline.FlagAssigned != 0 && p.loadedPlugin != "" {
			// "Using non-device net plugin": the net selected is the
			// plugin that loaded and was not cancelled.
			p.addCand(p.loadedPlugin, KindPluginSelected)
		}
		return
	}
	name := pipeline.NormalizeNetwork(string(ev.Name))
	switch {
	case ev.Flags&pipeline.FlagAssigned != 0:
		p.assigned = name
	case ev.Flags&pipeline.FlagInitOK != 0:
		p.addCand(name, KindPluginInitialized)
	default:
		p.loadedPlugin = name
	}
	if name != "IB" && name != "Socket" {
		p.plugin = name
	}
}

// topology folds the events about rings, trees, NVLS, CollNet, GDR and
// channel counts.
func topology(j *jobState, p *proc, ev *pipeline.Event) {
	switch ev.Kind {
	case pipeline.EventRingOrder:
		p.hostRank(0, -1)
		if ev.Channels > p.channels {
			p.channels = ev.Channels
		}
		if members := parseRankList(ev.Value); len(members) > len(j.ringMembers) {
			j.ringMembers = members
		}
	case pipeline.EventTrees:
		if ev.Rank >= 0 {
			p.hostRank(ev.Rank, -1)
		}
	case pipeline.EventConnected:
		if ev.Flags&pipeline.FlagRings != 0 {
			p.rings = true
		}
		if ev.Flags&pipeline.FlagTreesDone != 0 {
			p.trees = true
		}
		if ev.Flags&pipeline.FlagNVLSTree != 0 {
			p.nvls = true
		}
		if ev.Flags&pipeline.FlagGDR != 0 {
			p.gdr.flag1++
		}
		if ev.Flags&pipeline.FlagNoGDR != 0 {
			p.gdr.flag0++
		}
	case pipeline.EventNVLS:
		if ev.Flags&pipeline.FlagNVLSTree != 0 {
			p.nvls = true
		}
	case pipeline.EventCollNet:
		p.collnet = true
		if ev.Flags&pipeline.FlagGDR != 0 {
			p.gdr.collnet++
		}
	case pipeline.EventGDR:
		if ev.Flags&pipeline.FlagEnabled != 0 {
			p.gdr.capEnabled++
		} else {
			p.gdr.capDisabled++
		}
	case pipeline.EventNetTrace:
		p.netTrace = true
	case pipeline.EventChannelCounts:
		if ev.NVLSChannels > 0 {
			p.nvls = true
		}
		if ev.Channels > p.channels {
			p.channels = ev.Channels
		}
	}
}

func (a *Assembler) connection(p *proc, ev *pipeline.Event) {
	// The process printing the line owns the sending end, except for
	// [receive] lines where it owns the receiving end (transport/net.cc).
	mine, peer := rankRef{ev.From, ev.FromDev, false}, rankRef{ev.To, ev.ToDev, false}
	if ev.Flags&pipeline.FlagReceive != 0 {
		mine, peer = peer, mine
	}
	bus := ev.Flags&pipeline.FlagBusID != 0
	mine.bus, peer.bus = bus, bus
	if mine.rank >= 0 {
		if bus {
			if p.busRanks == nil {
				p.busRanks = make(map[int]int)
			}
			if len(p.busRanks) < maxMembers {
				p.busRanks[mine.rank] = mine.dev
			}
			p.hostRank(mine.rank, -1)
		} else {
			p.hostRank(mine.rank, mine.dev)
		}
	}
	switch ev.Transport {
	case pipeline.TransportNet:
		p.netConn = true
		if name := pipeline.NormalizeNetwork(string(ev.Name)); !slices.Contains(p.netChan, name) && len(p.netChan) < 8 {
			p.netChan = append(p.netChan, name)
		}
		gdr := ev.Flags&pipeline.FlagGDR != 0
		if gdr {
			p.gdr.conn++
		} else {
			p.gdr.connPlain++
		}
		switch {
		case ev.Flags&pipeline.FlagSend != 0 && gdr:
			p.gdr.send++
		case ev.Flags&pipeline.FlagSend != 0:
			p.gdr.sendPlain++
		case ev.Flags&pipeline.FlagReceive != 0 && gdr:
			p.gdr.recv++
		case ev.Flags&pipeline.FlagReceive != 0:
			p.gdr.recvPlain++
		}
		if peer.rank >= 0 && peer.dev >= 0 && len(p.netPeers) < maxSmall && !slices.Contains(p.netPeers, peer) {
			p.netPeers = append(p.netPeers, peer)
		}
	case pipeline.TransportCollNet:
		p.collnet = true
		if ev.Flags&pipeline.FlagGDR != 0 {
			p.gdr.collnet++
		}
	case pipeline.TransportUnknown, pipeline.TransportP2PMNNVL:
		// P2P/MNNVL (2.20+) joins GPUs of a multi-node NVLink domain, which
		// may be on other nodes: it is no intra-node evidence, so it is kept
		// out of intra as it was while the parser called it unknown.
	default:
		p.intra |= 1 << ev.Transport
		if peer.rank >= 0 && peer.dev >= 0 && len(p.intraPeers) < maxSmall && !slices.Contains(p.intraPeers, peer) {
			p.intraPeers = append(p.intraPeers, peer)
		}
	}
}

func (p *proc) addIface(iface, ip []byte) {
	if len(iface) == 0 || !validIP(ip) {
		return
	}
	if isLoopback(ip) {
		p.loopback = true
	}
	if p.ifaceIP == nil {
		p.ifaceIP = make(map[string]string)
	}
	if _, ok := p.ifaceIP[string(iface)]; !ok && len(p.ifaceIP) < 16 {
		p.ifaceIP[string(iface)] = string(ip)
	}
}
