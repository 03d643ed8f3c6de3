package model_test

import (
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/npu/nputest"
)

// TestOpen: the registry picks the implementation by model_type and names
// what it serves for an unknown one.
func TestOpen(t *testing.T) {
	be := nputest.Backend(t, 1)
	dir := "../../testdata/glm5next/tiny"
	cfg, err := config.LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Open(be, dir, cfg, model.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if g, ok := glm5next.Of(m); !ok || g.Config().VocabSize != cfg.VocabSize {
		t.Fatalf("opened %T, want the glm5next model", m)
	}
	if _, ok := m.(model.Collective); !ok {
		t.Error("the glm5next engine model does not offer DummyStep")
	}
	other := *cfg
	other.ModelType = "llama"
	_, err = model.Open(be, dir, &other, model.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), `"llama" is not supported`) || !strings.Contains(err.Error(), "glm5_next") {
		t.Fatalf("unknown model_type: %v", err)
	}
}
