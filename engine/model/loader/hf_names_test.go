package loader

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// TestSavePretrainedNames loads a checkpoint with exactly the tensor names,
// dtypes and shapes that transformers 5.17 save_pretrained wrote for a tiny
// glm5_next model (header kept in engine/config/testdata/micro; data here
// is synthetic): nested layout, every text tensor claimed through its
// canonical name, the vision tower skipped in one line.
func TestSavePretrainedNames(t *testing.T) {
	raw, err := os.ReadFile("../../config/testdata/micro/model.safetensors.header.json")
	if err != nil {
		t.Fatal(err)
	}
	var header map[string]struct {
		DType string `json:"dtype"`
		Shape []int  `json:"shape"`
	}
	if err := json.Unmarshal(raw, &header); err != nil {
		t.Fatal(err)
	}
	delete(header, "__metadata__")
	dir := t.TempDir()
	var ts []safetensors.WriteTensor
	var specs []Spec
	vision := 0
	for name, e := range header {
		if e.DType != "F32" {
			t.Fatalf("%s: dtype %s", name, e.DType)
		}
		ts = append(ts, tensor(name, npu.F32, 1, e.Shape...))
		if strings.HasPrefix(name, "model.visual.") {
			vision++
			continue
		}
		canonical := name
		if rest, ok := strings.CutPrefix(name, "model.language_model."); ok {
			canonical = "model." + rest
		}
		specs = append(specs, Spec{Name: canonical, Shape: e.Shape, Matrix: strings.HasSuffix(name, "proj.weight")})
	}
	writeCk(t, dir, safetensors.SingleFile, ts...)
	ck := openCk(t, dir)
	if l, err := DetectLayout(ck); err != nil || l != LayoutNested {
		t.Fatalf("layout %v, %v", l, err)
	}
	var log logger
	got, err := Load(cpu.New(1), ck, specs, Options{NumLayers: 4, DType: "bfloat16", Log: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(specs) || got["model.layers.0.hc_attn_fn"] == nil || got["model.layers.3.self_attn.indexer.wq_b.weight"] == nil ||
		got["model.layers.2.mlp.experts.3.down_proj.weight"].DType() != npu.BF16 || got["model.layers.0.self_attn.q_conv1d.weight"].DType() != npu.F32 {
		t.Errorf("loaded %d of %d specs", len(got), len(specs))
	}
	if want := fmt.Sprintf("skipping %d vision tower tensors (model.visual.*): not implemented yet", vision); len(log.lines) != 2 || log.lines[0] != want || vision != 25 {
		t.Errorf("log %q (%d vision tensors)", log.lines, vision)
	}
}
