package rules

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestJobViewCoversSummary checks that JobView stays derived from
// pipeline.JobSummary: every summary field is either exposed to
// expressions under its JSON name (and jobView copies its value) or
// listed here with the reason it is not.
func TestJobViewCoversSummary(t *testing.T) {
	renamed := map[string]string{"job": "name"}
	hidden := map[string]string{
		"gdr_send":    "per-direction GDR is a communicator fact (comm.*)",
		"gdr_recv":    "per-direction GDR is a communicator fact (comm.*)",
		"gdr_partial": "per-direction GDR is a communicator fact (comm.*)",
		"evidence":    "decision provenance, not a fact to alert on",
		"version":     "a storage ordering, not a fact",
	}
	view := map[string]int{}
	vt := reflect.TypeFor[JobView]()
	for i := range vt.NumField() {
		view[vt.Field(i).Tag.Get("expr")] = i
	}

	var sum pipeline.JobSummary
	st := reflect.TypeFor[pipeline.JobSummary]()
	sv := reflect.ValueOf(&sum).Elem()
	for i := range st.NumField() {
		setNonZero(t, sv.Field(i), st.Field(i).Name)
	}
	got := (&subject{sum: &sum}).jobView()
	gv := reflect.ValueOf(got)

	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if _, ok := hidden[name]; ok {
			continue
		}
		if r, ok := renamed[name]; ok {
			name = r
		}
		j, ok := view[name]
		if !ok {
			t.Errorf("JobSummary.%s (json %q) is not in JobView: expose it or list it as hidden", st.Field(i).Name, name)
			continue
		}
		want, have := sv.Field(i), gv.Field(j)
		if name == "topology" {
			if !got.Topology.Known {
				t.Errorf("jobView: topology not known for a summary with a topology")
			}
			continue
		}
		if want.Type() != have.Type() && want.Type().ConvertibleTo(have.Type()) {
			want = want.Convert(have.Type())
		}
		if !reflect.DeepEqual(want.Interface(), have.Interface()) {
			t.Errorf("jobView: job.%s = %v; want %v (JobSummary.%s)", name, have.Interface(), want.Interface(), st.Field(i).Name)
		}
	}
	for name := range hidden {
		if _, ok := view[name]; ok {
			t.Errorf("%q is listed as hidden but JobView exposes it", name)
		}
	}
}

// setNonZero sets v to a value that is not its zero value.
func setNonZero(t *testing.T, v reflect.Value, field string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.ToLower(field))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint64:
		v.SetUint(7)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		setNonZero(t, s.Index(0), field)
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		setNonZero(t, p.Elem(), field)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				setNonZero(t, v.Field(i), field+"."+v.Type().Field(i).Name)
			}
		}
	default:
		t.Fatalf("setNonZero: %s: unhandled kind %s", field, v.Kind())
	}
}
