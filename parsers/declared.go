package parsers

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Declared formats: progress-line forms users write in the configuration
// (telemetry.formats) for trainers the generic reader does not read. A
// format is a literal token, which gates it (a substring search per format
// on a line; nothing when none is declared), and a placeholder pattern,
// "step {step} loss {loss} {step_time:ms}ms", matched by a byte scanner:
// no regular expression runs per line. docs/telemetry.md documents them.

// FormatConfig is one declared progress-line format.
type FormatConfig struct {
	// Name is the framework the format's step lines are reported under.
	Name string `yaml:"name"`
	// Token is a literal every line of the format holds; it must hold a
	// finder token, or the finder would never hand such a line on.
	Token string `yaml:"token"`
	// Pattern is literal text with {field} or {field:unit} placeholders.
	Pattern string `yaml:"pattern"`
}

// declaredFormat is a compiled FormatConfig.
type declaredFormat struct {
	name  string
	token []byte
	parts []formatPart
}

// formatPart is a literal (lit; a blank in it matches one or more blanks
// or tabs) or, when lit is nil, a placeholder of field f whose value is
// multiplied by scale.
type formatPart struct {
	lit   []byte
	f     progressField
	exp   int // a power of ten applied in decimal (ms: -3), exactly
	scale float64
}

// declaredFields are the placeholder names, their fields and units (def
// is the default). A unit's number converts to the field's unit: a
// factor, or for step_time's ms and us a power of ten (negative).
var declaredFields = map[string]struct {
	f     progressField
	units map[string]float64
	def   string
}{
	"step":          {keyStep, nil, ""},
	"step_time":     {keyTime, map[string]float64{"s": 1, "ms": -3, "us": -6, "min": 60}, "s"},
	"tokens_per_s":  {keyTokens, nil, ""},
	"samples_per_s": {keySamples, nil, ""},
	"it_per_s":      {keyItPerS, nil, ""},
	"tflops":        {keyTFLOPs, nil, ""},
	"mfu":           {keyMFU, map[string]float64{"percent": 1, "fraction": 100}, "percent"},
	"loss":          {keyLoss, nil, ""},
}

const declaredFieldList = "step, step_time, tokens_per_s, samples_per_s, it_per_s, tflops, mfu, loss"

// validateFormats reports every invalid format by configuration path.
func validateFormats(fs []FormatConfig) []error {
	var errs []error
	seen := map[string]bool{}
	for i, f := range fs {
		path := fmt.Sprintf("telemetry.formats[%d]", i)
		bad := func(field, msg string, args ...any) {
			errs = append(errs, fmt.Errorf("%w: %s.%s: %s", ErrTelemetryConfig, path, field, fmt.Sprintf(msg, args...)))
		}
		switch {
		case f.Name == "":
			bad("name", "must not be empty")
		case strings.Trim(f.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != "":
			bad("name", "%q: only letters, digits, '_', '-' and '.'", f.Name)
		case seen[f.Name]:
			bad("name", "%q declared twice", f.Name)
		}
		seen[f.Name] = true
		switch {
		case f.Token == "":
			bad("token", "must not be empty")
		case strings.ContainsAny(f.Token, "\n\r"):
			bad("token", "must not hold a line break")
		case !telemetrySet.contains([]byte(f.Token)):
			bad("token", "%q holds no finder token, so no line holding it would reach the reader; include one (e.g. \"loss\", \"_time\", \"(ms)\", \"_per_s\", \"/sec\", \"mfu\"; docs/telemetry.md)", f.Token)
		}
		if _, err := compilePattern(f.Pattern); err != nil {
			bad("pattern", "%v", err)
		}
	}
	return errs
}

// compilePattern compiles a placeholder pattern.
func compilePattern(pat string) ([]formatPart, error) {
	if strings.TrimSpace(pat) == "" {
		return nil, fmt.Errorf("empty: it would match an empty line")
	}
	var parts []formatPart
	have := map[string]bool{}
	for rest := pat; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if j := strings.IndexByte(rest, '}'); j >= 0 && (i < 0 || j < i) {
			return nil, fmt.Errorf("'}' without '{' at %q", rest[j:])
		}
		if i < 0 {
			parts = append(parts, formatPart{lit: []byte(rest)})
			break
		}
		if i > 0 {
			parts = append(parts, formatPart{lit: []byte(rest[:i])})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unclosed placeholder %q", rest[i:])
		}
		ph := rest[i+1 : i+j]
		rest = rest[i+j+1:]
		name, unit, _ := strings.Cut(ph, ":")
		d, ok := declaredFields[name]
		if !ok {
			return nil, fmt.Errorf("unknown field %q (fields: %s)", name, declaredFieldList)
		}
		if have[name] {
			return nil, fmt.Errorf("{%s} twice", name)
		}
		have[name] = true
		scale, exp := 1.0, 0
		if unit != "" || d.units != nil {
			if unit == "" {
				unit = d.def
			}
			s, ok := d.units[unit]
			if !ok {
				return nil, fmt.Errorf("{%s}: unit %q does not fit %s", ph, unit, name)
			}
			scale = s
			if s < 0 {
				scale, exp = 1, int(s)
			}
		}
		if n := len(parts); n > 0 && parts[n-1].lit == nil {
			return nil, fmt.Errorf("{%s} follows another placeholder: literal text must separate them", ph)
		}
		parts = append(parts, formatPart{f: d.f, exp: exp, scale: scale})
	}
	if !have["step"] {
		return nil, fmt.Errorf("no {step} placeholder")
	}
	if len(have) < 2 {
		return nil, fmt.Errorf("no figure placeholder (one of %s besides step)", declaredFieldList)
	}
	return parts, nil
}

