package pipeline

import (
	"reflect"
	"testing"
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
		rows = appendRow(rows, TrainingStep{Step: int64(i)})
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
