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
