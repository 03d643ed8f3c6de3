package glm5next

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
	"github.com/npuserve/npuserve/quant"
)

// TestSpecQuantizedMTP: the MTP fixture quantized to msmodelslim
// W8A8_DYNAMIC loads with its MTP layer, both with the MTP block copied
// through FLOAT (Quantize's default, as msmodelslim NextN recipes may leave
// it) and with its linears quantized too (QuantizeOptions.MTP; eh_proj
// stays FLOAT). From the same trunk hidden states the MTP layer computes
// exactly what the float checkpoint's does in the first case and close to
// it in the second; greedy decoding with k = 3 drafts on the quantized
// model equals its plain greedy decoding; a quantized eh_proj is refused.
func TestSpecQuantizedMTP(t *testing.T) {
	for _, c := range []struct {
		name     string
		quantMTP bool
		tol      float64
	}{
		{"FLOAT MTP block", false, 0},
		{"W8A8_DYNAMIC MTP block", true, 5e-2},
	} {
		t.Run(c.name, func(t *testing.T) { testSpecQuantizedMTP(t, c.quantMTP, c.tol) })
	}
}

func testSpecQuantizedMTP(t *testing.T, quantMTP bool, tol float64) {
	be := nputest.Open(0)
	m0, g := mtpFixture(t, be)
	qDir := t.TempDir()
	if _, err := Quantize(filepath.Join(mtpFixtureRoot, "mtp"), qDir, QuantizeOptions{Scheme: quant.W8A8Dynamic, MTP: quantMTP}); err != nil {
		t.Fatal(err)
	}
	mq, err := Load(be, qDir, LoadOptions{MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	if !mq.HasMTP() {
		t.Fatal("the quantized checkpoint loaded without its MTP layer")
	}
	if got := mq.mtp.block.mla.qA.q != nil; got != quantMTP {
		t.Errorf("MTP q_a_proj quantized %v, want %v", got, quantMTP)
	}
	if m, err := Load(be, qDir, LoadOptions{}); err != nil {
		t.Fatalf("loading without the MTP layer: %v", err)
	} else {
		m.Close()
	}
	// A quantized eh_proj is refused by name (the loader splits it).
	descPath := filepath.Join(qDir, quant.DescriptionFile)
	desc, err := os.ReadFile(descPath)
	if err != nil {
		t.Fatal(err)
	}
	key := `"model.language_model.layers.8.eh_proj.weight": "FLOAT"`
	if !strings.Contains(string(desc), key) {
		t.Fatalf("%s has no %s", descPath, key)
	}
	bad := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(qDir, f), filepath.Join(bad, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bad, quant.DescriptionFile), []byte(strings.Replace(string(desc), key, `"model.language_model.layers.8.eh_proj.weight": "W8A8_DYNAMIC"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(be, bad, LoadOptions{MTP: true}); err == nil || !strings.Contains(err.Error(), "eh_proj must be FLOAT") {
		t.Errorf("a W8A8_DYNAMIC eh_proj: %v", err)
	}
	p := g.Prompts[0]
	T := len(p)
	// The float model's trunk hidden states feed both MTP layers.
	c0, bt0 := specCache(t, m0, 1, T+8)
	s := &SpecSeq{Slot: 0, Blocks: bt0[0]}
	var b Batch
	b.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c0.BlockSize}
	b.Tokens = p
	m0.addSeq(&b.Layout, s, T)
	b.LogitRows = make([]int, T)
	for i := range b.LogitRows {
		b.LogitRows[i] = i
	}
	l, h, err := m0.ForwardHidden(c0, &b)
	if err != nil {
		t.Fatal(err)
	}
	be.Free(l)
	defer be.Free(h)
	ext := b
	ext.Tokens = append(append([]int32{}, p[1:]...), g.Next[0])
	rows := func(m *Model, c *Cache) [][]float32 {
		lg, gg, err := m.MTPForward(c, &ext, h)
		if err != nil {
			t.Fatal(err)
		}
		be.Free(gg)
		r, err := DownloadRows(be, lg)
		be.Free(lg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	want := rows(m0, c0)
	cq, _ := specCache(t, mq, 1, T+8)
	if d := relRows(rows(mq, cq), want); d > tol {
		t.Errorf("quantized checkpoint's MTP logits differ from the float one's by %.3g (rel)", d)
	} else {
		t.Logf("MTP logits from the same hidden states: max rel diff %.3g", d)
	}

	prompts := [][]int32{p, seqIDs(9, 3)}
	const n, k = 20, 3
	plain := plainGreedy(t, mq, prompts, n)
	c, bt := specCache(t, mq, len(prompts), 200)
	for i, pr := range prompts {
		ss := &SpecSeq{Slot: i, Blocks: bt[i]}
		if err := mq.SpecPrefill(c, ss, pr, k, func(r []float32) int32 { return int32(argmax(r)) }); err != nil {
			t.Fatal(err)
		}
		got := []int32{ss.Next}
		for len(got) < n {
			toks, err := mq.SpecStep(c, []*SpecSeq{ss}, k, func(_ int, rows [][]float32, d []int32) []int32 { return GreedyAccept(rows, d) })
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, toks[0]...)
		}
		if !slices.Equal(got[:n], plain[i][:n]) {
			t.Errorf("prompt %d: speculative %v, plain %v", i, got[:n], plain[i][:n])
		}
	}
}
