package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// inventory import on real kubectl output (testdata/topology/SOURCES.md)
// writes a file the inventory loads back with the nodes' facts, from a
// file or from stdin.
func TestInventoryImport(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "topology", "eks_cluster_info_nodelist.json")
	out := filepath.Join(t.TempDir(), "nodes.yaml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"inventory", "import", "--rdma-span", "ecommerce-dev-node-group=block", "-o", out, src},
		strings.NewReader(""), &stdout, &stderr); code != exitOK {
		t.Fatalf("inventory import = %d: %s", code, stderr.String())
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "2 nodes") {
		t.Errorf("stdout %q, stderr %q; want the file only and a count", stdout.String(), stderr.String())
	}
	inv, err := pipeline.LoadInventory(out)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := inv.Node("ip-10-0-20-143.ec2.internal")
	if !ok || f.Pool != "ecommerce-dev-node-group" || f.Zone != "us-east-1b" || f.Region != "us-east-1" || f.RDMASpan != "block" {
		t.Errorf("node ip-10-0-20-143.ec2.internal: %+v, %v", f, ok)
	}
	if inv.Len() != 2 {
		t.Errorf("%d nodes; want 2", inv.Len())
	}

	// stdin, to stdout: the same document.
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	written, _ := os.ReadFile(out)
	stdout.Reset()
	if code := run([]string{"inventory", "import", "--rdma-span", "ecommerce-dev-node-group=block", "-"},
		bytes.NewReader(b), &stdout, &stderr); code != exitOK || stdout.String() != string(written) {
		t.Errorf("from stdin = %d:\n%s\nwant\n%s", code, stdout.String(), written)
	}

	for _, args := range [][]string{
		{"inventory"},
		{"inventory", "export"},
		{"inventory", "import", "--rdma-span", "galaxy", src},
		{"inventory", "import", "/nonexistent/nodes.json"},
		{"inventory", "import", filepath.Join("..", "..", "README.md")},
		{"inventory", "import", src, src},
	} {
		stderr.Reset()
		if code := run(args, strings.NewReader(""), &stdout, &stderr); code != exitUsage || stderr.Len() == 0 {
			t.Errorf("%v = %d, %q; want %d and a message", args, code, stderr.String(), exitUsage)
		}
	}
}
