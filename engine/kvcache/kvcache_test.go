package kvcache

import (
	"errors"
	"testing"
)

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"ok", Config{BlockSize: 16, NumBlocks: 4, NumStateSlots: 2, KPool: 4}, true},
		{"kpool defaults to 1", Config{BlockSize: 3, NumBlocks: 4, NumStateSlots: 2}, true},
		{"block not a multiple of kpool", Config{BlockSize: 6, NumBlocks: 4, NumStateSlots: 2, KPool: 4}, false},
		{"no state slots", Config{BlockSize: 16, NumBlocks: 4, KPool: 4}, false},
		{"zero block size", Config{BlockSize: 0, NumBlocks: 4, NumStateSlots: 1, KPool: 1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			if (err == nil) != c.ok {
				t.Fatalf("New(%+v) error %v, want ok=%v", c.cfg, err, c.ok)
			}
		})
	}
}

// TestAddressing checks slot uniqueness across sequences and the pool-slot
// invariant: a pool's slot is its first token's slot divided by KPool.
func TestAddressing(t *testing.T) {
	cases := []struct {
		name       string
		bs, kp     int
		appends    [][]int // per round, per sequence: positions to append
		numBlocks  int
		wantBlocks int
	}{
		{"kpool 4 block 8", 8, 4, [][]int{{5, 9, 1}, {3, 1, 20}, {1, 1, 1}}, 16, 2 + 2 + 3},
		{"kpool 1 block 4", 4, 1, [][]int{{4, 1}, {1, 7}}, 8, 2 + 2},
		{"kpool 2 block 2", 2, 2, [][]int{{3}, {1}, {1}, {2}}, 8, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := New(Config{BlockSize: c.bs, NumBlocks: c.numBlocks, NumStateSlots: 4, KPool: c.kp})
			if err != nil {
				t.Fatal(err)
			}
			seqs := make([]*Seq, len(c.appends[0]))
			for i := range seqs {
				if seqs[i], err = m.Allocate(); err != nil {
					t.Fatal(err)
				}
			}
			for _, round := range c.appends {
				for i, n := range round {
					if err := m.Append(seqs[i], n); err != nil {
						t.Fatal(err)
					}
				}
			}
			if m.UsedBlocks() != c.wantBlocks {
				t.Fatalf("used blocks %d, want %d", m.UsedBlocks(), c.wantBlocks)
			}
			seenTok := map[int32]bool{}
			seenPool := map[int32]bool{}
			for _, s := range seqs {
				if need := (s.Len() + c.bs - 1) / c.bs; len(s.Blocks()) != need {
					t.Fatalf("len %d with %d blocks of %d, want %d", s.Len(), len(s.Blocks()), c.bs, need)
				}
				for p := range s.Len() {
					ts := s.TokenSlot(p)
					if seenTok[ts] || ts < 0 || int(ts) >= m.TokenSlots() {
						t.Fatalf("token slot %d of position %d reused or out of range", ts, p)
					}
					seenTok[ts] = true
					if want := s.Blocks()[p/c.bs]*int32(c.bs) + int32(p%c.bs); ts != want {
						t.Fatalf("position %d slot %d, want %d", p, ts, want)
					}
				}
				for i := range s.Len() / c.kp {
					ps := s.PoolSlot(i)
					if seenPool[ps] || ps < 0 || int(ps) >= m.PoolSlots() {
						t.Fatalf("pool slot %d of pool %d reused or out of range", ps, i)
					}
					seenPool[ps] = true
					if first := s.TokenSlot(i * c.kp); ps*int32(c.kp) != first {
						t.Fatalf("pool %d slot %d, first token slot %d", i, ps, first)
					}
				}
			}
			for _, s := range seqs {
				m.Free(s)
			}
			if m.UsedBlocks() != 0 || m.UsedStateSlots() != 0 || m.NumSeqs() != 0 {
				t.Fatalf("after Free: %d blocks, %d slots, %d seqs in use", m.UsedBlocks(), m.UsedStateSlots(), m.NumSeqs())
			}
		})
	}
}

