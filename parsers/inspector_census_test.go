package parsers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// inspectorCensusRow is a row of testdata/nccl-formats/inspector.tsv: one
// writer function's output at the tags that have it.
type inspectorCensusRow struct {
	id, kind, function, format string
}

func loadInspectorCensus(t *testing.T) ([]inspectorCensusRow, map[string][]string) {
	t.Helper()
	dir := filepath.Join("..", "testdata", "nccl-formats")
	b, err := os.ReadFile(filepath.Join(dir, "inspector.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []inspectorCensusRow
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 10 {
			t.Fatalf("inspector.tsv: %d fields in %q", len(f), l)
		}
		rows = append(rows, inspectorCensusRow{id: f[0], kind: f[2], function: f[8], format: f[9]})
	}
	var tags map[string][]string
	tb, err := os.ReadFile(filepath.Join(dir, "inspector-tags.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(tb, &tags); err != nil {
		t.Fatal(err)
	}
	return rows, tags
}

// censusValues are the values a rendered record gets, by key; a key not
// here gets a value of its conversion's type.
var censusValues = map[string]string{
	"id": `"0x6e99db63b024eb76"`, "comm_name": `"TP Group 3"`, "rank": "5", "n_ranks": "16", "nnodes": "2",
	"inspector_output_format_version": `"v4.0"`, "git_rev": `"9019a1912-dirty"`,
	"rec_mechanism": `"nccl_profiler_interface"`, "dump_timestamp_us": "1764072000123456", "hostname": `"gpu-node-7"`,
	"pid": "4242", "coll": `"AllGather"`, "coll_sn": "77", "coll_msg_size_bytes": "134217728",
	"coll_exec_time_us": "1021", "coll_timing_source": `"kernel_gpu"`, "coll_algobw_gbs": "131.456342",
	"coll_busbw_gbs": "123.240321", "p2p": `"Send"`, "p2p_sn": "78", "p2p_peer": "9",
	"p2p_msg_size_bytes": "536870912", "p2p_exec_time_us": "1154", "p2p_timing_source": `"kernel_cpu"`,
	"p2p_algobw_gbs": "465.225126", "p2p_busbw_gbs": "465.225126",
}

var censusSpec = regexp.MustCompile(`"([a-z0-9_]+)":("%s"|%d|%u|%lu|%zu|%lf|null)`)

// TestInspectorCensus renders every record shape the writer has at every
// tag of the census (plain and verbose) with realistic values and checks
// what ParseInspector reads from it.
func TestInspectorCensus(t *testing.T) {
	rows, tags := loadInspectorCensus(t)
	byTag := map[string]map[string]string{} // tag → function → format
	for _, r := range rows {
		if len(tags[r.id]) == 0 {
			t.Errorf("%s: no tags", r.id)
		}
		for _, tag := range tags[r.id] {
			if byTag[tag] == nil {
				byTag[tag] = map[string]string{}
			}
			byTag[tag][r.function] = r.format
		}
	}
	records := 0
	for _, r := range rows {
		if r.kind != "inspector_record" {
			continue
		}
		for _, tag := range tags[r.id] {
			for _, verbose := range []bool{false, true} {
				text := expandCensus(t, r.format, byTag[tag], verbose, 0)
				text = strings.TrimSuffix(text, `\n`)
				text = censusSpec.ReplaceAllStringFunc(text, func(m string) string {
					sub := censusSpec.FindStringSubmatch(m)
					v, ok := censusValues[sub[1]]
					if !ok {
						switch sub[2] {
						case `"%s"`:
							v = `"x"`
						case "%lf":
							v = "1.500000"
						case "null":
							v = "null"
						default:
							v = "3"
						}
					}
					return `"` + sub[1] + `":` + v
				})
				if strings.Contains(text, "%") || strings.Contains(text, "@") {
					t.Fatalf("%s at %s: unrendered %q", r.id, tag, text)
				}
				checkCensusRecord(t, r.id+" at "+tag, []byte(text), verbose, strings.Contains(text, `"comm_name"`))
				records++
			}
		}
	}
	if records == 0 {
		t.Fatal("no record shapes in inspector.tsv")
	}
}

// expandCensus replaces @name (and, when verbose, @?name; otherwise it is
// dropped) with the format of writer function name at the tag.
func expandCensus(t *testing.T, format string, fns map[string]string, verbose bool, depth int) string {
	t.Helper()
	if depth > 4 {
		t.Fatalf("writer calls nest too deep: %q", format)
	}
	re := regexp.MustCompile(`@(\??)(\w+)`)
	return re.ReplaceAllStringFunc(format, func(m string) string {
		sub := re.FindStringSubmatch(m)
		if sub[1] == "?" && !verbose {
			return ""
		}
		f, ok := fns[sub[2]]
		if !ok {
			t.Fatalf("no format of %s at this tag", sub[2])
		}
		return expandCensus(t, f, fns, verbose, depth+1)
	})
}

func checkCensusRecord(t *testing.T, what string, text []byte, verbose, named bool) {
	t.Helper()
	var r pipeline.CollectiveRecord
	if err := ParseInspector(text, &r); err != nil {
		t.Fatalf("%s: ParseInspector(%s) = %v", what, text, err)
	}
	want := inspWant{comm: "0x6e99db63b024eb76", version: "v4.0", host: "gpu-node-7", rank: 5, nranks: 16, nnodes: 2,
		pid: 4242, dump: 1764072000123456, verbose: verbose, peer: -1,
		op: "AllGather", timing: "kernel_gpu", sn: 77, bytes: 134217728, exec: 1021, alg: 131.456342, bus: 123.240321}
	if r.P2P {
		want.p2p, want.op, want.timing, want.sn, want.peer, want.bytes, want.exec = true, "Send", "kernel_cpu", 78, 9, 536870912, 1154
		want.alg, want.bus = 465.225126, 465.225126
	}
	if named {
		want.name = "TP Group 3"
	}
	if got := gotInsp(&r); !want.equal(got) {
		t.Errorf("%s: ParseInspector =\n %v\nwant\n %v", what, got, want)
	}
	if !allSet.contains(text) {
		t.Errorf("%s: no finder token", what)
	}
}
