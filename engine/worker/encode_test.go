package worker

import (
	"reflect"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// TestBatchEncoding: a batch survives the leader-to-follower encoding
// exactly: layouts travel as block tables (one word per block), nil and
// empty LogitRows stay distinct, and the empty (dummy) batch works.
func TestBatchEncoding(t *testing.T) {
	const bs, kp = 8, 4
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: 64, NumStateSlots: 4, KPool: kp})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []*kvcache.Seq
	for _, n := range []int{3, 40, 17} {
		s, err := mgr.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		// Interleave allocations so block tables are not contiguous.
		if err := mgr.Append(s, n); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	for _, s := range seqs {
		if err := mgr.Append(s, 5); err != nil {
			t.Fatal(err)
		}
	}
	paged := mgr.Layout(seqs, []int{5, 5, 1})
	var toks []int32
	for i := range paged.Rows() {
		toks = append(toks, int32(100+i))
	}
	raw := npu.BatchLayout{
		QueryStart:  []int{0, 2, 3},
		Pos:         []int{0, 4},
		StateSlot:   []int{1, 0},
		BlockSize:   4,
		BlockTables: [][]int32{{9}, {7, 1}},
	}
	cases := []struct {
		name  string
		b     glm5next.Batch
		words int // encoded length (0: not checked)
	}{
		{"paged, default logit rows", glm5next.Batch{Tokens: toks, Layout: paged}, 0},
		{"paged, chosen rows", glm5next.Batch{Tokens: toks, Layout: paged, LogitRows: []int{10, 4}}, 0},
		{"hand-built, no logits", glm5next.Batch{Tokens: []int32{1, 2, 3}, Layout: raw, LogitRows: []int{}}, 0},
		{"dummy", glm5next.Batch{Layout: npu.BatchLayout{QueryStart: []int{0}, BlockSize: bs}, LogitRows: []int{}}, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := encodeBatch(nil, &tc.b)
			if tc.words > 0 && len(w) != tc.words {
				t.Errorf("%d words, want %d", len(w), tc.words)
			}
			got, err := decodeBatch(w)
			if err != nil {
				t.Fatal(err)
			}
			norm := func(b *glm5next.Batch) glm5next.Batch {
				c := *b
				if len(c.Tokens) == 0 {
					c.Tokens = nil
				}
				L := &c.Layout
				for _, p := range []*[]int{&L.Pos, &L.StateSlot} {
					if len(*p) == 0 {
						*p = nil
					}
				}
				for i := range L.BlockTables {
					if len(L.BlockTables[i]) == 0 {
						L.BlockTables[i] = nil
					}
				}
				if len(L.BlockTables) == 0 {
					L.BlockTables = nil
				}
				return c
			}
			if g, w := norm(got), norm(&tc.b); !reflect.DeepEqual(g, w) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", g, w)
			}
			if (got.LogitRows == nil) != (tc.b.LogitRows == nil) {
				t.Fatalf("LogitRows nil %v, want %v", got.LogitRows == nil, tc.b.LogitRows == nil)
			}
		})
	}
	// Paged sequences cost one word per block, not per token.
	w := encodeBatch(nil, &glm5next.Batch{Tokens: toks, Layout: paged})
	slots := 0
	for _, s := range seqs {
		slots += s.Len()
	}
	if len(w) >= slots {
		t.Errorf("paged batch of %d token slots encoded in %d words", slots, len(w))
	}
	// Truncated or padded encodings are errors, not panics.
	for _, bad := range [][]int32{w[:len(w)-1], append(append([]int32(nil), w...), 7), {3}} {
		if _, err := decodeBatch(bad); err == nil {
			t.Errorf("decoding %d words of a %d-word batch: no error", len(bad), len(w))
		}
	}
}

// TestStartErrors: configurations Start rejects before loading anything.
func TestStartErrors(t *testing.T) {
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	one, err := hccl.Init(ri, 0, 1, hccl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	g := &Groups{World: one}
	cfg := &config.ModelConfig{}
	cases := []struct {
		name string
		c    Config
		want string
	}{
		{"no groups", Config{Topology: Topology{DP: 1, TP: 1}, Random: cfg}, "without communicators"},
		{"bad topology", Config{Topology: Topology{DP: 0, TP: 1}, Groups: g, Random: cfg}, "must be positive"},
		{"rank outside", Config{Topology: Topology{DP: 1, TP: 1}, TPRank: 1, Groups: g, Random: cfg}, "outside DP 1 × TP 1"},
		{"world rank", Config{Topology: Topology{DP: 2, TP: 1}, DPRank: 1, Groups: g, Random: cfg}, "world rank 0 is not"},
		{"missing TP comm", Config{Topology: Topology{DP: 1, TP: 2}, Groups: g, Random: cfg}, "lack a communicator"},
		{"missing EP comm", Config{Topology: Topology{DP: 2, TP: 1, EP: true}, Groups: g, Random: cfg}, "lack a communicator"},
		{"two models", Config{Topology: Topology{DP: 1, TP: 1}, Groups: g, Random: cfg, ModelDir: "x"}, "exactly one of ModelDir and Random"},
		{"no model", Config{Topology: Topology{DP: 1, TP: 1}, Groups: g}, "exactly one of ModelDir and Random"},
	}
	for _, tc := range cases {
		_, err := Start(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
