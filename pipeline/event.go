package pipeline

// EventKind says what an NCCL line reported. The catalogue with the NCCL
// versions that print each form is testdata/NCCL-FORMATS.md.
type EventKind uint8

// The kinds of NCCL line that ncclwatch interprets.
const (
	EventOther         EventKind = iota // an NCCL line ncclwatch does not interpret
	EventVersion                        // NCCL version 2.18.3+cuda12.2 (Name holds "2.18.3")
	EventNetwork                        // Using network IB / Using internal Network Socket (Name)
	EventIBDevices                      // NET/IB : Using [0]mlx5_0:1/IB ... ; OOB eth0:10.0.0.1<0> (Value: device list, Iface, IP)
	EventIBNoDevice                     // NET/IB : No device found. / Net/IB: call to devices() returned 0 devices.
	EventIBSideband                     // NET/IB : Using interface X for sideband communication (≤ 2.3, not IB use)
	EventSocketDevices                  // NET/Socket : Using [0]eth0:10.0.0.1<0> (Name: "Socket" or a plugin such as "FastSocket")
	EventNoVerbs                        // Failed to open libibverbs.so[.1]
	EventPluginLoaded                   // a net plugin loaded or initialised (Name: the plugin's network name where printed)
	EventPluginFailed                   // a net plugin was found but failed or was rejected
	EventBootstrap                      // Bootstrap : Using eth0:10.0.0.1<0> / NET : Using interface (Iface, IP)
	EventConnection                     // Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
	EventRingOrder                      // Channel 00/02 :    0   1   2 (Value: the rank list; Channels: the channel count)
	EventTrees                          // Trees [0] 1/-1/-1->0->-1 (Rank: this rank)
	EventConnected                      // Connected all rings|trees [, use ring PXN n GDR n], Connected NVLS tree
	EventComm                           // comm 0x… rank R nranks N cudaDev D … [commId 0x…] - Init START|COMPLETE / Destroy COMPLETE
	EventCommNodes                      // comm 0x… rank R nRanks N nNodes M localRanks L localRank l MNNVL x
	EventInitTimings                    // Init timings[ - fn]: rank R nranks N total T (…)
	EventEnv                            // NCCL_X set by environment to V / NCCL_X set to V (Name, Value)
	EventNVLS                           // NVLS multicast support is [not ]available / NVLS comm … (FlagEnabled)
	EventCollNet                        // CollNet use (SHARP rank … initialized, CollNet NN/0 : … via COLLNET/…)
	EventGDR                            // GPU Direct RDMA Enabled|Disabled for HCA|GPU (FlagEnabled)
	EventChannelCounts                  // 16 coll channels, 16 nvls channels, … (Channels, NVLSChannels)
	EventTestRank                       // nccl-tests "#  Rank  1 Group  0 Pid 77729 on gpu-2 device  0 [...]"
	EventWarn                           // any NCCL WARN line (Value: the message)
	EventNetTrace                       // error trace through the NET transport: "transport/net_socket.cc:336 -> 2"
)

var eventKindNames = [...]string{
	EventOther: "other", EventVersion: "version", EventNetwork: "network", EventIBDevices: "ib_devices",
	EventIBNoDevice: "ib_no_device", EventIBSideband: "ib_sideband", EventSocketDevices: "socket_devices",
	EventNoVerbs: "no_verbs", EventPluginLoaded: "plugin_loaded", EventPluginFailed: "plugin_failed",
	EventBootstrap: "bootstrap", EventConnection: "connection", EventRingOrder: "ring_order",
	EventTrees: "trees", EventConnected: "connected", EventComm: "comm", EventCommNodes: "comm_nodes",
	EventInitTimings: "init_timings", EventEnv: "env", EventNVLS: "nvls", EventCollNet: "collnet",
	EventGDR: "gdr", EventChannelCounts: "channel_counts", EventTestRank: "test_rank", EventWarn: "warn", EventNetTrace: "net_trace",
}

// String returns the kind's name as stored in ClickHouse and shown in JSON.
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "unknown"
}

