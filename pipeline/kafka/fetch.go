package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

const (
	// chunkMax is the most messages one partition reader hands to the
	// queue at once (fewer when Config.QueueCapacity is smaller). A fetch of
	// 1 MiB holds ~2 300 Fluent Bit records of ~450 B; 256 a hand-off makes
	// the channel operations per record negligible (with kafka-go's
	// Reader, one channel send and receive per record plus our own two
	// were a large share of the consume phase's profile) while a chunk
	// stays small beside the queue.
	chunkMax = 256
	// readTimeout bounds reading one chunk of a fetch response that has
	// started to arrive (kafka-go's ReaderConfig.ReadBatchTimeout default).
	readTimeout = 10 * time.Second
	// fetchBackoffMin and fetchBackoffMax pace reconnects of a partition
	// reader after an error (kafka-go's Reader defaults).
	fetchBackoffMin = 100 * time.Millisecond
	fetchBackoffMax = time.Second
)

// chunk is up to chunkMax consecutive messages of one partition, and the
// arenas their keys and values are slices of (held for the chunk).
type chunk struct {
	msgs   []Message
	arenas []*arena
}

// releaser returns the chunk's pipeline.Input.Release: it drops the
// chunk's holds, once however often it is called (a second drop would
// give up holds of other chunks, and their buffer could be reused under
// them); nil when the chunk holds none.
func (c chunk) releaser() func() {
	if len(c.arenas) == 0 {
		return nil
	}
	var done atomic.Bool
	return func() {
		if done.Swap(true) {
			return
		}
		c.drop()
	}
}

// drop gives up the chunk's holds.
func (c chunk) drop() {
	for _, a := range c.arenas {
		a.drop()
	}
}

// heldArena is an arena deliver holds, and where in its pending messages
// the records of it start and end.
type heldArena struct {
	a          *arena
	start, end int
}

// fetcher reads one partition through kafka-go's connection-level fetch
// API (Conn.ReadBatchWith): one fetch request, its messages read into
// chunks, each chunk one send on the queue. It does what kafka-go's Reader
// does for one partition (leader lookup, seek, reconnect with backoff,
// offset-out-of-range handling) without the Reader's per-message channel.
type fetcher struct {
	s     *Source
	p     Partition
	q     chan<- chunk
	fatal chan<- error
	warn  chan<- error
	size  int // messages per chunk

	// legacy is set once a fetch response held message format v0/v1: this
	// partition is read through kafka-go from then on.
	legacy bool
	corr   int32 // the native fetch's last correlation id
}

// run fetches until ctx is done or an error that retrying will not fix.
func (f *fetcher) run(ctx context.Context) {
	off := f.p.CommittedOffset
	if off < 0 {
		off = f.s.start
	}
	backoff := pipeline.Backoff{Min: fetchBackoffMin, Max: fetchBackoffMax}
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !backoff.Wait(ctx) {
			return
		}
		conn, raw, start, err := f.connect(ctx, off)
		if err == nil {
			attempt = 0
			backoff.Reset()
			off = start
			if raw.conn != nil {
				off, err = f.readNative(ctx, conn, raw, off)
			} else {
				off, err = f.read(ctx, conn, off)
			}
			conn.Close()
		}
		if errors.Is(err, errLegacyFormat) {
			f.legacy = true
			select {
			case f.warn <- fmt.Errorf("kafka fetch %s/%d at offset %d: %w: reading the partition through kafka-go's reader from here on", f.p.Topic, f.p.Partition, off, err):
			default:
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue
		}
		err = fmt.Errorf("kafka fetch %s/%d: %w", f.p.Topic, f.p.Partition, err)
		if permanent(err) {
			select {
			case f.fatal <- err:
			default:
			}
			return
		}
		select {
		case f.warn <- err:
		default:
		}
	}
}

// nativeConn is the connection under a kafka.Conn that the native fetch
// reads, and the Fetch version it speaks; conn nil: read through kafka-go.
type nativeConn struct {
	conn    net.Conn
	version int16
}

