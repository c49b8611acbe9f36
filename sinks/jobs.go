package sinks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// JobQuery selects rows of the job_verdicts view. Empty fields match
// everything. Rows come ordered by (cluster, namespace, job); After is a
// cursor: only rows whose key sorts after it are returned.
type JobQuery struct {
	Cluster, Namespace, Job string
	Verdict                 pipeline.Verdict
	// Since keeps jobs last seen at or after it (zero: all).
	Since time.Time
	After JobKey
	// Limit caps the rows; it must be > 0.
	Limit int
}

// JobKey identifies a job in job_verdicts.
type JobKey struct{ Cluster, Namespace, Job string }

// Less orders keys as job_verdicts rows are returned.
func (k JobKey) Less(o JobKey) bool {
	if k.Cluster != o.Cluster {
		return k.Cluster < o.Cluster
	}
	if k.Namespace != o.Namespace {
		return k.Namespace < o.Namespace
	}
	return k.Job < o.Job
}

// IsZero reports whether k is the empty key (no cursor).
func (k JobKey) IsZero() bool { return k == JobKey{} }

// JobVerdicts reads job_verdicts, the stable SQL interface, as job
// summaries (the fields the view holds: network, class, fabric, GDR, nodes,
// ranks, NCCL version, verdict, reasons, first and last seen, and of the
// topology zones, blocks, racks, cliques and crosses).
func (c *ClickHouse) JobVerdicts(ctx context.Context, q JobQuery) ([]pipeline.JobSummary, error) {
	if q.Limit <= 0 {
		return nil, fmt.Errorf("job verdicts: limit must be > 0")
	}
	var where []string
	var args []any
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if q.Cluster != "" {
		add("cluster = ?", q.Cluster)
	}
	if q.Namespace != "" {
		add("namespace = ?", q.Namespace)
	}
	if q.Job != "" {
		add("job = ?", q.Job)
	}
	if q.Verdict != "" {
		add("verdict = ?", string(q.Verdict))
	}
	if !q.Since.IsZero() {
		add("last_seen >= ?", q.Since.UTC())
	}
	if !q.After.IsZero() {
		// Spelled out rather than a tuple comparison, which 18.16 lacks.
		a := q.After
		add("(cluster > ? OR (cluster = ? AND (namespace > ? OR (namespace = ? AND job > ?))))",
			a.Cluster, a.Cluster, a.Namespace, a.Namespace, a.Job)
	}
	sql := "SELECT cluster, namespace, job, network, network_class, fabric, gdr, nnodes, nranks, nccl_version, verdict, reasons, first_seen, last_seen, " +
		"zones, blocks, racks, cliques, topology_crosses FROM " + c.cfg.Database + ".job_verdicts"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += fmt.Sprintf(" ORDER BY cluster, namespace, job LIMIT %d", q.Limit)
	rows, err := c.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("job verdicts: %w", err)
	}
	defer rows.Close()
	var out []pipeline.JobSummary
	for rows.Next() {
		var (
			j              pipeline.JobSummary
			gdr            *uint8
			nnodes, nranks *int32
			verdict        string
			t              pipeline.Topology
		)
		if err := rows.Scan(&j.Cluster, &j.Namespace, &j.Job, &j.Network, &j.NetworkClass, &j.Fabric, &gdr, &nnodes, &nranks,
			&j.NCCLVersion, &verdict, &j.Reasons, &j.FirstSeen, &j.LastSeen, &t.Zones, &t.Blocks, &t.Racks, &t.Cliques,
			&t.Crosses); err != nil {
			return nil, fmt.Errorf("job verdicts: %w", err)
		}
		j.Topology = storedTopology(t)
		j.Verdict = pipeline.Verdict(verdict)
		if gdr != nil {
			b := *gdr != 0
			j.GDR = &b
		}
		j.NNodes, j.NRanks = fromInt32(nnodes), fromInt32(nranks)
		if j.Reasons == nil {
			j.Reasons = []string{}
		}
		j.Intra = []string{} // not in the view
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job verdicts: %w", err)
	}
	return out, nil
}

func fromInt32(p *int32) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// storedTopology is the topology of a job_verdicts row: nil when the row
// holds none (no inventory placed the job), else the columns it keeps.
func storedTopology(t pipeline.Topology) *pipeline.Topology {
	if len(t.Zones)+len(t.Blocks)+len(t.Racks)+len(t.Cliques) == 0 && t.Crosses == "" {
		return nil
	}
	return &t
}
