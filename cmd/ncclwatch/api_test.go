package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
	"github.com/ncclwatch/ncclwatch/sinks"
)

func apiGet(t *testing.T, url, token string, into any) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if into != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// TestAPIStoredAndLive seeds job_verdicts on the real ClickHouse server,
// adds live state, and reads both through the API with a bearer token.
func TestAPIStoredAndLive(t *testing.T) {
	addr := testenv.Server(t, "NCCLWATCH_TEST_CLICKHOUSE", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := sinks.DefaultClickHouseConfig()
	cfg.Addr, cfg.Database = []string{addr}, "ncclwatch_api_"+randHex()
	ch, err := sinks.NewClickHouse(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	defer func() { _ = ch.Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.Database) }()
	if _, err := ch.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	ptrS := func(s string) *string { return &s }
	ptrI := func(i int) *int { return &i }
	f := false
	stored := []pipeline.JobSummary{
		{Cluster: "prod", Namespace: "research", Job: "llm-13b", Verdict: pipeline.VerdictSocketFallback, Version: 50,
			Network: ptrS("Socket"), NetworkClass: ptrS("tcp"), NNodes: ptrI(2), NRanks: ptrI(16), NCCLVersion: ptrS("2.26.2"),
			Reasons: []string{"NCCL uses Socket across nodes (2 hosts) where RDMA is expected", "NET/IB: no device found"},
			Intra:   []string{}, FirstSeen: t0, LastSeen: t0.Add(3 * time.Minute)},
		{Cluster: "prod", Namespace: "research", Job: "llm-70b", Verdict: pipeline.VerdictOK, Version: 15,
			Network: ptrS("IB"), NetworkClass: ptrS("rdma"), Fabric: ptrS("IB"), GDR: &f, Reasons: []string{"IB (rdma)"},
			Intra: []string{}, FirstSeen: t0, LastSeen: t0.Add(time.Minute)},
		{Cluster: "prod", Namespace: "nlp", Job: "bert", Verdict: pipeline.VerdictGDROff, Version: 9, Intra: []string{},
			Reasons: []string{}, FirstSeen: t0, LastSeen: t0},
	}
	if err := ch.Consume(ctx, &pipeline.Batch{Jobs: stored}); err != nil {
		t.Fatal(err)
	}
	live := newLiveJobs(10)
	// llm-70b is also live, newer than its stored row: the live state wins.
	liveJob := stored[1]
	liveJob.Verdict, liveJob.Version, liveJob.LastSeen = pipeline.VerdictSocketFallback, 30, t0.Add(10*time.Minute)
	live.observe([]pipeline.JobSummary{liveJob,
		{Cluster: "prod", Namespace: "vision", Job: "vit", Verdict: pipeline.VerdictOK, Version: 2, LastSeen: t0.Add(time.Minute)}})
	live.observe([]pipeline.JobSummary{{Cluster: "prod", Namespace: "vision", Job: "vit", Verdict: pipeline.VerdictUnknown, Version: 1}}) // older: ignored

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := newJobsAPI(live, ch, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	u := srv.URL + "/api/v1/jobs"

	if code := apiGet(t, u, "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET without token = %d; want 401", code)
	}
	if code := apiGet(t, u, "wrong", nil); code != http.StatusUnauthorized {
		t.Errorf("GET with a wrong token = %d; want 401", code)
	}

	var one apiJob
	if code := apiGet(t, u+"/research/llm-13b", "s3cret", &one); code != http.StatusOK {
		t.Fatalf("GET llm-13b = %d", code)
	}
	b, _ := json.Marshal(one)
	want := `{"cluster":"prod","namespace":"research","job":"llm-13b","verdict":"socket_fallback","network":"Socket",` +
		`"network_class":"tcp","fabric":null,"gdr":null,"nnodes":2,"nranks":16,"nccl_version":"2.26.2",` +
		`"reasons":["NCCL uses Socket across nodes (2 hosts) where RDMA is expected","NET/IB: no device found"],` +
		`"first_seen":"2026-11-30T08:00:00Z","last_seen":"2026-11-30T08:03:00Z","source":"stored"}`
	if string(b) != want {
		t.Errorf("GET llm-13b = %s\nwant %s", b, want)
	}
	if code := apiGet(t, u+"/research/llm-70b", "s3cret", &one); code != http.StatusOK || one.Source != "live" ||
		one.Verdict != "socket_fallback" {
		t.Errorf("GET llm-70b = %d %+v; want the live state (socket_fallback)", code, one)
	}
	if code := apiGet(t, u+"/research/nope", "s3cret", nil); code != http.StatusNotFound {
		t.Errorf("GET a missing job = %d; want 404", code)
	}

	list := func(query string) (names string, next string) {
		t.Helper()
		var l apiJobList
		if code := apiGet(t, u+query, "s3cret", &l); code != http.StatusOK {
			t.Fatalf("GET %s = %d", query, code)
		}
		for _, j := range l.Jobs {
			names += fmt.Sprintf("%s/%s:%s:%s ", j.Namespace, j.Job, j.Verdict, j.Source)
		}
		return names, l.Next
	}
	for _, tc := range []struct{ query, want string }{
		{"", "nlp/bert:gdr_off:stored research/llm-13b:socket_fallback:stored research/llm-70b:socket_fallback:live vision/vit:ok:live "},
		{"?verdict=socket_fallback", "research/llm-13b:socket_fallback:stored research/llm-70b:socket_fallback:live "},
		{"?namespace=research", "research/llm-13b:socket_fallback:stored research/llm-70b:socket_fallback:live "},
		{"?since=2026-11-30T08:02:00Z", "research/llm-13b:socket_fallback:stored research/llm-70b:socket_fallback:live "},
	} {
		if got, _ := list(tc.query); got != tc.want {
			t.Errorf("GET %s = %s\nwant %s", tc.query, got, tc.want)
		}
	}
	// Pages of two, following the cursor, cover every job once.
	var all string
	next := ""
	for i := 0; i < 5; i++ {
		q := "?limit=2"
		if next != "" {
			q += "&cursor=" + next
		}
		var got string
		got, next = list(q)
		all += got
		if next == "" {
			break
		}
	}
	if want := "nlp/bert:gdr_off:stored research/llm-13b:socket_fallback:stored research/llm-70b:socket_fallback:live vision/vit:ok:live "; all != want {
		t.Errorf("pages = %s\nwant %s", all, want)
	}
	for _, bad := range []string{"?verdict=bad", "?limit=0", "?limit=5000", "?since=yesterday", "?cursor=notacursor"} {
		if code := apiGet(t, u+bad, "s3cret", nil); code != http.StatusBadRequest {
			t.Errorf("GET %s = %d; want 400", bad, code)
		}
	}
}

// TestAPILiveDemo reads the API of the running demo pipeline (in-process
// Kafka, no ClickHouse): the verdicts come from its live state.
func TestAPILiveDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := demo(ctx, pw, io.Discard, demoOptions{out: t.TempDir(), serve: true, listen: "127.0.0.1:0", timeout: 60 * time.Second})
		pw.CloseWithError(err)
		done <- err
	}()
	re := regexp.MustCompile(`serving http://([0-9.:]+)/metrics`)
	var out bytes.Buffer
	var addr string
	buf := make([]byte, 4096)
	for addr == "" {
		n, err := pr.Read(buf)
		out.Write(buf[:n])
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		if err != nil {
			t.Fatalf("demo ended before serving: %v\n%s", err, out.String())
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	var one apiJob
	if code := apiGet(t, "http://"+addr+"/api/v1/jobs/research/llm-13b-socket", "", &one); code != http.StatusOK {
		t.Fatalf("GET llm-13b-socket = %d", code)
	}
	if one.Verdict != "socket_fallback" || one.Source != "live" || one.Network == nil || *one.Network != "Socket" ||
		one.NNodes == nil || *one.NNodes != 2 || one.Cluster != "demo" {
		t.Errorf("GET llm-13b-socket = %+v; want live socket_fallback on Socket, 2 nodes, cluster demo", one)
	}
	var l apiJobList
	if code := apiGet(t, "http://"+addr+"/api/v1/jobs?verdict=ok", "", &l); code != http.StatusOK {
		t.Fatalf("GET ?verdict=ok = %d", code)
	}
	var names []string
	for _, j := range l.Jobs {
		names = append(names, j.Job)
	}
	if got := strings.Join(names, ","); got != "efa-p4d,nvls-single-node,llm-70b-ib" {
		t.Errorf("GET ?verdict=ok jobs = %s; want efa-p4d,nvls-single-node,llm-70b-ib (key order)", got)
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Errorf("demo: %v", err)
	}
}
