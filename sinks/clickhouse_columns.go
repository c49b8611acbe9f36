package sinks

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// columns appends a batch one column at a time (clickhouse-go's columnar
// Append): one typed slice per column instead of a row of interface values
// per row, which boxed most cells (an allocation each) and type-switched on
// every one; measured, the row-wise training_steps append was most of the
// insert's CPU. Columns go in the table's column order.
type columns struct {
	d   driver.Batch
	lo  int // the first row of the block (v's index of its row 0)
	n   int // rows
	i   int // next column
	err error
	// scratch holds a slice per column type, reused from column to column
	// and, through scratchPool, from insert to insert: the driver copies
	// the values (the columns of a batch are one allocation per type, not
	// per column; BenchmarkClickHouseConsume shows the saving).
	// A slice keeps its last insert's strings reachable until it is
	// filled again or the pool drops it.
	scratch map[reflect.Type]any
	// measure: nothing is appended; strBytes gets, by column index, the
	// bytes of each column of Go strings that only marks (every one when
	// only is nil) (strSizes.hint).
	measure  bool
	only     []bool
	strBytes []int
}

// scratchPool holds the scratch maps of finished inserts.
var scratchPool = sync.Pool{New: func() any { return map[reflect.Type]any{} }}

// newColumns appends the block of rows lo to lo+rows-1 to d.
func newColumns(d driver.Batch, lo, rows int) *columns {
	return &columns{d: d, lo: lo, n: rows, scratch: scratchPool.Get().(map[reflect.Type]any)}
}

// col appends the next column of the block, v(j) being row j's value.
func col[T any](c *columns, v func(j int) T) {
	if c.err != nil {
		return
	}
	if c.measure {
		wanted := c.only == nil || c.i < len(c.only) && c.only[c.i]
		if str, ok := any(v).(func(int) string); ok && wanted && c.i < len(c.strBytes) {
			total := 0
			for j := c.lo; j < c.lo+c.n; j++ {
				total += len(str(j))
			}
			c.strBytes[c.i] = max(c.strBytes[c.i], total)
		}
		c.i++
		return
	}
	vals, _ := c.scratch[reflect.TypeFor[T]()].([]T)
	if cap(vals) < c.n {
		vals = make([]T, c.n)
		c.scratch[reflect.TypeFor[T]()] = vals
	}
	vals = vals[:c.n]
	for j := range vals {
		vals[j] = v(c.lo + j)
	}
	if err := c.d.Column(c.i).Append(vals); err != nil {
		c.err = fmt.Errorf("column %d: %w", c.i, err)
	}
	c.i++
}

// arrayCol appends the next column, an Array, a row at a time: the
// driver's Append of a slice of rows reflects on every element, its
// AppendRow of one row's typed slice does not.
func arrayCol[T any](c *columns, v func(j int) []T) {
	if c.err != nil {
		return
	}
	if !c.measure {
		bc := c.d.Column(c.i)
		for j := c.lo; j < c.lo+c.n; j++ {
			if err := bc.AppendRow(v(j)); err != nil {
				c.err = fmt.Errorf("column %d: %w", c.i, err)
				return
			}
		}
	}
	c.i++
}

// sourceColumns appends topic, partition, offset and line.
func sourceColumns(c *columns, src func(j int) *pipeline.Source) {
	col(c, func(j int) string { return src(j).Topic })
	col(c, func(j int) int32 { return src(j).Partition })
	col(c, func(j int) int64 { return src(j).Offset })
	col(c, func(j int) int32 { return src(j).Line })
}

// done returns the first error, or one when the columns appended are not
// the batch's columns.
func (c *columns) done() error {
	if c.scratch != nil {
		scratchPool.Put(c.scratch)
		c.scratch = nil
	}
	if c.err != nil {
		return c.err
	}
	if n := len(c.d.Columns()); c.i != n {
		return fmt.Errorf("%d columns appended; the insert has %d", c.i, n)
	}
	return nil
}

func writeSource(h io.Writer, s pipeline.Source) {
	var buf [64]byte
	p := append(buf[:0], s.Topic...)
	p = append(p, 0)
	p = strconv.AppendInt(p, int64(s.Partition), 10)
	p = append(p, '/')
	p = strconv.AppendInt(p, s.Offset, 10)
	p = append(p, '/')
	p = strconv.AppendInt(p, int64(s.Line), 10)
	p = append(p, 0)
	h.Write(p)
}

func writeKey(h io.Writer, version uint64, parts ...string) {
	for _, p := range parts {
		io.WriteString(h, p)
		h.Write([]byte{0})
	}
	io.WriteString(h, strconv.FormatUint(version, 10))
	h.Write([]byte{0})
}

// DateTime holds 1970-01-01 to 2106-02-07; DateTime64 more, but both
// schemas must hold the same values. A zero time (no evidence) is stored as
// the epoch.
var (
	minStoredTime = time.Unix(0, 0)
	maxStoredTime = time.Date(2105, 12, 31, 23, 59, 59, 0, time.UTC)
)

func clampTime(t time.Time) time.Time {
	if t.Before(minStoredTime) {
		return minStoredTime
	}
	if t.After(maxStoredTime) {
		return maxStoredTime
	}
	return t
}

func clamp(v, lo, hi int) int { return min(max(v, lo), hi) }

func count32(n int) uint32 { return uint32(clamp(n, 0, 1<<32-1)) }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func boolPtr(b *bool) *uint8 {
	if b == nil {
		return nil
	}
	v := b2u(*b)
	return &v
}

func intPtr(n *int) *int32 {
	if n == nil {
		return nil
	}
	v := int32(clamp(*n, -1<<31, 1<<31-1))
	return &v
}

// strs turns nil into an empty slice, for Array(String).
func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// hcaColumn renders HCAs as NCCL prints them: "mlx5_0:1/IB".
func hcaColumn(hcas []pipeline.HCA) []string {
	out := make([]string, len(hcas))
	for i, h := range hcas {
		out[i] = h.Device + ":" + strconv.Itoa(h.Port) + "/" + h.LinkLayer
	}
	return out
}

// envColumns splits the NCCL_* overrides into parallel key and value
// arrays, sorted by key so that equal summaries store equal rows.
func envColumns(env map[string]string) (keys, values []string) {
	keys = make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	values = make([]string, len(keys))
	for i, k := range keys {
		values[i] = env[k]
	}
	return keys, values
}

// capText cuts s to at most n bytes, backing off to the start of a UTF-8
// sequence so that a valid line stays valid. Invalid UTF-8 is stored as is.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n // not UTF-8 anyway
	}
	return s[:cut]
}
