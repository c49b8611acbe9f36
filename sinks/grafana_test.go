package sinks

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dashboard is the part of a Grafana dashboard model the test checks.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Time struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		RefID      string `json:"refId"`
		EditorType string `json:"editorType"`
		Format     *int   `json:"format"`
		RawSQL     string `json:"rawSql"`
	} `json:"targets"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "deploy", "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana: %v", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: not a JSON dashboard: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

// TestGrafanaDashboardValid checks the dashboard model: what Grafana needs
// to import it, and that every panel queries the ClickHouse data source
// with raw SQL.
func TestGrafanaDashboardValid(t *testing.T) {
	for name, d := range loadDashboards(t) {
		if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 || len(d.Panels) == 0 || d.Time.From == "" {
			t.Errorf("%s: uid %q title %q schemaVersion %d panels %d time %q: not an importable dashboard",
				name, d.UID, d.Title, d.SchemaVersion, len(d.Panels), d.Time.From)
		}
		vars := map[string]string{}
		for _, v := range d.Templating.List {
			q, _ := v.Query.(string)
			vars[v.Name] = v.Type + ":" + q
		}
		if vars["datasource"] != "datasource:grafana-clickhouse-datasource" || !strings.HasPrefix(vars["database"], "textbox:") {
			t.Errorf("%s: variables %v; want a grafana-clickhouse-datasource datasource variable and a database textbox", name, vars)
		}
		ids := map[int]bool{}
		queries := 0
		for _, p := range d.Panels {
			if ids[p.ID] || p.ID <= 0 {
				t.Errorf("%s: panel %q has id %d, not unique and positive", name, p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: panel %q gridPos %+v outside the 24-column grid", name, p.Title, p.GridPos)
			}
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "grafana-clickhouse-datasource" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q datasource %+v; want grafana-clickhouse-datasource ${datasource}", name, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", name, p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				if tg.RefID == "" || tg.EditorType != "sql" || tg.Format == nil || *tg.Format > 1 || strings.TrimSpace(tg.RawSQL) == "" {
					t.Errorf("%s: panel %q target %+v; want refId, editorType sql, format 0 (time series) or 1 (table), rawSql", name, p.Title, tg)
				}
				if *tg.Format == 0 && !strings.Contains(tg.RawSQL, " AS t,") {
					t.Errorf("%s: time series panel %q does not name its time column t", name, p.Title)
				}
			}
		}
		if queries == 0 {
			t.Errorf("%s: no queries", name)
		}
	}
}

// grafanaMacro matches the data source's macros the dashboard uses.
var grafanaMacro = regexp.MustCompile(`\$__timeFilter\(([^)]+)\)`)

// expandGrafana does what grafana-clickhouse-datasource does to a query
// before it sends it: the database variable and the time-range macros.
func expandGrafana(sql, db string, from, to time.Time) string {
	f, t := strconv.FormatInt(from.Unix(), 10), strconv.FormatInt(to.Unix(), 10)
	sql = grafanaMacro.ReplaceAllString(sql, "$1 >= toDateTime("+f+") AND $1 <= toDateTime("+t+")")
	sql = strings.NewReplacer("${database}", db, "$database", db, "$__fromTime", "toDateTime("+f+")",
		"$__toTime", "toDateTime("+t+")").Replace(sql)
	return sql
}

// TestGrafanaDashboardQueries runs every panel query, with the dashboard's
// default range (7 days), against the seeded test server: each must run,
// and the panels over the seeded fleet must show it.
func TestGrafanaDashboardQueries(t *testing.T) {
	c, f := seeded(t)
	nonEmpty := map[string]bool{
		"Jobs on the expected fabric": true, "Jobs by verdict": true, "Pools with no RDMA proof in 6 h": true,
		"Jobs in socket fallback (last 24 h) and the GPU-hours they burnt": true,
		"Median step time by network class, same model and scale":          true,
		"Median step time per job and network (hourly)":                    true,
		"Canary bus bandwidth per pool":                                    true,
		"Canary busbw against the pool's baseline":                         true,
	}
	for name, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			want := nonEmpty[p.Title]
			delete(nonEmpty, p.Title)
			for _, tg := range p.Targets {
				sql := expandGrafana(tg.RawSQL, "ncclwatch", f.now.Add(-7*24*time.Hour), f.now.Add(time.Hour))
				if strings.Contains(sql, "$") {
					t.Errorf("%s: panel %q: unexpanded variable or macro in\n%s", name, p.Title, sql)
					continue
				}
				got, err := queryTable(t, c, sql)
				if err != nil {
					t.Errorf("%s: panel %q: %v\n%s", name, p.Title, err, sql)
					continue
				}
				if want && len(got) == 0 {
					t.Errorf("%s: panel %q shows nothing for the seeded fleet", name, p.Title)
				}
			}
		}
	}
	for title := range nonEmpty {
		t.Errorf("no panel %q in deploy/grafana", title)
	}
}
