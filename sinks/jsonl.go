package sinks

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// JSONLines writes batches as JSON lines, one file per table, into a
// directory: the sink of `ncclwatch demo` when no ClickHouse address is
// given. Files are appended to; each line is one row. Not safe for
// concurrent use (the runner calls Consume from one goroutine).
type JSONLines struct {
	dir   string
	files map[string]*os.File
}

// NewJSONLines creates dir if needed.
func NewJSONLines(dir string) (*JSONLines, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("jsonl sink: %w", err)
	}
	return &JSONLines{dir: dir, files: map[string]*os.File{}}, nil
}

// Dir returns the directory written to.
func (s *JSONLines) Dir() string { return s.dir }

// Consume appends the batch's rows to one file per table (nccl_events,
// comm_summaries, job_summaries, alerts, training_steps,
// nccl_test_results, dead_letters; .jsonl) and syncs them before
// returning (the runner commits offsets afterwards).
func (s *JSONLines) Consume(_ context.Context, b *pipeline.Batch) error {
	if err := s.write("nccl_events", len(b.Events), func(i int) any { return b.Events[i] }); err != nil {
		return err
	}
	if err := s.write("comm_summaries", len(b.Comms), func(i int) any { return b.Comms[i] }); err != nil {
		return err
	}
	if err := s.write("job_summaries", len(b.Jobs), func(i int) any { return b.Jobs[i] }); err != nil {
		return err
	}
	if err := s.write("alerts", len(b.Alerts), func(i int) any { return b.Alerts[i] }); err != nil {
		return err
	}
	// Telemetry rows mark missing numbers with NaN, which JSON cannot
	// hold: they are written as null.
	if err := s.write("training_steps", len(b.Steps), func(i int) any { return nanToNull(reflect.ValueOf(b.Steps[i])) }); err != nil {
		return err
	}
	if err := s.write("nccl_test_results", len(b.TestRuns), func(i int) any { return nanToNull(reflect.ValueOf(b.TestRuns[i])) }); err != nil {
		return err
	}
	if err := s.write("checkpoint_events", len(b.Checkpoints), func(i int) any { return nanToNull(reflect.ValueOf(b.Checkpoints[i])) }); err != nil {
		return err
	}
	return s.write("dead_letters", len(b.DeadLetters), func(i int) any { return b.DeadLetters[i] })
}

func (s *JSONLines) write(table string, n int, row func(int) any) error {
	if n == 0 {
		return nil
	}
	f, ok := s.files[table]
	if !ok {
		var err error
		f, err = os.OpenFile(filepath.Join(s.dir, table+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("jsonl sink: %w", err)
		}
		s.files[table] = f
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := 0; i < n; i++ {
		if err := enc.Encode(row(i)); err != nil {
			return pipeline.Permanent(fmt.Errorf("jsonl sink %s: %w", table, err))
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("jsonl sink %s: %w", table, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("jsonl sink %s: %w", table, err)
	}
	return nil
}

// nanToNull turns a value into what encoding/json writes for it, with NaN
// and infinite floats as null. Structs become objects keyed by field name
// (the rows' only JSON tag is "-", a field left out); values that marshal
// themselves (time.Time) are kept.
func nanToNull(v reflect.Value) any {
	if v.CanInterface() {
		if m, ok := v.Interface().(json.Marshaler); ok {
			return m
		}
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case reflect.Struct:
		out := make(map[string]any, v.NumField())
		fields(v, out)
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = nanToNull(v.Index(i))
		}
		return out
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return nanToNull(v.Elem())
	}
	if v.CanInterface() {
		return v.Interface()
	}
	return nil
}

// fields puts struct v's fields into out, those of an embedded struct
// (or pointer to one) as its own, as encoding/json does.
func fields(v reflect.Value, out map[string]any) {
	for i := 0; i < v.NumField(); i++ {
		f, fv := v.Type().Field(i), v.Field(i)
		if f.Anonymous && fv.Kind() == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct {
			if !fv.IsNil() {
				fields(fv.Elem(), out)
			}
			continue
		}
		if f.Anonymous && fv.Kind() == reflect.Struct {
			fields(fv, out)
			continue
		}
		if f.IsExported() && f.Tag.Get("json") != "-" {
			out[f.Name] = nanToNull(fv)
		}
	}
}

// Close closes the files.
func (s *JSONLines) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
