package rules

import (
	"reflect"
	"testing"
)

func TestViewData(t *testing.T) {
	f := 2.5
	d := map[string]any{}
	viewData(d, "canary_", &CanaryView{Is: true, Pool: "a", BusBW: &f}, "")
	want := map[string]any{"canary_is": true, "canary_pool": "a", "canary_collective": nil, "canary_rows": 0,
		"canary_max_bytes": nil, "canary_busbw": 2.5, "canary_avg_busbw": nil, "canary_baseline_busbw": nil}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("canary data = %v, want %v", d, want)
	}

	d = map[string]any{}
	viewData(d, "series_", (*SeriesView)(nil), "")
	if len(d) != reflect.TypeFor[SeriesView]().NumField() {
		t.Fatalf("nil series: %d keys, want one per field: %v", len(d), d)
	}
	for k, v := range d {
		if v != nil {
			t.Fatalf("nil series: %s = %v, want nil", k, v)
		}
	}

	d = map[string]any{}
	viewData(d, "", &PoolView{Name: "gpu-a", Nodes: 4}, "pool")
	if _, has := d["name"]; has || d["pool"] != "gpu-a" || d["nodes"] != 4 {
		t.Fatalf("pool data = %v: want the name under pool", d)
	}
}
