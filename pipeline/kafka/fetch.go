package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// chunk is up to chunkMax consecutive messages of one partition.
type chunk struct {
	msgs []Message
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
		conn, start, err := f.connect(ctx, off)
		if err == nil {
			attempt = 0
			backoff.Reset()
			off, err = f.read(ctx, conn, start)
			conn.Close()
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

// connect dials the partition's leader and seeks to off, a real offset or
// kafka.FirstOffset / LastOffset; an offset before the log's start (deleted
// by retention) starts at the first one. It returns the absolute offset.
func (f *fetcher) connect(ctx context.Context, off int64) (*kafka.Conn, int64, error) {
	var err error
	for _, b := range f.s.cfg.Brokers {
		var conn *kafka.Conn
		conn, err = f.s.dialer.DialLeader(ctx, "tcp", b, f.p.Topic, int(f.p.Partition))
		if err != nil {
			continue
		}
		first, last, oerr := offsets(conn)
		if oerr != nil {
			conn.Close()
			return nil, 0, oerr
		}
		switch {
		case off == kafka.LastOffset:
			off = last
		case off == kafka.FirstOffset || off < first:
			off = first
		}
		if _, err := conn.Seek(off, kafka.SeekAbsolute); err != nil {
			conn.Close()
			return nil, 0, err
		}
		_ = conn.SetDeadline(time.Time{})
		return conn, off, nil
	}
	return nil, 0, err
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
		if !f.throttle(ctx, batch.Throttle()) {
			return off, nil
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

// throttle waits out d, the pause a broker's quota asked for in a fetch
// response (throttle_time_ms), before the next fetch, and counts it; false
// when ctx ended first. kafka-go's connection fetches with version 10 where
// the broker has it: from version 8 the broker answers a throttled client
// at once and expects it to wait (KIP-219). (A broker without version 10
// held the response back itself; the reader then waits a second time.)
func (f *fetcher) throttle(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	f.s.throttled.Add(1)
	f.s.throttleNanos.Add(int64(d))
	return sleep(ctx, d)
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