// connect dials the partition's leader and seeks to off, a real offset or
// kafka.FirstOffset / LastOffset; an offset before the log's start (deleted
// by retention) starts at the first one. It returns the absolute offset,
// and the connection for the native fetch unless kafka-go reads this one.
func (f *fetcher) connect(ctx context.Context, off int64) (*kafka.Conn, nativeConn, int64, error) {
	var err error
	native := f.s.cfg.FetchDecoder == FetchNative && !f.legacy
	for _, b := range f.s.cfg.Brokers {
		var conn *kafka.Conn
		var raw nativeConn
		d := f.s.dialer
		if native {
			d = captureDialer(d, &raw.conn)
		}
		conn, err = d.DialLeader(ctx, "tcp", b, f.p.Topic, int(f.p.Partition))
		if err != nil {
			continue
		}
		first, last, oerr := offsets(conn)
		if oerr == nil && native {
			raw.version, oerr = fetchVersionOf(conn)
			if raw.version < minFetchVersion {
				raw.conn = nil
			}
		}
		if oerr != nil {
			conn.Close()
			return nil, nativeConn{}, 0, oerr
		}
		switch {
		case off == kafka.LastOffset:
			off = last
		case off == kafka.FirstOffset || off < first:
			off = first
		}
		if _, err := conn.Seek(off, kafka.SeekAbsolute); err != nil {
			conn.Close()
			return nil, nativeConn{}, 0, err
		}
		_ = conn.SetDeadline(time.Time{})
		return conn, raw, off, nil
	}
	return nil, nativeConn{}, 0, err
}

// captureDialer returns a copy of d that stores in *raw each connection it
// opens, TLS included (done here instead of by kafka-go, so that *raw is
// the stream kafka-go's SASL and requests run on): after DialLeader, the
// leader's. The native fetch writes and reads it directly, never while
// the kafka.Conn on it is in a request.
func captureDialer(d *kafka.Dialer, raw *net.Conn) *kafka.Dialer {
	c := *d
	tc := c.TLS
	c.TLS = nil
	nd := &net.Dialer{LocalAddr: d.LocalAddr, FallbackDelay: d.FallbackDelay, KeepAlive: d.KeepAlive}
	c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc != nil {
			cfg := tc
			if cfg.ServerName == "" {
				// As kafka-go does: the certificate must name the dialled host.
				cfg = tc.Clone()
				host, _, herr := net.SplitHostPort(addr)
				if herr != nil {
					host = addr
				}
				cfg.ServerName = host
			}
			t := tls.Client(conn, cfg)
			if err := t.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			conn = t
		}
		*raw = conn
		return conn, nil
	}
	return &c
}

// fetchVersionOf returns the Fetch version for the native fetch on conn:
// the broker's newest up to fetchVersion (0 when it has none).
func fetchVersionOf(conn *kafka.Conn) (int16, error) {
	vs, err := conn.ApiVersions()
	if err != nil {
		return 0, err
	}
	for _, v := range vs {
		if v.ApiKey == fetchAPIKey {
			if v.MaxVersion < minFetchVersion || v.MinVersion > fetchVersion {
				return 0, nil
			}
			return min(v.MaxVersion, fetchVersion), nil
		}
	}
	return 0, nil
}

// offsets reads the partition's first and last offsets.
func offsets(conn *kafka.Conn) (first, last int64, err error) {
	_ = conn.SetDeadline(time.Now().Add(dialTimeout))
	return conn.ReadOffsets()
}

// read fetches from conn until ctx is done or the connection fails, and
// returns the next offset to read with the error (nil when ctx ended it).
func (f *fetcher) read(ctx context.Context, conn *kafka.Conn, off int64) (int64, error) {
	// A fetch waits up to MaxWait on the broker; cancelling ctx must not
	// wait for it: closing the connection ends a read in progress.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	cfg := kafka.ReadBatchConfig{MinBytes: f.s.cfg.MinBytes, MaxBytes: f.s.cfg.MaxBytes, MaxWait: f.s.cfg.MaxWait}
	for ctx.Err() == nil {
		_ = conn.SetReadDeadline(time.Now().Add(f.s.cfg.MaxWait + readTimeout))
		batch := conn.ReadBatchWith(cfg)
		hwm := batch.HighWaterMark()
		err := f.drain(ctx, conn, batch, hwm)
		cerr := batch.Close()
		// The batch's offset is the next one to read, past records
		// removed by compaction at the end of a record batch too.
		off = batch.Offset()
		if ctx.Err() != nil {
			return off, nil
		}
		if err == nil {
			err = cerr
		}
		oor := errors.Is(err, kafka.OffsetOutOfRange)
		if off, err = f.after(ctx, conn, off, err); err != nil || ctx.Err() != nil {
			return off, err
		}
		if oor {
			if _, err := conn.Seek(off, kafka.SeekAbsolute); err != nil {
				return off, err
			}
			_ = conn.SetDeadline(time.Time{})
		}
	}
	return off, nil
}

