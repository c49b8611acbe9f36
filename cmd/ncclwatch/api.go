package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// The read API of `ncclwatch run` (docs/read-api.md, "Read API"):
//
//	GET /api/v1/jobs?verdict=&namespace=&cluster=&since=&limit=&cursor=
//	GET /api/v1/jobs/{namespace}/{job}?cluster=
//
// Jobs the running service flushed come from its live state; the others
// from ClickHouse's job_verdicts view.

// apiJob is one job in the API's answers; its JSON form is documented in
// docs/read-api.md and is a contract.
type apiJob struct {
	Cluster      string    `json:"cluster"`
	Namespace    string    `json:"namespace"`
	Job          string    `json:"job"`
	Verdict      string    `json:"verdict"`
	Network      *string   `json:"network"`
	NetworkClass *string   `json:"network_class"`
	Fabric       *string   `json:"fabric"`
	GDR          *bool     `json:"gdr"`
	NNodes       *int      `json:"nnodes"`
	NRanks       *int      `json:"nranks"`
	NCCLVersion  *string   `json:"nccl_version"`
	Reasons      []string  `json:"reasons"`
	FirstSeen    time.Time `json:"first_seen"`
	LastSeen     time.Time `json:"last_seen"`
	// Source is "live" (the running service's state) or "stored"
	// (job_verdicts).
	Source string `json:"source"`
}

type apiJobList struct {
	Jobs []apiJob `json:"jobs"`
	// Next is the cursor of the next page; absent on the last one.
	Next string `json:"next,omitempty"`
}

type apiError struct {
	Error string `json:"error"`
}

func toAPIJob(j pipeline.JobSummary, source string) apiJob {
	reasons := j.Reasons
	if reasons == nil {
		reasons = []string{}
	}
	return apiJob{Cluster: j.Cluster, Namespace: j.Namespace, Job: j.Job, Verdict: string(j.Verdict), Network: j.Network,
		NetworkClass: j.NetworkClass, Fabric: j.Fabric, GDR: j.GDR, NNodes: j.NNodes, NRanks: j.NRanks,
		NCCLVersion: j.NCCLVersion, Reasons: reasons, FirstSeen: j.FirstSeen, LastSeen: j.LastSeen, Source: source}
}

// liveJobsMax bounds the live state the API keeps: the latest summary of
// this many jobs (a few hundred bytes each), more than a cluster runs at
// once; beyond it the least recently seen go, and job_verdicts answers.
const liveJobsMax = 50000

// liveJobs holds the latest summary of every job the running service
// stored. observe runs as the last stage of the chain, after the sink
// accepted the batch (one batch at a time); queries on the HTTP server's
// goroutines.
type liveJobs struct {
	mu   sync.RWMutex
	jobs map[sinks.JobKey]pipeline.JobSummary
	max  int
}

func newLiveJobs(max int) *liveJobs {
	return &liveJobs{jobs: map[sinks.JobKey]pipeline.JobSummary{}, max: max}
}

func keyOf(j pipeline.JobSummary) sinks.JobKey {
	return sinks.JobKey{Cluster: j.Cluster, Namespace: j.Namespace, Job: j.Job}
}

// observe keeps the newest state (highest version) of each job.
func (l *liveJobs) observe(jobs []pipeline.JobSummary) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range jobs {
		k := keyOf(j)
		if old, ok := l.jobs[k]; ok && old.Version > j.Version {
			continue
		}
		j.Reasons = slices.Clone(j.Reasons)
		l.jobs[k] = j
	}
	for len(l.jobs) > l.max {
		var oldest sinks.JobKey
		first := true
		var t time.Time
		for k, j := range l.jobs {
			if first || j.LastSeen.Before(t) {
				oldest, t, first = k, j.LastSeen, false
			}
		}
		delete(l.jobs, oldest)
	}
}

// matches reports whether j satisfies q (as sinks.JobVerdicts filters).
func matches(q apiQuery, j pipeline.JobSummary) bool {
	return (q.Cluster == "" || j.Cluster == q.Cluster) && (q.Namespace == "" || j.Namespace == q.Namespace) &&
		(q.Job == "" || j.Job == q.Job) && (q.Verdict == "" || j.Verdict == q.Verdict) &&
		(q.Since.IsZero() || !j.LastSeen.Before(q.Since)) && (q.After.IsZero() || q.After.Less(keyOf(j)))
}

// query returns the live jobs matching q, in key order, at most q.Limit.
func (l *liveJobs) query(q apiQuery) []pipeline.JobSummary {
	l.mu.RLock()
	var out []pipeline.JobSummary
	for _, j := range l.jobs {
		if matches(q, j) {
			out = append(out, j)
		}
	}
	l.mu.RUnlock()
	slices.SortFunc(out, func(a, b pipeline.JobSummary) int { return cmpKey(keyOf(a), keyOf(b)) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

func cmpKey(a, b sinks.JobKey) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

type apiQuery = sinks.JobQuery

// jobReader reads stored verdicts; sinks.ClickHouse is the implementation.
type jobReader interface {
	JobVerdicts(ctx context.Context, q sinks.JobQuery) ([]pipeline.JobSummary, error)
}

// API page sizes: 100 by default keeps an answer small for a chat bot or a
// CI step; 1000 at most bounds one ClickHouse read and one response.
const (
	apiDefaultLimit = 100
	apiMaxLimit     = 1000
)

// jobsAPI serves the read API. store may be nil (no ClickHouse: live only).
type jobsAPI struct {
	live  *liveJobs
	store jobReader
	token []byte // nil: no authentication
}

// newJobsAPI reads the bearer token from tokenFile (empty: no auth).
func newJobsAPI(live *liveJobs, store jobReader, tokenFile string) (*jobsAPI, error) {
	a := &jobsAPI{live: live, store: store}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("http.api_token_file: %w", err)
		}
		if a.token = bytes.TrimSpace(b); len(a.token) == 0 {
			return nil, fmt.Errorf("http.api_token_file: %s is empty", tokenFile)
		}
	}
	return a, nil
}

// mount registers the API's routes on mux.
func (a *jobsAPI) mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/jobs", a.auth(a.list))
	mux.HandleFunc("GET /api/v1/jobs/{namespace}/{job}", a.auth(a.get))
}