// Event flags. Which ones apply depends on the kind.
const (
	FlagGDR       uint32 = 1 << iota // connection ends in /GDRDMA; Connected … GDR 1
	FlagNoGDR                        // Connected … GDR 0
	FlagShared                       // connection ends in /Shared
	FlagSend                         // connection line says [send]
	FlagReceive                      // connection line says [receive]
	FlagBusID                        // the [x] after ranks in a connection line is a PCI bus id, not a cudaDev
	FlagEnabled                      // GDR Enabled / NVLS available
	FlagStart                        // Init START
	FlagComplete                     // Init COMPLETE
	FlagDestroy                      // Destroy COMPLETE
	FlagRings                        // Connected all rings
	FlagTreesDone                    // Connected all trees
	FlagNVLSTree                     // Connected NVLS tree
	FlagMNNVL                        // comm line MNNVL 1
	FlagWarnLevel                    // the line is a WARN
	FlagHCA                          // GDR line names an HCA (per-HCA capability)
	FlagInitOK                       // plugin_loaded: it initialized (Initialized NET plugin X, NET/X plugin initialized, NET/OFI Selected Provider)
	FlagAssigned                     // plugin_loaded: Assigned NET plugin X to comm (2.27+)
)

// Transport of a connection line.
type Transport uint8

// Transports NCCL prints in connection lines.
const (
	TransportUnknown     Transport = iota
	TransportNet                   // via NET/<name>/<dev>
	TransportP2PIPC                // via P2P/IPC[/read]
	TransportP2PCUMEM              // via P2P/CUMEM[/read]
	TransportP2PDirect             // via P2P/direct pointer, P2P/common device (≤ 2.7: two ranks on one GPU)
	TransportSHM                   // via SHM/direct/direct, via direct shared memory
	TransportNVLS                  // via NVLS
	TransportCollNet               // via COLLNET/…
	TransportP2PMNNVL              // via P2P/MNNVL[/read] (≥ 2.20: CUMEM P2P across a multi-node NVLink domain)
	TransportP2PIndirect           // via P2P/indirect/r[x] (2.8+: relayed through another GPU of the node)
)

var transportNames = [...]string{"unknown", "NET", "P2P/IPC", "P2P/CUMEM", "P2P/direct pointer", "SHM", "NVLS", "CollNet", "P2P/MNNVL", "P2P/indirect"}

// String returns the transport's name as listed in a summary's intra field.
func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "unknown"
}

// Event is one classified NCCL line. Byte-slice fields alias the parsed line
// and are valid only until the parser's next call; the assembler copies what
// it keeps. Integer fields are -1 when the line does not give them.
type Event struct {
	Kind  EventKind
	Flags uint32

	// Line prefix: host:pid:tid [dev]. Host may be empty (NCCL prints an
	// empty hostname in some containers), PID and TID are kept as text
	// because redacted logs print words there.
	Host, PID, TID []byte
	Dev            int

	// Launcher facts from a stripped prefix (torchrun [rank3]:, mpirun
	// [1,3]<stdout>:, pdsh host labels, Ray ip=).
	LauncherRank int
	LauncherHost []byte

	Name  []byte // network, plugin, env variable, version
	Value []byte // env value, device list, rank list, WARN message
	Iface []byte // bootstrap / OOB interface
	IP    []byte // bootstrap / OOB address

	Rank, NRanks, NNodes, LocalRanks int
	CommPtr, CommID                  []byte

	// Connection lines.
	Transport     Transport
	From, FromDev int
	To, ToDev     int
	NetDev        int
	Channels      int // ring-order channel count, or coll channels
	NVLSChannels  int
}

// Reset clears e for reuse.
func (e *Event) Reset() {
	*e = Event{Dev: -1, LauncherRank: -1, Rank: -1, NRanks: -1, NNodes: -1, LocalRanks: -1,
		From: -1, FromDev: -1, To: -1, ToDev: -1, NetDev: -1, Channels: -1, NVLSChannels: -1}
}

// IsWarn reports whether the event came from a WARN line.
func (e *Event) IsWarn() bool { return e.Flags&FlagWarnLevel != 0 }
