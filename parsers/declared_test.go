package parsers

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// docFormats are docs/telemetry.md's worked examples, one per spelling
// family.
var docFormats = []FormatConfig{
	{Name: "colon", Token: "loss:", Pattern: "it: {step}, loss: {loss}, dt: {step_time:ms}ms"},
	{Name: "equals", Token: "loss=", Pattern: "upd={step} loss={loss} tput={tokens_per_s}"},
	{Name: "blank", Token: "Loss", Pattern: "round {step} Loss {loss} speed {it_per_s}"},
	{Name: "unit", Token: "loss:", Pattern: "#{step} loss: {loss} took {step_time:min} min"},
	{Name: "json", Token: `"step_time"`, Pattern: `"upd": {step}, "loss": {loss}, "step_time": {step_time}`},
	{Name: "mfu", Token: "mfu", Pattern: "batch [{step}] mfu={mfu:fraction}"},
}

func TestDeclaredFormats(t *testing.T) {
	cfg := DefaultTelemetryConfig()
	cfg.Formats = docFormats
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p := NewTelemetry(cfg)
	for _, c := range []struct {
		in   string
		want func(*pipeline.TelemetryLine)
	}{
		{"it: 120, loss: 2.31, dt: 410ms", func(l *pipeline.TelemetryLine) { step(l, "colon", 120); l.Loss, l.StepTime = 2.31, 0.41 }},
		{"[rank3]: it: 7,  loss: 2.5, dt:\t12ms (warm)", func(l *pipeline.TelemetryLine) {
			step(l, "colon", 7)
			l.Rank, l.Loss, l.StepTime = 3, 2.5, 0.012
		}},
		{"upd=88 loss=1.9 tput=5,120.5", func(l *pipeline.TelemetryLine) { step(l, "equals", 88); l.Loss, l.TokensPerS = 1.9, 5120.5 }},
		{"round 7 Loss 0.52 speed 3.1", func(l *pipeline.TelemetryLine) { step(l, "blank", 7); l.Loss, l.ItPerS = 0.52, 3.1 }},
		{"#12 loss: 2.2 took 1.5 min", func(l *pipeline.TelemetryLine) { step(l, "unit", 12); l.Loss, l.StepTime = 2.2, 90 }},
		{`{"upd": 12, "loss": 2.2, "step_time": 0.9}`, func(l *pipeline.TelemetryLine) { step(l, "json", 12); l.Loss, l.StepTime = 2.2, 0.9 }},
		{"batch [5] mfu=0.41", func(l *pipeline.TelemetryLine) { step(l, "mfu", 5); l.MFU = 41 }},
		// Not the format: a placeholder needs a number, the step an integer.
		{"it: x, loss: 2.31, dt: 410ms", nil},
		{"it: 1.5, loss: 2.31, dt: 410ms", nil},
		// An NCCL line is never read.
		{"host:1:1 [0] NCCL INFO it: 5, loss: 2, dt: 3ms", nil},
	} {
		var got, want pipeline.TelemetryLine
		ok := p.Parse([]byte(c.in), &got)
		want.Reset()
		if c.want != nil {
			c.want(&want)
		}
		if ok != (c.want != nil) || (ok && describe(&got) != describe(&want)) {
			t.Errorf("Parse(%q) = %v, %s; want %v, %s", c.in, ok, describe(&got), c.want != nil, describe(&want))
		}
	}
}

func TestDeclaredFormatsValidate(t *testing.T) {
	for _, c := range []struct {
		f    FormatConfig
		want string
	}{
		{FormatConfig{Name: "", Token: "loss", Pattern: "s {step} l {loss}"}, "telemetry.formats[0].name: must not be empty"},
		{FormatConfig{Name: "a b", Token: "loss", Pattern: "s {step} l {loss}"}, "telemetry.formats[0].name: \"a b\""},
		{FormatConfig{Name: "a", Token: "", Pattern: "s {step} l {loss}"}, "telemetry.formats[0].token: must not be empty"},
		{FormatConfig{Name: "a", Token: "xyz", Pattern: "s {step} l {loss}"}, "telemetry.formats[0].token: \"xyz\" holds no finder token"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: ""}, "telemetry.formats[0].pattern: empty: it would match an empty line"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "s {step} v {speed}"}, "telemetry.formats[0].pattern: unknown field \"speed\""},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "l {loss}"}, "telemetry.formats[0].pattern: no {step} placeholder"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "s {step}"}, "telemetry.formats[0].pattern: no figure placeholder"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "s {step} {loss:ms}"}, "telemetry.formats[0].pattern: {loss:ms}: unit \"ms\" does not fit loss"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "s {step}{loss}"}, "telemetry.formats[0].pattern: {loss} follows another placeholder"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "s {step} l {loss"}, "telemetry.formats[0].pattern: unclosed placeholder"},
		{FormatConfig{Name: "a", Token: "loss", Pattern: "s {step} {step} l {loss}"}, "telemetry.formats[0].pattern: {step} twice"},
	} {
		cfg := DefaultTelemetryConfig()
		cfg.Formats = []FormatConfig{c.f}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v; want an error with %q", c.f, err, c.want)
		}
	}
	cfg := DefaultTelemetryConfig()
	cfg.Formats = []FormatConfig{docFormats[0], docFormats[0]}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "telemetry.formats[1].name: \"colon\" declared twice") {
		t.Errorf("Validate(a format twice) = %v; want telemetry.formats[1].name: declared twice", err)
	}
}

// FuzzDeclaredFormats: a line a declared format reads holds its token and
// a finder token, no NCCL, and a step; a second read gives the same.
func FuzzDeclaredFormats(f *testing.F) {
	for _, s := range []string{"it: 120, loss: 2.31, dt: 410ms", "upd=88 loss=1.9 tput=5,120.5", "#12 loss: 2.2 took 1.5 min", `{"upd": 12, "loss": 2.2, "step_time": 0.9}`, "batch [5] mfu=0.41 batch [6] mfu=2"} {
		f.Add([]byte(s))
	}
	cfg := DefaultTelemetryConfig()
	cfg.Formats = docFormats
	p := NewTelemetry(cfg)
	names := map[string][]byte{}
	for _, d := range docFormats {
		names[d.Name] = []byte(d.Token)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 || bytes.IndexByte(b, '\n') >= 0 {
			return
		}
		var tl pipeline.TelemetryLine
		if !p.Parse(b, &tl) {
			return
		}
		tok, ok := names[tl.Framework]
		if !ok {
			return // another reader's line
		}
		first := describe(&tl)
		if !bytes.Contains(b, tok) || !allSet.contains(b) || bytes.Contains(b, []byte("NCCL")) || tl.Step < 0 {
			t.Fatalf("format %s read %q: %s", tl.Framework, b, first)
		}
		if !p.Parse(b, &tl) || describe(&tl) != first {
			t.Fatalf("second read of %q = %s; first %s", b, describe(&tl), first)
		}
	})
}
