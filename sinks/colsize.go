package sinks

import (
	"strings"
	"sync"
	"sync/atomic"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The String columns of an insert block, made at their size.
//
// clickhouse-go makes each String column of an insert block empty and grows
// it value by value: its bytes double from nothing a dozen times or more
// for a batch, every doubling a fresh allocation and a copy. That growth
// shows in `ncclwatch run`'s profile on the load benchmark
// (deploy/local/load.sh), and BenchmarkColStr shows that filling columns
// made at their size is several times cheaper than growing them. The
// driver's one hook for it, column.WithColStrProvider, is process-wide and
// is told only a column's name. So an insert into a table written a column at a time
// first measures its String values (one pass over the batch's strings, no
// copy: strSizes.hint) and announces, just before PrepareBatch reads the
// block's header, each String column's exact size; the hook makes columns
// of those names at that size until the insert withdraws it. A query or
// another sink's insert running at that moment may get a column made for
// this insert: that is a capacity, never a value, so only memory is at
// stake. The sizes are measured per insert rather than taken from the
// table's recent inserts, which would leave a table's first insert — the
// largest of a restart's backlog — growing its columns. The measuring pass
// costs every insert a fraction of growing its columns from empty
// (BenchmarkStrSizesHint against BenchmarkColStr); in exchange no column
// is made too large or grown when its rows are longer than the last
// insert's.

// colHint is what one insert announces: its rows and, by column name, the
// bytes of its String columns.
type colHint struct {
	rows  int
	bytes map[string]int
}

var (
	announced   atomic.Pointer[colHint]
	installHook sync.Once
)

// installColStr installs the hook, once per process. The driver keeps it
// in a plain variable that every column it makes reads, so NewClickHouse
// installs it before its first connection exists, not an insert while a
// query of the API may be reading blocks.
func installColStr() {
	installHook.Do(func() { column.WithColStrProvider(sizedColStr) })
}

// announce makes h the sizes of the String columns the driver makes from
// now on; nil announces nothing.
func announce(h *colHint) {
	if h != nil {
		announced.Store(h)
	}
}

// withdraw ends what announce(h) began, unless another insert announced
// since.
func withdraw(h *colHint) {
	if h != nil {
		announced.CompareAndSwap(h, nil)
	}
}

// sizedColStr is the driver's String column for a column named name.
func sizedColStr(name string) chproto.ColStr {
	h := announced.Load()
	if h == nil {
		return chproto.ColStr{}
	}
	n, ok := h.bytes[name]
	if !ok {
		return chproto.ColStr{}
	}
	return chproto.ColStr{Buf: make([]byte, 0, n), Pos: make([]chproto.Position, 0, h.rows)}
}

// strSizes keeps, by table, which of its columns the server made plain
// String (learned from each insert's block): a LowCardinality(String)
// column's dictionary is made by the same hook, and is as small as its
// distinct values. One sink's memory of its own inserts.
type strSizes struct {
	mu    sync.Mutex
	plain map[string][]bool // by table name; by column index
}

// hint is what an insert of t's rows of b in blocks of blockRows rows (fill)
// announces: by column name the bytes of each String column's values in
// its largest block, measured. nil for a table not
// written a column at a time, or no rows. Before the table's first insert
// every column of Go strings is announced (a LowCardinality dictionary too,
// that once).
func (s *strSizes) hint(t *table, b *pipeline.Batch, cfg *ClickHouseConfig, blockRows int) *colHint {
	if t.cols == nil {
		return nil
	}
	rows := t.rows(b)
	if rows == 0 {
		return nil
	}
	s.mu.Lock()
	plain := s.plain[t.name]
	s.mu.Unlock()
	block := rows
	if blockRows > 0 {
		block = min(rows, blockRows)
	}
	c := &columns{measure: true, only: plain, strBytes: make([]int, len(t.columns))}
	for i := range c.strBytes {
		c.strBytes[i] = -1
	}
	for lo := 0; lo < rows; lo += block {
		c.lo, c.n, c.i = lo, min(block, rows-lo), 0
		t.cols(c, b, cfg)
	}
	h := &colHint{rows: block, bytes: make(map[string]int, len(t.columns))}
	for i, n := range c.strBytes {
		if n >= 0 {
			h.bytes[strings.Trim(t.columns[i], "`")] = n
		}
	}
	return h
}

// learn keeps which of t's columns the server's block has as plain String.
func (s *strSizes) learn(t *table, cols []column.Interface) {
	if t.cols == nil {
		return
	}
	plain := make([]bool, len(cols))
	for i, c := range cols {
		plain[i] = c != nil && c.Type() == "String"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plain == nil {
		s.plain = map[string][]bool{}
	}
	s.plain[t.name] = plain
}
