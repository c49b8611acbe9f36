package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// Finder finds candidate lines in a block of text; parsers.Finder is the
// implementation. Clone returns an independent finder with the same
// tokens, for another goroutine.
type Finder interface {
	Reset(block []byte)
	Next(from int) int
	Clone() Finder
}

// BlockScanner reads a stream in large blocks and hands fn only the lines
// that hold a candidate token, found with one fast substring search per
// token over the whole block: the lines in between are never looked at.
// Where most lines hold a token (trainer output with telemetry on: nine
// lines in ten) the search stands aside for the rest of the block and
// every line is handed on (Chunk.Searched): the line parser rejects a line
// without a token at about what searching it costs, and the search's cost
// per found line is saved. Reading runs in its own goroutine, one block
// ahead of the search, so the read syscalls overlap the scanning. Lines
// over the cap are skipped and counted, never fatal; in a dense stretch
// only those holding a token are counted, as in a searched one.
type BlockScanner struct {
	r    io.Reader
	find Finder
	max  int
	size int
	// Oversized counts candidate lines longer than the cap (and lines too
	// long for the buffer).
	Oversized int64
	// Bytes counts the bytes read.
	Bytes int64
	// sample is how much of a block is searched before the dense stretch
	// may start (0: denseSample).
	sample int
}

// NewBlockScanner reads r with lines capped at max bytes.
func NewBlockScanner(r io.Reader, find Finder, max int) *BlockScanner {
	size := 1 << 20 // one read syscall per MiB keeps the syscall cost under the search cost
	if 4*max > size {
		size = 4 * max
	}
	return &BlockScanner{r: r, find: find, max: max, size: size}
}

// chunk is a run of complete lines and the buffer that holds it.
type chunk struct {
	region []byte
	base   int64
	buf    []byte
}

// Scan calls fn for every candidate line (without its newline; in a dense
// stretch every line), in input order, with the byte offset where it
// starts. line is valid only during the call. It returns nil at the end of
// the input. The token search runs on up to four goroutines (one block
// each, a clone of the finder per goroutine) while fn is called from
// Scan's own goroutine, so fn needs no locking. A few buffers of the block
// size are all the memory it holds, whatever the input length.
func (s *BlockScanner) Scan(fn func(line []byte, off int64)) error {
	return s.scan(nil, func(c *Chunk, _ *ParsedChunk) {
		for i, l := range c.Lines {
			fn(l, c.Offs[i])
		}
	})
}

// Chunk is the candidate lines of one block (without their newlines) and
// the byte offsets where they start, in input order. Lines[:Searched]
// each hold a token the finder found; Lines[Searched:] are every line of
// the rest of the block, handed on unsearched because most lines of its
// start held a token (the dense stretch: BlockScanner). A step that counts
// something per candidate line (a malformed one) checks those lines itself.
type Chunk struct {
	Lines    [][]byte
	Offs     []int64
	Searched int
}

// ParsedChunk is what a ScanParsed step made of a Chunk: its lines
// decoded and parsed, in input order, and the lines it could not read.
type ParsedChunk struct {
	Parsed    Parsed
	Oversized int64 // candidate lines over the decoder's cap
	Malformed int64 // candidate lines the decoder rejected
}

// ScanParsed is Scan with the decoding and parsing on the search
// goroutines: newStep is called once per search goroutine, on it, and
// returns that goroutine's step, which reads each chunk of candidate lines
// it found into out (empty; its buffers are reused) and may keep no
// reference to them. fn gets each chunk with what the step made of it on
// Scan's own goroutine, chunk after chunk in input order, so that it may
// apply them in order (Assembly.Apply); both are valid until fn returns.
// Parsing in the step spreads it over the cores while fn keeps what needs
// input order.
func (s *BlockScanner) ScanParsed(newStep func() func(c *Chunk, out *ParsedChunk), fn func(c *Chunk, p *ParsedChunk)) error {
	return s.scan(newStep, fn)
}

func (s *BlockScanner) scan(newStep func() func(*Chunk, *ParsedChunk), fn func(*Chunk, *ParsedChunk)) error {
	workers := max(1, min(runtime.GOMAXPROCS(0), 4))
	free := make(chan []byte, workers+2)
	for i := 0; i < cap(free); i++ {
		free <- make([]byte, s.size)
	}
	type found struct {
		c         Chunk
		p         *ParsedChunk // nil without a step
		oversized int64
	}
	type job struct {
		c   chunk
		out chan found
	}
	chunks := make(chan chunk, 1)
	// spare holds the line lists of chunks the caller is done with, for
	// the workers to fill again: a block's lists are ~0.3 MiB, made anew
	// per block they were most of a scan's garbage. spareParsed does the
	// same for what the steps made of them.
	spare := make(chan Chunk, cap(free)+workers)
	spareParsed := make(chan *ParsedChunk, cap(free)+workers)
	order := make(chan job, cap(free))
	work := make(chan job, cap(free))
	type result struct {
		oversized int64
		err       error
	}
	done := make(chan result, 1)
	go func() {
		n, err := s.produce(free, chunks)
		done <- result{n, err}
	}()
	go func() {
		// Hand each chunk to the workers and, in the same order, to the
		// caller's loop.
		for c := range chunks {
			j := job{c: c, out: make(chan found, 1)}
			order <- j
			work <- j
		}
		close(order)
		close(work)
	}()
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		f := s.find.Clone()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var step func(*Chunk, *ParsedChunk)
			if newStep != nil {
				step = newStep()
			}
			for j := range work {
				var r found
				select {
				case r.c = <-spare:
				default:
				}
				r.oversized = s.lines(f, j.c.region, j.c.base, &r.c)
				if step != nil {
					select {
					case r.p = <-spareParsed:
						r.p.Parsed.Reset()
						r.p.Oversized, r.p.Malformed = 0, 0
					default:
						r.p = new(ParsedChunk)
					}
					step(&r.c, r.p)
				}
				j.out <- r
			}
		}()
	}
	for j := range order {
		r := <-j.out
		fn(&r.c, r.p)
		s.Oversized += r.oversized
		free <- j.c.buf
		select {
		case spare <- r.c:
		default:
		}
		if r.p != nil {
			select {
			case spareParsed <- r.p:
			default:
			}
		}
	}
	wg.Wait()
	res := <-done
	s.Oversized += res.oversized
	return res.err
}

