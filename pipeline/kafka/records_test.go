package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// Unit tests of the native fetch's decoders on record batches written by
// an independent encoder, kafka-go's protocol package (the one its
// producer uses). The real broker's batches are read in the integration
// tests (TestIntegrationFetchDecoders).

// testRecord is what a batch is built from and a decoded message compared
// with.
type testRecord struct {
	key, value []byte // nil: null
	ts         int64  // milliseconds
}

// encodeBatch returns the record batch kafka-go's protocol encoder writes
// for recs with attrs, its base offset set to base.
func encodeBatch(t testing.TB, base int64, attrs protocol.Attributes, recs []testRecord) []byte {
	t.Helper()
	rs := make([]protocol.Record, len(recs))
	for i, r := range recs {
		rs[i] = protocol.Record{Time: time.UnixMilli(r.ts)}
		if r.key != nil {
			rs[i].Key = protocol.NewBytes(r.key)
		}
		if r.value != nil {
			rs[i].Value = protocol.NewBytes(r.value)
		}
		if i%3 == 1 {
			rs[i].Headers = []protocol.Header{{Key: "h", Value: []byte("header value")}, {Key: "n"}}
		}
	}
	set := protocol.RecordSet{Version: 2, Attributes: attrs, Records: protocol.NewRecordReader(rs...)}
	var buf bytes.Buffer
	if _, err := set.WriteTo(&buf); err != nil {
		t.Fatalf("RecordSet.WriteTo: %v", err)
	}
	b := buf.Bytes()
	// The set is written as in a response: its size, then the batch.
	if len(b) < 4+batchHeaderSize || int(binary.BigEndian.Uint32(b)) != len(b)-4 || b[4+16] != 2 {
		t.Fatalf("encoded record set of %d bytes: size %d, magic %d", len(b), binary.BigEndian.Uint32(b), b[4+16])
	}
	b = b[4:]
	binary.BigEndian.PutUint64(b, uint64(base)) // outside the CRC
	return b
}

// testRecords returns n records of varied sizes; some keys are null, some
// values empty.
func testRecords(n int, seed int) []testRecord {
	recs := make([]testRecord, n)
	for i := range recs {
		r := &recs[i]
		if (i+seed)%4 != 0 {
			r.key = fmt.Appendf(nil, "pod-%d", (i+seed)%7)
		}
		switch (i + seed) % 5 {
		case 0:
			r.value = []byte{}
		default:
			r.value = fmt.Appendf(nil, `{"log":"line %d of %d %s"}`, i, seed, strings.Repeat("NCCL INFO ", (i*seed)%40))
		}
		r.ts = 1_700_000_000_000 + int64(i*10+seed)
	}
	return recs
}

func checkDecoded(t *testing.T, got []Message, base int64, want []testRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("decoded %d messages; want %d", len(got), len(want))
	}
	for i, m := range got {
		w := want[i]
		if m.Offset != base+int64(i) || !bytes.Equal(m.Key, w.key) || (m.Key == nil) != (w.key == nil) ||
			!bytes.Equal(m.Value, w.value) || !m.Time.Equal(time.UnixMilli(w.ts)) {
			t.Fatalf("message %d = offset %d key %q value %q time %v; want %d %q %q %v",
				i, m.Offset, m.Key, m.Value, m.Time, base+int64(i), w.key, w.value, time.UnixMilli(w.ts))
		}
		if m.Topic != "t" || m.Partition != 3 || m.HighWaterMark != 99 {
			t.Fatalf("message %d: coordinates %s/%d hwm %d not the template's", i, m.Topic, m.Partition, m.HighWaterMark)
		}
	}
}

// decode appends to out the records of the complete record batches of recs
// at or after offset from (a batch may start before it), each a copy of
// tmpl with its offset, time, key and value (slices of the batch's buffer,
// or of recs when uncompressed). It returns the offset after the last
// complete batch (from when there was none) and whether a message refers
// to recs itself (the caller must then not reuse recs' memory). A truncated
// batch at the end is left for the next fetch; one at the start is an
// error, as a broker returns a first batch whole whatever the size limit.
// On an error, out holds the records of the batches before the bad one and
// next is the offset after them. It is fetcher.deliver without the queue:
// the partition reader calls decodeNext as it queues, one batch at a time.
func (d *batchDecoder) decode(recs []byte, from int64, tmpl Message, out []Message) (_ []Message, next int64, shared bool, err error) {
	next = from
	all := recs
	for first := true; ; first = false {
		var ok bool
		n := len(out)
		out, recs, next, ok, err = d.decodeNext(recs, next, from, tmpl, out, first)
		for _, m := range out[n:] {
			shared = shared || len(m.Value) > 0 && inside(m.Value, all)
		}
		if err != nil || !ok {
			return out, next, shared, err
		}
	}
}

