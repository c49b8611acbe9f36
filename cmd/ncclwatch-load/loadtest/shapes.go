package loadtest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Shape names a shape of the synthetic stream: what its jobs are and how
// their trainers print. The same shape gives the raw log of `gen` and the
// Kafka records of the benchmark.
type Shape string

// The stream shapes.
const (
	// ShapeDefault is jobs whose every rank prints each step's progress
	// line in turn (one trainer per job), steps counting up: about
	// sixteen progress lines fold into one training_steps row.
	ShapeDefault Shape = "default"
	// ShapeRandomSteps draws each trainer line's trainer and numbers,
	// its step too, anew: every progress line is a step of its own.
	ShapeRandomSteps Shape = "random-steps"
	// ShapeCluster is a cluster's stream: many jobs of 1-8 nodes starting
	// and ending, DefaultConcurrent at once, each running one trainer
	// that prints on one rank or on every rank as that trainer does,
	// with its own NCCL init, warnings and data-loader noise
	// (cluster.go).
	ShapeCluster Shape = "cluster"
	// ShapeClusterInspector is the cluster's stream with NCCL Inspector
	// records mixed in at Options.InspectorRate records per second of
	// stream time (inspector.go).
	ShapeClusterInspector Shape = "cluster-inspector"
)

// shapes are the shapes in the order `--shape all` runs them.
var shapes = []Shape{ShapeDefault, ShapeRandomSteps, ShapeCluster, ShapeClusterInspector}

// ShapeNames returns the names of the shapes.
func ShapeNames() []string {
	n := make([]string, len(shapes))
	for i, s := range shapes {
		n[i] = string(s)
	}
	return n
}

