package assemble

import "fmt"

// decideGDR is rule 4. gdr is true when any NET connection used GDR
// (/GDRDMA, a COLLNET path with /GDRDMA, or NCCL's own "GDR 1"); false when
// NET connections exist and none did, or "GDR 0"; without connection
// evidence the per-HCA/GPU capability lines decide; else nil. gdr_send and
// gdr_recv are the same rule over [send] and [receive] connections; partial
// is some receive paths with GDR and some without (nil without receive
// connections).
func decideGDR(d *decision, g gdrFacts) (gdr, send, recv, partial *bool) {
	switch {
	case g.conn > 0:
		gdr = ptr(true)
		d.use("gdr", KindNetConnGDR, fmt.Sprintf("%d NET connections with /GDRDMA, %d without", g.conn, g.connPlain))
	case g.collnet > 0:
		gdr = ptr(true)
		d.use("gdr", KindCollNetGDR, fmt.Sprintf("%d CollNet paths with /GDRDMA", g.collnet))
	case g.flag1 > 0:
		gdr = ptr(true)
		d.use("gdr", KindConnectedGDR, "Connected all rings … GDR 1")
	case g.connPlain > 0:
		gdr = ptr(false)
		d.use("gdr", KindNetConnPlain, fmt.Sprintf("%d NET connections, none with /GDRDMA", g.connPlain))
	case g.flag0 > 0:
		gdr = ptr(false)
		d.use("gdr", KindConnectedGDR, "Connected all rings … GDR 0")
	case g.capEnabled > 0:
		gdr = ptr(true)
		d.use("gdr", KindGDRCapability, fmt.Sprintf("GPU Direct RDMA Enabled on %d lines", g.capEnabled))
	case g.capDisabled > 0:
		gdr = ptr(false)
		d.use("gdr", KindGDRCapability, fmt.Sprintf("GPU Direct RDMA Disabled on %d lines", g.capDisabled))
	}
	dir := func(field string, with, without int) *bool {
		switch {
		case with > 0:
			d.use(field, KindDirectedConn, fmt.Sprintf("%d with /GDRDMA, %d without", with, without))
			return ptr(true)
		case without > 0:
			d.use(field, KindDirectedConn, fmt.Sprintf("%d, none with /GDRDMA", without))
			return ptr(false)
		}
		return nil
	}
	send = dir("gdr_send", g.send, g.sendPlain)
	recv = dir("gdr_recv", g.recv, g.recvPlain)
	if recv != nil && *recv && send != nil && !*send {
		d.reason("GDR on receives only: sends read GPU memory without GDR (normal before Ampere without NVLink; NCCL_NET_GDR_READ)")
	}
	if recv != nil {
		partial = ptr(g.recv > 0 && g.recvPlain > 0)
	}
	if g.recv > 0 && g.recvPlain > 0 {
		d.use("gdr_partial", KindPartialRecv, fmt.Sprintf("%d receive paths with /GDRDMA, %d without", g.recv, g.recvPlain))
		d.reason(fmt.Sprintf("partial GDR: %d of %d receive paths without GPUDirect RDMA (a GPU far from its NIC)", g.recvPlain, g.recv+g.recvPlain))
	}
	return gdr, send, recv, partial
}
