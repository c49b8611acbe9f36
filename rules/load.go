package rules

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"gopkg.in/yaml.v3"
)

// BuiltinName is the name Load takes for the built-in rule pack.
const BuiltinName = "builtin"

//go:embed builtin/*.rules.yaml
var builtinFS embed.FS

// Scope says what a rule is evaluated for.
type Scope string

// Scopes.
const (
	// ScopeJob rules are evaluated for every job (the default).
	ScopeJob Scope = "job"
	// ScopePool rules are evaluated for every node pool of the inventory:
	// fleet rules that hold when no job runs at all.
	ScopePool Scope = "pool"
)

// Bounds on what one expression may cost (the sandbox; rules/README.md
// "Functions and sandbox"). 1 000 AST nodes is ten times the largest
// built-in rule; 4 KiB of source is fifty times its longest expression and
// bounds the parser's recursion (deep parentheses make no nodes); 256-byte
// string literals hold any label value a rule compares with. 100 000 units of the VM's memory
// budget (about one per array element or map entry it allocates, and one
// per element each loop over an array starts) let a rule walk a job's
// communicators many times over while a runaway range like 0..1e9, or loops
// nested over large arrays, fail at once. A rule file over 1 MiB is a wrong
// file, not rules.
const (
	maxExprNodes    = 1000
	maxExprBytes    = 4096
	maxLiteralBytes = 256
	maxExprMemory   = 100_000
	maxRuleFile     = 1 << 20
	maxRuleNameLen  = 200
)

// growingBuiltins are the expr builtins whose result can be far larger than
// their arguments (repeat, join, replace, JSON and base64 encoding) or that
// make arrays the memory budget does not see (split). No rule needs them;
// disabled, an expression's output is bounded by its inputs and the budget.
var growingBuiltins = []string{"repeat", "join", "replace", "split", "splitAfter",
	"toJSON", "fromJSON", "toBase64", "fromBase64"}

// Rule is one compiled alerting rule.
type Rule struct {
	Name          string
	Group         string
	File          string
	Line          int // of the rule's `alert:` key
	Scope         Scope
	Expr          string
	For           time.Duration
	KeepFiringFor time.Duration
	Labels        map[string]string
	Annotations   map[string]string

	program    *vm.Program
	perComm    bool // names comm: evaluated once per communicator
	perSeries  bool // names series: evaluated once per training series
	telemetry  bool // names canary, series, checkpoint or collective: needs the job's telemetry
	timed      bool // names now: its value changes with time alone
	labelTmpl  map[string]*template.Template
	annotTmpl  map[string]*template.Template
	exprLine   int // file position of the expression, for run-time errors
	exprColumn int
}

// Severity is the rule's severity label, "warning" when it has none.
func (r *Rule) Severity() string {
	if s := r.Labels["severity"]; s != "" {
		return s
	}
	return "warning"
}

// RuleSet is a loaded, compiled set of rules, in file order.
type RuleSet struct {
	Files []string
	Rules []*Rule
}

