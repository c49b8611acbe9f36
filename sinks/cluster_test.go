package sinks

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// migratedCluster connects to the test cluster (make test-cluster) with
// a database of its own, migrated with the cluster and dropped on it when
// the test ends; it skips the test when there is no cluster.
func migratedCluster(t *testing.T) *ClickHouse {
	t.Helper()
	addrs := strings.Split(os.Getenv("NCCLWATCH_TEST_CLICKHOUSE_CLUSTER"), ",")
	if addrs[0] == "" {
		t.Skip("NCCLWATCH_TEST_CLICKHOUSE_CLUSTER not set: the cluster tests run in make test-cluster")
	}
	name := os.Getenv("NCCLWATCH_TEST_CLICKHOUSE_CLUSTER_NAME")
	if name == "" {
		name = "ncclwatch"
	}
	cfg := DefaultClickHouseConfig()
	cfg.Addr, cfg.Cluster = addrs, name
	cfg.Database = testDatabase(t)
	c, err := NewClickHouse(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewClickHouse(%v) = %v", addrs, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+cfg.Database+" ON CLUSTER '"+name+"'"); err != nil {
			t.Errorf("drop %s on cluster: %v", cfg.Database, err)
		}
		c.Close()
	})
	if _, err := c.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate() on cluster %s = %v", name, err)
	}
	return c
}

// TestClusterCookbook seeds the fleet through the sink into a schema
// migrated with a cluster (Replicated tables per shard, Distributed tables
// over them; deploy/local/clickhouse-cluster.sh, make test-cluster), twice,
// and runs every cookbook query and Grafana panel through the Distributed
// tables: the rows must be the ones one server returns (cookbook(),
// grafanaWant()), nothing twice.
func TestClusterCookbook(t *testing.T) {
	c := migratedCluster(t)
	cfg := c.cfg
	f := newFleet()
	b := f.batch()
	for i := 0; i < 2; i++ {
		if err := c.Consume(t.Context(), b); err != nil {
			t.Fatalf("seed Consume() = %v", err)
		}
	}
	// Each job's summaries on one shard: the rows of job_summaries
	// through the Distributed table are the batch's, once.
	if n := queryInt(t, c, "SELECT count() FROM "+cfg.Database+".job_summaries FINAL"); n != uint64(len(b.Jobs)) {
		t.Errorf("job_summaries FINAL through the cluster: %d rows; want %d", n, len(b.Jobs))
	}
	if n := queryInt(t, c, "SELECT count() FROM "+cfg.Database+".job_verdicts"); n != uint64(len(b.Jobs)) {
		t.Errorf("job_verdicts through the cluster: %d rows; want one per job, %d", n, len(b.Jobs))
	}

	want := cookbook(f)
	for _, cq := range cookbookQueries(t) {
		q := cq.name
		got, err := queryTable(t, c, cq.sql)
		if err != nil {
			t.Errorf("cookbook %s through the cluster: %v", q, err)
			continue
		}
		if !slices.Equal(got, want[q]) {
			t.Errorf("cookbook %s through the cluster =\n\t%s\nwant\n\t%s", q, strings.Join(got, "\n\t"), strings.Join(want[q], "\n\t"))
		}
	}
	gw := grafanaWant(f, b)
	for file, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				sql := expandGrafana(tg.RawSQL, cfg.Database, f.now.Add(-7*24*time.Hour), f.now.Add(time.Hour))
				got, err := queryTable(t, c, sql)
				if err != nil {
					t.Errorf("%s: panel %q through the cluster: %v", file, p.Title, err)
					continue
				}
				if *tg.Format == 0 {
					slices.Sort(got)
				}
				if w := gw[p.Title]; !slices.Equal(got, w) {
					t.Errorf("%s: panel %q through the cluster =\n\t%s\nwant\n\t%s", file, p.Title, strings.Join(got, "\n\t"), strings.Join(w, "\n\t"))
				}
			}
		}
	}
}

// TestClusterLoadEventsBounded runs the bounded rebuild read
// (checkLoadEventsBounded) through the Distributed nccl_events of a
// cluster: the bounds are aggregated over the shards.
func TestClusterLoadEventsBounded(t *testing.T) {
	checkLoadEventsBounded(t, migratedCluster(t))
}

// TestClusterMigrateConcurrent: two instances connected to different
// servers of the cluster migrate a fresh database at the same time; the
// migration lock (a table created ON CLUSTER) lets one apply while the
// other waits, both succeed, the schema is complete and no lock is left
// on any server.
func TestClusterMigrateConcurrent(t *testing.T) {
	addrs := strings.Split(os.Getenv("NCCLWATCH_TEST_CLICKHOUSE_CLUSTER"), ",")
	if addrs[0] == "" {
		t.Skip("NCCLWATCH_TEST_CLICKHOUSE_CLUSTER not set: the cluster tests run in make test-cluster")
	}
	name := os.Getenv("NCCLWATCH_TEST_CLICKHOUSE_CLUSTER_NAME")
	if name == "" {
		name = "ncclwatch"
	}
	db := testDatabase(t)
	errs := make(chan error, len(addrs))
	var members []*ClickHouse
	for _, addr := range addrs {
		cfg := DefaultClickHouseConfig()
		cfg.Addr, cfg.Cluster, cfg.Database = []string{addr}, name, db
		c, err := NewClickHouse(t.Context(), cfg)
		if err != nil {
			t.Fatalf("NewClickHouse(%s) = %v", addr, err)
		}
		members = append(members, c)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := members[0].Exec(ctx, "DROP DATABASE IF EXISTS "+db+" ON CLUSTER '"+name+"'"); err != nil {
			t.Errorf("drop %s on cluster: %v", db, err)
		}
		for _, c := range members {
			c.Close()
		}
	})
	for _, c := range members {
		go func() {
			_, err := c.Migrate(t.Context())
			errs <- err
		}()
	}
	for range members {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Migrate() on cluster %s = %v", name, err)
		}
	}
	for i, c := range members {
		if err := c.CheckSchema(t.Context()); err != nil {
			t.Errorf("%s: CheckSchema() = %v", addrs[i], err)
		}
		if n := queryInt(t, c, "SELECT count() FROM system.tables WHERE database = '"+db+"' AND name = '"+lockTable+"'"); n != 0 {
			t.Errorf("%s: %s left behind", addrs[i], lockTable)
		}
	}
}