// after decides what follows a fetch that ended with err at offset off:
// fetch again from the offset it returns, or (error) reconnect.
func (f *fetcher) after(ctx context.Context, conn *kafka.Conn, off int64, err error) (int64, error) {
	switch {
	case err == nil, errors.Is(err, kafka.RequestTimedOut):
		// The fetch returned everything it had, or nothing within
		// MaxWait: fetch again.
		return off, nil
	case errors.Is(err, kafka.OffsetOutOfRange):
		first, last, oerr := offsets(conn)
		if oerr != nil {
			return off, oerr
		}
		switch {
		case off < first: // deleted by retention meanwhile
			off = first
		case off < last: // more arrived since: retry at once
		default: // past the end: wait for records
			sleep(ctx, f.s.cfg.MaxWait)
		}
		return off, nil
	default:
		// Broken connection, a leader that moved, a corrupt batch, an
		// unknown error: reconnect (to the leader of the moment) from off.
		return off, err
	}
}

// readNative is read for the native fetch: Fetch requests written to
// raw, responses decoded by decodeFetchResponse and batchDecoder.
func (f *fetcher) readNative(ctx context.Context, conn *kafka.Conn, raw nativeConn, off int64) (int64, error) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var req []byte
	dec := batchDecoder{pooled: true, st: &f.s.stats}
	for ctx.Err() == nil {
		f.corr++
		req = appendFetchRequest(req[:0], fetchRequest{version: raw.version, correlation: f.corr,
			topic: f.p.Topic, partition: f.p.Partition, offset: off,
			minBytes: int32(f.s.cfg.MinBytes), maxBytes: int32(f.s.cfg.MaxBytes), maxWait: f.s.cfg.MaxWait})
		body, err := f.roundTrip(raw.conn, req)
		var res fetchResult
		if err == nil {
			res, err = decodeFetchResponse(body.buf, raw.version, f.corr, f.p.Topic, f.p.Partition)
			f.s.stats.nativeFetches.Add(1)
		}
		if err == nil {
			tmpl := Message{Topic: f.p.Topic, Partition: f.p.Partition, HighWaterMark: res.highWaterMark}
			var sent bool
			off, sent, err = f.deliver(ctx, &dec, body, res.records, off, tmpl)
			if !sent {
				body.drop()
				return off, nil
			}
		}
		if body != nil {
			body.drop()
		}
		if ctx.Err() != nil {
			return off, nil
		}
		if res.throttle > 0 && clientThrottles(raw.version) {
			// A quota: the broker answered at once and sends nothing
			// more to this client until the pause is over (a request
			// sent meanwhile waits on the broker, or with a broker that
			// mutes the connection, times out).
			f.s.stats.throttled.Add(1)
			f.s.stats.throttleNanos.Add(int64(res.throttle))
			if !sleep(ctx, res.throttle) {
				return off, nil
			}
		}
		if off, err = f.after(ctx, conn, off, err); err != nil {
			return off, err
		}
	}
	return off, nil
}

