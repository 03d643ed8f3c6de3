package config_test

import (
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/npu/cpu"
)

// TestPlanCacheMatchesModel: the plan's cache sizes, computed from
// config.json alone, equal what the loaded model's cache takes on the cpu
// backend (glm5next.NewCache's tensors).
func TestPlanCacheMatchesModel(t *testing.T) {
	for _, dir := range []string{"../../testdata/glm5next/tiny", "testdata/tiny"} {
		cfg, err := config.LoadModel(dir)
		if err != nil {
			t.Fatal(err)
		}
		a, err := config.Build(nil, []string{dir})
		if err != nil {
			t.Fatal(err)
		}
		p, err := config.BuildPlan(a, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := glm5next.NewRandom(cpu.New(1), cfg, "float32", 1)
		if got, want := p.Cache.BytesPerToken, m.BytesPerToken(); got != want {
			t.Errorf("%s: plan bytes per token %d, model %d", dir, got, want)
		}
		if got, want := p.Cache.BytesPerSequenceState, m.BytesPerSequenceState(); got != want {
			t.Errorf("%s: plan bytes per sequence state %d, model %d", dir, got, want)
		}
		// NewCache accepts the plan's block size.
		c, err := m.NewCache(2, p.Scheduler.BlockSize, 1)
		if err != nil {
			t.Fatalf("%s: NewCache with the plan's block size %d: %v", dir, p.Scheduler.BlockSize, err)
		}
		c.Free(m.Backend())
		m.Close()
	}
}