var tmpl = Message{Topic: "t", Partition: 3, HighWaterMark: 99}

func TestDecodeBatchesCodecs(t *testing.T) {
	for _, c := range []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			a, b := testRecords(50, 1), testRecords(700, 2)
			recs := append(encodeBatch(t, 100, protocol.Attributes(c), a), encodeBatch(t, 150, protocol.Attributes(c), b)...)
			var d batchDecoder
			got, next, shared, err := d.decode(recs, 100, tmpl, nil)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if next != 850 {
				t.Errorf("next = %d; want 850", next)
			}
			if shared != (c == compress.None) {
				t.Errorf("shared = %v; want %v (records are slices of the response only uncompressed)", shared, c == compress.None)
			}
			checkDecoded(t, got, 100, append(a, b...))
			// Keys and values are capped: appending to one cannot
			// overwrite the next.
			for _, m := range got {
				if cap(m.Value) != len(m.Value) || cap(m.Key) != len(m.Key) {
					t.Fatalf("offset %d: key or value capacity beyond its length", m.Offset)
				}
			}
		})
	}
}

func TestDecodeBatchesFrom(t *testing.T) {
	recs := testRecords(20, 3)
	b := encodeBatch(t, 40, protocol.Attributes(compress.Lz4), recs)
	var d batchDecoder
	// A fetch at 47 gets the whole batch from 40: 40-46 are dropped.
	got, next, _, err := d.decode(b, 47, tmpl, nil)
	if err != nil || next != 60 {
		t.Fatalf("decode = next %d, %v; want 60, nil", next, err)
	}
	checkDecoded(t, got, 47, recs[7:])
	// A fetch past the batch gets nothing from it, and next stays.
	got, next, _, err = d.decode(b, 60, tmpl, nil)
	if err != nil || next != 60 || len(got) != 0 {
		t.Fatalf("decode past the batch = %d messages, next %d, %v; want none, 60, nil", len(got), next, err)
	}
}

func TestDecodeBatchesTruncated(t *testing.T) {
	a, b := testRecords(30, 4), testRecords(30, 5)
	first := encodeBatch(t, 0, protocol.Attributes(compress.Snappy), a)
	second := encodeBatch(t, 30, protocol.Attributes(compress.Snappy), b)
	var d batchDecoder
	for _, cut := range []int{1, 16, 17, 60, len(second) - 1} {
		recs := append(slices.Clone(first), second[:cut]...)
		got, next, _, err := d.decode(recs, 0, tmpl, nil)
		if err != nil || next != 30 {
			t.Fatalf("cut %d: decode = next %d, %v; want 30, nil (the partial batch left for the next fetch)", cut, next, err)
		}
		checkDecoded(t, got, 0, a)
	}
	// A response with only part of its first batch is an error, not an
	// empty fetch repeated forever.
	if _, _, _, err := d.decode(second[:len(second)-1], 30, tmpl, nil); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("decode of a truncated first batch = %v; want a truncation error", err)
	}
}

func TestDecodeBatchesCorrupt(t *testing.T) {
	a, b := testRecords(10, 6), testRecords(10, 7)
	first := encodeBatch(t, 0, protocol.Attributes(compress.Lz4), a)
	second := encodeBatch(t, 10, protocol.Attributes(compress.Lz4), b)
	recs := append(slices.Clone(first), second...)
	recs[len(first)+batchHeaderSize+5] ^= 0x40 // a byte of the second batch's compressed records
	var d batchDecoder
	got, next, _, err := d.decode(recs, 0, tmpl, nil)
	if !errors.Is(err, ErrCorruptBatch) || !strings.Contains(err.Error(), "CRC-32C") {
		t.Fatalf("decode of a corrupted batch: %v; want ErrCorruptBatch, a CRC-32C error", err)
	}
	if next != 10 {
		t.Errorf("next = %d; want 10 (after the good batch)", next)
	}
	checkDecoded(t, got, 0, a)

	// A batch whose CRC matches but whose records run short (a broken
	// producer): an error, and none of its records.
	bad := encodeBatch(t, 10, protocol.Attributes(compress.None), b)
	binary.BigEndian.PutUint32(bad[57:], 11) // one record more than it holds
	binary.BigEndian.PutUint32(bad[17:], crc32.Checksum(bad[21:], castagnoli))
	got, next, _, err = d.decode(append(slices.Clone(first), bad...), 0, tmpl, nil)
	if !errors.Is(err, ErrCorruptBatch) || next != 10 {
		t.Fatalf("decode of a short batch = next %d, %v; want 10 and ErrCorruptBatch", next, err)
	}
	checkDecoded(t, got, 0, a)
}

