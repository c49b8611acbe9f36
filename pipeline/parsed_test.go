package pipeline

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

// TestParsedKeepsEveryEventField checks that Parsed.keepEvent copies every
// byte field of Event (a field added later and not copied would alias a
// parser's buffer that the next line overwrites), and keeps nil apart
// from empty.
func TestParsedKeepsEveryEventField(t *testing.T) {
	var ev Event
	v := reflect.ValueOf(&ev).Elem()
	src := []byte("0123456789")
	var fields []int
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).Type() == reflect.TypeFor[[]byte]() {
			v.Field(i).SetBytes(src[i%10 : i%10+1])
			fields = append(fields, i)
		}
	}
	if len(fields) == 0 {
		t.Fatal("Event has no byte fields")
	}
	var p Parsed
	kept := ev
	p.keepEvent(&kept)
	copy(src, "xxxxxxxxxx")
	kv := reflect.ValueOf(&kept).Elem()
	for _, i := range fields {
		if got, want := string(kv.Field(i).Bytes()), string(rune('0'+i%10)); got != want {
			t.Errorf("kept Event.%s = %q after the source changed; want %q", v.Type().Field(i).Name, got, want)
		}
	}
	if got := p.keep(nil); got != nil {
		t.Errorf("keep(nil) = %q; want nil", got)
	}
	if got := p.keep([]byte{}); got == nil || len(got) != 0 {
		t.Errorf("keep(empty) = %v (nil %v); want empty, not nil", got, got == nil)
	}
}

// TestParsedKeepsEveryTelemetryField is the same for TelemetryLine and
// the structs in it.
func TestParsedKeepsEveryTelemetryField(t *testing.T) {
	var tl TelemetryLine
	src := []byte("0123456789")
	var n int
	var set func(v reflect.Value)
	set = func(v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			switch f := v.Field(i); {
			case f.Type() == reflect.TypeFor[[]byte]():
				f.SetBytes(src[n%10 : n%10+1])
				n++
			case f.Kind() == reflect.Struct:
				set(f)
			}
		}
	}
	set(reflect.ValueOf(&tl).Elem())
	if n < 2 {
		t.Fatalf("TelemetryLine has %d byte fields; want several", n)
	}
	var p Parsed
	kept := tl
	p.keepTelemetry(&kept)
	copy(src, "xxxxxxxxxx")
	n = 0
	var check func(v reflect.Value, path string)
	check = func(v reflect.Value, path string) {
		for i := 0; i < v.NumField(); i++ {
			name := path + v.Type().Field(i).Name
			switch f := v.Field(i); {
			case f.Type() == reflect.TypeFor[[]byte]():
				if got, want := string(f.Bytes()), string(rune('0'+n%10)); got != want {
					t.Errorf("kept TelemetryLine.%s = %q after the source changed; want %q", name, got, want)
				}
				n++
			case f.Kind() == reflect.Struct:
				check(f, name+".")
			}
		}
	}
	check(reflect.ValueOf(&kept).Elem(), "")
}

// TestAppendRowDoubles: a batch's rows grow by doubling (appendRow), so
// 120 000 rows take at most ~12 reallocations; append alone took ~28 (a
// quarter at a time past 256 elements).
func TestAppendRowDoubles(t *testing.T) {
	var rows []TrainingStep
	grows := 0
	for i := range 120000 {
		c := cap(rows)
		rows = appendRow(rows, TrainingStep{Step: int64(i)}, 0)
		if cap(rows) != c {
			grows++
		}
	}
	if len(rows) != 120000 || rows[119999].Step != 119999 {
		t.Fatalf("appendRow kept %d rows, last %d; want 120000, 119999", len(rows), rows[len(rows)-1].Step)
	}
	if grows > 12 {
		t.Errorf("appendRow grew the slice %d times for 120 000 rows; want at most 12 (doubling)", grows)
	}
}