// produce reads blocks, cuts each at its last newline and sends the
// complete lines to work; the incomplete tail is copied to the front of the
// next buffer. It closes work when the input ends.
func (s *BlockScanner) produce(free chan []byte, work chan<- chunk) (oversized int64, err error) {
	defer close(work)
	buf := <-free
	carry := 0        // bytes of an incomplete line kept from the last block
	var base int64    // stream offset of buf[0]
	skipping := false // inside a line too long for the buffer
	for {
		n, rerr := io.ReadAtLeast(s.r, buf[carry:], len(buf)-carry)
		s.Bytes += int64(n)
		eof := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !eof {
			return oversized, fmt.Errorf("read: %w", rerr)
		}
		block := buf[:carry+n]
		skip := 0
		if skipping {
			nl := bytes.IndexByte(block, '\n')
			if nl < 0 {
				base += int64(len(block))
				carry = 0
				if eof {
					return oversized, nil
				}
				continue
			}
			skipping = false
			skip = nl + 1
			block = block[skip:]
		}
		region := block
		if !eof {
			last := bytes.LastIndexByte(block, '\n')
			switch {
			case last >= 0:
				region = block[:last+1]
			case len(block) == len(buf):
				// One line fills the buffer: skip it.
				oversized++
				skipping = true
				base += int64(len(block))
				carry = 0
				continue
			default:
				region = block[:0]
			}
		}
		if eof {
			work <- chunk{region: region, base: base + int64(skip), buf: buf}
			return oversized, nil
		}
		next := <-free
		carry = copy(next, block[len(region):])
		work <- chunk{region: region, base: base + int64(skip), buf: buf}
		base += int64(skip + len(region))
		buf = next
	}
}

// denseSample is how much of a block the finder searches before lines
// decides whether it searches the rest (BlockScanner): ~300 lines of
// trainer output, 3 % of a block.
const denseSample = 32 << 10

// lines sets c to the candidate lines of region, which starts at stream
// offset base (c's lists are reused), and returns the number of candidate
// lines over the cap (skipped). Once denseSample bytes are searched, the
// rest of the block is handed on line by line (every) when at least half
// the lines searched held a token.
func (s *BlockScanner) lines(f Finder, region []byte, base int64, c *Chunk) (oversized int64) {
	c.Lines, c.Offs, c.Searched = c.Lines[:0], c.Offs[:0], 0
	f.Reset(region)
	sample := s.sample
	if sample == 0 {
		sample = denseSample
	}
	pos, hits, sampled := 0, 0, false
	for pos < len(region) {
		if !sampled && pos >= sample {
			sampled = true
			if 2*hits >= bytes.Count(region[:pos], newline) {
				c.Searched = len(c.Lines)
				return oversized + s.every(f, region[pos:], base+int64(pos), c)
			}
		}
		h := f.Next(pos)
		if h < 0 {
			break
		}
		hits++
		start := bytes.LastIndexByte(region[:h], '\n') + 1
		end := len(region)
		if e := bytes.IndexByte(region[h:], '\n'); e >= 0 {
			end = h + e
		}
		if end-start > s.max {
			oversized++
		} else {
			c.Lines = append(c.Lines, region[start:end])
			c.Offs = append(c.Offs, base+int64(start))
		}
		pos = end + 1
	}
	c.Searched = len(c.Lines)
	return oversized
}

var newline = []byte{'\n'}

// every appends every line of region, which starts at stream offset base,
// to c, and returns the number of those over the cap that hold a token.
func (s *BlockScanner) every(f Finder, region []byte, base int64, c *Chunk) (oversized int64) {
	for pos := 0; pos < len(region); {
		end := len(region)
		if e := bytes.IndexByte(region[pos:], '\n'); e >= 0 {
			end = pos + e
		}
		if line := region[pos:end]; len(line) <= s.max {
			c.Lines = append(c.Lines, line)
			c.Offs = append(c.Offs, base+int64(pos))
		} else if f.Reset(line); f.Next(0) >= 0 {
			oversized++
		}
		pos = end + 1
	}
	return oversized
}