func TestExhaustion(t *testing.T) {
	m, err := New(Config{BlockSize: 4, NumBlocks: 3, NumStateSlots: 2, KPool: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := m.Allocate()
	b, _ := m.Allocate()
	if _, err := m.Allocate(); !errors.Is(err, ErrNoStateSlots) {
		t.Fatalf("third Allocate: %v, want ErrNoStateSlots", err)
	}
	if err := m.Append(a, 9); err != nil { // 3 blocks
		t.Fatal(err)
	}
	if m.CanAppend(b, 1) {
		t.Fatal("CanAppend with no free blocks")
	}
	if err := m.Append(b, 1); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("Append without blocks: %v, want ErrNoBlocks", err)
	}
	if b.Len() != 0 || len(b.Blocks()) != 0 {
		t.Fatalf("failed Append changed the sequence: len %d, %d blocks", b.Len(), len(b.Blocks()))
	}
	// a's last block has room for 3 more positions without a new block.
	if err := m.Append(a, 3); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(a, 1); !errors.Is(err, ErrNoBlocks) {
		t.Fatalf("Append past capacity: %v", err)
	}
	m.Free(a)
	if err := m.Append(b, 12); err != nil {
		t.Fatalf("Append after Free: %v", err)
	}
	m.Free(b)
	if m.UsedBlocks() != 0 || m.UsedStateSlots() != 0 {
		t.Fatalf("usage after Free: %d blocks %d slots", m.UsedBlocks(), m.UsedStateSlots())
	}
}

func TestLayout(t *testing.T) {
	m, err := New(Config{BlockSize: 8, NumBlocks: 8, NumStateSlots: 3, KPool: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := m.Allocate()
	b, _ := m.Allocate()
	c, _ := m.Allocate()
	// a: 10 cached + 1 new (decode); b: 0 cached + 7 new (prefill);
	// c: 4 cached + 5 new (chunked prefill).
	for _, st := range []struct {
		s    *Seq
		n    int
		rows int
	}{{a, 11, 1}, {b, 7, 7}, {c, 9, 5}} {
		if err := m.Append(st.s, st.n); err != nil {
			t.Fatal(err)
		}
	}
	l := m.Layout([]*Seq{a, b, c}, []int{1, 7, 5})
	wantQS := []int{0, 1, 8, 13}
	wantPos := []int{10, 0, 4}
	for i, v := range wantQS {
		if l.QueryStart[i] != v {
			t.Fatalf("QueryStart %v, want %v", l.QueryStart, wantQS)
		}
	}
	for i, v := range wantPos {
		if l.Pos[i] != v {
			t.Fatalf("Pos %v, want %v", l.Pos, wantPos)
		}
	}
	if l.Rows() != 13 || l.NumSeqs() != 3 {
		t.Fatalf("rows %d seqs %d", l.Rows(), l.NumSeqs())
	}
	for i, s := range []*Seq{a, b, c} {
		if l.StateSlot[i] != s.StateSlot() || len(l.BlockTables[i]) != (s.Len()+7)/8 || l.BlockSize != 8 {
			t.Fatalf("seq %d: slot %d, %d blocks of %d", i, l.StateSlot[i], len(l.BlockTables[i]), l.BlockSize)
		}
		for p := range s.Len() {
			if l.TokenRow(i, p) != s.TokenSlot(p) {
				t.Fatalf("seq %d position %d: layout row %d, sequence slot %d", i, p, l.TokenRow(i, p), s.TokenSlot(p))
			}
		}
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	if l.StateSlot[0] == l.StateSlot[1] || l.StateSlot[1] == l.StateSlot[2] || l.StateSlot[0] == l.StateSlot[2] {
		t.Fatalf("state slots not distinct: %v", l.StateSlot)
	}
}