func TestDecodeBatchesControlAndLegacy(t *testing.T) {
	a := testRecords(5, 8)
	ctl := encodeBatch(t, 5, protocol.Transactional|protocol.Control, []testRecord{{key: []byte{0, 0, 0, 1}, value: []byte{0, 0, 0, 0, 0, 0}}})
	data := encodeBatch(t, 6, protocol.Transactional, a)
	var d batchDecoder
	got, next, _, err := d.decode(append(slices.Clone(ctl), data...), 5, tmpl, nil)
	if err != nil || next != 11 {
		t.Fatalf("decode = next %d, %v; want 11, nil", next, err)
	}
	checkDecoded(t, got, 6, a) // the commit marker is not a record

	legacy := slices.Clone(data)
	legacy[16] = 1
	if _, _, _, err := d.decode(legacy, 6, tmpl, nil); !errors.Is(err, errLegacyFormat) {
		t.Fatalf("decode of magic 1 = %v; want errLegacyFormat", err)
	}
}

func TestDecodeBatchesLogAppendTime(t *testing.T) {
	recs := testRecords(4, 9)
	b := encodeBatch(t, 0, protocol.Attributes(compress.None), recs)
	binary.BigEndian.PutUint16(b[21:], attrLogAppendTime)
	binary.BigEndian.PutUint64(b[35:], 1_800_000_000_000) // the broker's append time
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	var d batchDecoder
	got, _, _, err := d.decode(b, 0, tmpl, nil)
	if err != nil || len(got) != 4 {
		t.Fatalf("decode = %d messages, %v", len(got), err)
	}
	for _, m := range got {
		if m.Time.UnixMilli() != 1_800_000_000_000 {
			t.Fatalf("offset %d: time %v; want the batch's log append time", m.Offset, m.Time)
		}
	}
}

// TestLZ4LinkedBlocks: a frame whose second block copies from the first
// (block independence unset, as LZ4F writes by default); pierrec's writer
// only writes independent blocks, so the frame is assembled here.
func TestLZ4LinkedBlocks(t *testing.T) {
	first := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	b1 := make([]byte, lz4.CompressBlockBound(len(first)))
	n, err := lz4.CompressBlock(first, b1, nil)
	if err != nil || n == 0 {
		t.Fatalf("CompressBlock = %d, %v", n, err)
	}
	b1 = b1[:n]
	if n == 0 {
		b1 = nil
	}
	// Block 2: literal "x", then 8 bytes from 30 back (in block 1's
	// output, which "x" follows at 36: "789abcde"), then the literals
	// "ENDED".
	b2 := []byte{1<<4 | (8 - 4), 'x', 30, 0, 5 << 4, 'E', 'N', 'D', 'E', 'D'}
	frame := binary.LittleEndian.AppendUint32(nil, lz4Magic)
	frame = append(frame, 0x40, 0x40, 0) // version 1, linked blocks; 64 KiB blocks; header checksum (not checked)
	for _, blk := range [][]byte{b1, b2} {
		frame = binary.LittleEndian.AppendUint32(frame, uint32(len(blk)))
		frame = append(frame, blk...)
	}
	frame = binary.LittleEndian.AppendUint32(frame, 0)
	got, err := lz4Frames(nil, frame)
	if err != nil {
		t.Fatalf("lz4Frames: %v", err)
	}
	want := string(first) + "x" + "789abcde" + "ENDED"
	if string(got) != want {
		t.Fatalf("lz4Frames = %q; want %q", got, want)
	}
	// The same second block in a frame of independent blocks has nothing
	// to copy from: an error, not made-up bytes.
	frame[4] |= lz4FlagBlockIndep
	if got, err := lz4Frames(nil, frame); err == nil {
		t.Fatalf("lz4Frames with independent blocks = %q, nil; want an error", got)
	}
}