// Rule returns the rule named name, or nil.
func (rs *RuleSet) Rule(name string) *Rule {
	for _, r := range rs.Rules {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// LoadError is a problem in a rule file: it names the file, the rule and
// the position.
type LoadError struct {
	File   string
	Rule   string // empty for problems outside a rule
	Line   int
	Column int
	Err    error
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, ": rule %s", e.Rule)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *LoadError) Unwrap() error { return e.Err }

// Load reads and compiles rule files. The name "builtin" stands for the
// built-in pack (rules/builtin/); write ./builtin for a file of that name.
// Every problem of every file is reported, each as a *LoadError. An alert
// name defined twice is an error: Alertmanager would merge the two.
func Load(paths ...string) (*RuleSet, error) {
	rs := &RuleSet{}
	var errs []error
	for _, p := range paths {
		var sub *RuleSet
		var err error
		if p == BuiltinName {
			sub, err = Builtin()
		} else {
			var b []byte
			if b, err = os.ReadFile(p); err != nil {
				errs = append(errs, &LoadError{File: p, Err: err})
				continue
			}
			sub, err = Parse(p, b)
		}
		if err != nil {
			errs = append(errs, err)
		}
		if sub != nil {
			rs.Files = append(rs.Files, sub.Files...)
			rs.Rules = append(rs.Rules, sub.Rules...)
		}
	}
	seen := map[string]*Rule{}
	for _, r := range rs.Rules {
		if prev, ok := seen[r.Name]; ok {
			errs = append(errs, &LoadError{File: r.File, Rule: r.Name, Line: r.Line, Column: 1,
				Err: fmt.Errorf("alert name already defined at %s:%d", prev.File, prev.Line)})
			continue
		}
		seen[r.Name] = r
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rs, nil
}

// Builtin returns the built-in rule pack, rules/builtin/*.rules.yaml.
func Builtin() (*RuleSet, error) {
	names, err := fs.Glob(builtinFS, "builtin/*.rules.yaml")
	if err != nil {
		return nil, err
	}
	rs := &RuleSet{}
	var errs []error
	for _, n := range names {
		b, err := builtinFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		sub, err := Parse(BuiltinName+":"+strings.TrimPrefix(n, "builtin/"), b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rs.Files = append(rs.Files, sub.Files...)
		rs.Rules = append(rs.Rules, sub.Rules...)
	}
	return rs, errors.Join(errs...)
}

// Parse compiles one rule file; name is used in errors.
func Parse(name string, data []byte) (*RuleSet, error) {
	if len(data) > maxRuleFile {
		return nil, &LoadError{File: name, Line: 1, Column: 1,
			Err: fmt.Errorf("%d bytes; a rule file holds at most %d", len(data), maxRuleFile)}
	}
	p := &fileParser{name: name, lines: strings.Split(string(data), "\n")}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &LoadError{File: name, Line: yamlErrLine(err), Column: 1, Err: err}
	}
	rs := &RuleSet{Files: []string{name}}
	if len(doc.Content) == 0 {
		return rs, nil // an empty file holds no rules
	}
	root := doc.Content[0]
	p.mapping(root, "", map[string]func(k, v *yaml.Node){
		"groups": func(k, v *yaml.Node) {
			if !p.kind(v, yaml.SequenceNode, "", "groups: must be a list") {
				return
			}
			groupNames := map[string]bool{}
			for _, g := range v.Content {
				p.group(g, groupNames, rs)
			}
		},
	})
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return rs, nil
}

type fileParser struct {
	name  string
	lines []string
	errs  []error
}

func (p *fileParser) errorf(n *yaml.Node, rule, format string, args ...any) {
	e := &LoadError{File: p.name, Rule: rule, Err: fmt.Errorf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *fileParser) kind(n *yaml.Node, k yaml.Kind, rule, msg string) bool {
	if n.Kind != k {
		p.errorf(n, rule, "%s", msg)
		return false
	}
	return true
}

// mapping calls fields[key] for each key of a mapping node and reports
// unknown keys: a typo must not silently drop a setting.
func (p *fileParser) mapping(n *yaml.Node, rule string, fields map[string]func(k, v *yaml.Node)) {
	if !p.kind(n, yaml.MappingNode, rule, "must be a mapping") {
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fn, ok := fields[k.Value]
		switch {
		case !ok:
			known := make([]string, 0, len(fields))
			for f := range fields {
				known = append(known, f)
			}
			slices.Sort(known)
			p.errorf(k, rule, "unknown key %q (known: %s)", k.Value, strings.Join(known, ", "))
		case seen[k.Value]:
			p.errorf(k, rule, "key %q given twice", k.Value)
		default:
			seen[k.Value] = true
			fn(k, v)
		}
	}
}

func (p *fileParser) group(n *yaml.Node, names map[string]bool, rs *RuleSet) {
	var name string
	var rules *yaml.Node
	p.mapping(n, "", map[string]func(k, v *yaml.Node){
		"name": func(k, v *yaml.Node) { name = v.Value },
		"rules": func(k, v *yaml.Node) {
			if p.kind(v, yaml.SequenceNode, "", "rules: must be a list") {
				rules = v
			}
		},
	})
	if name == "" {
		p.errorf(n, "", "group: name must not be empty")
	} else if names[name] {
		p.errorf(n, "", "group %q defined twice in the file", name)
	}
	names[name] = true
	if rules == nil {
		return
	}
	for _, rn := range rules.Content {
		if r := p.rule(rn, name); r != nil {
			rs.Rules = append(rs.Rules, r)
		}
	}
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// reservedLabels are set by the engine from the alert's subject.
var reservedLabels = []string{"alertname", "cluster", "namespace", "job_name", "pool"}

func (p *fileParser) rule(n *yaml.Node, group string) *Rule {
	r := &Rule{Group: group, File: p.name, Line: n.Line, Scope: ScopeJob,
		Labels: map[string]string{}, Annotations: map[string]string{}}
	var exprNode *yaml.Node
	before := len(p.errs)
	// The alert name first, so that every error names the rule.
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "alert" {
				r.Name = n.Content[i+1].Value
				r.Line = n.Content[i].Line
			}
		}
	}
	strMap := func(dst map[string]string, what string) func(k, v *yaml.Node) {
		return func(k, v *yaml.Node) {
			if !p.kind(v, yaml.MappingNode, r.Name, what+": must be a mapping") {
				return
			}
			for i := 0; i+1 < len(v.Content); i += 2 {
				key, val := v.Content[i], v.Content[i+1]
				if val.Kind != yaml.ScalarNode {
					p.errorf(val, r.Name, "%s.%s: must be a string", what, key.Value)
					continue
				}
				dst[key.Value] = val.Value
			}
		}
	}
	duration := func(dst *time.Duration, what string) func(k, v *yaml.Node) {
		return func(k, v *yaml.Node) {
			d, err := ParseDuration(v.Value)
			if err != nil {
				p.errorf(v, r.Name, "%s: %v", what, err)
			}
			*dst = d
		}
	}
	var tmplNodes []*yaml.Node
	p.mapping(n, r.Name, map[string]func(k, v *yaml.Node){
		"alert": func(k, v *yaml.Node) {},
		"record": func(k, v *yaml.Node) {
			p.errorf(k, r.Name, "recording rules are not supported: ncclwatch exports metrics for PromQL rules instead (see deploy/prometheus)")
		},
		"expr": func(k, v *yaml.Node) {
			exprNode = v
			r.Expr = v.Value
		},
		"for":             duration(&r.For, "for"),
		"keep_firing_for": duration(&r.KeepFiringFor, "keep_firing_for"),
		"labels": func(k, v *yaml.Node) {
			strMap(r.Labels, "labels")(k, v)
			tmplNodes = append(tmplNodes, v)
		},
		"annotations": func(k, v *yaml.Node) {
			strMap(r.Annotations, "annotations")(k, v)
			tmplNodes = append(tmplNodes, v)
		},
		"scope": func(k, v *yaml.Node) {
			switch Scope(v.Value) {
			case ScopeJob, ScopePool:
				r.Scope = Scope(v.Value)
			default:
				p.errorf(v, r.Name, "scope: %q is not job or pool", v.Value)
			}
		},
	})
	switch {
	case r.Name == "":
		p.errorf(n, "", "alert: must not be empty (group %s)", group)
	case !labelName.MatchString(r.Name) || len(r.Name) > maxRuleNameLen:
		p.errorf(n, r.Name, "alert: %q must be a valid label value of letters, digits and _ (it becomes alertname)", r.Name)
	}
	if r.For < 0 || r.KeepFiringFor < 0 {
		p.errorf(n, r.Name, "for and keep_firing_for must not be negative")
	}
	for k := range r.Labels {
		if !labelName.MatchString(k) {
			p.errorf(n, r.Name, "labels: %q is not a valid label name", k)
		}
		if slices.Contains(reservedLabels, k) {
			p.errorf(n, r.Name, "labels: %q is set from the alert's subject and may not be overridden", k)
		}
	}
	for k := range r.Annotations {
		if !labelName.MatchString(k) {
			p.errorf(n, r.Name, "annotations: %q is not a valid annotation name", k)
		}
	}
	if exprNode == nil {
		p.errorf(n, r.Name, "expr: missing")
	} else {
		p.compile(r, exprNode)
	}
	r.labelTmpl = p.templates(r, r.Labels, "labels", tmplNodes)
	r.annotTmpl = p.templates(r, r.Annotations, "annotations", tmplNodes)
	if len(p.errs) > before {
		return nil
	}
	return r
}

// compile type-checks the expression against its scope's environment.
func (p *fileParser) compile(r *Rule, n *yaml.Node) {
	var env any = JobEnv{}
	if r.Scope == ScopePool {
		env = PoolEnv{}
	}
	r.exprLine, r.exprColumn = n.Line, n.Column
	if strings.TrimSpace(r.Expr) == "" {
		p.errorf(n, r.Name, "expr: must not be empty")
		return
	}
	if len(r.Expr) > maxExprBytes {
		p.errorf(n, r.Name, "expr: %d bytes; at most %d (a rule is a condition, not a program)", len(r.Expr), maxExprBytes)
		return
	}
	prog, err := expr.Compile(r.Expr, exprOptions(env)...)
	if err != nil {
		line, col := p.exprPos(n, err)
		msg := err.Error()
		var fe *file.Error
		if errors.As(err, &fe) {
			msg = fe.Message
		}
		p.errs = append(p.errs, &LoadError{File: p.name, Rule: r.Name, Line: line, Column: col,
			Err: fmt.Errorf("expr: %s (scope %s; see rules/README.md for the names)", msg, r.Scope)})
		return
	}
	node := prog.Node()
	sb := &sandboxVisitor{}
	ast.Walk(&node, sb)
	if sb.err != "" {
		p.errorf(n, r.Name, "expr: %s", sb.err)
		return
	}
	r.program = prog
	v := &identVisitor{}
	ast.Walk(&node, v)
	r.perComm, r.perSeries, r.timed = v.names["comm"], v.names["series"], v.names["now"]
	r.telemetry = v.names["canary"] || v.names["series"] || v.names["checkpoint"] || v.names["collective"]
}

func exprOptions(env any) []expr.Option {
	opts := make([]expr.Option, 0, len(growingBuiltins))
	for _, name := range growingBuiltins {
		opts = append(opts, expr.DisableBuiltin(name))
	}
	return append(opts,
		expr.Env(env),
		expr.AsBool(),
		// Time is an argument: the clock is the env's now, never the
		// builtin.
		expr.DisableBuiltin("now"),
		expr.Function("known", known, new(func(any) bool)),
		expr.MaxNodes(maxExprNodes),
	)
}

// sandboxVisitor finds what the sandbox rejects in a compiled expression:
// string literals over maxLiteralBytes, and + on strings or arrays, which
// with let doubles a value per step (let b = a + a; let c = b + b; ...) past
// any memory limit in a few hundred nodes, unseen by the VM's budget.
type sandboxVisitor struct{ err string }

func (v *sandboxVisitor) Visit(n *ast.Node) {
	if v.err != "" {
		return
	}
	switch n := (*n).(type) {
	case *ast.StringNode:
		if len(n.Value) > maxLiteralBytes {
			v.err = fmt.Sprintf("a string literal of %d bytes; at most %d", len(n.Value), maxLiteralBytes)
		}
	case *ast.ConstantNode:
		if s, ok := n.Value.(string); ok && len(s) > maxLiteralBytes {
			v.err = fmt.Sprintf("a string constant of %d bytes; at most %d", len(s), maxLiteralBytes)
		}
	case *ast.BinaryNode:
		if n.Operator != "+" {
			return
		}
		if t := n.Type(); t == nil || t.Kind() == reflect.String || t.Kind() == reflect.Slice || t.Kind() == reflect.Interface {
			v.err = "+ only adds numbers here: joining strings or arrays can grow without bound"
		}
	}
}

type identVisitor struct{ names map[string]bool }

func (v *identVisitor) Visit(n *ast.Node) {
	if v.names == nil {
		v.names = map[string]bool{}
	}
	if id, ok := (*n).(*ast.IdentifierNode); ok {
		v.names[id.Value] = true
	}
}

// exprPos maps an expression error's position to the file.
func (p *fileParser) exprPos(n *yaml.Node, err error) (line, col int) {
	var fe *file.Error
	if !errors.As(err, &fe) || fe.Line == 0 {
		return n.Line, n.Column
	}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		// The block's first line is the one after the indicator; its
		// indentation is the block's, which the expression lacks.
		line = n.Line + fe.Line
		if n.Line < len(p.lines) {
			first := p.lines[n.Line]
			col = len(first) - len(strings.TrimLeft(first, " ")) + fe.Column + 1
		}
		return line, col
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		if fe.Line == 1 {
			return n.Line, n.Column + 1 + fe.Column
		}
	default:
		if fe.Line == 1 {
			return n.Line, n.Column + fe.Column
		}
	}
	return n.Line + fe.Line - 1, fe.Column + 1
}

func (p *fileParser) templates(r *Rule, src map[string]string, what string, nodes []*yaml.Node) map[string]*template.Template {
	out := make(map[string]*template.Template, len(src))
	for k, text := range src {
		t, err := template.New(r.Name + "." + what + "." + k).Funcs(templateFuncs).Parse(text)
		if err != nil {
			var at *yaml.Node
			for _, m := range nodes {
				for i := 0; i+1 < len(m.Content); i += 2 {
					if m.Content[i].Value == k {
						at = m.Content[i+1]
					}
				}
			}
			p.errorf(at, r.Name, "%s.%s: %v", what, k, err)
			continue
		}
		out[k] = t
	}
	return out
}

func yamlErrLine(err error) int {
	// yaml.v3 says "yaml: line N: …".
	s := err.Error()
	if i := strings.Index(s, "line "); i >= 0 {
		rest := s[i+5:]
		if j := strings.IndexByte(rest, ':'); j > 0 {
			if n, err := strconv.Atoi(rest[:j]); err == nil {
				return n
			}
		}
	}
	return 0
}

// ParseDuration reads a Prometheus duration: a sequence of integers with
// the units ms, s, m, h, d (24h), w (7d) and y (365d), such as "90s",
// "1h30m" or "7d". "0" is zero.
func ParseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, errors.New("empty duration")
	}
	units := []struct {
		name string
		d    time.Duration
	}{{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour},
		{"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour}, {"y", 365 * 24 * time.Hour}}
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("%q is not a duration like 30s, 5m, 1h30m or 7d", s)
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", s, err)
		}
		rest = rest[i:]
		found := false
		for _, u := range units {
			if strings.HasPrefix(rest, u.name) && (u.name != "m" || !strings.HasPrefix(rest, "ms")) {
				if n > int64(1<<62)/int64(u.d) {
					return 0, fmt.Errorf("%q is too long", s)
				}
				total += time.Duration(n) * u.d
				rest = rest[len(u.name):]
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("%q is not a duration like 30s, 5m, 1h30m or 7d", s)
		}
	}
	return total, nil
}
