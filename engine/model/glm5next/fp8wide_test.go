package glm5next

import (
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// fp8WideConfig is fp8Config at 512 wide: the q/kv projections, the MLP
// and the experts then have K a multiple of 512, so the CUDA backend runs
// their prefill GEMMs on its e4m3 tensor cores (npu/cuda/fp8.go).
var fp8WideConfig = map[string]any{"hidden_size": 512, "intermediate_size": 512, "moe_intermediate_size": 512, "q_lora_rank": 512, "kv_lora_rank": 512}

// TestBlockFP8WideOnDevice: a block-FP8 checkpoint of fp8WideConfig, kept
// as FP8_BLOCK128, on the test device against the same checkpoint on the
// CPU backend, teacher forced over 96-token prompts (prefill GEMMs of 96
// rows). On cuda this is the model-level check of the tensor-core path;
// on the CPU backend it would compare the CPU with itself, so it skips.
func TestBlockFP8WideOnDevice(t *testing.T) {
	if nputest.Device() == "cpu" {
		t.Skip("compares the test device with the CPU backend (set NPUSERVE_TEST_DEVICE)")
	}
	be := nputest.Open(0)
	if err := npu.SupportsQuant(be, npu.QFP8Block); err != nil {
		t.Skipf("%s does not keep FP8_BLOCK128 weights: %v", nputest.Device(), err)
	}
	cfg := testConfig(t, fp8WideConfig)
	vals, _ := checkpointValues(cfg)
	floatDir, dir := t.TempDir(), t.TempDir()
	writeCheckpoint(t, floatDir, cfg, testConfigJSON(fp8WideConfig), vals, weightForm{lmHead: true}, true, npu.F32, nil)
	writeBlockFP8(t, floatDir, dir)
	dev, err := Load(be, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ref, err := Load(cpu.New(0), dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if !dev.Quantized() || !ref.Quantized() {
		t.Fatal("the block-FP8 checkpoint loaded without kept FP8 weights")
	}
	r, err := Compare(dev, ref, randomSeqs(11, 2, 96, cfg.VocabSize))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kept FP8_BLOCK128 on %s vs on cpu (512-wide random config): top1 %.4f, mean KL %.3g over %d tokens", nputest.Device(), r.Top1Agreement, r.MeanKL, r.Tokens)
	// The same codes and scales on both sides: only the GEMMs' summation
	// (tensor cores against fp32 FMAs) differs.
	if r.MeanKL > 1e-3 || r.Top1Agreement < 0.9 {
		t.Errorf("kept FP8 on %s against cpu: top1 %.4f (floor 0.9), mean KL %.3g (bound 1e-3)", nputest.Device(), r.Top1Agreement, r.MeanKL)
	}
}
