package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// SeriesKey is ClickHouse's cityHash64 of the eleven strings: the values
// below are what ClickHouse 18.16 and chDB 26.9 return for
// cityHash64(cluster, namespace, job, pod, node, pool, model, framework,
// kind, network, network_class) of the same strings (lengths 0 to 70, so
// every length branch of CityHash64 is taken).
func TestSeriesKeyIsCityHash64(t *testing.T) {
	for _, tc := range []struct {
		s    StepSeries
		want uint64
	}{
		{StepSeries{Cluster: "prod-east", Namespace: "ml-team", Job: "llama-pretrain-7f3a", Pod: "llama-pretrain-7f3a-worker-3",
			Node: "gpu-node-017", Pool: "h100-pool", Model: "llama-70b", Framework: "megatron", Kind: "step", Network: "IB",
			NetworkClass: "rdma"}, 6642621698801070509},
		{StepSeries{}, 8925121791834778294},
		{StepSeries{Cluster: "c", Namespace: "n", Job: "j", Pod: strings.Repeat("p", 70), Node: strings.Repeat("n", 40),
			Pool: strings.Repeat("x", 17), Model: "m", Framework: "deepspeed", Kind: "amend", Network: "AWS Libfabric",
			NetworkClass: "rdma"}, 6216100413747968130},
	} {
		if got := SeriesKey(&tc.s); got != tc.want {
			t.Errorf("SeriesKey(%+v) = %d; want %d", tc.s, got, tc.want)
		}
	}
}

// Every row the assembler makes carries its strings' key, from the cache or
// not: rows of one pod, kind and network share a key, and a new pod, kind
// or network is a new series. More pods than the cache holds take turns in
// it.
func TestTelemetryRowsCarrySeriesKey(t *testing.T) {
	a := NewTelemetryAssembler(DefaultTelemetryAssemblerConfig(), nil)
	b := &Batch{}
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const pods = 3 * seriesCacheSize
	off := int64(0)
	line := func(pod int, kind TelemetryKind, step int64) {
		meta := &Meta{Job: "j", Namespace: "ml", Cluster: "c1", Pod: fmt.Sprintf("j-worker-%d", pod), Node: fmt.Sprintf("n%d", pod/8)}
		tl := tline(func(l *TelemetryLine) { l.Kind, l.Framework, l.Step, l.StepTime = kind, FrameworkMegatron, step, 1.5 })
		a.Add("j", meta, tl, t0, Source{Topic: "t", Offset: off}, b)
		off++
	}
	for step := range int64(3) {
		for pod := range pods {
			// Each pod's line a step of its own, so that every line is
			// a row.
			line(pod, TelemetryStep, step*pods+int64(pod))
		}
	}
	line(0, TelemetrySummary, -1)
	line(0, TelemetryStep, 999) // the summary's pod, another kind
	a.Add("j", nil, tline(func(l *TelemetryLine) { l.Kind, l.Name = TelemetryNCCLNetwork, []byte("IB") }), t0, Source{Topic: "t", Offset: off}, b)
	off++
	line(0, TelemetryStep, 1000)
	keys := map[uint64]string{}
	for i := range b.Steps {
		r := &b.Steps[i]
		if want := SeriesKey(r.StepSeries); r.Series != want {
			t.Fatalf("row %d (%s %s %s) carries series %d; want SeriesKey %d", i, r.Pod, r.Kind, r.Network, r.Series, want)
		}
		id := r.Pod + "/" + r.Kind + "/" + r.Network
		if other, ok := keys[r.Series]; ok && other != id {
			t.Errorf("series %d of both %s and %s", r.Series, other, id)
		}
		keys[r.Series] = id
	}
	if want := pods + 2; len(keys) != want {
		t.Errorf("%d series among %d rows; want %d (a pod each, a summary, a network change)", len(keys), len(b.Steps), want)
	}
}
