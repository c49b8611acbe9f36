package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// printFlags is flag.PrintDefaults that names every flag's default, the
// zero ones too ("" shows as none); shown overrides the value printed for a
// flag whose effective default comes from elsewhere (run's flags overlay
// the configuration's defaults). A usage text that already says
// "(default …)" is left as it is.
func printFlags(w io.Writer, fs *flag.FlagSet, shown map[string]string) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !strings.Contains(usage, "(default") {
			def, ok := shown[f.Name]
			if !ok {
				def = f.DefValue
			}
			if def == "" {
				def = "none"
			}
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintln(w)
	})
}

// versionString is what `ncclwatch version` prints: the version set at
// link time (-X main.version=…), else the module version from the build
// information (a tag with `go install …@v1.2.3`), and the VCS revision,
// time and dirty flag when the binary was built in a checkout.
func versionString() string {
	v := version
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "ncclwatch " + v
	}
	if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	s := "ncclwatch " + v
	var rev, at, dirty string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		s += fmt.Sprintf(" (revision %s, %s%s)", rev, at, dirty)
	}
	return s + " " + info.GoVersion
}

// runFlagDefaults are the effective defaults of run's flags: what the
// configuration holds when neither file, environment nor flag sets it.
func runFlagDefaults() map[string]string {
	c := defaultServiceConfig()
	return map[string]string{
		"brokers":    strings.Join(c.Kafka.Brokers, ","),
		"topic":      strings.Join(c.Kafka.Topics, ","),
		"group":      c.Kafka.GroupID,
		"clickhouse": strings.Join(c.ClickHouse.Addr, ","),
		"database":   c.ClickHouse.Database,
		"listen":     c.HTTP.Listen,
		"log-level":  c.Log.Level,
		"expect":     "rdma",
		"migrate":    fmt.Sprint(c.Migrate),
	}
}
