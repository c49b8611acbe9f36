package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// helpEntries splits flag help into one text per flag, by name.
func helpEntries(help string) map[string]string {
	out := map[string]string{}
	name := ""
	for _, l := range strings.Split(help, "\n") {
		if strings.HasPrefix(l, "  -") {
			name, _, _ = strings.Cut(strings.TrimPrefix(l, "  -"), " ")
			out[name] = ""
			continue
		}
		if name != "" {
			out[name] += l
		}
	}
	return out
}

func TestHelpListsEveryFlagWithItsDefault(t *testing.T) {
	var scanHelp, runHelp bytes.Buffer
	if code := runScan([]string{"--help"}, strings.NewReader(""), io.Discard, &scanHelp); code != exitOK {
		t.Fatalf("scan --help: exit %d", code)
	}
	if code := runService([]string{"--help"}, &runHelp); code != exitOK {
		t.Fatalf("run --help: exit %d", code)
	}
	runFlags := newServiceFlags("run", io.Discard).fs
	for _, tc := range []struct {
		cmd   string
		help  string
		flags []string
	}{
		{"scan", scanHelp.String(), []string{"json", "expect", "no-gdr-expected", "hcas", "max-line-bytes", "inventory",
			"no-progress", "rules", "cpuprofile", "telemetry"}},
		{"run", runHelp.String(), flagNames(runFlags)},
	} {
		got := helpEntries(tc.help)
		if len(got) != len(tc.flags) {
			t.Errorf("%s --help lists %d flags; want %d:\n%s", tc.cmd, len(got), len(tc.flags), tc.help)
		}
		for _, f := range tc.flags {
			text, ok := got[f]
			if !ok {
				t.Errorf("%s --help does not list -%s", tc.cmd, f)
			} else if !strings.Contains(text, "(default ") {
				t.Errorf("%s --help: -%s has no default: %q", tc.cmd, f, text)
			}
		}
	}
	// run's flags show the configuration's defaults, not the empty overlay.
	if e := helpEntries(runHelp.String()); !strings.Contains(e["brokers"], "(default 127.0.0.1:9092)") ||
		!strings.Contains(e["group"], "(default ncclwatch)") || !strings.Contains(e["topic"], "(default training-logs)") {
		t.Errorf("run --help defaults: %q, %q, %q", e["brokers"], e["group"], e["topic"])
	}
}

func flagNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

func TestVersionPrintsBuildInfo(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"version"}, strings.NewReader(""), &out, io.Discard); code != exitOK {
		t.Fatalf("version: exit %d", code)
	}
	if s := out.String(); !strings.HasPrefix(s, "ncclwatch ") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("version = %q; want ncclwatch, the version and %s", s, runtime.Version())
	}
}

func TestScanJSONHasNoZeroTimes(t *testing.T) {
	in, err := os.ReadFile(corpusPath(fallbackFile))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	runScan([]string{"--json", "-"}, bytes.NewReader(in), &out, io.Discard)
	if bytes.Contains(out.Bytes(), []byte("0001-01-01")) {
		t.Errorf("scan --json of a raw file prints a zero time:\n%s", out.Bytes())
	}
	if !bytes.Contains(out.Bytes(), []byte(`"first_seen": null`)) {
		t.Errorf("scan --json of a raw file: first_seen is not null")
	}
}

func TestNodesCellAgreesWithHosts(t *testing.T) {
	two := 2
	for _, tc := range []struct {
		c    pipeline.CommSummary
		want string
	}{
		{pipeline.CommSummary{NNodes: &two, Hosts: []string{"a"}}, "2"},
		{pipeline.CommSummary{Hosts: []string{"a", "b", "c"}}, "≥3"},
		{pipeline.CommSummary{Hosts: []string{"a"}}, "-"},
		{pipeline.CommSummary{}, "-"},
	} {
		if got := nodesCell(tc.c); got != tc.want {
			t.Errorf("nodesCell(nnodes %v, hosts %v) = %q; want %q", tc.c.NNodes, tc.c.Hosts, got, tc.want)
		}
	}
}
