package assemble

import "testing"

func TestRingNodes(t *testing.T) {
	a, b := "node-a", "node-b"
	for _, c := range []struct {
		name  string
		ring  []int
		nodes map[int]string
		want  int
	}{
		{"all known", []int{0, 1}, map[int]string{0: a, 1: b}, 2},
		{"gaps flanked by one node (corpus 082)", []int{0, 7, 6, 5, 4, 3, 2, 1, 8, 15, 14, 13, 12, 11, 10, 9},
			map[int]string{0: a, 6: a, 4: a, 3: a, 2: a, 1: a, 8: b, 14: b, 12: b, 10: b, 9: b}, 2},
		{"gap between two nodes", []int{0, 1, 2, 3}, map[int]string{0: a, 2: b}, 0},
		{"one node known", []int{0, 1, 2, 3}, map[int]string{0: a}, 0},
		{"gap at the wrap", []int{5, 0, 1, 2, 3, 4}, map[int]string{0: a, 1: a, 2: b, 3: b, 4: a}, 2},
		{"gap at the wrap between nodes", []int{5, 0, 1, 2, 3, 4}, map[int]string{0: a, 1: a, 2: b, 3: b, 4: b}, 0},
	} {
		if got := ringNodes(c.ring, c.nodes); got != c.want {
			t.Errorf("%s: ringNodes = %d; want %d", c.name, got, c.want)
		}
	}
}
