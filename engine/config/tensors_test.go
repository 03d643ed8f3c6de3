package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/engine/safetensors"
)

// TestTableFullSize: the spec table of GLM-5.3-Flash, summed tensor by
// tensor (every layer and routed expert listed), gives the totals of
// glm5next-architecture.md §6.1.
func TestTableFullSize(t *testing.T) {
	c, err := config.LoadModel("testdata/glm5.3-flash")
	if err != nil {
		t.Fatal(err)
	}
	sum := func(ts []config.TensorSpec) (n int64) {
		for _, x := range ts {
			n += x.Params()
		}
		return n
	}
	for _, f := range []config.WeightForm{c.OfficialForm(), {FusedConv: true, FusedExperts: true, ForgetGate: true, LMHead: true}} {
		main, mtp := sum(c.Tensors(f)), sum(c.MTPTensors(f))
		for _, x := range []struct {
			what      string
			got, want int64
		}{
			{"main model", main, 313_326_811_966},
			{"text incl. MTP", main + mtp, 320_759_404_382},
			{"MTP layer 45", mtp, 7_432_592_416},
		} {
			if x.got != x.want {
				t.Errorf("form %+v: %s: table %d, architecture doc %d", f, x.what, x.got, x.want)
			}
		}
	}
}

// TestTableMatchesFixtures: for every checkpoint in testdata/glm5next the
// table's tensors (the main model's, and the MTP layers' when the
// checkpoint has them) in the checkpoint's form are exactly its
// safetensors names and shapes, the vision tower (model.visual.*) aside.
func TestTableMatchesFixtures(t *testing.T) {
	dirs, err := filepath.Glob("../../testdata/glm5next/*/model.safetensors")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures (%v)", err)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c, err := config.LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := safetensors.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			layout, err := loader.DetectLayout(ck)
			if err != nil {
				t.Fatal(err)
			}
			names := ck.Names()
			f := c.DetectWeightForm(names)
			table := c.Tensors(f)
			mtp := layout.CheckpointName(config.LayerPrefix(c.NumHiddenLayers) + "eh_proj.weight")
			if slices.Contains(names, mtp) {
				table = append(table, c.MTPTensors(f)...)
			}
			want := map[string][]int{}
			for _, x := range table {
				n := layout.CheckpointName(x.Name)
				if _, dup := want[n]; dup {
					t.Errorf("the table lists %s twice", n)
				}
				want[n] = x.Shape
			}
			for _, n := range names {
				if strings.HasPrefix(n, "model.visual.") {
					continue // the vision tower: not the text model's table
				}
				info, _ := ck.Info(n)
				shape, ok := want[n]
				switch {
				case !ok:
					t.Errorf("checkpoint tensor %s %v is not in the table", n, info.Shape)
				case !slices.Equal(shape, info.Shape):
					t.Errorf("%s: checkpoint shape %v, table %v", n, info.Shape, shape)
				}
				delete(want, n)
			}
			for n, s := range want {
				t.Errorf("table tensor %s %v is not in the checkpoint", n, s)
			}
		})
	}
	if _, err := os.Stat("../../testdata/glm5next/mtp/model.safetensors"); err != nil {
		t.Errorf("the MTP fixture is missing: %v", err)
	}
}

// TestTPSizesCoverTable: every size a SplitHeads rule of the table splits
// over TP is one TPSizes checks (the routed experts' only without expert
// parallelism), so a TP size that passes the check splits every tensor
// evenly.
func TestTPSizesCoverTable(t *testing.T) {
	for _, dir := range []string{"testdata/glm5.3-flash", "testdata/tiny", "../../testdata/glm5next/shared"} {
		c, err := config.LoadModel(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range []bool{false, true} {
			checked := map[int]bool{}
			for _, s := range c.TPSizes(ep) {
				checked[s.N] = true
			}
			f := config.WeightForm{FusedConv: true, FusedExperts: true, LMHead: true}
			for _, x := range append(append(c.Tensors(f), c.Tensors(c.OfficialForm())...), c.MTPTensors(f)...) {
				if x.TP.Kind != config.SplitHeads || ep && x.Routed {
					continue
				}
				if x.TP.Units*x.TP.Per*max(x.TP.Groups, 1) != x.Shape[x.TP.Dim] {
					t.Errorf("%s: %s rule %+v does not tile dimension %d of %v", dir, x.Name, x.TP, x.TP.Dim, x.Shape)
				}
				if !checked[x.TP.Units] {
					t.Errorf("%s (ep %v): %s splits %d units over TP, which TPSizes does not check", dir, ep, x.Name, x.TP.Units)
				}
			}
		}
	}
}

// TestShardRanges: the element ranges and local shapes of the TP rules.
func TestShardRanges(t *testing.T) {
	heads := config.Shard{Kind: config.SplitHeads, Dim: 0, Units: 4, Per: 3, Groups: 1}
	fused := config.Shard{Kind: config.SplitHeads, Dim: 0, Units: 4, Per: 2, Groups: 3}
	vocab := config.Shard{Kind: config.SplitVocab, Units: 10, Per: 1, Groups: 1}
	for _, tc := range []struct {
		name   string
		s      config.Shard
		shape  []int
		tp, r  int
		ranges [][2]int
		local  []int
	}{
		{"replicated", config.Shard{}, []int{8, 2}, 2, 1, nil, []int{8, 2}},
		{"heads rank 0", heads, []int{12, 5}, 2, 0, [][2]int{{0, 6}}, []int{6, 5}},
		{"heads rank 3", heads, []int{12, 5}, 4, 3, [][2]int{{9, 12}}, []int{3, 5}},
		{"heads tp 1", heads, []int{12, 5}, 1, 0, nil, []int{12, 5}},
		{"fused q|k|v rank 1", fused, []int{24, 1, 4}, 2, 1, [][2]int{{4, 8}, {12, 16}, {20, 24}}, []int{12, 1, 4}},
		{"row-parallel", config.Shard{Kind: config.SplitHeads, Dim: 1, Units: 6, Per: 1, Groups: 1}, []int{4, 6}, 3, 2, [][2]int{{4, 6}}, []int{4, 2}},
		{"vocab divides", vocab, []int{10, 4}, 2, 1, [][2]int{{5, 10}}, []int{5, 4}},
		{"vocab does not divide", vocab, []int{10, 4}, 3, 1, nil, []int{10, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Ranges(tc.tp, tc.r); !slices.Equal(got, tc.ranges) {
				t.Errorf("Ranges(%d, %d) = %v, want %v", tc.tp, tc.r, got, tc.ranges)
			}
			if got := tc.s.LocalShape(tc.shape, tc.tp); !slices.Equal(got, tc.local) {
				t.Errorf("LocalShape(%v, %d) = %v, want %v", tc.shape, tc.tp, got, tc.local)
			}
		})
	}
}
