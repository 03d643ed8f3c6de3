package kvcache

import (
	"fmt"
	"testing"
)

// BenchmarkDecodeLayout builds and encodes a decode step's batch
// description (32 sequences, one new token each) at 1k and 100k tokens of
// context: what the model uploads per step (block tables, O(batch +
// blocks)) next to what a per-token slot list would cost (O(context)).
// Run: go test -run '^$' -bench DecodeLayout ./engine/kvcache/
func BenchmarkDecodeLayout(b *testing.B) {
	const B, bs = 32, 64
	for _, ctx := range []int{1024, 100 * 1024} {
		b.Run(fmt.Sprintf("context=%d", ctx), func(b *testing.B) {
			per := (ctx + 1 + bs - 1) / bs
			m, err := New(Config{BlockSize: bs, NumBlocks: B * per, NumStateSlots: B, KPool: 4})
			if err != nil {
				b.Fatal(err)
			}
			seqs := make([]*Seq, B)
			rows := make([]int, B)
			for i := range seqs {
				if seqs[i], err = m.Allocate(); err != nil {
					b.Fatal(err)
				}
				if err := m.Append(seqs[i], ctx+1); err != nil {
					b.Fatal(err)
				}
				rows[i] = 1
			}
			var words []int32
			b.ResetTimer()
			for range b.N {
				l := m.Layout(seqs, rows)
				words = l.SlotMapping(l.Encode(words[:0]))
			}
			b.ReportMetric(float64(4*len(words)), "upload-B/step")
			b.ReportMetric(float64(4*B*(ctx+1)), "token-slot-list-B/step")
		})
	}
}
