package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

const inventoryUsage = `usage: ncclwatch inventory import [flags] [FILE|-]

  import  turn the output of kubectl get nodes -o json (a file, or stdin)
          into the node inventory that run, scan and guard read (--inventory):
          pool, region, zone, block, sub-block, rack and NVLink clique from
          the node labels clusters publish (docs/topology.md), rdma_capable
          from an RDMA device resource the node offers

  kubectl get nodes -o json | ncclwatch inventory import --pool-label pool -o nodes.yaml

Exit status: 0 written, 2 usage or I/O error, or input that is not a node list.

flags:
`

// spanFlags is --rdma-span, repeatable: LEVEL for every node, POOL=LEVEL
// for one pool's.
type spanFlags struct {
	all   string
	pools map[string]string
}

func (s *spanFlags) String() string { return "" }

func (s *spanFlags) Set(v string) error {
	if pool, level, ok := strings.Cut(v, "="); ok {
		if s.pools == nil {
			s.pools = map[string]string{}
		}
		s.pools[pool] = level
		return nil
	}
	s.all = v
	return nil
}

// runInventory implements `ncclwatch inventory import`.
func runInventory(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "import" {
		if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, inventoryUsage)
			return exitOK
		}
		fmt.Fprint(stderr, inventoryUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("inventory import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg pipeline.NodeImport
	var spans spanFlags
	fs.StringVar(&cfg.PoolLabel, "pool-label", "", "node label that names the pool (before the GKE, EKS, Karpenter and AKS pool labels)")
	fs.StringVar(&cfg.RackLabel, "rack-label", "", "node label that names the rack (before topology.k8s.aws/network-node-layer-3)")
	fs.StringVar(&cfg.BlockLabel, "block-label", "", "node label that names the block (before GKE's gce-topology-block and topology.k8s.aws/network-node-layer-1)")
	fs.Var(&spans, "rdma-span", "rdma_span to write: LEVEL for every node or POOL=LEVEL for one pool (repeatable); any, region, zone, block, subblock, rack or clique")
	out := fs.String("o", "", "write the inventory to this file (atomically, for run's reload) instead of stdout")
	fs.Usage = func() {
		fmt.Fprint(stderr, inventoryUsage)
		printFlags(stderr, fs, nil)
	}
	if code, ok := parseArgs(fs, args[1:]); !ok {
		return code
	}
	cfg.RDMASpan, cfg.PoolSpans = spans.all, spans.pools
	in, name := stdin, "stdin"
	switch fs.NArg() {
	case 0:
	case 1:
		if fs.Arg(0) != "-" {
			f, err := os.Open(fs.Arg(0))
			if err != nil {
				fmt.Fprintln(stderr, "ncclwatch inventory import:", err)
				return exitUsage
			}
			defer f.Close()
			in, name = f, fs.Arg(0)
		}
	default:
		fmt.Fprintln(stderr, "ncclwatch inventory import: one input at most")
		return exitUsage
	}
	nodes, err := pipeline.ImportNodes(in, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ncclwatch %s: %v\n", name, err)
		return exitUsage
	}
	doc, err := inventoryYAML(nodes)
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch inventory import:", err)
		return exitUsage
	}
	if *out == "" {
		_, err = stdout.Write(doc)
	} else {
		err = writeAtomic(*out, doc)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ncclwatch inventory import:", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "ncclwatch inventory import: %d nodes\n", len(nodes))
	return exitOK
}

// inventoryYAML renders nodes as the inventory file (pipeline.ParseInventory
// reads it back): a comment, then {nodes: [...]} with one flow mapping per
// node, as an operator would write it by hand.
func inventoryYAML(nodes []pipeline.NodeFacts) ([]byte, error) {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, n := range nodes {
		var item yaml.Node
		if err := item.Encode(n); err != nil {
			return nil, err
		}
		item.Style = yaml.FlowStyle
		seq.Content = append(seq.Content, &item)
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "nodes"}, seq},
		HeadComment: "Node inventory written by ncclwatch inventory import from kubectl get nodes -o json.\n" +
			"Add hcas, gdr_expected and rdma_capable: false where the labels cannot say them (docs/topology.md)."}
	b, err := yaml.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("inventory yaml: %w", err)
	}
	return b, nil
}

// writeAtomic writes b to path through a temporary file in its directory
// and a rename, so that a reader (run's inventory reload) never sees half
// of it.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
