package sinks

import (
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestJobVerdicts seeds job summaries through the sink (two versions of one
// job) and reads them back through job_verdicts with filters and a cursor.
func TestJobVerdicts(t *testing.T) {
	c := migrated(t)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	job := func(ns, name string, v pipeline.Verdict, version uint64, seen time.Time) pipeline.JobSummary {
		return pipeline.JobSummary{Job: name, Namespace: ns, Cluster: "c1", Verdict: v, Version: version,
			Network: ptr("Socket"), NetworkClass: ptr("tcp"), NNodes: ptr(2), NRanks: ptr(16), GDR: ptr(false),
			Reasons: []string{"NCCL uses Socket across nodes (2 hosts) where RDMA is expected"}, Intra: []string{},
			FirstSeen: t0, LastSeen: seen}
	}
	b := &pipeline.Batch{Jobs: []pipeline.JobSummary{
		job("ml", "llm-a", pipeline.VerdictOK, 3, t0.Add(time.Minute)),
		job("ml", "llm-a", pipeline.VerdictSocketFallback, 9, t0.Add(2*time.Minute)), // newer state wins
		job("ml", "llm-b", pipeline.VerdictOK, 4, t0.Add(time.Hour)),
		job("nlp", "bert", pipeline.VerdictSocketFallback, 5, t0.Add(time.Hour)),
	}}
	if err := c.Consume(ctx, b); err != nil {
		t.Fatal(err)
	}
	names := func(js []pipeline.JobSummary) string {
		s := ""
		for _, j := range js {
			s += j.Namespace + "/" + j.Job + ":" + string(j.Verdict) + " "
		}
		return s
	}
	for _, tc := range []struct {
		name string
		q    JobQuery
		want string
	}{
		{"all", JobQuery{Limit: 10}, "ml/llm-a:socket_fallback ml/llm-b:ok nlp/bert:socket_fallback "},
		{"verdict", JobQuery{Verdict: pipeline.VerdictSocketFallback, Limit: 10}, "ml/llm-a:socket_fallback nlp/bert:socket_fallback "},
		{"namespace", JobQuery{Namespace: "ml", Limit: 10}, "ml/llm-a:socket_fallback ml/llm-b:ok "},
		{"since", JobQuery{Since: t0.Add(30 * time.Minute), Limit: 10}, "ml/llm-b:ok nlp/bert:socket_fallback "},
		{"page 1", JobQuery{Limit: 2}, "ml/llm-a:socket_fallback ml/llm-b:ok "},
		{"page 2", JobQuery{Limit: 2, After: JobKey{"c1", "ml", "llm-b"}}, "nlp/bert:socket_fallback "},
		{"one job", JobQuery{Cluster: "c1", Namespace: "nlp", Job: "bert", Limit: 1}, "nlp/bert:socket_fallback "},
	} {
		got, err := c.JobVerdicts(ctx, tc.q)
		if err != nil {
			t.Fatalf("%s: JobVerdicts(%+v) = %v", tc.name, tc.q, err)
		}
		if names(got) != tc.want {
			t.Errorf("%s: JobVerdicts(%+v) = %s; want %s", tc.name, tc.q, names(got), tc.want)
		}
	}
	got, err := c.JobVerdicts(ctx, JobQuery{Job: "bert", Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("JobVerdicts(bert) = %v, %v", got, err)
	}
	j := got[0]
	if j.Network == nil || *j.Network != "Socket" || j.GDR == nil || *j.GDR || j.NNodes == nil || *j.NNodes != 2 ||
		j.NRanks == nil || *j.NRanks != 16 || len(j.Reasons) != 1 || !j.LastSeen.Equal(t0.Add(time.Hour)) || j.Cluster != "c1" {
		t.Errorf("JobVerdicts(bert) = %+v; want Socket, GDR false, 2 nodes, 16 ranks, one reason, last seen %s", j, t0.Add(time.Hour))
	}
	if _, err := c.JobVerdicts(ctx, JobQuery{}); err == nil {
		t.Error("JobVerdicts with limit 0: want an error")
	}
}
