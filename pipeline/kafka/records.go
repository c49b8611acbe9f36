package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// The native fetch (Config.FetchDecoder "native"): the partition reader
// sends Fetch requests on the connection kafka-go dialled and authenticated
// and decodes the response itself, record batches included. kafka-go's
// Batch.ReadMessage reads every key and value through a 16-byte bufio
// reader over the decompressed batch into two new allocations, and its LZ4
// reader hashes every decompressed byte (xxh32): on the load benchmark the
// fetch was a large share of ncclwatch's CPU, and decoding the LZ4 blocks
// only a small part of it. Here a batch is decompressed once into one
// buffer and its records' keys and values are slices of it; what is
// verified is the batch's CRC-32C, over the compressed bytes, as Kafka's
// Java consumer does (check.crcs) — which also reads LZ4 frames without
// their xxh32 checksums.

// fetchVersion is the Fetch request version used: 11, the newest with topic
// names and without flexible encoding (Kafka 2.3 and later; Kafka 4 serves
// 4-17). minFetchVersion is the oldest the native decoder speaks (Kafka
// 0.11, the first with record batches); a broker without it is read
// through kafka-go.
const (
	fetchVersion    = 11
	minFetchVersion = 4
	fetchAPIKey     = 1
)

// maxResponse bounds a fetch response the native reader accepts: far above
// any max_bytes (a batch larger than max_bytes is returned whole, KIP-74,
// and brokers cap batches at message.max.bytes, 1 MiB by default).
const maxResponse = 256 << 20

// maxDecompressed bounds one record batch decompressed (LZ4 may expand
// 255-fold, gzip ~1000-fold): beyond it the batch is an error, not an
// allocation. A producer's batch is at most message.max.bytes (1 MiB by
// default) compressed; log records compress 5-20-fold.
const maxDecompressed = 256 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errLegacyFormat is a message set of format v0 or v1 (magic < 2) in a
// fetch response: the native decoder reads record batches only, so the
// partition reader reads this connection through kafka-go instead.
var errLegacyFormat = errors.New("message format v0/v1 (magic < 2)")

// ErrCorruptBatch is in the error of a record batch that fails its CRC-32C
// or does not decode: the partition reader retries from that batch.
var ErrCorruptBatch = errors.New("corrupt record batch")

// RetryReason names the kind of an error the source retries (the reason
// label of ncclwatch_source_retries_total): "corrupt_batch" or "fetch".
func RetryReason(err error) string {
	if errors.Is(err, ErrCorruptBatch) {
		return "corrupt_batch"
	}
	return "fetch"
}

// fetchRequest is one partition's Fetch request of version v.
type fetchRequest struct {
	version       int16
	correlation   int32
	topic         string
	partition     int32
	offset        int64
	minBytes      int32
	maxBytes      int32
	maxWait       time.Duration
	isolationRead int8 // 0: read_uncommitted
}