func TestLZ4FramesExactSize(t *testing.T) {
	// A highly compressible batch after one that compressed little: its
	// buffer is made at the size its blocks' sequence headers add up to.
	val := bytes.Repeat([]byte("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"), 2000)
	recs := []testRecord{{key: []byte("k"), value: val, ts: 1}}
	b := encodeBatch(t, 0, protocol.Attributes(compress.Lz4), recs)
	d := batchDecoder{ratio: 0.1}
	got, _, _, err := d.decode(b, 0, tmpl, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	checkDecoded(t, got, 0, recs)
	if d.ratio < 10 {
		t.Errorf("ratio after the batch = %.1f; want the batch's (> 10)", d.ratio)
	}
	// The measure agrees with the decoder, and a block whose sequences do
	// not add up has none.
	frame := b[batchHeaderSize:]
	out, err := lz4Frames(nil, frame)
	if err != nil || len(out) < len(val) || cap(out)-len(out) > 8<<10 {
		t.Fatalf("lz4Frames = %d bytes in a %d-byte buffer, %v; want a buffer of its size (rounded to a page)", len(out), cap(out), err)
	}
	total := 0
	if err := eachLZ4Block(frame, func(block []byte, stored, _ bool) error {
		if stored {
			total += len(block)
		} else {
			total += lz4BlockLen(block)
		}
		return nil
	}); err != nil || total != len(out) {
		t.Fatalf("blocks measured %d bytes, %v; decoded %d", total, err, len(out))
	}
	if n := lz4BlockLen([]byte{0x20, 'a'}); n != -1 {
		t.Errorf("lz4BlockLen of a block cut in its literals = %d; want -1", n)
	}
}

// zeros reads zeros for ever: a decompression bomb's output.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReadLimited(t *testing.T) {
	out, err := readLimited(nil, zeros{}, 4<<20)
	if err == nil || len(out) > 4<<20+1 {
		t.Fatalf("readLimited of an endless stream = %d bytes, %v; want an error at 4 MiB", len(out), err)
	}
	out, err = readLimited(make([]byte, 0, 10), bytes.NewReader(make([]byte, 1000)), 4<<20)
	if err != nil || len(out) != 1000 {
		t.Fatalf("readLimited of 1000 bytes = %d, %v", len(out), err)
	}
	out, err = readLimited(nil, bytes.NewReader(make([]byte, 4<<20)), 4<<20)
	if err != nil || len(out) != 4<<20 {
		t.Fatalf("readLimited of exactly the limit = %d, %v; want all of it", len(out), err)
	}
}

func TestFetchRequestResponse(t *testing.T) {
	// The request as kafka-go's own encoder writes it, for every version
	// the native fetch may speak.
	for v := int16(minFetchVersion); v <= fetchVersion; v++ {
		r := fetchRequest{version: v, correlation: 7, topic: "logs", partition: 2, offset: 12345,
			minBytes: 1, maxBytes: 1 << 20, maxWait: 500 * time.Millisecond}
		got := appendFetchRequest(nil, r)
		if int(binary.BigEndian.Uint32(got)) != len(got)-4 {
			t.Fatalf("v%d: size prefix %d; want %d", v, binary.BigEndian.Uint32(got), len(got)-4)
		}
		var want bytes.Buffer
		if err := protocol.WriteRequest(&want, v, 7, clientID, fetchRequestMessage(r)); err != nil {
			t.Fatalf("v%d: protocol.WriteRequest: %v", v, err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("v%d: request\n%x\nkafka-go writes\n%x", v, got, want.Bytes())
		}
	}
}

func TestDecodeFetchResponse(t *testing.T) {
	want := testRecords(3, 10)
	set := func(recs []testRecord) protocol.RecordSet {
		rs := make([]protocol.Record, len(recs))
		for i, r := range recs {
			rs[i] = protocol.Record{Offset: int64(i), Time: time.UnixMilli(r.ts), Value: protocol.NewBytes(r.value)}
			if r.key != nil {
				rs[i].Key = protocol.NewBytes(r.key)
			}
		}
		return protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(rs...)}
	}
	for v := int16(minFetchVersion); v <= fetchVersion; v++ {
		resp := &fetch.Response{Topics: []fetch.ResponseTopic{
			{Topic: "other", Partitions: []fetch.ResponsePartition{{Partition: 2, HighWatermark: 5, RecordSet: set(testRecords(2, 11))}}},
			{Topic: "logs", Partitions: []fetch.ResponsePartition{
				{Partition: 1, ErrorCode: int16(kafka.NotLeaderForPartition), RecordSet: set(testRecords(1, 12))},
				{Partition: 2, HighWatermark: 77, LastStableOffset: 77, PreferredReadReplica: -1,
					AbortedTransactions: []fetch.ResponseTransaction{{ProducerID: 1, FirstOffset: 2}}, RecordSet: set(want)},
			}},
		}}
		body := responseBody(t, v, 9, resp)
		res, err := decodeFetchResponse(body, v, 9, "logs", 2)
		if err != nil || res.highWaterMark != 77 {
			t.Fatalf("v%d: decode = hwm %d, %v; want 77, nil", v, res.highWaterMark, err)
		}
		var d batchDecoder
		got, _, _, err := d.decode(res.records, 0, tmpl, nil)
		if err != nil {
			t.Fatalf("v%d: records: %v", v, err)
		}
		checkDecoded(t, got, 0, want)
		// A partition error comes back as kafka-go's error, for the retry
		// rules.
		if _, err := decodeFetchResponse(body, v, 9, "logs", 1); !errors.Is(err, kafka.NotLeaderForPartition) {
			t.Fatalf("v%d: decode of the partition with an error = %v; want NotLeaderForPartition", v, err)
		}
		if _, err := decodeFetchResponse(body, v, 9, "logs", 3); err == nil {
			t.Fatalf("v%d: a response without the partition decoded", v)
		}
		if _, err := decodeFetchResponse(body, v, 8, "logs", 2); err == nil {
			t.Fatalf("v%d: a response with another correlation id decoded", v)
		}
		for cut := range len(body) {
			if _, err := decodeFetchResponse(body[:cut], v, 9, "logs", 2); err == nil {
				t.Fatalf("v%d: a response cut at %d of %d bytes decoded", v, cut, len(body))
			}
		}
	}
}

