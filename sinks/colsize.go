package sinks

import (
	"strings"
	"sync"
	"sync/atomic"

	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
)

// The String columns of an insert block, made at their size.
//
// clickhouse-go makes each String column of an insert block empty and grows
// it value by value: its bytes double from nothing a dozen times or more
// for a batch, every doubling a fresh allocation and a copy. In the load
// benchmark (deploy/local/load.sh) that growth was 6 % of `ncclwatch run`'s
// CPU, and in BenchmarkColStr filling eleven 30 000-row columns made at
// their size took a sixth of the time of growing them. The driver's one
// hook for it, column.WithColStrProvider, is process-wide and is told only
// a column's name. So an insert into a table written a column at a time
// announces, just before PrepareBatch reads the block's header, the size of
// each of its String columns — the row count times the bytes per row of
// the table's recent inserts, with an eighth to spare — and the hook makes
// columns of those names at that size until the insert withdraws it. A
// query or another sink's insert running at that moment may get a column
// made for this insert: that is a capacity, never a value, so only memory
// is at stake; a value longer than announced grows the column as before.

// colHint is what one insert announces: its rows and, by column name, the
// bytes of its String columns.
type colHint struct {
	rows  int
	bytes map[string]int
}

var (
	announced   atomic.Pointer[colHint]
	installHook sync.Once
	// sized counts the columns the hook made at an announced size.
	sized atomic.Uint64
)

// installColStr installs the hook. The driver keeps it in a plain
// variable that every column it makes reads, so NewClickHouse installs it
// before its first connection exists, not an insert while a query of the
// API may be reading blocks.
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
	sized.Add(1)
	return chproto.ColStr{Buf: make([]byte, 0, n), Pos: make([]chproto.Position, 0, h.rows)}
}

// strSizes keeps, by table, the bytes per row of each String column of
// the table's recent inserts (record): one sink's memory of its own
// inserts.
type strSizes struct {
	mu     sync.Mutex
	perRow map[string][]float64 // by table name; by column index, 0 for other types
}

// hint is what an insert of rows rows into t announces: nil for a table
// not written a column at a time or not written before.
func (s *strSizes) hint(t *table, rows int) *colHint {
	if t.cols == nil || rows == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	per := s.perRow[t.name]
	if per == nil {
		return nil
	}
	h := &colHint{rows: rows, bytes: make(map[string]int, len(per))}
	for i, b := range per {
		if b > 0 && i < len(t.columns) {
			h.bytes[strings.Trim(t.columns[i], "`")] = int(b*float64(rows)*1.125) + 64
		}
	}
	return h
}

// record keeps the sizes of an insert of rows rows into t: the bytes of
// its String columns by column index. A column's bytes per row follow a
// larger figure at once and a smaller one by a tenth an insert: the rows of
// one batch are longer than the last one's as often as not, and a column
// that outgrows its size is copied whole once more.
func (s *strSizes) record(t *table, rows int, bytes []int) {
	if rows == 0 || len(bytes) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perRow == nil {
		s.perRow = map[string][]float64{}
	}
	per := s.perRow[t.name]
	if len(per) < len(bytes) {
		per = append(per, make([]float64, len(bytes)-len(per))...)
		s.perRow[t.name] = per
	}
	for i, b := range bytes {
		per[i] = max(float64(b)/float64(rows), per[i]*0.9)
	}
}
