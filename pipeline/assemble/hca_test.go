package assemble

import (
	"slices"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// TestParsedHCAsFollowsTheList: the one-list cache answers parseHCAs of
// each list, whatever came before it.
func TestParsedHCAsFollowsTheList(t *testing.T) {
	a := New(pipeline.DefaultAssemblerConfig())
	for _, list := range []string{"[0]mlx5_0:1/IB [1]mlx5_1:1/IB", "[0]mlx5_2:1/RoCE/SHARP [RO]", "[0]mlx5_2:1/RoCE/SHARP [RO]",
		"[RO]", "", "[0]mlx5_0:1/IB [1]mlx5_1:1/IB", "[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}"} {
		if got, want := a.parsedHCAs([]byte(list)), parseHCAs(list); !slices.Equal(got, want) || got == nil {
			t.Errorf("parsedHCAs(%q) = %v; parseHCAs %v", list, got, want)
		}
	}
}