// compileFormats compiles valid formats (validateFormats has checked
// them; an invalid one is left out).
func compileFormats(fs []FormatConfig) []declaredFormat {
	var out []declaredFormat
	for _, f := range fs {
		parts, err := compilePattern(f.Pattern)
		if err != nil || f.Token == "" {
			continue
		}
		out = append(out, declaredFormat{name: f.Name, token: []byte(f.Token), parts: parts})
	}
	return out
}

// parseDeclared reads b by the first declared format whose token b holds
// and whose pattern matches. NCCL lines are never read.
func (t *Telemetry) parseDeclared(b []byte, tl *pipeline.TelemetryLine) bool {
	for i := range t.formats {
		f := &t.formats[i]
		if !bytes.Contains(b, f.token) || bytes.Contains(b, []byte("NCCL")) {
			continue
		}
		if f.match(b, tl) {
			tl.Kind, tl.Framework = pipeline.TelemetryStep, f.name
			return true
		}
		tl.Reset()
	}
	return false
}

// match tries the pattern at each candidate start in b: each occurrence of
// its first literal, or each number's start when it starts with a
// placeholder. The first match fills tl.
func (f *declaredFormat) match(b []byte, tl *pipeline.TelemetryLine) bool {
	first := f.parts[0]
	for s := 0; s < len(b); s++ {
		if first.lit != nil {
			j := indexLit(b[s:], first.lit)
			if j < 0 {
				return false
			}
			s += j
		} else if !numberStart(b, s) {
			continue
		}
		if f.matchAt(b, s, tl) {
			return true
		}
		tl.Reset()
	}
	return false
}

// matchAt matches the whole pattern from b[s].
func (f *declaredFormat) matchAt(b []byte, s int, tl *pipeline.TelemetryLine) bool {
	pos := s
	for _, p := range f.parts {
		if p.lit != nil {
			n, ok := litAt(b[pos:], p.lit)
			if !ok {
				return false
			}
			pos += n
			continue
		}
		n := numberLen(b[pos:])
		if n == 0 {
			return false
		}
		text := b[pos : pos+n]
		pos += n
		if p.f == keyStep {
			v, ok := progressStep(text)
			if !ok {
				return false
			}
			tl.Step = v
			continue
		}
		v, ok := parseScaled(text, p.exp)
		if !ok {
			return false
		}
		v *= p.scale
		switch p.f {
		case keyTime:
			tl.StepTime = v
		case keyTokens:
			tl.TokensPerS = v
		case keySamples:
			tl.SamplesPerS = v
		case keyItPerS:
			tl.ItPerS = v
		case keyTFLOPs:
			tl.TFLOPs = v
		case keyMFU:
			tl.MFU = v
		case keyLoss:
			tl.Loss = v
		}
	}
	return tl.Step >= 0 && !math.IsNaN(v0(tl))
}

// v0 is any figure of tl (NaN when none): a match needs one.
func v0(tl *pipeline.TelemetryLine) float64 {
	for _, v := range [...]float64{tl.StepTime, tl.TokensPerS, tl.SamplesPerS, tl.ItPerS, tl.TFLOPs, tl.MFU, tl.Loss} {
		if !math.IsNaN(v) {
			return v
		}
	}
	return math.NaN()
}

// indexLit is the first place in b where lit matches (litAt), or -1.
func indexLit(b, lit []byte) int {
	for i := 0; i < len(b); i++ {
		if _, ok := litAt(b[i:], lit); ok {
			return i
		}
	}
	return -1
}

// litAt matches lit at the start of b, a blank in lit matching one or
// more blanks or tabs, and returns the bytes of b it took.
func litAt(b, lit []byte) (int, bool) {
	n := 0
	for _, c := range lit {
		if c == ' ' {
			if n >= len(b) || (b[n] != ' ' && b[n] != '\t') {
				return 0, false
			}
			for n < len(b) && (b[n] == ' ' || b[n] == '\t') {
				n++
			}
			continue
		}
		if n >= len(b) || b[n] != c {
			return 0, false
		}
		n++
	}
	return n, true
}

// numberStart reports whether a number starts at b[i] (not inside one).
func numberStart(b []byte, i int) bool {
	if i > 0 && (isDigit(b[i-1]) || b[i-1] == '.') {
		return false
	}
	return numberLen(b[i:]) > 0
}

// numberLen is the length of the number at the start of b (sign, digits,
// grouping commas, fraction, exponent), 0 when none.
func numberLen(b []byte) int {
	num, _ := splitUnit(b)
	for _, c := range num {
		if isDigit(c) {
			return len(num)
		}
	}
	return 0
}
