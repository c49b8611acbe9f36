package main

// The scale-out fault test: one input, produced with librdkafka (kcat,
// lz4: what Fluent Bit's Kafka output writes) in chunks while several
// `ncclwatch run` members of one group consume it and one of them is
// SIGKILLed and restarted every few seconds (each kill moves partitions
// and makes members rebuild their state from ClickHouse), compared table
// by table with one member consuming the same topic without faults, which
// is compared with a second one alone with other batch limits.
// NCCLWATCH_SCALEOUT_LONG=1 runs the long form; NCCLWATCH_SCALEOUT_MEMBERS
// sets the group's size (3); NCCLWATCH_SCALEOUT_SEED replays a run's
// input interleaving, chunking and kill timings (the test logs its seed);
// NCCLWATCH_SCALEOUT_BROKER=1 adds a broker restart (see below).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclwatch/ncclwatch/parsers"
	"github.com/ncclwatch/ncclwatch/pipeline"
	"github.com/ncclwatch/ncclwatch/pipeline/assemble"
	"github.com/ncclwatch/ncclwatch/pipeline/testenv"
	"github.com/ncclwatch/ncclwatch/rules"
)

// scaleOutInput returns the records of the test's jobs as kcat input lines
// (key, tab, Fluent Bit JSON), the jobs' lines interleaved in runs of 1 to
// 20 lines as pods print concurrently, and the number of records.
func scaleOutInput(t *testing.T, dir string, nJobs int, jobBytes int64, rng *rand.Rand) []string {
	t.Helper()
	jobs := genJobs(t, dir, nJobs, jobBytes)
	// Real logs: trainer steps of every rank, an nccl-tests table, NCCL
	// banners before the communicator's lines.
	jobs["so-megatron"] = "../../testdata/telemetry/026_megatron_core_moe_ep8_throughput_params_norm_warnings_interleaved_a100.log"
	jobs["so-tests"] = "../../testdata/telemetry/017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log"
	jobs["so-efa"] = corpus + "080_efa_ofi_libfabric_no_gdr_g7e_2node_nccl2.29.2.log"
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range jobs {
			if !yield(k) {
				return
			}
		}
	})
	lines := map[string][]string{}
	for _, job := range names {
		b, err := os.ReadFile(jobs[job])
		if err != nil {
			t.Fatal(err)
		}
		lines[job] = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	}
	// Now: the rules weigh a job's activity by its records' times.
	t0 := time.Now().UTC().Truncate(time.Second)
	var out []string
	for len(names) > 0 {
		i := rng.IntN(len(names))
		job := names[i]
		n := min(1+rng.IntN(20), len(lines[job]))
		m := replayMeta{Job: job, Namespace: "it", Pod: job + "-worker-0", Container: "trainer", Node: "node-" + job}
		for _, l := range lines[job][:n] {
			v := fluentBitJSON(nil, []byte(l), t0.Add(time.Duration(len(out))*time.Millisecond), m)
			out = append(out, job+"\t"+string(v))
		}
		if lines[job] = lines[job][n:]; len(lines[job]) == 0 {
			names = slices.Delete(names, i, i+1)
		}
	}
	return out
}

// kcatProduce writes records (key, tab, value lines) to topic with kcat,
// lz4-compressed, waiting for every delivery.
func kcatProduce(t *testing.T, kcat, broker, topic string, records []string) {
	t.Helper()
	cmd := exec.Command(kcat, "-P", "-b", broker, "-t", topic, "-K", "\t", "-z", "lz4", "-X", "linger.ms=5")
	cmd.Stdin = strings.NewReader(strings.Join(records, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
}

// rebuild is one state rebuild a member logged: when its assignment
// began (the log line's time less its "took"; the log has whole seconds)
// and how long it took.
type rebuild struct {
	at   time.Time
	took time.Duration
}

// rebuilds returns every state rebuild the members logged, by start.
func rebuilds(t *testing.T, logs []string) []rebuild {
	t.Helper()
	var out []rebuild
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if !strings.Contains(l, "state rebuilt from stored events") {
				continue
			}
			var line struct {
				Took float64   `json:"took"` // milliseconds
				Time time.Time `json:"time"`
			}
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("%s: %v: %s", path, err, l)
			}
			took := time.Duration(line.Took * float64(time.Millisecond))
			out = append(out, rebuild{at: line.Time.Add(-took), took: took})
		}
		f.Close()
	}
	slices.SortFunc(out, func(x, y rebuild) int { return x.at.Compare(y.at) })
	return out
}

// spread is "min a, median b, max c" of ds (sorted here).
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("min %v, median %v, max %v", ds[0], ds[len(ds)/2], ds[len(ds)-1])
}

