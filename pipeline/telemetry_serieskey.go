package pipeline

import "github.com/go-faster/city"

// A training_steps row's series is what is the same for every step a pod
// prints in one phase of a job: cluster, namespace, job, pod, node, pool,
// model, framework, kind, network and network class. Storage keeps those
// strings once per series (sinks: the training_step_series table) and the
// row only their key, TrainingStep.Series.

// SeriesKey returns the series key of a row's strings: ClickHouse's
// cityHash64 of the eleven strings in the order above, so that a key
// made here equals the one the migration that split training_steps
// computes in SQL for rows stored before it (a replay of them then names
// the same series), and equal series get equal keys in every process.
func SeriesKey(r *TrainingStep) uint64 {
	h := cityString(r.Cluster)
	for _, s := range [...]string{r.Namespace, r.Job, r.Pod, r.Node, r.Pool, r.Model, r.Framework, r.Kind,
		r.Network, r.NetworkClass} {
		h = hash128to64(h, cityString(s))
	}
	return h
}

// cityString is CityHash64 v1.0.2, ClickHouse's cityHash64 of one String.
func cityString(s string) uint64 { return city.CH64([]byte(s)) }

// hash128to64 is how ClickHouse's cityHash64 folds the hash of its next
// argument into the hash of those before (CityHash's Hash128to64 of the
// pair: the earlier hash low, the next high).
func hash128to64(lo, hi uint64) uint64 {
	const mul = 0x9ddfea08eb382d69
	a := (lo ^ hi) * mul
	a ^= a >> 47
	b := (hi ^ a) * mul
	b ^= b >> 47
	return b * mul
}

// seriesKeyCache holds the series keys of a job's recent rows, so that a
// key is hashed once per series and not once per row: a job's rows come
// from a few pods and kinds at a time. Entries are replaced in turn.
type seriesKeyCache struct {
	entries []seriesKeyEntry
	next    int
}

type seriesKeyEntry struct {
	cluster, namespace, job, pod, node, pool, model, framework, kind, network string
	key                                                                       uint64
}

// seriesKeyCacheSize bounds the keys held per job: every pod of an
// 8-node job of 8 GPUs printing its own rows misses at times, which costs
// one hash, while the cache costs every job holding training rows.
const seriesKeyCacheSize = 16

// key returns the series key of r, from the cache when r's strings are
// those of an entry. NetworkClass is a function of Network, so it is not
// compared.
func (c *seriesKeyCache) key(r *TrainingStep) uint64 {
	for i := range c.entries {
		e := &c.entries[i]
		if e.pod == r.Pod && e.kind == r.Kind && e.node == r.Node && e.network == r.Network &&
			e.framework == r.Framework && e.pool == r.Pool && e.model == r.Model &&
			e.job == r.Job && e.namespace == r.Namespace && e.cluster == r.Cluster {
			return e.key
		}
	}
	e := seriesKeyEntry{cluster: r.Cluster, namespace: r.Namespace, job: r.Job, pod: r.Pod, node: r.Node,
		pool: r.Pool, model: r.Model, framework: r.Framework, kind: r.Kind, network: r.Network, key: SeriesKey(r)}
	if len(c.entries) < seriesKeyCacheSize {
		c.entries = append(c.entries, e)
	} else {
		c.entries[c.next] = e
		c.next = (c.next + 1) % seriesKeyCacheSize
	}
	return e.key
}