// appendFetchRequest appends r, size-prefixed, to b.
func appendFetchRequest(b []byte, r fetchRequest) []byte {
	be := binary.BigEndian
	start := len(b)
	b = append(b, 0, 0, 0, 0) // size, set below
	b = be.AppendUint16(b, fetchAPIKey)
	b = be.AppendUint16(b, uint16(r.version))
	b = be.AppendUint32(b, uint32(r.correlation))
	b = be.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	b = be.AppendUint32(b, 0xffffffff) // replica_id -1: a consumer
	b = be.AppendUint32(b, uint32(r.maxWait.Milliseconds()))
	b = be.AppendUint32(b, uint32(r.minBytes))
	b = be.AppendUint32(b, uint32(r.maxBytes)) // response max_bytes (v3+)
	b = append(b, byte(r.isolationRead))       // v4+
	if r.version >= 7 {
		b = be.AppendUint32(b, 0)          // session_id: no fetch session
		b = be.AppendUint32(b, 0xffffffff) // session_epoch -1
	}
	b = be.AppendUint32(b, 1) // topics
	b = be.AppendUint16(b, uint16(len(r.topic)))
	b = append(b, r.topic...)
	b = be.AppendUint32(b, 1) // partitions
	b = be.AppendUint32(b, uint32(r.partition))
	if r.version >= 9 {
		b = be.AppendUint32(b, 0xffffffff) // current_leader_epoch -1: unchecked
	}
	b = be.AppendUint64(b, uint64(r.offset))
	if r.version >= 5 {
		b = be.AppendUint64(b, 0xffffffffffffffff) // log_start_offset -1 (followers only)
	}
	b = be.AppendUint32(b, uint32(r.maxBytes))
	if r.version >= 7 {
		b = be.AppendUint32(b, 0) // forgotten_topics_data
	}
	if r.version >= 11 {
		b = be.AppendUint16(b, 0) // rack_id ""
	}
	be.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// wire reads the big-endian fields of a Kafka response; a read past the end
// sets err and returns zeros, so that a caller checks once.
type wire struct {
	b   []byte
	err error
}

func (w *wire) take(n int) []byte {
	if w.err != nil || n < 0 || n > len(w.b) {
		if w.err == nil {
			w.err = io.ErrUnexpectedEOF
		}
		return nil
	}
	p := w.b[:n:n]
	w.b = w.b[n:]
	return p
}

func (w *wire) int16() int16 {
	if p := w.take(2); p != nil {
		return int16(binary.BigEndian.Uint16(p))
	}
	return 0
}

func (w *wire) int32() int32 {
	if p := w.take(4); p != nil {
		return int32(binary.BigEndian.Uint32(p))
	}
	return 0
}

func (w *wire) int64() int64 {
	if p := w.take(8); p != nil {
		return int64(binary.BigEndian.Uint64(p))
	}
	return 0
}

// varint reads a zig-zag varint (record fields).
func (w *wire) varint() int64 {
	if w.err != nil {
		return 0
	}
	v, n := binary.Varint(w.b)
	if n <= 0 {
		w.err = io.ErrUnexpectedEOF
		return 0
	}
	w.b = w.b[n:]
	return v
}

// nullable reads a varint-length byte string of a record; a negative
// length is null (nil).
func (w *wire) nullable() []byte {
	n := w.varint()
	if n < 0 || w.err != nil {
		return nil
	}
	if n > int64(len(w.b)) {
		w.err = io.ErrUnexpectedEOF
		return nil
	}
	return w.take(int(n))
}

// fetchResult is the one partition of a fetch response, and the pause
// the broker asked for.
type fetchResult struct {
	highWaterMark int64
	records       []byte // the record batches, the last one possibly truncated
	// throttle is the response's throttle_time_ms: how long a quota
	// wants this client to send the broker nothing more (KIP-219).
	throttle time.Duration
}

// clientThrottles reports whether a Fetch response of version v leaves the
// pause it names to the client: from version 8 the broker answers at once
// and expects the client to wait (KIP-219); before, the broker held the
// response back for the pause itself.
func clientThrottles(v int16) bool { return v >= 8 }

// decodeFetchResponse reads the body (after the size) of a response of
// version v to a one-partition fetchRequest with correlation id corr. A
// top-level or partition error is returned as kafka.Error, for the caller's
// retry rules, with the result's throttle set.
func decodeFetchResponse(body []byte, v int16, corr int32, topic string, partition int32) (fetchResult, error) {
	w := wire{b: body}
	if got := w.int32(); w.err == nil && got != corr {
		return fetchResult{}, fmt.Errorf("fetch response correlation id %d, want %d", got, corr)
	}
	var res fetchResult
	if ms := w.int32(); ms > 0 {
		res.throttle = time.Duration(ms) * time.Millisecond
	}
	if v >= 7 {
		if code := w.int16(); code != 0 && w.err == nil {
			return res, kafka.Error(code)
		}
		w.int32() // session_id
	}
	found := false
	for nt := w.int32(); nt > 0 && w.err == nil; nt-- {
		name := w.take(int(w.int16()))
		for np := w.int32(); np > 0 && w.err == nil; np-- {
			idx := w.int32()
			code := w.int16()
			hwm := w.int64()
			w.int64() // last_stable_offset
			if v >= 5 {
				w.int64() // log_start_offset
			}
			if na := w.int32(); na > 0 {
				w.take(16 * int(na)) // aborted_transactions (read_uncommitted: all records are delivered)
			}
			if v >= 11 {
				w.int32() // preferred_read_replica
			}
			n := w.int32()
			var recs []byte
			if n > 0 {
				recs = w.take(int(n))
			}
			if w.err != nil || string(name) != topic || idx != partition {
				continue
			}
			if code != 0 {
				return fetchResult{throttle: res.throttle}, kafka.Error(code)
			}
			res.highWaterMark, res.records, found = hwm, recs, true
		}
	}
	if w.err != nil {
		return fetchResult{}, fmt.Errorf("fetch response: %w", w.err)
	}
	if !found {
		return fetchResult{throttle: res.throttle}, fmt.Errorf("fetch response without %s/%d", topic, partition)
	}
	return res, nil
}

// batchHeaderSize is a record batch's fixed part: base offset (8), length
// (4), leader epoch (4), magic (1), crc (4), attributes (2), last offset
// delta (4), first and max timestamps (16), producer id (8) and epoch (2),
// base sequence (4), record count (4).
const batchHeaderSize = 61

// Record batch attributes.
const (
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrControl       = 0x20
)

// batchDecoder decodes the record batches of fetch responses into
// messages. It remembers the last decompression ratio to size the next
// batch's buffer. Not safe for concurrent use.
type batchDecoder struct {
	ratio float64 // decompressed / compressed bytes of the last compressed batch
	// pooled: decompress into pooled buffers (takeBuf), each batch's in
	// an arena the caller takes (takeArena); otherwise into new ones.
	pooled bool
	arena  *arena      // the last decompressed batch's, until taken
	st     *fetchStats // counts the pooled buffers and arenas; nil: nobody
}

// takeArena returns the arena of the batch decodeNext decoded last, with
// the decoder's hold now the caller's; nil when that batch was not
// decompressed (or the decoder does not pool).
func (d *batchDecoder) takeArena() *arena {
	a := d.arena
	d.arena = nil
	return a
}

// buf returns an empty buffer for n bytes.
func (d *batchDecoder) buf(n int) []byte {
	if d.pooled {
		return d.st.takeBuf(n)
	}
	return make([]byte, 0, n)
}

// decodeNext appends to out the records of the first record batch of recs
// at or after offset from (the batch may start before it), each a copy of
// tmpl with its offset, time, key and value (slices of the batch's buffer,
// takeArena's when pooled, or of recs when uncompressed: takeArena gives
// nil then), and returns the rest of recs; ok is false when recs holds no complete batch
// (first: when that is the response's first batch, it is an error). next
// is the offset after the batch (at least prev, the offset after the ones
// before); on an error out and next are as they were.
func (d *batchDecoder) decodeNext(recs []byte, prev, from int64, tmpl Message, out []Message, first bool) (_ []Message, rest []byte, next int64, ok bool, err error) {
	if len(recs) < 17 { // through the magic byte
		if first && len(recs) > 0 {
			return out, recs, prev, false, fmt.Errorf("record batch at offset %d truncated in a fetch response", from)
		}
		return out, recs, prev, false, nil
	}
	base := int64(binary.BigEndian.Uint64(recs))
	length := int(int32(binary.BigEndian.Uint32(recs[8:])))
	if magic := recs[16]; magic < 2 {
		return out, recs, prev, false, errLegacyFormat
	} else if magic > 2 {
		return out, recs, prev, false, fmt.Errorf("record batch at offset %d: %w: unknown magic %d", base, ErrCorruptBatch, magic)
	}
	if length < batchHeaderSize-12 {
		return out, recs, prev, false, fmt.Errorf("record batch at offset %d: %w: length %d", base, ErrCorruptBatch, length)
	}
	if 12+length > len(recs) {
		if first {
			return out, recs, prev, false, fmt.Errorf("record batch at offset %d truncated in a fetch response", from)
		}
		return out, recs, prev, false, nil
	}
	batch := recs[: 12+length : 12+length]
	if got, want := crc32.Checksum(batch[21:], castagnoli), binary.BigEndian.Uint32(batch[17:]); got != want {
		return out, recs, prev, false, fmt.Errorf("record batch at offset %d: %w: CRC-32C %08x, stored %08x", base, ErrCorruptBatch, got, want)
	}
	n := len(out)
	if c := int(int32(binary.BigEndian.Uint32(batch[57:]))); c > 0 && cap(out)-n < c {
		// One allocation per batch: growing by append copied every
		// message about twice.
		out = slices.Grow(out, min(c, 1<<17))
	}
	out, err = d.batch(batch, from, tmpl, out)
	if err != nil {
		return out[:n], recs, prev, false, fmt.Errorf("record batch at offset %d: %w: %w", base, ErrCorruptBatch, err)
	}
	lastDelta := int64(int32(binary.BigEndian.Uint32(batch[23:])))
	return out, recs[12+length:], max(prev, base+lastDelta+1), true, nil
}

// batch appends the records of one complete, checked record batch: slices
// of a buffer of their own when it is compressed, of batch when not.
func (d *batchDecoder) batch(batch []byte, from int64, tmpl Message, out []Message) (_ []Message, err error) {
	be := binary.BigEndian
	base := int64(be.Uint64(batch))
	attrs := be.Uint16(batch[21:])
	lastDelta := int64(int32(be.Uint32(batch[23:])))
	firstTS := int64(be.Uint64(batch[27:]))
	maxTS := int64(be.Uint64(batch[35:]))
	count := int(int32(be.Uint32(batch[57:])))
	if attrs&attrControl != 0 || base+lastDelta < from || count <= 0 {
		return out, nil // transaction markers; all before the offset asked for; or none
	}
	data := batch[batchHeaderSize:]
	if c := compress.Compression(attrs & attrCompression); c != compress.None {
		if data, err = d.decompress(c, data); err != nil {
			return out, err
		}
	}
	w := wire{b: data}
	for i := 0; i < count; i++ {
		w.varint() // record length
		w.take(1)  // record attributes (unused)
		tsDelta := w.varint()
		offDelta := w.varint()
		key := w.nullable()
		value := w.nullable()
		for h := w.varint(); h > 0 && w.err == nil; h-- {
			w.nullable() // header key
			w.nullable() // header value
		}
		if w.err != nil {
			return out, w.err
		}
		m := tmpl
		m.Offset = base + offDelta
		if m.Offset < from {
			continue
		}
		ts := firstTS + tsDelta
		if attrs&attrLogAppendTime != 0 {
			ts = maxTS
		}
		m.Time = time.UnixMilli(ts)
		m.Key, m.Value = key, value
		out = append(out, m)
	}
	return out, nil
}

// decompress returns the records of a batch compressed with c, in a new
// buffer.
func (d *batchDecoder) decompress(c compress.Compression, data []byte) ([]byte, error) {
	var out []byte
	var err error
	if c == compress.Lz4 {
		// Sized exactly. Never an empty buffer: pierrec/lz4's amd64
		// decoder writes through a nil one (its short-output bound wraps
		// below address 32).
		var size int
		if size, err = lz4Size(data); err == nil {
			out, err = lz4Decode(d.buf(max(size, 1)), data)
		}
	} else {
		// Sized from the last batch's ratio, grown as needed.
		guess := min(int(float64(len(data))*max(d.ratio, 1)*1.05)+512, 64<<20)
		codec := c.Codec()
		if codec == nil {
			return nil, fmt.Errorf("unknown compression codec %d", c)
		}
		r := codec.NewReader(bytes.NewReader(data))
		out, err = readLimited(d.buf(guess), r, maxDecompressed)
		r.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	if len(data) > 0 {
		d.ratio = float64(len(out)) / float64(len(data))
	}
	if d.pooled {
		if d.arena != nil {
			d.arena.drop() // a batch before that nobody took: none of its records were kept
		}
		d.arena = d.st.newArena(out)
	}
	return out, nil
}

// readLimited appends what r reads to dst until io.EOF, and fails when
// that is more than limit bytes.
func readLimited(dst []byte, r io.Reader, limit int) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if _, err := buf.ReadFrom(io.LimitReader(r, int64(limit-len(dst))+1)); err != nil {
		return buf.Bytes(), err
	}
	if buf.Len() > limit {
		return buf.Bytes(), fmt.Errorf("a batch of over %d MiB decompressed", limit>>20)
	}
	return buf.Bytes(), nil
}

// LZ4 frame format (lz4_Frame_format.md): magic, FLG, BD, [content size],
// [dictionary id], header checksum; blocks of a 4-byte little-endian size
// (high bit: stored uncompressed; 0: end mark) each with [a checksum]; then
// [the content checksum]. Skippable frames (magic 0x184D2A5?) carry no data.
const (
	lz4Magic          = 0x184D2204
	lz4SkippableMask  = 0xFFFFFFF0
	lz4Skippable      = 0x184D2A50
	lz4FlagBlockIndep = 0x20
	lz4FlagBlockSum   = 0x10
	lz4FlagSize       = 0x08
	lz4FlagContentSum = 0x04
	lz4FlagDictID     = 0x01
	lz4Window         = 64 << 10 // how far back a block's matches reach
)

// lz4Frames appends the decompressed content of the LZ4 frames in src to
// dst. A first pass reads the blocks' sequence headers (lz4BlockLen:
// nothing is copied) for the exact size, so that dst grows once and no
// block is decoded twice; then pierrec/lz4 decodes each block straight
// into dst. (Decoding into a buffer sized from the last batch's ratio
// first, and measuring only a block that did not fit, saves the first pass
// where batches compress alike, as on the load stream, but is much slower
// where they do not: BenchmarkDecodeBatches shows it.) The
// blocks' and the content's xxh32 checksums are skipped (the record
// batch's CRC-32C covers these bytes). A linked block (block independence
// unset) reads the previous 64 KiB of output as its dictionary.
func lz4Frames(dst, src []byte) ([]byte, error) {
	size, err := lz4Size(src)
	if err != nil {
		return dst, err
	}
	// Never an empty buffer: pierrec/lz4's amd64 decoder writes through a
	// nil one (its short-output bound wraps below address 32).
	return lz4Decode(slices.Grow(dst, max(size, 1)), src)
}

// lz4Size returns the decompressed size of the LZ4 frames in src, read
// from their blocks' sequence headers (lz4Frames).
func lz4Size(src []byte) (int, error) {
	size := 0
	err := eachLZ4Block(src, func(block []byte, stored, _ bool) error {
		n := len(block)
		if !stored {
			if n = lz4BlockLen(block); n < 0 {
				return errors.New("lz4: corrupt block")
			}
		}
		if size += n; size > maxDecompressed {
			return fmt.Errorf("lz4: a batch of over %d MiB decompressed", maxDecompressed>>20)
		}
		return nil
	})
	return size, err
}

// lz4Decode appends the decompressed content of the LZ4 frames in src to
// dst, which must have room for all of it (lz4Size) and must not be empty
// (a nil one breaks pierrec/lz4's amd64 decoder).
func lz4Decode(dst, src []byte) ([]byte, error) {
	err := eachLZ4Block(src, func(block []byte, stored, linked bool) error {
		if stored {
			dst = append(dst, block...)
			return nil
		}
		start := len(dst)
		out := dst[start:cap(dst)]
		var n int
		var err error
		if linked && start > 0 {
			n, err = lz4.UncompressBlockWithDict(block, out, dst[max(0, start-lz4Window):start])
		} else {
			n, err = lz4.UncompressBlock(block, out)
		}
		if err != nil {
			return fmt.Errorf("lz4: corrupt block (%w)", err)
		}
		dst = dst[:start+n]
		return nil
	})
	return dst, err
}

// eachLZ4Block calls fn with each data block of the frames in src, whether
// it is stored uncompressed, and whether it may refer to the output before
// it (linked).
func eachLZ4Block(src []byte, fn func(block []byte, stored, linked bool) error) error {
	le := binary.LittleEndian
	for len(src) > 0 {
		if len(src) < 4 {
			return io.ErrUnexpectedEOF
		}
		magic := le.Uint32(src)
		if magic&lz4SkippableMask == lz4Skippable {
			if len(src) < 8 || uint64(le.Uint32(src[4:])) > uint64(len(src)-8) {
				return io.ErrUnexpectedEOF
			}
			src = src[8+le.Uint32(src[4:]):]
			continue
		}
		if magic != lz4Magic {
			return fmt.Errorf("lz4: bad frame magic %08x", magic)
		}
		if len(src) < 7 {
			return io.ErrUnexpectedEOF
		}
		flg, bd := src[4], src[5]
		if flg>>6 != 1 {
			return fmt.Errorf("lz4: frame version %d", flg>>6)
		}
		blockMax := 1 << (8 + 2*int(bd>>4&7))
		if blockMax < 64<<10 {
			return fmt.Errorf("lz4: block size code %d", bd>>4&7)
		}
		if flg&lz4FlagDictID != 0 {
			return errors.New("lz4: frames with a dictionary id are not supported")
		}
		hdr := 7 // magic, FLG, BD, HC
		if flg&lz4FlagSize != 0 {
			hdr += 8
		}
		if len(src) < hdr {
			return io.ErrUnexpectedEOF
		}
		src = src[hdr:]
		linked := flg&lz4FlagBlockIndep == 0
		for {
			if len(src) < 4 {
				return io.ErrUnexpectedEOF
			}
			size := le.Uint32(src)
			src = src[4:]
			if size == 0 {
				break
			}
			stored := size&0x80000000 != 0
			size &^= 0x80000000
			if int(size) > blockMax || int(size) > len(src) {
				return fmt.Errorf("lz4: block of %d bytes (max %d, %d left)", size, blockMax, len(src))
			}
			block := src[:size]
			src = src[size:]
			if flg&lz4FlagBlockSum != 0 {
				if len(src) < 4 {
					return io.ErrUnexpectedEOF
				}
				src = src[4:]
			}
			if err := fn(block, stored, linked); err != nil {
				return err
			}
		}
		if flg&lz4FlagContentSum != 0 {
			if len(src) < 4 {
				return io.ErrUnexpectedEOF
			}
			src = src[4:]
		}
	}
	return nil
}

// lz4BlockLen returns the decompressed length of an LZ4 block from its
// sequence headers (token, literal length, offset, match length; the
// literals are skipped, nothing is copied), or -1 when they do not add up.
// The last sequence of a block is literals only.
func lz4BlockLen(src []byte) int {
	n, i := 0, 0
	for i < len(src) {
		tok := src[i]
		var lit int
		var ok bool
		if lit, i, ok = lz4Length(src, i+1, int(tok>>4)); !ok {
			return -1
		}
		i += lit
		n += lit
		if i == len(src) {
			return n
		}
		if i+2 > len(src) {
			return -1
		}
		var ml int
		if ml, i, ok = lz4Length(src, i+2, int(tok&15)); !ok { // after the match offset
			return -1
		}
		n += ml + 4
	}
	return -1
}

// lz4Length reads the bytes that extend a token's 4-bit length n (15:
// bytes up to one below 255 are added) from src[i:]; it returns the length
// and where the sequence goes on.
func lz4Length(src []byte, i, n int) (int, int, bool) {
	if n != 15 {
		return n, i, true
	}
	for i < len(src) {
		b := src[i]
		i++
		n += int(b)
		if b != 255 {
			return n, i, true
		}
	}
	return 0, i, false
}