// responseBody is resp as kafka-go's protocol package writes it, without
// the size.
func responseBody(t *testing.T, v int16, corr int32, resp protocol.Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protocol.WriteResponse(&buf, v, corr, resp); err != nil {
		t.Fatalf("v%d: protocol.WriteResponse: %v", v, err)
	}
	b := buf.Bytes()
	if int(binary.BigEndian.Uint32(b)) != len(b)-4 {
		t.Fatalf("v%d: response size %d of %d bytes", v, binary.BigEndian.Uint32(b), len(b))
	}
	return b[4:]
}

// fetchRequestMessage is r as kafka-go's protocol package has it.
func fetchRequestMessage(r fetchRequest) *fetch.Request {
	return &fetch.Request{ReplicaID: -1, MaxWaitTime: int32(r.maxWait.Milliseconds()), MinBytes: r.minBytes,
		MaxBytes: r.maxBytes, IsolationLevel: r.isolationRead, SessionID: 0, SessionEpoch: -1,
		Topics: []fetch.RequestTopic{{Topic: r.topic, Partitions: []fetch.RequestPartition{{
			Partition: r.partition, CurrentLeaderEpoch: -1, FetchOffset: r.offset, LogStartOffset: -1,
			PartitionMaxBytes: r.maxBytes}}}},
		ForgottenTopics: []fetch.RequestForgottenTopic{}}
}

// FuzzDecodeBatches: whatever a response holds, decoding returns an error
// or messages inside it, never a panic; run with -fuzz to explore beyond
// the seeds.
func FuzzDecodeBatches(f *testing.F) {
	for i, c := range []compress.Compression{compress.None, compress.Lz4, compress.Gzip} {
		f.Add(encodeBatch(f, int64(i), protocol.Attributes(c), testRecords(5, i)), int64(i))
	}
	f.Fuzz(func(t *testing.T, recs []byte, from int64) {
		var d batchDecoder
		got, next, _, err := d.decode(recs, from, tmpl, nil)
		if next < from {
			t.Fatalf("next %d < from %d", next, from)
		}
		// Decoded into pooled arenas that held garbage: the same
		// messages, and the same error or none.
		poisonPools()
		pd := batchDecoder{pooled: true}
		var pgot []Message
		var held []*arena
		rest, pnext := recs, from
		for first := true; ; first = false {
			var ok bool
			var perr error
			pgot, rest, pnext, ok, perr = pd.decodeNext(rest, pnext, from, tmpl, pgot, first)
			if a := pd.takeArena(); a != nil {
				held = append(held, a)
			}
			if perr != nil || !ok {
				if (perr == nil) != (err == nil) || pnext != next {
					t.Fatalf("pooled: next %d, error %v; unpooled next %d, error %v", pnext, perr, next, err)
				}
				break
			}
		}
		sameMessages(t, "pooled", pgot, got)
		for _, a := range held {
			a.drop()
		}
		for _, m := range got {
			if m.Offset < from || m.Offset >= next {
				t.Fatalf("message offset %d outside [%d, %d) (err %v)", m.Offset, from, next, err)
			}
		}
		if len(recs) >= batchHeaderSize {
			// The batch itself, as if its CRC matched.
			got, err := d.batch(recs, from, tmpl, nil)
			for _, m := range got {
				if m.Offset < from {
					t.Fatalf("batch: message offset %d < from %d", m.Offset, from)
				}
			}
			// Its decompressed records never read what a pooled arena
			// held before.
			poisonPools()
			pgot, perr := pd.batch(recs, from, tmpl, nil)
			if (perr == nil) != (err == nil) {
				t.Fatalf("batch: pooled error %v; unpooled %v", perr, err)
			}
			sameMessages(t, "pooled batch", pgot, got)
			if a := pd.takeArena(); a != nil {
				a.drop()
			}
		}
		_, _ = lz4Frames(nil, recs)
	})
}

