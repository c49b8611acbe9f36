package pipeline

import "github.com/go-faster/city"

// A training_steps row's series is what is the same for every step a pod
// prints in one phase of a job: cluster, namespace, job, pod, node, pool,
// model, framework, kind, network and network class. Storage keeps those
// strings once per series (sinks: the training_step_series table) and the
// row only their key, StepSeries.Series.

// SeriesKey returns the series key of a row's strings: ClickHouse's
// cityHash64 of the eleven strings in the order above, so that a key
// made here equals the one the migration that split training_steps
// computes in SQL for rows stored before it (a replay of them then names
// the same series), and equal series get equal keys in every process.
func SeriesKey(s *StepSeries) uint64 {
	h := cityString(s.Cluster)
	for _, v := range [...]string{s.Namespace, s.Job, s.Pod, s.Node, s.Pool, s.Model, s.Framework, s.Kind,
		s.Network, s.NetworkClass} {
		h = hash128to64(h, cityString(v))
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

// seriesCache holds the series of a job's recent rows, so that the rows
// of a series share one StepSeries and its key is hashed once per series,
// not once per row: a job's rows come from a few pods and kinds at a
// time. Entries are replaced in turn; rows keep theirs.
type seriesCache struct {
	entries []*StepSeries
	next    int
}

// seriesCacheSize bounds the series held per job: every pod of an 8-node
// job of 8 GPUs printing its own rows misses at times, which costs one
// hash and one allocation, while the cache costs every job holding
// training rows.
const seriesCacheSize = 16

// of returns the series with s's strings and its key: an entry of the
// cache, or a copy of s. NetworkClass is a function of Network, so it is
// not compared.
func (c *seriesCache) of(s *StepSeries) *StepSeries {
	for _, e := range c.entries {
		if e.Pod == s.Pod && e.Kind == s.Kind && e.Node == s.Node && e.Network == s.Network &&
			e.Framework == s.Framework && e.Pool == s.Pool && e.Model == s.Model &&
			e.Job == s.Job && e.Namespace == s.Namespace && e.Cluster == s.Cluster {
			return e
		}
	}
	e := new(StepSeries)
	*e = *s
	e.Series = SeriesKey(e)
	if len(c.entries) < seriesCacheSize {
		c.entries = append(c.entries, e)
	} else {
		c.entries[c.next] = e
		c.next = (c.next + 1) % seriesCacheSize
	}
	return e
}