// ParseShapes reads a comma-separated list of shape names; "all" is every
// shape.
func ParseShapes(s string) ([]Shape, error) {
	var out []Shape
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == "all":
			out = append(out, shapes...)
		case slices.Contains(shapes, Shape(f)):
			out = append(out, Shape(f))
		default:
			return nil, fmt.Errorf("shape %q: want all or one of %s", f, strings.Join(ShapeNames(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no shape in %q", s)
	}
	var uniq []Shape
	for _, sh := range out {
		if !slices.Contains(uniq, sh) {
			uniq = append(uniq, sh)
		}
	}
	return uniq, nil
}

// DefaultShare is the share of NCCL lines of a shape's stream when none is
// given: 5 % for one job's log (the share seen in real trainer logs with
// NCCL_DEBUG=INFO), ClusterNCCLShare for the cluster.
func (s Shape) DefaultShare() float64 {
	if s.cluster() {
		return ClusterNCCLShare
	}
	return 0.05
}

// cluster reports whether s is the cluster's stream (with or without
// Inspector records).
func (s Shape) cluster() bool { return s == ShapeCluster || s == ShapeClusterInspector }

// inspectorRate is the Inspector records per second of stream time o's
// shape carries.
func (o Options) inspectorRate() float64 {
	if o.Shape != ShapeClusterInspector {
		return 0
	}
	if o.InspectorRate <= 0 {
		return DefaultInspectorRate
	}
	return o.InspectorRate
}

// backlogPart calls fn with producer w's part of the backlog of o's shape,
// each record with its job (the record's key): jobs w, w+Producers, … of
// o.Jobs for the one-job shapes, o.Records/o.Jobs records each; the jobs
// whose number is w modulo Producers of the cluster's first o.Records
// records. It returns the number of jobs the whole backlog has.
func backlogPart(o Options, w int, stamp func() time.Time, fn func(job string, rec []byte) error) (int, error) {
	if o.Shape.cluster() {
		keep := func(id int) bool { return id%o.Producers == w }
		return clusterRecords(o.Seed, "load", o.NCCLShare, o.Concurrent, o.inspectorRate(), o.Records, keep, stamp, fn)
	}
	for j := w; j < o.Jobs; j += o.Producers {
		n := o.Records / int64(o.Jobs)
		if int64(j) < o.Records%int64(o.Jobs) {
			n++
		}
		if n == 0 {
			continue
		}
		job := JobName("load", j)
		err := genRecords(o.Seed, j, job, o.NCCLShare, o.Shape == ShapeRandomSteps, n, stamp, func(rec []byte) error {
			return fn(job, rec)
		})
		if err != nil {
			return 0, err
		}
	}
	return o.Jobs, nil
}

// pacedStream calls fn with the total records of the latency phase, a
// stream of fresh jobs (seed o.Seed+1), in order.
func pacedStream(o Options, total int64, stamp func() time.Time, fn func(job string, rec []byte) error) error {
	if o.Shape.cluster() {
		_, err := clusterRecords(o.Seed+1, "latency", o.NCCLShare, o.Concurrent, o.inspectorRate(), total, nil, stamp, fn)
		return err
	}
	perJob := max(total/int64(o.Jobs), 1)
	var made int64
	for j := 0; made < total; j++ {
		job := JobName("latency", j%o.Jobs)
		n := min(perJob, total-made)
		made += n
		err := genRecords(o.Seed+1, j, job, o.NCCLShare, o.Shape == ShapeRandomSteps, n, stamp, func(rec []byte) error {
			return fn(job, rec)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// RunShapes runs the benchmark once per shape, each on a topic and a
// database of its own (o's names with the shape appended), printing each
// report to stdout as it ends and then one table of them all. Without
// o.ShareSet each shape gets its DefaultShare of NCCL lines. A shape that
// fails does not stop the others; the first error is returned.
func RunShapes(ctx context.Context, o Options, list []Shape, stdout, stderr io.Writer) ([]*Report, error) {
	var reps []*Report
	var first error
	for _, sh := range list {
		so := o
		so.Shape, so.RandomSteps = sh, sh == ShapeRandomSteps
		if !o.ShareSet {
			so.NCCLShare = sh.DefaultShare()
		}
		if len(list) > 1 {
			so.Topic = o.Topic + "-" + string(sh)
			so.Database = o.Database + "_" + strings.ReplaceAll(string(sh), "-", "_")
			if o.CPUProfile != "" {
				so.CPUProfile = o.CPUProfile + "." + string(sh)
			}
		}
		fmt.Fprintf(stderr, "load: shape %s\n", sh)
		rep, err := Run(ctx, so, stderr)
		if rep != nil {
			rep.Print(stdout)
			fmt.Fprintln(stdout)
			reps = append(reps, rep)
		}
		if err != nil {
			err = fmt.Errorf("shape %s: %w", sh, err)
			fmt.Fprintln(stderr, "ncclwatch-load:", err)
			if first == nil {
				first = err
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if !o.ProduceOnly {
		PrintTable(stdout, reps)
	}
	return reps, first
}

// PrintTable writes one row per report: the shape, its records and jobs,
// the rows a query sees per table, ncclwatch's and the peer's records/s
// and their ratio, ncclwatch's max RSS and CPU, and the ClickHouse
// server's CPU while ncclwatch consumed (- where not measured).
func PrintTable(w io.Writer, reps []*Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\trecords\tjobs\tnccl_events\ttraining_steps\tjob_verdicts\tncclwatch rec/s\tpeer rec/s\tratio\tmax RSS MB\tCPU-s\tserver CPU-s\t")
	for _, r := range reps {
		peer, ratio := "-", "-"
		if r.peer != nil && r.peer.phase.rate() > 0 {
			peer = fmt.Sprintf("%.0f", r.peer.phase.rate())
			if r.consume.rate() > 0 {
				ratio = fmt.Sprintf("%.2fx", r.consume.rate()/r.peer.phase.rate())
			}
		}
		rate, cpu := "-", "-"
		if r.consume.wall > 0 {
			rate, cpu = fmt.Sprintf("%.0f", r.consume.rate()), fmt.Sprintf("%.1f", r.consume.cpu.Seconds())
		}
		rss := "-"
		if m := max(r.maxRSSConsume, r.maxRSSLatency); m > 0 {
			rss = fmt.Sprintf("%.0f", mb(m))
		}
		server := "-"
		if c := r.serverConsume; c != nil {
			server = fmt.Sprintf("%.1f", (c.user + c.sys).Seconds())
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.o.Shape, r.produce.records, r.jobs,
			orDash(r.stored), orDash(r.steps), orDash(r.jobRows), rate, peer, ratio, rss, cpu, server)
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