// rebalanceTimes returns, for each kill, how long its partitions had no
// owner: from the kill to the first assignment after it (the start of
// the next rebuild any member logged), to within the log's second.
func rebalanceTimes(kills []time.Time, rbs []rebuild) []time.Duration {
	var out []time.Duration
	for _, k := range kills {
		k = k.Truncate(time.Second)
		i, _ := slices.BinarySearchFunc(rbs, k, func(r rebuild, k time.Time) int { return r.at.Truncate(time.Second).Compare(k) })
		if i < len(rbs) {
			out = append(out, rbs[i].at.Sub(k).Round(time.Second))
		}
	}
	return out
}

func TestIntegrationScaleOut(t *testing.T) {
	long := os.Getenv("NCCLWATCH_SCALEOUT_LONG") == "1"
	brokers, chAddr := itServers(t)
	kcat := testenv.Servers(t, "make test sets it: deploy/local/kcat.sh path", "NCCLWATCH_TEST_KCAT")[0]
	members, kills, nJobs, jobBytes, chunks := 3, 6, 10, int64(128<<10), 40
	if long {
		kills, nJobs, jobBytes, chunks = 14, 60, 1<<20, 150
	}
	if v := os.Getenv("NCCLWATCH_SCALEOUT_MEMBERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NCCLWATCH_SCALEOUT_MEMBERS=%q: want a count", v)
		}
		members = n
	}
	// NCCLWATCH_SCALEOUT_BROKER=1 also restarts the broker, with its
	// data, once half the kills are done: deploy/local/kafka.sh stop
	// --keep-data and start on the broker the test is given, so only for a
	// broker of one's own, started by the same script with the same
	// environment (KAFKA_CONTROLLER_PORT, TMPDIR).
	var broker *privateKafka
	if os.Getenv("NCCLWATCH_SCALEOUT_BROKER") == "1" {
		_, port, err := net.SplitHostPort(brokers[0])
		if err != nil || os.Getenv("KAFKA_CONTROLLER_PORT") == "" {
			t.Fatalf("NCCLWATCH_SCALEOUT_BROKER=1 restarts the broker at %s with deploy/local/kafka.sh: "+
				"set KAFKA_CONTROLLER_PORT as when it was started (%v)", brokers[0], err)
		}
		broker = &privateKafka{addr: brokers[0], env: append(os.Environ(), "KAFKA_PORT="+port)}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("NCCLWATCH_SCALEOUT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("NCCLWATCH_SCALEOUT_SEED=%q: want an unsigned integer", v)
		}
		seed = n
	}
	rng := rand.New(rand.NewPCG(seed, 32))
	t.Logf("seed %d, %d members", seed, members)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	control := newITEnv(t, brokers, chAddr, 8)
	scaled := newITEnv(t, brokers, chAddr, 8)
	scaled.topic = control.topic
	records := scaleOutInput(t, dir, nJobs, jobBytes, rng)
	total := int64(len(records))
	t.Logf("input: %d records", total)

	pipelineYAML := `pipeline:
  max_record_bytes: 65536
  batch:
    max_rows: 500
    max_wait: 100ms
`
	done := func(e *itEnv) string {
		if c := committed(t, e); sum(c) != total {
			return fmt.Sprintf("committed %d of %d: %v", sum(c), total, c)
		}
		return ""
	}

	// The group: members started before the input, which arrives in
	// chunks, some after a pause longer than fold_idle (partitions go
	// quiet mid-window), while a member is killed every 2-5 s.
	procs := make([]*process, members)
	configs := make([]string, members)
	addrs := make([]string, members)
	var logs []string
	for i := range members {
		mdir := filepath.Join(dir, fmt.Sprintf("member-%d", i))
		if err := os.MkdirAll(mdir, 0o755); err != nil {
			t.Fatal(err)
		}
		configs[i], addrs[i] = writeRunConfig(t, scaled, mdir, chAddr, pipelineYAML)
		logs = append(logs, filepath.Join(mdir, "run.log"))
		procs[i] = startProcess(t, bin, configs[i], logs[i], addrs[i])
	}
	dump := func() string {
		var b strings.Builder
		for _, p := range procs {
			b.WriteString(p.dump())
		}
		return b.String()
	}
	per := (len(records) + chunks - 1) / chunks
	nextKill := time.Now().Add(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
	killed := 0
	var killedAt []time.Time
	for i := 0; i < len(records); i += per {
		kcatProduce(t, kcat, brokers[0], control.topic, records[i:min(i+per, len(records))])
		if rng.IntN(4) == 0 {
			time.Sleep(1500 * time.Millisecond)
		} else {
			time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond)
		}
		if killed < kills && time.Now().After(nextKill) {
			m := rng.IntN(members)
			procs[m].kill()
			killedAt = append(killedAt, time.Now())
			t.Logf("kill %d: member %d at %s", killed+1, m, killedAt[killed].Format(time.TimeOnly))
			procs[m] = startProcess(t, bin, configs[m], logs[m], addrs[m])
			killed++
			nextKill = time.Now().Add(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
		}
		if broker != nil && killed >= kills/2 {
			// Between two chunks: kcat is not running while the broker
			// is down, the members are.
			stopped := time.Now()
			if err := broker.stop(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			if err := broker.start(); err != nil {
				t.Fatal(err)
			}
			t.Logf("broker restarted with its data: down %v", time.Since(stopped).Round(100*time.Millisecond))
			broker = nil
		}
	}
	for ; killed < kills; killed++ {
		time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
		m := rng.IntN(members)
		procs[m].kill()
		killedAt = append(killedAt, time.Now())
		t.Logf("kill %d: member %d at %s (input complete)", killed+1, m, killedAt[killed].Format(time.TimeOnly))
		procs[m] = startProcess(t, bin, configs[m], logs[m], addrs[m])
	}
	deadline := time.Now().Add(5 * time.Minute)
	for msg := done(scaled); msg != ""; msg = done(scaled) {
		if time.Now().After(deadline) {
			t.Fatalf("the group consumed: %s\n%s", msg, dump())
		}
		time.Sleep(time.Second)
	}
	for _, p := range procs {
		p.kill()
	}
	rbs := rebuilds(t, logs)
	took := make([]time.Duration, len(rbs))
	for i, r := range rbs {
		took[i] = r.took
	}
	t.Logf("%d state rebuilds: %s", len(rbs), spread(took))
	t.Logf("rebalances, kill to the next assignment (whole seconds): %s", spread(rebalanceTimes(killedAt, rbs)))

	// The controls: one member, the whole topic, no faults; the second
	// with other batch limits, so other batch boundaries and flush times.
	control2 := newITEnv(t, brokers, chAddr, 8)
	control2.topic = control.topic
	for i, c := range []struct {
		e    *itEnv
		yaml string
	}{{control, pipelineYAML}, {control2, strings.NewReplacer("500", "37", "100ms", "20ms").Replace(pipelineYAML)}} {
		cdir := filepath.Join(dir, fmt.Sprintf("control-%d", i))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		config, addr := writeRunConfig(t, c.e, cdir, chAddr, c.yaml)
		p := startProcess(t, bin, config, filepath.Join(cdir, "run.log"), addr)
		deadline = time.Now().Add(5 * time.Minute)
		for msg := done(c.e); msg != ""; msg = done(c.e) {
			if time.Now().After(deadline) {
				t.Fatalf("control %d consumed: %s\n%s", i, msg, p.dump())
			}
			time.Sleep(time.Second)
		}
		p.kill()
	}

	keep := func() {
		dir := os.Getenv("NCCLWATCH_SCALEOUT_KEEP")
		if dir == "" {
			return
		}
		for _, e := range []*itEnv{scaled, control, control2} {
			rows := queryStrings(t, e.ch, "SELECT toString(tuple(*)) FROM "+e.db+".alerts ORDER BY job, rule, state")
			_ = os.WriteFile(filepath.Join(dir, e.db+"-alerts.txt"), []byte(strings.Join(rows, "\n")), 0o644)
		}
		for i, l := range logs {
			b, _ := os.ReadFile(l)
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("member-%d.log", i)), b, 0o644)
		}
	}
	compareScaleOut(t, "a second member-alone run, other batch limits", control2, control, keep)
	compareScaleOut(t, fmt.Sprintf("%d members under %d kills", members, kills), scaled, control, keep)
}

