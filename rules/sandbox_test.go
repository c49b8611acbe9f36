package rules

import (
	"strings"
	"testing"
)

// ruleFile is a one-rule file with expression ex (YAML single-quoted).
func ruleFile(ex string) []byte {
	return []byte("groups:\n  - name: g\n    rules:\n      - alert: X\n        expr: '" +
		strings.ReplaceAll(ex, "'", "''") + "'\n")
}

// Pathological expressions are rejected when the file loads, with an error
// that says which bound, and that does not echo a huge expression back.
func TestRulesSandboxRejectsAtLoad(t *testing.T) {
	doubling := "let a = \"xxxxxxxx\"; "
	prev := "a"
	for i := range 40 {
		name := "v" + strings.Repeat("x", i+1)
		doubling += "let " + name + " = " + prev + " + " + prev + "; "
		prev = name
	}
	doubling += "len(" + prev + ") > 0"
	tests := []struct {
		name, expr, want string
	}{
		{"deep parentheses", strings.Repeat("(", 100000) + "true" + strings.Repeat(")", 100000), "expr: 200004 bytes; at most 4096"},
		{"deep negation", strings.Repeat("!", 2000) + "true", "expression exceeds maximum allowed nodes"},
		{"huge literal", `job.name != "` + strings.Repeat("a", 100000) + `"`, "bytes; at most 4096 (a rule is a condition"},
		{"long literal", `job.name != "` + strings.Repeat("a", 300) + `"`, "a string literal of 300 bytes; at most 256"},
		{"string doubling", doubling, "+ only adds numbers here"},
		// expr itself has no + on arrays.
		{"array doubling", "let a = [1, 2]; let b = a + a; let c = b + b; len(c) > 0", "invalid operation: + (mismatched types"},
		{"string concat", `job.name + "x" != ""`, "+ only adds numbers here"},
		{"repeat", `len(repeat("x", 1000000000)) > 0`, "unknown name repeat"},
		{"join", `len(join(map(0..40000, {"xxxxxxxxxxxxxxxx"}), "")) > 0`, "unknown name join"},
		{"toJSON", `len(toJSON(comms)) > 0`, "unknown name toJSON"},
		{"replace", `len(replace(job.name, "", job.name)) > 0`, "unknown name replace"},
	}
	for _, tc := range tests {
		_, err := Parse("sandbox.yaml", ruleFile(tc.expr))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Parse = %.300v; want an error containing %q", tc.name, err, tc.want)
			continue
		}
		if len(err.Error()) > 8<<10 {
			t.Errorf("%s: error is %d bytes long; it must not echo the expression whole", tc.name, len(err.Error()))
		}
		t.Logf("%s: %.200s", tc.name, err)
	}
	big := append([]byte("# "), strings.Repeat("x", maxRuleFile)...)
	if _, err := Parse("big.yaml", big); err == nil || !strings.Contains(err.Error(), "a rule file holds at most 1048576") {
		t.Errorf("Parse(1 MiB file) = %.200v; want the file size bound", err)
	}
}

// Loops over large arrays load but stop at evaluation on the VM's memory
// budget, which counts every element a loop starts over; a failing rule
// is an evaluation error, the other rules still run.
func TestRulesSandboxBoundsEvaluation(t *testing.T) {
	for _, ex := range []string{
		"all(0..300, {all(0..300, {all(0..300, {true})})})",
		"sum(map(0..60000, {#})) > 0 && sum(map(0..60000, {#})) > 0",
		"count(0..99999, {# > 0}) > 0 && count(0..99999, {# > 0}) > 0",
		"any(comms, {all(0..50000, {all(0..50000, {true})})})",
	} {
		rs, err := Parse("bounded.yaml", ruleFile(ex))
		if err != nil {
			t.Errorf("Parse(%s) = %v; want it to load", ex, err)
			continue
		}
		e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{})
		sum, comms := fallbackJob("j", 1, false)
		e.Observe(sum, comms, nil)
		_, err = e.Eval(t0)
		if err == nil || !strings.Contains(err.Error(), "memory budget exceeded") {
			t.Errorf("Eval(%s) = %v; want memory budget exceeded", ex, err)
		}
	}
	// What a real rule needs stays within the bounds.
	rs, err := Parse("fine.yaml", ruleFile(`let n = len(comms) + 1; n > 0 && all(comms, {.network_class in ["rdma", "tcp"]}) && sum(0..1000) > 0`))
	if err != nil {
		t.Fatalf("Parse(ordinary rule) = %v", err)
	}
	e, _ := NewEngine(DefaultConfig(), rs, EngineDeps{})
	sum, comms := fallbackJob("j", 1, false)
	e.Observe(sum, comms, nil)
	if _, err := e.Eval(t0); err != nil {
		t.Errorf("Eval(ordinary rule) = %v", err)
	}
}
