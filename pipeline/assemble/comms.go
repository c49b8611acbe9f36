package assemble

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// commLine records a communicator line: which rank of which communicator the
// process holds.
func (a *Assembler) commLine(j *jobState, p *proc, ev *pipeline.Event) {
	if ev.Flags&pipeline.FlagComplete != 0 {
		p.initComplete = true
	}
	key := ""
	ptr := string(ev.CommPtr)
	switch {
	case len(ev.CommID) > 0:
		key = "0x" + strings.TrimPrefix(string(ev.CommID), "0x")
		if ptr != "" {
			if old := j.commKey(p.ptrComm[ptr]); old != "" && old != key {
				if strings.HasPrefix(old, "split ") {
					// Every member of a split communicator is in the
					// communicator this commId names.
					j.mergeComm(old, key)
				} else {
					// The pointer was first seen on a line without a
					// commId (an nNodes line before Init START): move
					// what it told to the real communicator.
					j.moveMember(p, old, key)
				}
			}
			p.setPtrComm(ptr, key)
		}
	case ptr != "" && p.ptrComm[ptr] != "":
		key = j.commKey(p.ptrComm[ptr])
	case len(ev.Value) > 0 && ev.NRanks > 0:
		// A bootstrapSplit line: its color names the communicator every
		// rank of the split joins, before any commId does.
		key = j.commKey(fmt.Sprintf("split color=%s nranks=%d", ev.Value, ev.NRanks))
		if ptr != "" {
			p.setPtrComm(ptr, key)
		}
	case ev.NRanks > 0:
		// Versions without a commId: the rank/nranks tuple is the only key.
		key = fmt.Sprintf("nranks=%d", ev.NRanks)
		if ptr == "" {
			// Init timings print no pointer; prefer a comm the process
			// already holds with the same size.
			for _, k := range p.comms {
				if c := j.comms[k]; c != nil && c.nranks == ev.NRanks {
					key = k
					break
				}
			}
		} else {
			p.setPtrComm(ptr, key)
		}
	default:
		return
	}
	c, ok := j.comms[key]
	if !ok {
		c = &comm{key: key, nranks: -1, nnodes: -1, localRanks: -1, members: make(map[int]string)}
		j.comms[key] = c
		j.commOrder = append(j.commOrder, c)
		j.created++
	}
	if ev.NRanks > 0 {
		c.nranks = ev.NRanks
	}
	if ev.NNodes > 0 {
		c.nnodes = ev.NNodes
	}
	if ev.LocalRanks > 0 {
		c.localRanks = ev.LocalRanks
	}
	if ev.Rank >= 0 && len(c.members) < maxMembers {
		c.members[ev.Rank] = p.key
		p.hostRank(ev.Rank, ev.FromDev)
	}
	if !slices.Contains(c.procs, p.key) && len(c.procs) < maxMembers {
		c.procs = append(c.procs, p.key)
	}
	if !slices.Contains(p.comms, key) && len(p.comms) < maxSmall {
		p.comms = append(p.comms, key)
	}
}

func (p *proc) setPtrComm(ptr, key string) {
	if p.ptrComm == nil {
		p.ptrComm = make(map[string]string)
	}
	if len(p.ptrComm) < maxSmall {
		p.ptrComm[ptr] = key
	}
}

// commKey resolves a communicator key through the merges mergeComm made.
func (j *jobState) commKey(k string) string {
	for range 4 {
		to, ok := j.commAlias[k]
		if !ok {
			break
		}
		k = to
	}
	return k
}

// mergeComm moves every member of communicator from into to and makes from
// an alias of to.
func (j *jobState) mergeComm(from, to string) {
	c := j.comms[from]
	if c == nil {
		return
	}
	t, ok := j.comms[to]
	if !ok {
		t = &comm{key: to, nranks: c.nranks, nnodes: c.nnodes, localRanks: c.localRanks, members: make(map[int]string)}
		j.comms[to] = t
		j.commOrder = append(j.commOrder, t)
		j.created++
	}
	for r, k := range c.members {
		if _, taken := t.members[r]; !taken && len(t.members) < maxMembers {
			t.members[r] = k
		}
	}
	if t.nranks < 0 {
		t.nranks = c.nranks
	}
	for _, pk := range c.procs {
		if !slices.Contains(t.procs, pk) && len(t.procs) < maxMembers {
			t.procs = append(t.procs, pk)
		}
		if q := j.procs[pk]; q != nil {
			q.comms = slices.DeleteFunc(q.comms, func(k string) bool { return k == from })
			if !slices.Contains(q.comms, to) && len(q.comms) < maxSmall {
				q.comms = append(q.comms, to)
			}
		}
	}
	delete(j.comms, from)
	j.commOrder = slices.DeleteFunc(j.commOrder, func(x *comm) bool { return x == c })
	if j.commAlias == nil {
		j.commAlias = make(map[string]string)
	}
	if len(j.commAlias) < maxSmall {
		j.commAlias[from] = to
	}
}

// moveMember moves process p's membership from communicator from to to,
// dropping from when no process is left in it.
func (j *jobState) moveMember(p *proc, from, to string) {
	c := j.comms[from]
	if c == nil {
		return
	}
	t, ok := j.comms[to]
	if !ok {
		t = &comm{key: to, nranks: c.nranks, nnodes: c.nnodes, localRanks: c.localRanks, members: make(map[int]string)}
		j.comms[to] = t
		j.commOrder = append(j.commOrder, t)
		j.created++
	}
	for r, k := range c.members {
		if k == p.key {
			t.members[r] = k
			delete(c.members, r)
		}
	}
	if t.nnodes < 0 {
		t.nnodes = c.nnodes
	}
	if t.localRanks < 0 {
		t.localRanks = c.localRanks
	}
	c.procs = slices.DeleteFunc(c.procs, func(k string) bool { return k == p.key })
	p.comms = slices.DeleteFunc(p.comms, func(k string) bool { return k == from })
	if len(c.procs) == 0 {
		delete(j.comms, from)
		j.commOrder = slices.DeleteFunc(j.commOrder, func(x *comm) bool { return x == c })
	}
}

func (p *proc) hostRank(rank, dev int) {
	if p.ranks == nil {
		p.ranks = make(map[int]int)
	}
	if old, ok := p.ranks[rank]; ok && (dev < 0 || old >= 0) {
		return
	}
	if len(p.ranks) < maxMembers {
		p.ranks[rank] = dev
	}
}

func (p *proc) hostPrefixRank(rank, dev int) {
	if p.prefixRanks == nil {
		p.prefixRanks = make(map[int]int)
	}
	if len(p.prefixRanks) < maxSmall {
		p.prefixRanks[rank] = dev
	}
	p.hostRank(rank, -1)
}