// FuzzDecodeBatchesKafkaGo is a differential fuzzer: a record batch made
// well-formed around the fuzzer's bytes (its length, magic 2 and CRC-32C
// set so that both decoders read past them) is decoded by the native
// decoder and by kafka-go's own (protocol.RecordSet, the codec of its
// producer and of kafka.Client.Fetch). Where the native decoder returns
// records, kafka-go returns the same ones; where kafka-go returns every
// record the batch counts, so does the native decoder; where kafka-go
// stops early at a record that does not decode (it keeps the ones
// before and reports nothing), the native decoder reports the batch as
// corrupt. One difference is by design: the native decoder skips the LZ4
// frames' xxh32 checksums (the CRC-32C covers the compressed bytes), so
// kafka-go's checksum errors there are not compared.
func FuzzDecodeBatchesKafkaGo(f *testing.F) {
	for i, c := range []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
		f.Add(encodeBatch(f, int64(i), protocol.Attributes(c), testRecords(6, i)))
	}
	f.Fuzz(func(t *testing.T, batch []byte) {
		if len(batch) < batchHeaderSize {
			return
		}
		b := bytes.Clone(batch)
		be := binary.BigEndian
		count := int32(be.Uint32(b[57:]))
		if count < 0 || count > 1<<14 {
			return // kafka-go allocates count records before reading any (a negative count panics)
		}
		be.PutUint32(b[8:], uint32(len(b)-12))
		b[16] = 2
		// Not a control batch, create time (the native decoder's
		// log-append time is TestDecodeBatchesLogAppendTime's), and a last
		// offset delta that is not negative (kafka-go ignores it).
		be.PutUint16(b[21:], be.Uint16(b[21:])&^uint16(attrControl|attrLogAppendTime))
		be.PutUint32(b[23:], be.Uint32(b[23:])&0x7fffffff)
		be.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
		from := int64(be.Uint64(b))

		var d batchDecoder
		got, _, _, err := d.decode(b, from, tmpl, nil)

		var rs protocol.RecordSet
		framed := be.AppendUint32(nil, uint32(len(b)))
		_, kerr := rs.ReadFrom(bytes.NewReader(append(framed, b...)))
		var want []Message
		n := 0 // records kafka-go read
		if kerr == nil && rs.Records != nil {
			for {
				r, rerr := rs.Records.ReadRecord()
				if rerr != nil {
					if !errors.Is(rerr, io.EOF) {
						kerr = rerr
					}
					break
				}
				n++
				key, kerr1 := protocol.ReadAll(r.Key)
				value, kerr2 := protocol.ReadAll(r.Value)
				if kerr1 != nil || kerr2 != nil {
					t.Fatalf("kafka-go: record %d: key %v, value %v", n, kerr1, kerr2)
				}
				if r.Offset < from {
					continue // the native decoder skips records before the offset asked for
				}
				m := tmpl
				m.Offset, m.Time, m.Key, m.Value = r.Offset, r.Time, key, value
				if r.Value != nil && value == nil {
					m.Value = []byte{}
				}
				if r.Key != nil && key == nil {
					m.Key = []byte{}
				}
				want = append(want, m)
			}
		}
		all := n == int(count) // kafka-go read every record the batch counts
		lz4Sum := compress.Compression(be.Uint16(b[21:])&attrCompression) == compress.Lz4 &&
			kerr != nil && strings.Contains(kerr.Error(), "checksum")
		switch {
		case count == 0:
			// Nothing to read: the native decoder does not decompress
			// the batch; kafka-go does and may fail there.
			if err != nil || len(got) != 0 {
				t.Fatalf("a batch of no records: native %d records, error %v", len(got), err)
			}
		case err == nil && kerr != nil && !lz4Sum:
			t.Fatalf("native decoded %d records; kafka-go: %v", len(got), kerr)
		case err == nil && kerr == nil:
			if !all {
				t.Fatalf("native decoded %d records; kafka-go stopped before the batch's %d records without an error", len(got), count)
			}
			sameMessages(t, "native vs kafka-go", got, want)
		case err != nil && kerr == nil && all:
			t.Fatalf("native: %v; kafka-go decoded all %d records", err, count)
		}
	})
}

