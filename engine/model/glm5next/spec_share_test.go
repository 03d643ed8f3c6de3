package glm5next

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// mtpFixture loads testdata/glm5next/mtp (index_topk 8, kpool 4, tail on,
// index_share_for_mtp_iteration true) and its golden.json.
func mtpFixture(t *testing.T, be npu.Backend) (*Model, mtpGolden) {
	t.Helper()
	dir := filepath.Join(mtpFixtureRoot, "mtp")
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if os.IsNotExist(err) {
		t.Skip("testdata/glm5next/mtp is absent: generate it with python3 tools/golden/mtp_golden.py on the accelerator host")
	}
	if err != nil {
		t.Fatal(err)
	}
	var g mtpGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	m, err := Load(be, dir, LoadOptions{MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if !m.cfg.IndexShareForMTPIteration || m.index.KPool != 4 || m.index.TopKPools != 2 || !m.index.Tail {
		t.Fatalf("mtp fixture: share %v, index %+v", m.cfg.IndexShareForMTPIteration, m.index)
	}
	return m, g
}

// TestSpecIndexShareSelection checks the selection of a shared draft step
// (sharedSelection) against the rule written out by hand: step 0's chosen
// pools, then every position from step 0's tail start through the step's
// own position, -1 after, width SelW + k - 1.
func TestSpecIndexShareSelection(t *testing.T) {
	be := nputest.Open(0)
	m, _ := mtpFixture(t, be)
	const k = 3
	sw := m.d.SelW // 8 + 3
	// Step 0 selections of three sequences (DSAIndex's layout: pools
	// expanded in rank order, then the tail, then -1).
	sel0 := [][]int32{
		{0, 1, 2, 3, 4, -1, -1, -1, -1, -1, -1},  // q0 = 4: one pool visible
		{8, 9, 10, 11, 0, 1, 2, 3, 12, 13, 14},   // q0 = 14: pools 2, 0 of 3; tail 12..14
		{20, 21, 22, 23, 4, 5, 6, 7, -1, -1, -1}, // q0 = 23: a pool just completed, no tail
	}
	pos := []int{5, 15, 24} // Pos after step 0 (q0 + 1)
	cases := []struct {
		j    int
		want [][]int32
	}{
		{1, [][]int32{
			{0, 1, 2, 3, 4, 5, -1, -1, -1, -1, -1, -1, -1},
			{8, 9, 10, 11, 0, 1, 2, 3, 12, 13, 14, 15, -1},
			{20, 21, 22, 23, 4, 5, 6, 7, 24, -1, -1, -1, -1},
		}},
		{2, [][]int32{ // the second sequence crosses into a new pool: 12..16 all kept
			{0, 1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, -1},
			{8, 9, 10, 11, 0, 1, 2, 3, 12, 13, 14, 15, 16},
			{20, 21, 22, 23, 4, 5, 6, 7, 24, 25, -1, -1, -1},
		}},
	}
	var flat []int32
	for _, r := range sel0 {
		if len(r) != sw {
			t.Fatalf("sel0 row width %d, SelW %d", len(r), sw)
		}
		flat = append(flat, r...)
	}
	dev, err := be.FromHost(npu.I32, npu.EncodeInt32s(flat), len(sel0), sw)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free(dev)
	seqs := make([]*SpecSeq, len(pos))
	for i, p := range pos {
		seqs[i] = &SpecSeq{Pos: p}
	}
	for _, c := range cases {
		got, err := npu.DownloadI32(be, m.sharedSelection(dev, seqs, c.j, k))
		if err != nil {
			t.Fatal(err)
		}
		W := sw + k - 1
		for i, want := range c.want {
			if row := got[i*W : (i+1)*W]; !slices.Equal(row, want) {
				t.Errorf("j=%d seq %d: %v, want %v", c.j, i, row, want)
			}
		}
	}
}

// TestSpecIndexShare runs the draft chain with and without sharing on the
// MTP fixture: while every pool stays selectable (short prompts, at most
// index_topk/kpool pools visible to the whole chain) both select the same
// positions and draft the same tokens; on the golden prompts (29 and 70
// tokens, sparse) step 0 still matches the unshared reference and sharing
// changes a later draft (so it is in effect), and the shared chain equals
// the reference's when the fixture has one (mtp_golden.py --index-share);
// greedy decoding with shared
// drafts stays lossless (TestSpecGreedyLossless runs shared too: tiny's
// config asks for it).
func TestSpecIndexShare(t *testing.T) {
	be := nputest.Open(0)
	m, g := mtpFixture(t, be)
	const k = 3
	drafts := func(p []int32, share bool) (int32, []int32) {
		m.noMTPIndexShare = !share
		defer func() { m.noMTPIndexShare = false }()
		c, bt := specCache(t, m, 1, len(p)+2*k+specBlock)
		s := &SpecSeq{Slot: 0, Blocks: bt[0]}
		if err := m.SpecPrefill(c, s, p, k, func(r []float32) int32 { return int32(argmax(r)) }); err != nil {
			t.Fatal(err)
		}
		return s.Next, s.Drafts
	}
	for n := 2; n <= 6; n++ {
		for seed := range uint64(3) {
			p := seqIDs(n, 40+seed)
			// The chain's last query sits at n-1+k-1 <= 10: at most 2 pools.
			_, a := drafts(p, false)
			_, b := drafts(p, true)
			if !slices.Equal(a, b) {
				t.Errorf("prompt of %d (seed %d): shared drafts %v, unshared %v", n, seed, b, a)
			}
		}
	}
	changed := false
	for i, p := range g.Prompts {
		next, d := drafts(p, true)
		if next != g.Next[i] || d[0] != g.Drafts[i][0] {
			t.Errorf("prompt %d: next %d first draft %d, want %d %d (step 0 does not share)", i, next, d[0], g.Next[i], g.Drafts[i][0])
		}
		changed = changed || !slices.Equal(d, g.Drafts[i])
		if len(g.DraftsShared) > i {
			if !slices.Equal(d, g.DraftsShared[i]) && g.Margins.SharedArgmax >= 2e-4 {
				t.Errorf("prompt %d: shared drafts %v, the reference's %v", i, d, g.DraftsShared[i])
			}
		} else if i == 0 {
			t.Log("the fixture has no shared reference chain (made without mtp_golden.py --index-share)")
		}
		t.Logf("prompt %d (%d tokens): shared drafts %v, unshared reference %v", i, len(p), d, g.Drafts[i])
	}
	if !changed {
		t.Error(fmt.Sprintf("sharing changed no draft of the %d sparse golden prompts", len(g.Prompts)))
	}
}