// deliver decodes the record batches of recs, in the response body, one
// at a time and queues their messages in chunks of f.size, so that a
// response's batches are not all decompressed at once (log records
// compress several-fold, so a 1 MiB fetch is several MB decompressed, and
// all partitions wait to queue at once while catching up). What decoded before an error is queued; off
// becomes the offset after it. sent is false when ctx ended first.
//
// The records are slices of arenas: of a decompressed batch's, of body
// for an uncompressed batch. deliver holds an arena until the last record
// of it is queued, and every chunk with records of it holds it until the
// chunk is released (pipeline.Input.Release).
func (f *fetcher) deliver(ctx context.Context, dec *batchDecoder, body *arena, recs []byte, off int64, tmpl Message) (next int64, sent bool, err error) {
	var c []Message
	var held []heldArena
	defer func() {
		for _, h := range held {
			h.a.drop()
		}
	}()
	from := off
	for first := true; ; first = false {
		var ok bool
		n := len(c)
		c, recs, off, ok, err = dec.decodeNext(recs, off, from, tmpl, c, first)
		a := dec.takeArena()
		if a == nil && len(c) > n {
			a = body // uncompressed: the records are slices of the response
			a.hold()
		}
		if a != nil {
			if len(c) > n {
				held = append(held, heldArena{a, n, len(c)})
			} else {
				a.drop()
			}
		}
		for len(c) >= f.size {
			if !f.sendHeld(ctx, cut(c[:f.size:f.size], held)) {
				return off, false, nil
			}
			c = c[f.size:]
			held = shift(held, f.size)
		}
		if err != nil || !ok {
			break
		}
	}
	if len(c) > 0 && !f.sendHeld(ctx, cut(c[:len(c):len(c)], held)) {
		return off, false, nil
	}
	return off, true, err
}

// sendHeld is send for a chunk that holds arenas: one that is not queued
// gives its holds back.
func (f *fetcher) sendHeld(ctx context.Context, c chunk) bool {
	if f.send(ctx, c) {
		return true
	}
	c.drop()
	return false
}

// cut returns the chunk of msgs, the first pending messages, holding the
// arenas of held that records of msgs are in.
func cut(msgs []Message, held []heldArena) chunk {
	c := chunk{msgs: msgs}
	for _, h := range held {
		if h.start < len(msgs) {
			h.a.hold()
			c.arenas = append(c.arenas, h.a)
		}
	}
	return c
}

// shift moves held's positions back by n, the messages queued, and drops
// the arenas none of whose records are pending any more.
func shift(held []heldArena, n int) []heldArena {
	k := 0
	for _, h := range held {
		h.start, h.end = max(h.start-n, 0), h.end-n
		if h.end <= 0 {
			h.a.drop()
			continue
		}
		held[k] = h
		k++
	}
	clear(held[k:])
	return held[:k]
}

// roundTrip writes req on c and reads the response's body into an arena
// of a pooled buffer, held by the caller; nil on an error.
func (f *fetcher) roundTrip(c net.Conn, req []byte) (*arena, error) {
	_ = c.SetDeadline(time.Now().Add(f.s.cfg.MaxWait + readTimeout))
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(size[:])))
	if n < 8 || n > maxResponse {
		return nil, fmt.Errorf("fetch response of %d bytes", n)
	}
	st := &f.s.stats
	body := st.newArena(st.takeBuf(n)[:n])
	if _, err := io.ReadFull(c, body.buf); err != nil {
		body.drop()
		return nil, err
	}
	return body, nil
}

// drain reads the batch's messages into chunks and queues them. It returns
// nil at the end of the batch.
func (f *fetcher) drain(ctx context.Context, conn *kafka.Conn, batch *kafka.Batch, hwm int64) error {
	var c chunk
	for {
		if len(c.msgs) == 0 {
			_ = conn.SetReadDeadline(time.Now().Add(readTimeout))
		}
		km, err := batch.ReadMessage()
		if err != nil {
			if len(c.msgs) > 0 && !f.send(ctx, c) {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if c.msgs == nil {
			c.msgs = make([]Message, 0, f.size)
		}
		c.msgs = append(c.msgs, Message{
			Topic:         f.p.Topic,
			Partition:     f.p.Partition,
			Offset:        km.Offset,
			Key:           km.Key,
			Value:         km.Value,
			Time:          km.Time,
			HighWaterMark: hwm,
		})
		if len(c.msgs) == f.size {
			if !f.send(ctx, c) {
				return nil
			}
			c = chunk{}
		}
	}
}

// send queues c; false when ctx ended first.
func (f *fetcher) send(ctx context.Context, c chunk) bool {
	select {
	case f.q <- c:
		f.s.queued.Add(int64(len(c.msgs)))
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits d or until ctx is done; false when ctx ended it.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