func (a *jobsAPI) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.token != nil {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), a.token) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ncclwatch"`)
				writeJSON(w, http.StatusUnauthorized, apiError{"missing or wrong bearer token"})
				return
			}
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to tell it
}

// parseAPIQuery reads the list's parameters; now resolves a relative since.
func parseAPIQuery(r *http.Request, now time.Time) (apiQuery, error) {
	v := r.URL.Query()
	q := apiQuery{Cluster: v.Get("cluster"), Namespace: v.Get("namespace"), Limit: apiDefaultLimit}
	switch vd := pipeline.Verdict(v.Get("verdict")); vd {
	case "", pipeline.VerdictOK, pipeline.VerdictUnknown, pipeline.VerdictNoEvidence, pipeline.VerdictDegraded,
		pipeline.VerdictGDROff, pipeline.VerdictSocketFallback:
		q.Verdict = vd
	default:
		return q, fmt.Errorf("verdict: %q is not one of ok, unknown, no_evidence, degraded, gdr_off, socket_fallback", vd)
	}
	if s := v.Get("since"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			q.Since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, s); err == nil {
			q.Since = t
		} else {
			return q, fmt.Errorf("since: %q is neither an RFC 3339 time nor a duration such as 30m", s)
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > apiMaxLimit {
			return q, fmt.Errorf("limit: want 1 to %d", apiMaxLimit)
		}
		q.Limit = n
	}
	if s := v.Get("cursor"); s != "" {
		k, err := decodeCursor(s)
		if err != nil {
			return q, err
		}
		q.After = k
	}
	return q, nil
}

func encodeCursor(k sinks.JobKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.Cluster + "\x00" + k.Namespace + "\x00" + k.Job))
}

func decodeCursor(s string) (sinks.JobKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	parts := strings.Split(string(b), "\x00")
	if err != nil || len(parts) != 3 {
		return sinks.JobKey{}, fmt.Errorf("cursor: not one this API returned")
	}
	return sinks.JobKey{Cluster: parts[0], Namespace: parts[1], Job: parts[2]}, nil
}

// find merges live and stored jobs matching q: live wins for a job in
// both; the result is in key order, at most q.Limit, with more reporting
// whether a further page may hold jobs.
func (a *jobsAPI) find(ctx context.Context, q apiQuery) (jobs []apiJob, more bool, err error) {
	live := a.live.query(q)
	var stored []pipeline.JobSummary
	if a.store != nil {
		if stored, err = a.store.JobVerdicts(ctx, q); err != nil {
			return nil, false, err
		}
	}
	seen := map[sinks.JobKey]bool{}
	for _, j := range live {
		seen[keyOf(j)] = true
		jobs = append(jobs, toAPIJob(j, "live"))
	}
	for _, j := range stored {
		if !seen[keyOf(j)] {
			jobs = append(jobs, toAPIJob(j, "stored"))
		}
	}
	slices.SortFunc(jobs, func(x, y apiJob) int {
		return cmpKey(sinks.JobKey{Cluster: x.Cluster, Namespace: x.Namespace, Job: x.Job},
			sinks.JobKey{Cluster: y.Cluster, Namespace: y.Namespace, Job: y.Job})
	})
	more = len(jobs) > q.Limit || len(stored) == q.Limit || len(live) == q.Limit
	if len(jobs) > q.Limit {
		jobs = jobs[:q.Limit]
	}
	return jobs, more, nil
}

// apiTimeout bounds one request's ClickHouse read.
const apiTimeout = 10 * time.Second

func (a *jobsAPI) list(w http.ResponseWriter, r *http.Request) {
	q, err := parseAPIQuery(r, time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	jobs, more, err := a.find(ctx, q)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, apiError{err.Error()})
		return
	}
	res := apiJobList{Jobs: jobs}
	if res.Jobs == nil {
		res.Jobs = []apiJob{}
	}
	if more && len(jobs) > 0 {
		last := jobs[len(jobs)-1]
		res.Next = encodeCursor(sinks.JobKey{Cluster: last.Cluster, Namespace: last.Namespace, Job: last.Job})
	}
	writeJSON(w, http.StatusOK, res)
}

func (a *jobsAPI) get(w http.ResponseWriter, r *http.Request) {
	q := apiQuery{Cluster: r.URL.Query().Get("cluster"), Namespace: r.PathValue("namespace"), Job: r.PathValue("job"),
		Limit: 2}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	jobs, _, err := a.find(ctx, q)
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadGateway, apiError{err.Error()})
	case len(jobs) == 0:
		writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("no job %s/%s", q.Namespace, q.Job)})
	case len(jobs) > 1:
		writeJSON(w, http.StatusConflict, apiError{fmt.Sprintf("job %s/%s exists in several clusters (%s, %s): add ?cluster=",
			q.Namespace, q.Job, jobs[0].Cluster, jobs[1].Cluster)})
	default:
		writeJSON(w, http.StatusOK, jobs[0])
	}
}
