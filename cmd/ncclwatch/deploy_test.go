package main

import (
	"path/filepath"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestKubernetesConfig loads the configuration and inventory shipped in
// deploy/kubernetes/ncclwatch exactly as `ncclwatch run --config` does and
// checks that they validate and say what the README claims.
func TestKubernetesConfig(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes", "ncclwatch")
	f := newServiceFlags("run", nil)
	if err := f.fs.Parse([]string{"--config", filepath.Join(dir, "ncclwatch.yaml")}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.resolve(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatalf("deploy/kubernetes/ncclwatch/ncclwatch.yaml does not validate:\n%v", err)
	}
	if cfg.Kafka.GroupID != "ncclwatch" || cfg.ClickHouse.Database != "ncclwatch" || !cfg.Migrate || len(cfg.Rules.Alertmanagers) != 1 {
		t.Errorf("config = group %q, database %q, migrate %v, %d alertmanagers", cfg.Kafka.GroupID, cfg.ClickHouse.Database,
			cfg.Migrate, len(cfg.Rules.Alertmanagers))
	}
	inv, err := pipeline.LoadInventory(filepath.Join(dir, "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e := inv.Expect([]string{"gpu-l4-b01"}, pipeline.Expectation{})
	if e.Network != pipeline.ClassTCP {
		t.Errorf("the L4 Ethernet node expects %q; want tcp", e.Network)
	}
	e = inv.Expect([]string{"gpu-h100-a01"}, pipeline.Expectation{})
	if e.Network != pipeline.ClassRDMA || e.HCAs != 8 {
		t.Errorf("the H100 IB node expects %+v; want rdma with 8 HCAs", e)
	}
}
