package loadtest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/sinks"
)

// serverCPU is a ClickHouse server's CPU time: user and system (kernel)
// time of the whole process, and the part of it spent in the threads that
// do the work of a stream's inserts: the TCPHandler threads (one per client
// connection: receiving, sorting and writing each insert's part) and the
// BackgrProcPool threads (merges).
type serverCPU struct {
	user, sys      time.Duration
	inserts, merge time.Duration
}

// cpuSample is one reading of a process and its threads.
type cpuSample struct {
	user, sys time.Duration
	threads   map[string]threadCPU // by thread id
}

type threadCPU struct {
	name string
	cpu  time.Duration
}

// readCPU reads process pid's CPU times from /proc/pid/stat (clock ticks
// of 1/100 s, the Linux USER_HZ); ok is false when it cannot.
func readCPU(pid string) (user, sys time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// Fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return time.Duration(u) * 10 * time.Millisecond, time.Duration(s) * 10 * time.Millisecond, true
}

// sampleCPU reads server pid and its threads; ok is false when it cannot
// (no pid given, not Linux, another user's process).
func sampleCPU(pid string) (s cpuSample, ok bool) {
	if pid == "" {
		return s, false
	}
	if s.user, s.sys, ok = readCPU(pid); !ok {
		return s, false
	}
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return s, false
	}
	s.threads = make(map[string]threadCPU, len(tasks))
	for _, t := range tasks {
		comm, err := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/comm")
		if err != nil {
			continue // the thread ended
		}
		u, sy, ok := readCPU(pid + "/task/" + t.Name())
		if !ok {
			continue
		}
		s.threads[t.Name()] = threadCPU{name: strings.TrimSpace(string(comm)), cpu: u + sy}
	}
	return s, true
}

// since returns the CPU from o to s. A thread's time goes to the pool it
// is in at s (pooled threads take a pool's name when they start a task);
// a thread that ended between the readings is in neither pool's figure,
// only in the process's user and system time.
func (s cpuSample) since(o cpuSample) serverCPU {
	c := serverCPU{user: s.user - o.user, sys: s.sys - o.sys}
	for id, t := range s.threads {
		d := t.cpu - o.threads[id].cpu
		switch t.name {
		case "TCPHandler":
			c.inserts += d
		case "BackgrProcPool":
			c.merge += d
		}
	}
	return c
}

func (c serverCPU) String() string {
	return fmt.Sprintf("%.1f s (user %.1f, system %.1f; insert threads %.1f, merge threads %.1f)",
		(c.user + c.sys).Seconds(), c.user.Seconds(), c.sys.Seconds(), c.inserts.Seconds(), c.merge.Seconds())
}

// serverProbe measures a process's CPU over a phase: the ClickHouse
// server's, with its insert and merge threads apart, or the broker's.
type serverProbe struct {
	pid   string
	start cpuSample
	ok    bool
}

func startServerProbe(pid string) *serverProbe {
	p := &serverProbe{pid: pid}
	p.start, p.ok = sampleCPU(pid)
	return p
}

// stop returns the CPU since start, or nil when it could not be read.
func (p *serverProbe) stop() *serverCPU {
	if !p.ok {
		return nil
	}
	end, ok := sampleCPU(p.pid)
	if !ok {
		return nil
	}
	c := end.since(p.start)
	return &c
}

// boxCPU is this host's CPU time over a phase, every CPU together: busy
// (all but idle and iowait) of total.
type boxCPU struct {
	cpus        int
	busy, total time.Duration
}

// readBox reads /proc/stat's aggregate cpu line (clock ticks of 1/100 s)
// and counts the per-CPU lines.
func readBox() (b boxCPU, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return b, false
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			b.cpus++
			continue
		}
		for i, v := range f[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return b, false
			}
			d := time.Duration(n) * 10 * time.Millisecond
			b.total += d
			if i != 3 && i != 4 { // idle, iowait
				b.busy += d
			}
			if i == 7 { // user … steal; guest time is counted in user already
				break
			}
		}
	}
	return b, b.total > 0
}

// boxProbe measures the host's CPUs over a phase.
type boxProbe struct {
	start boxCPU
	ok    bool
}

func startBoxProbe() *boxProbe {
	p := &boxProbe{}
	p.start, p.ok = readBox()
	return p
}

// stop returns the CPU time since start, or nil when it could not be read
// or no tick passed.
func (p *boxProbe) stop() *boxCPU {
	if !p.ok {
		return nil
	}
	end, ok := readBox()
	if !ok || end.total <= p.start.total {
		return nil
	}
	return &boxCPU{cpus: end.cpus, busy: end.busy - p.start.busy, total: end.total - p.start.total}
}

// partFigures are the data parts of ncclwatch's tables: written by inserts
// (level 0) and by merges, active or merged away but not yet removed (18.16
// removes them after old_parts_lifetime, 8 minutes). Each part is a
// directory of two files per column stream (Nullable and Array columns
// have two streams) and a few more; files counts them where the server's
// data directory is readable here, 0 otherwise.
type partFigures struct {
	inserted, merged, files int
	byTable                 map[string]int // parts written by inserts, per table
}

func (p partFigures) String() string {
	s := fmt.Sprintf("%d parts written by inserts", p.inserted)
	if len(p.byTable) > 0 {
		tables := slices.Collect(maps.Keys(p.byTable))
		slices.SortFunc(tables, func(a, b string) int {
			return cmp.Or(cmp.Compare(p.byTable[b], p.byTable[a]), cmp.Compare(a, b))
		})
		var per []string
		for _, t := range tables {
			per = append(per, fmt.Sprintf("%s %d", t, p.byTable[t]))
		}
		s += " (" + strings.Join(per, ", ") + ")"
	}
	s += fmt.Sprintf(", %d by merges", p.merged)
	if p.files > 0 {
		s += fmt.Sprintf("; %d files in them", p.files)
	}
	return s
}

// countParts reads the part figures of database db.
func countParts(ctx context.Context, ch *sinks.ClickHouse, db string) (partFigures, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p := partFigures{byTable: map[string]int{}}
	rows, err := ch.Query(ctx, "SELECT table, level, path FROM system.parts WHERE database = ? "+
		"AND table != 'schema_migrations' AND NOT startsWith(table, 'peer_')", db)
	if err != nil {
		return p, fmt.Errorf("parts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			table, path string
			level       uint32
		)
		if err := rows.Scan(&table, &level, &path); err != nil {
			return p, fmt.Errorf("parts: %w", err)
		}
		if level == 0 {
			p.inserted++
			p.byTable[table]++
		} else {
			p.merged++
		}
		if files, err := filepath.Glob(filepath.Join(path, "*")); err == nil {
			p.files += len(files)
		}
	}
	return p, rows.Err()
}
