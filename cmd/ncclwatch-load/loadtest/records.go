package loadtest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"
)

// JobName names job j of the stream: fixed width, so that every job's
// records have the same size.
func JobName(prefix string, j int) string { return fmt.Sprintf("%s-j%04d", prefix, j) }

// Records calls fn with n seeded Fluent Bit records of one synthetic job:
// Generate's stream (Format "fluentbit", the shape of Fluent Bit's
// kubernetes filter) with its fixed job name replaced by job, and the
// record's "time" set by stamp (nil keeps Generate's). rec is valid only
// during the call. Jobs differ in seed, node count and network (every
// fourth one is a silent Socket fallback).
func Records(seed uint64, j int, job string, share float64, n int64, stamp func() time.Time, fn func(rec []byte) error) error {
	return genRecords(seed, j, job, share, false, n, stamp, fn)
}

func genRecords(seed uint64, j int, job string, share float64, random bool, n int64, stamp func() time.Time, fn func(rec []byte) error) error {
	cfg := DefaultGenConfig()
	cfg.RandomSteps = random
	cfg.Seed = seed<<20 + uint64(j)
	cfg.Bytes = math.MaxInt64
	cfg.Format = "fluentbit"
	cfg.NCCLShare = share
	cfg.Nodes = 2 + j%4
	if j%4 == 3 {
		cfg.Network = "Socket"
	}
	lw := &lineWriter{left: n, job: []byte(job), stamp: stamp, fn: fn}
	_, err := Generate(lw, cfg)
	if errors.Is(err, errEnough) {
		return nil
	}
	if err == nil {
		err = errors.New("load: generator ended early")
	}
	return err
}

var errEnough = errors.New("enough records")

// genJobName is the job name Generate writes into every record.
var genJobName = []byte("train-llm-7b")

// lineWriter turns Generate's output into records: it splits lines,
// rewrites each and stops the generator with errEnough after left records.
type lineWriter struct {
	left  int64
	job   []byte
	stamp func() time.Time
	fn    func([]byte) error
	carry []byte
	rec   []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			w.carry = append(w.carry, p...)
			break
		}
		line := p[:nl]
		if len(w.carry) > 0 {
			w.carry = append(w.carry, line...)
			line = w.carry
		}
		p = p[nl+1:]
		w.rec = rewriteRecord(w.rec[:0], line, w.job, w.stamp)
		w.carry = w.carry[:0]
		if err := w.fn(w.rec); err != nil {
			return 0, err
		}
		if w.left--; w.left <= 0 {
			return 0, errEnough
		}
	}
	return n, nil
}

// rewriteRecord appends rec with Generate's job name replaced by job and,
// when stamp is set, its "time" field set to stamp().
func rewriteRecord(dst, rec, job []byte, stamp func() time.Time) []byte {
	for {
		i := bytes.Index(rec, genJobName)
		if i < 0 {
			break
		}
		dst = append(dst, rec[:i]...)
		dst = append(dst, job...)
		rec = rec[i+len(genJobName):]
	}
	dst = append(dst, rec...)
	if stamp == nil {
		return dst
	}
	// "stream" comes right after "log" in Generate's records: this cannot
	// match inside the escaped log text.
	const key = `"stream":"stdout","time":"`
	i := bytes.Index(dst, []byte(key))
	if i < 0 {
		return dst
	}
	start := i + len(key)
	end := bytes.IndexByte(dst[start:], '"')
	if end < 0 {
		return dst
	}
	tail := append([]byte(nil), dst[start+end:]...)
	dst = stamp().UTC().AppendFormat(dst[:start], time.RFC3339Nano)
	return append(dst, tail...)
}