// compareScaleOut compares every table of got with want's (one member
// alone), row for row; alerts too, but for the columns that are the
// evaluations' wall clock (volatile): a rule whose condition went back and
// forth during a job's init would store a transition or not by where a
// run's batches end and rebuilds fall (TestScaleOutAlertsDoNotFlap checks
// that none does on this stream).
func compareScaleOut(t *testing.T, name string, got, want *itEnv, keep func()) {
	t.Helper()
	for _, table := range storedTables {
		w := tableRows(t, want.ch, want.db, table)
		g := tableRows(t, got.ch, got.db, table)
		if d := diffRows(g, w); d != "" {
			keep()
			t.Errorf("%s: %s: %d rows, %d of one member:\n%s", name, table, len(g), len(w), d)
		} else {
			t.Logf("%s: %s: %d rows, equal to one member's", name, table, len(g))
		}
	}
}

// TestScaleOutAlertsDoNotFlap evaluates the built-in rules on every prefix
// of each job of the scale-out stream (its generated jobs and real logs,
// as Fluent Bit records that name one Kubernetes node per job, as the
// test writes them), as `ncclwatch scan --rules builtin` would on that
// prefix, and checks that no alert goes firing, not firing, firing again:
// a rule that did would store a `resolved` row or not by where a run's
// batches end, and the scale-out test's tables could not equal each
// other. NCCLWATCH_SCALEOUT_LONG=1 checks the long form's jobs.
func TestScaleOutAlertsDoNotFlap(t *testing.T) {
	rs, err := rules.Load("builtin")
	if err != nil {
		t.Fatal(err)
	}
	nJobs, jobBytes := 10, int64(128<<10)
	if os.Getenv("NCCLWATCH_SCALEOUT_LONG") == "1" {
		nJobs, jobBytes = 60, 1<<20
	}
	jobs := genJobs(t, t.TempDir(), nJobs, jobBytes)
	jobs["so-megatron"] = "../../testdata/telemetry/026_megatron_core_moe_ep8_throughput_params_norm_warnings_interleaved_a100.log"
	jobs["so-tests"] = "../../testdata/telemetry/017_nccltests_allreduce_a100_oci_roce_2node_16rank_single_10GiB_row.log"
	jobs["so-efa"] = corpus + "080_efa_ofi_libfabric_no_gdr_g7e_2node_nccl2.29.2.log"
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	evaluated := 0
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		b, err := os.ReadFile(jobs[job])
		if err != nil {
			t.Fatal(err)
		}
		cfg := pipeline.DefaultAssemblerConfig()
		cfg.Expect = pipeline.Expectation{Network: "rdma"} // scan's and run's default
		asm := assemble.New(cfg)
		proc := pipeline.NewProcessor(asm, &parsers.Lines{}, func(*pipeline.Record) string { return job })
		dec := parsers.NewDecoder(parsers.DefaultDecoderConfig())
		m := replayMeta{Job: job, Namespace: "it", Pod: job + "-worker-0", Container: "trainer", Node: "node-" + job}
		firing := map[string]bool{}     // by rule, at the last prefix
		resolved := map[string]string{} // by rule: where it stopped firing, and why
		var rec []byte
		nccl := int64(-1)
		for i, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			rec = fluentBitJSON(rec[:0], []byte(l), t0.Add(time.Duration(i)*time.Millisecond), m)
			if err := dec.Decode(rec, proc.Record); err != nil {
				t.Fatalf("%s: record %d: %v", job, i+1, err)
			}
			dec.Flush(proc.Record)
			if proc.Stats.NCCLLines == nccl {
				continue // no NCCL line: the summaries are those just checked
			}
			nccl = proc.Stats.NCCLLines
			comms, sum, ok := asm.Summaries(job)
			if !ok {
				continue
			}
			alerts, err := rules.Check(rs, sum, comms, sum.LastSeen)
			if err != nil {
				t.Fatal(err)
			}
			evaluated++
			now := map[string]bool{}
			for _, a := range alerts {
				now[a.Rule] = true
				if why, ok := resolved[a.Rule]; ok && !firing[a.Rule] {
					t.Errorf("%s: %s fires again at line %d (%s), after it stopped firing at %s", job, a.Rule, i+1, l, why)
					delete(resolved, a.Rule)
				}
			}
			for r := range firing {
				if !now[r] {
					resolved[r] = fmt.Sprintf("line %d (%s): %s", i+1, l, groupsOf(comms))
				}
			}
			firing = now
		}
	}
	t.Logf("%d jobs, %d prefixes evaluated", len(jobs), evaluated)
}

// groupsOf is each summary's comm_id, multi_node (and the evidence kind
// that decided it), network class and RDMA failures, for messages.
func groupsOf(comms []pipeline.CommSummary) string {
	var out []string
	for _, c := range comms {
		mn := "null"
		if c.MultiNode != nil {
			mn = strconv.FormatBool(*c.MultiNode)
		}
		for _, e := range c.Evidence {
			if e.Field == "multi_node" {
				mn += " (" + e.Kind + ")"
			}
		}
		out = append(out, fmt.Sprintf("%s of %d processes: multi_node %s, %s, rdma_failures %v", c.CommID, c.Processes, mn, c.NetworkClass, c.RDMAFailure))
	}
	return strings.Join(out, "; ")
}