// TestAppendRowLimit: with a rows limit a slice doubles up to the limit,
// not past it (a batch's slices are reused: room beyond the limit would
// be held for good), and grows by a quarter once a batch goes over it.
func TestAppendRowLimit(t *testing.T) {
	const limit = 50000
	var rows []TrainingStep
	grows := 0
	for i := range limit {
		c := cap(rows)
		rows = appendRow(rows, TrainingStep{Step: int64(i)}, limit)
		if cap(rows) != c {
			grows++
		}
	}
	// slices.Grow rounds a large allocation up to whole pages.
	if c := cap(rows); c < limit || c*int(unsafe.Sizeof(TrainingStep{})) > limit*int(unsafe.Sizeof(TrainingStep{}))+8192 {
		t.Errorf("capacity %d for %d rows under a limit of %d; want the limit (up to a page more)", c, len(rows), limit)
	}
	if grows > 12 {
		t.Errorf("appendRow grew the slice %d times for %d rows; want at most 12 (doubling)", grows, limit)
	}
	for i := cap(rows) - len(rows); i >= 0; i-- {
		rows = appendRow(rows, TrainingStep{}, limit)
	}
	if c := cap(rows); c < limit+limit/4 || c > limit+limit/4+limit/16 {
		t.Errorf("capacity %d past the limit of %d; want about a quarter more", c, limit)
	}
}

// lineTable is a Classifier that gives each line the telemetry line its
// text names (an index into lines), and no NCCL event.
type lineTable struct{ lines []TelemetryLine }

func (c lineTable) Line(text []byte, ev *Event, tl *TelemetryLine) (nccl, telemetry bool) {
	*ev = Event{}
	i := int(text[0] - '0')
	if tl == nil || i >= len(c.lines) {
		return false, false
	}
	*tl = c.lines[i]
	return false, true
}

// TestParsedTrainingLines: a Parser keeps a step, amend or summary line by
// its training fields alone (trainingLine); Apply hands on those fields
// and blanks for the rest, in the lines' order, and every other kind whole.
func TestParsedTrainingLines(t *testing.T) {
	step := blankTelemetryLine
	step.Kind, step.Framework, step.Rank = TelemetryStep, FrameworkMegatron, 3
	step.TrainingFigures = TrainingFigures{Step: 7, StepTime: 1.5, TokensPerS: 2, SamplesPerS: 3, ItPerS: 4,
		TFLOPs: 5, MFU: 6, Loss: 7, Runtime: 8}
	amend, summary := step, step
	amend.Kind, amend.Step, amend.Loss = TelemetryAmend, 8, 0.5
	summary.Kind, summary.Framework, summary.Runtime = TelemetrySummary, FrameworkHF, 99
	stray := step // a training line with fields its kind does not carry
	stray.Host, stray.NRanks, stray.Row.Bytes = []byte("node-1"), 16, 1024
	row := blankTelemetryLine
	row.Kind, row.Host, row.Row.Bytes, row.Row.Type, row.Avg = TelemetryTestRow, []byte("node-2"), 8, []byte("float"), 3.5
	c := lineTable{[]TelemetryLine{step, row, amend, summary, stray}}
	strayWant := step
	want := []TelemetryLine{step, row, amend, summary, strayWant, step}

	p := NewParser(c, true)
	var out Parsed
	for i, text := range []string{"0", "1", "2", "3", "4", "0"} {
		p.Parse(&Record{Text: []byte(text), Source: Source{Offset: int64(i)}}, &out)
	}
	if len(out.training) != 5 || len(out.tls) != 1 {
		t.Fatalf("kept %d training and %d whole lines; want 5 and 1", len(out.training), len(out.tls))
	}
	proc := NewProcessor(nil, c, nil)
	var got []TelemetryLine
	var offs []int64
	proc.Apply(&out, func(rec *Record, tl *TelemetryLine) {
		got = append(got, *tl)
		offs = append(offs, rec.Source.Offset)
	})
	if len(got) != len(want) {
		t.Fatalf("Apply handed on %d lines; want %d", len(got), len(want))
	}
	for i := range want {
		// %#v: NaN equals NaN, nil differs from empty.
		if g, w := fmt.Sprintf("%#v", got[i]), fmt.Sprintf("%#v", want[i]); g != w {
			t.Errorf("line %d: Apply handed on\n%s\nwant\n%s", i, g, w)
		}
		if offs[i] != int64(i) {
			t.Errorf("line %d came with offset %d", i, offs[i])
		}
	}
}
