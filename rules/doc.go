// Package rules decides alerts: it loads Prometheus-shaped rule files
// whose expressions are expr-lang over documented views of the job and
// communicator summaries and the node inventory (env.go,
// rules/README.md), evaluates them with time as an argument (Engine),
// keeps per (rule, job) and (rule, pool) state through pending, firing
// and resolved, and sends the changes to Alertmanager and webhooks
// (Notifier) after the sink stored them (Stage, the rules tap of the
// pipeline). Rule scenario files test
// rules like `promtool test rules` (RunScenarios).
package rules