// BenchmarkDecodeBatches decodes ~1 MiB of LZ4 batches the way the
// partition reader does (fetcher.deliver): one batch at a time, each
// batch's messages in a slice of their own.
func BenchmarkDecodeBatches(b *testing.B) {
	var recs []byte
	n := 0
	for i := 0; len(recs) < 1<<20; i++ {
		rs := testRecords(200, i)
		recs = append(recs, encodeBatch(b, int64(n), protocol.Attributes(compress.Lz4), rs)...)
		n += len(rs)
	}
	b.SetBytes(int64(len(recs)))
	b.ReportAllocs()
	var d batchDecoder
	for b.Loop() {
		got, rest, next := 0, recs, int64(0)
		for first := true; ; first = false {
			out, r, nx, ok, err := d.decodeNext(rest, next, 0, tmpl, nil, first)
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
			got, rest, next = got+len(out), r, nx
		}
		if got != n {
			b.Fatalf("decoded %d messages; want %d", got, n)
		}
	}
}

// TestRetryReason: a corrupt record batch, as the partition reader wraps
// it, is told apart from other fetch errors.
func TestRetryReason(t *testing.T) {
	corrupt := fmt.Errorf("kafka fetch logs/3: %w", fmt.Errorf("record batch at offset 5: %w: CRC-32C 1, stored 2", ErrCorruptBatch))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{corrupt, "corrupt_batch"},
		{fmt.Errorf("kafka fetch logs/3: %w", errors.New("dial tcp 127.0.0.1:9092: connection refused")), "fetch"},
		{fmt.Errorf("kafka fetch logs/3: %w", ErrLoopStopped), "fetch"},
	} {
		if got := RetryReason(tc.err); got != tc.want {
			t.Errorf("RetryReason(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}

// TestDeliverHoldsArenas: the partition reader's chunks hold the arenas of
// the decompressed batches their records are in (a chunk may span
// batches, a batch several chunks, an uncompressed batch in between has
// none), deliver keeps no hold once it returned, and the release of the
// last chunk of an arena gives its buffer back; the records read the same
// until their chunk is released.
func TestDeliverHoldsArenas(t *testing.T) {
	var recs []byte
	var want []testRecord
	for i, attrs := range []protocol.Attributes{protocol.Attributes(compress.Lz4), protocol.Attributes(compress.Lz4), 0,
		protocol.Attributes(compress.Gzip), protocol.Attributes(compress.Lz4)} {
		rs := testRecords(7+3*i, i)
		recs = append(recs, encodeBatch(t, int64(len(want)), attrs, rs)...)
		want = append(want, rs...)
	}
	q := make(chan chunk, 100)
	f := &fetcher{q: q, size: 4, s: &Source{}}
	st := &f.s.stats
	dec := batchDecoder{pooled: true, st: st}
	body := st.newArena(recs) // the response, held by the reader
	next, sent, err := f.deliver(context.Background(), &dec, body, recs, 0, tmpl)
	if err != nil || !sent || next != int64(len(want)) {
		t.Fatalf("deliver = %d, sent %v, %v; want %d, sent", next, sent, err, len(want))
	}
	body.drop() // as the reader does after deliver
	close(q)
	var chunks []chunk
	var got []Message
	holders := map[*arena]int{}
	for c := range q {
		chunks = append(chunks, c)
		got = append(got, c.msgs...)
		for _, a := range c.arenas {
			holders[a]++
		}
	}
	checkDecoded(t, got, 0, want)
	if len(holders) != 5 || holders[body] == 0 {
		t.Fatalf("%d arenas held by the chunks, the response's %d times; want 5: the compressed batches' and the response's (an uncompressed batch)", len(holders), holders[body])
	}
	for a, n := range holders {
		if r := a.refs.Load(); r != int32(n) {
			t.Fatalf("arena of %d bytes: %d holds; want %d, its chunks' (deliver kept one)", len(a.buf), r, n)
		}
	}
	// Every record of a chunk lies in the chunk's arenas.
	for i, c := range chunks {
		for _, m := range c.msgs {
			in := len(m.Value) == 0
			for _, a := range c.arenas {
				in = in || inside(m.Value, a.buf)
			}
			if !in {
				t.Fatalf("chunk %d: record %d's value in an arena the chunk does not hold", i, m.Offset)
			}
		}
	}
	for _, c := range chunks {
		if rel := c.releaser(); rel != nil {
			rel()
		}
	}
	for a := range holders {
		if r := a.refs.Load(); r != 0 || a.buf != nil {
			t.Fatalf("after every release an arena has %d holds, buffer %v; want 0, given back", r, a.buf != nil)
		}
	}
	// A second release of a chunk changes nothing.
	a := st.newArena(st.takeBuf(1)) // held by deliver, say
	a.hold()                        // and by the chunk
	rel := chunk{arenas: []*arena{a}}.releaser()
	rel()
	rel()
	if r := a.refs.Load(); r != 1 {
		t.Fatalf("a chunk released twice left %d holds of 2; want 1", r)
	}
	a.drop()
	if s := f.s.Stats(); s.Arenas != 0 || s.ArenaBytes != 0 {
		t.Fatalf("after every release the source counts %d arenas of %d bytes; want none", s.Arenas, s.ArenaBytes)
	}

	// Queued nowhere (the context ended): deliver gives every hold back,
	// its own and those of the chunk it could not queue.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f = &fetcher{q: make(chan chunk), size: 4, s: &Source{}}
	st = &f.s.stats
	dec = batchDecoder{pooled: true, st: st}
	body = st.newArena(recs)
	if _, sent, _ := f.deliver(ctx, &dec, body, recs, 0, tmpl); sent {
		t.Fatal("deliver with an ended context: sent")
	}
	body.drop()
	if s := f.s.Stats(); s.Arenas != 0 || s.ArenaBytes != 0 {
		t.Fatalf("deliver that queued nothing left %d arenas of %d bytes held", s.Arenas, s.ArenaBytes)
	}
}

// inside reports whether b lies in buf's memory.
func inside(b, buf []byte) bool {
	if len(buf) == 0 {
		return false
	}
	p, lo, hi := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&buf[0]))+uintptr(cap(buf))
	return p >= lo && p+uintptr(len(b)) <= hi
}

// TestBufClass: pooled buffers come in powers of two from 64 KiB to 64 MiB;
// only a buffer of exactly a class's size goes back to its pool.
func TestBufClass(t *testing.T) {
	for _, tc := range []struct{ n, class int }{{1, 0}, {64 << 10, 0}, {64<<10 + 1, 1}, {1 << 20, 4}, {64 << 20, 10}, {64<<20 + 1, -1}} {
		if c := bufClass(tc.n); c != tc.class {
			t.Errorf("bufClass(%d) = %d; want %d", tc.n, c, tc.class)
		}
		var st *fetchStats
		b := st.takeBuf(tc.n)
		if len(b) != 0 || cap(b) < tc.n || tc.class >= 0 && cap(b) != 1<<(tc.class+16) {
			t.Errorf("takeBuf(%d) = len %d cap %d", tc.n, len(b), cap(b))
		}
	}
}

// poisonPools fills a buffer of the smallest pool (the fuzzer's batches
// decompress to less than 64 KiB) with garbage and puts it back, for the
// next takeBuf to find.
func poisonPools() {
	var st *fetchStats
	b := st.takeBuf(1 << minPooledShift)
	b = b[:cap(b)]
	copy(b, garbage[:])
	putBuf(b)
}

var garbage = func() (g [1 << minPooledShift]byte) {
	for i := range g {
		g[i] = 0xEE
	}
	return g
}()

// sameMessages fails unless got and want hold the same records.
func sameMessages(t *testing.T, name string, got, want []Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages; want %d", name, len(got), len(want))
	}
	for i := range got {
		a, b := got[i], want[i]
		if a.Offset != b.Offset || !bytes.Equal(a.Key, b.Key) || (a.Key == nil) != (b.Key == nil) ||
			!bytes.Equal(a.Value, b.Value) || !a.Time.Equal(b.Time) {
			t.Fatalf("%s: message %d = offset %d key %q value %q; want %d %q %q", name, i, a.Offset, a.Key, a.Value, b.Offset, b.Key, b.Value)
		}
	}
}
