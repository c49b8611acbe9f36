package rules

import (
	"fmt"
	"reflect"
	"strings"
	"text/template"
	"time"
)

// templateFuncs are the functions labels and annotations may call besides
// text/template's own (and, or, not, len, index, printf, eq, lt …).
var templateFuncs = template.FuncMap{
	// join ", " .reasons
	"join": func(sep string, v any) string {
		rv := reflect.ValueOf(v)
		if !rv.IsValid() || rv.Kind() != reflect.Slice {
			return fmt.Sprint(v)
		}
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(rv.Index(i).Interface())
		}
		return strings.Join(parts, sep)
	},
	// .nnodes | default "unknown": the value, or def when it is null or
	// empty.
	"default": func(def, v any) any {
		if v == nil {
			return def
		}
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.String, reflect.Slice, reflect.Map:
			if rv.Len() == 0 {
				return def
			}
		}
		return v
	},
	// .unproven_for | humanizeDuration: "3d 4h", "12m 5s".
	"humanizeDuration": humanizeDuration,
	"upper":            strings.ToUpper,
	"lower":            strings.ToLower,
}

func humanizeDuration(v any) string {
	var d time.Duration
	switch x := v.(type) {
	case time.Duration:
		d = x
	case float64:
		d = time.Duration(x * float64(time.Second))
	case int:
		d = time.Duration(x) * time.Second
	default:
		return fmt.Sprint(v)
	}
	if d < time.Second {
		return d.String()
	}
	d = d.Round(time.Second)
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	s := (d - m*time.Minute) / time.Second
	var parts []string
	for _, p := range []struct {
		n    time.Duration
		unit string
	}{{days, "d"}, {h, "h"}, {m, "m"}, {s, "s"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d%s", p.n, p.unit))
		}
	}
	if len(parts) > 2 {
		parts = parts[:2]
	}
	return strings.Join(parts, " ")
}

// deref turns a nullable fact into its value, or nil.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// viewData sets d[prefix+name] to each field of the view v, a pointer to
// a struct whose fields carry expr tags, under its expression name (the
// "name" field under nameKey): templates see a view's fields by the names
// expressions use, from one list, the view's. A pointer field is its
// value or nil; a nil v sets every name to nil.
func viewData(d map[string]any, prefix string, v any, nameKey string) {
	rv := reflect.ValueOf(v)
	rt := rv.Type().Elem()
	for i := range rt.NumField() {
		name := rt.Field(i).Tag.Get("expr")
		if name == "" {
			continue
		}
		if name == "name" {
			name = nameKey
		}
		var val any
		if !rv.IsNil() {
			f := rv.Elem().Field(i)
			switch {
			case f.Kind() != reflect.Pointer:
				val = f.Interface()
			case !f.IsNil():
				val = f.Elem().Interface()
			}
		}
		d[prefix+name] = val
	}
}

// jobData is the template data of a job alert: the job's fields, overlaid
// by the matched communicator's when the rule names comm, the canary's
// (canary_*) and the matched training series' (series_*, null when the
// rule does not name series).
func jobData(env *JobEnv, comm *CommView, series *SeriesView) map[string]any {
	nodes := make([]string, len(env.Nodes))
	for i, n := range env.Nodes {
		nodes[i] = n.Name
	}
	d := map[string]any{
		"comm_id": nil, "hcas": nil, "hca_devices": []string{}, "rdma_failures": []string{}, "plugin": nil,
		"oob_iface": nil, "env": map[string]string{}, "local_ranks": nil, "hosts": []string{}, "processes": nil,
		"expect_network": env.Expect.Network, "expect_gdr": env.Expect.GDR, "expect_hcas": env.Expect.HCAs,
		"nodes": nodes, "pool": env.Pool.Name, "pool_hcas": env.Pool.HCAs, "pool_rdma_capable": env.Pool.RDMACapable,
		"zones": env.Zones, "racks": env.Racks,
		"activity_nodes": env.Activity.Nodes, "activity_pods": env.Activity.Pods,
		"activity_first_seen": env.Activity.FirstSeen, "activity_last_seen": env.Activity.LastSeen,
		"now": env.Now,
	}
	viewData(d, "", &env.Job, "job")
	delete(d, "topology") // a struct: templates see its fields as topology_*
	viewData(d, "topology_", &env.Job.Topology, "")
	viewData(d, "canary_", &env.Canary, "")
	viewData(d, "series_", series, "")
	viewData(d, "checkpoint_", &env.Checkpoint, "")
	viewData(d, "collective_", &env.Collective, "")
	if c := comm; c != nil {
		for k, v := range map[string]any{
			"comm_id": c.ID, "network": deref(c.Network), "network_class": c.NetworkClass, "fabric": deref(c.Fabric),
			"gdr": deref(c.GDR), "multi_node": deref(c.MultiNode), "nnodes": deref(c.NNodes), "nranks": deref(c.NRanks),
			"hcas": c.HCAs, "hca_devices": c.HCADevices, "rdma_failures": c.RDMAFailures, "plugin": deref(c.Plugin),
			"oob_iface": deref(c.OOBIface), "env": c.Env, "local_ranks": deref(c.LocalRanks), "hosts": c.Hosts,
			"processes": c.Processes, "verdict": c.Verdict, "reasons": c.Reasons, "warns": c.Warns,
		} {
			d[k] = v
		}
	}
	return d
}

// poolData is the template data of a pool alert.
func poolData(env *PoolEnv) map[string]any {
	d := map[string]any{"now": env.Now}
	viewData(d, "", &env.Pool, "pool")
	return d
}

// render executes a rule's templates; a template that fails leaves its
// error text in the value, so that the alert still goes out.
func render(tmpls map[string]*template.Template, data map[string]any) map[string]string {
	out := make(map[string]string, len(tmpls))
	var b strings.Builder
	for k, t := range tmpls {
		b.Reset()
		if err := t.Execute(&b, data); err != nil {
			out[k] = "template error: " + err.Error()
			continue
		}
		out[k] = b.String()
	}
	return out
}

// sampleData returns template data with every key set, for linting
// templates with missingkey=error.
func sampleData(scope Scope) map[string]any {
	if scope == ScopePool {
		return poolData(&PoolEnv{Pool: PoolView{Zones: []string{}}})
	}
	env := &JobEnv{}
	d := jobData(env, &CommView{Env: map[string]string{}}, &SeriesView{})
	d["labels"] = map[string]string{}
	return d
}
