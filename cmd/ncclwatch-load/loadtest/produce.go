package loadtest

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
)

// produceBacklog produces o.Records records of o.Shape with o.Producers
// concurrent producers, as fast as the broker takes them, and returns the
// number of jobs they hold.
func produceBacklog(ctx context.Context, o Options, pcfg kafka.ProducerConfig) (phase, int, error) {
	writeLZ4AsFluentBit()
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		return phase{}, 0, err
	}
	defer prod.Close()
	var records, size, jobs atomic.Int64
	errs := make(chan error, o.Producers)
	start, cpu0 := time.Now(), selfCPU()
	stamp := func() time.Time { return time.Now() }
	for w := range o.Producers {
		go func() {
			errs <- func() error {
				c := newChunker(prod, pcfg.BatchSize)
				n, err := backlogPart(o, w, stamp, func(job string, rec []byte) error {
					return c.add(ctx, job, rec)
				})
				if err == nil {
					err = c.flush(ctx)
				}
				if err != nil {
					return err
				}
				jobs.Store(int64(n)) // every producer walks the whole backlog
				records.Add(c.records)
				size.Add(c.bytes)
				return nil
			}()
		}()
	}
	var first error
	for range o.Producers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return phase{records: records.Load(), bytes: size.Load(), wall: time.Since(start), cpu: selfCPU() - cpu0}, int(jobs.Load()), first
}

// chunker collects records into produce calls of up to size messages in
// one reused arena: Produce does not keep the slices.
type chunker struct {
	prod    *kafka.Producer
	size    int
	msgs    []kafka.ProducerMessage
	arena   []byte
	ends    []int
	keys    []string
	records int64
	bytes   int64
}

func newChunker(p *kafka.Producer, size int) *chunker {
	return &chunker{prod: p, size: size}
}

func (c *chunker) add(ctx context.Context, key string, rec []byte) error {
	c.arena = append(c.arena, rec...)
	c.ends = append(c.ends, len(c.arena))
	c.keys = append(c.keys, key)
	if len(c.ends) >= c.size {
		return c.flush(ctx)
	}
	return nil
}

func (c *chunker) flush(ctx context.Context) error {
	if len(c.ends) == 0 {
		return nil
	}
	c.msgs = c.msgs[:0]
	from := 0
	for i, end := range c.ends {
		// The key is the job, as Fluent Bit's output keys it.
		c.msgs = append(c.msgs, kafka.ProducerMessage{Key: []byte(c.keys[i]), Value: c.arena[from:end:end]})
		from = end
	}
	if err := c.prod.Produce(ctx, c.msgs); err != nil {
		return err
	}
	c.records += int64(len(c.ends))
	c.bytes += int64(len(c.arena))
	c.arena, c.ends, c.keys = c.arena[:0], c.ends[:0], c.keys[:0]
	return nil
}

// producePaced offers o.LatRate records/s for o.LatDuration over fresh
// jobs, each record stamped with the time it was made and noted in lat,
// and returns the number of records produced.
func producePaced(ctx context.Context, o Options, pcfg kafka.ProducerConfig, lat *latencyProbe) (int64, error) {
	// A short batch timeout: the offered rate, not the producer's
	// batching, should set the latency.
	pcfg.BatchTimeout = 2 * time.Millisecond
	writeLZ4AsFluentBit()
	prod, err := kafka.NewProducer(pcfg)
	if err != nil {
		return 0, err
	}
	defer prod.Close()
	total := int64(o.LatRate * o.LatDuration.Seconds())
	// One produce call per 10 ms of records, as a log shipper flushes.
	quantum := max(int64(o.LatRate/100), 1)
	c := newChunker(prod, math.MaxInt)
	start := time.Now()
	var made int64
	var stamp time.Time
	now := func() time.Time { stamp = time.Now(); return stamp }
	err = pacedStream(o, total, now, func(job string, rec []byte) error {
		made++
		lat.add(job, stamp)
		if err := c.add(ctx, job, rec); err != nil {
			return err
		}
		if made%quantum != 0 {
			return nil
		}
		if err := c.flush(ctx); err != nil {
			return err
		}
		due := start.Add(time.Duration(float64(made) / o.LatRate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		return nil
	})
	if err != nil {
		return c.records, err
	}
	if err := c.flush(ctx); err != nil {
		return c.records, err
	}
	return c.records, nil
}
