package cpu

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// hostLayout is an npu.SeqLayout read where the CPU backend's device memory
// is: on the host, when the op runs (never when it is enqueued: under the
// asynchronous wrapper the layout's tensors are written by an Upload queued
// before the op).
type hostLayout struct {
	QueryStart []int // B+1
	Pos        []int // B
	StateSlot  []int // B
	bt         []int32
	width, bs  int
}

// readLayout reads and checks s: sizes agree, QueryStart ascends from 0 to
// NumRows, positions are non-negative.
func readLayout(op string, s *npu.SeqLayout) *hostLayout {
	if s == nil || s.QueryStart == nil || s.Pos == nil || s.StateSlot == nil {
		panic(fmt.Sprintf("cpu: %s needs a SeqLayout with its tensors", op))
	}
	B := s.NumSeqs
	if B < 0 || s.QueryStart.Numel() != B+1 || s.Pos.Numel() != B || s.StateSlot.Numel() != B {
		panic(fmt.Sprintf("cpu: %s layout of %d sequences has QueryStart %v, Pos %v, StateSlot %v", op, B, s.QueryStart, s.Pos, s.StateSlot))
	}
	l := &hostLayout{QueryStart: ints(I32(s.QueryStart)), Pos: ints(I32(s.Pos)), StateSlot: ints(I32(s.StateSlot)), bs: s.BlockSize, width: s.MaxBlocks}
	if s.BlockTable != nil {
		if s.BlockTable.Numel() != B*s.MaxBlocks {
			panic(fmt.Sprintf("cpu: %s block table %v for %d sequences of %d blocks", op, s.BlockTable, B, s.MaxBlocks))
		}
		l.bt = I32(s.BlockTable)
	}
	if l.QueryStart[0] != 0 || l.QueryStart[B] != s.NumRows {
		panic(fmt.Sprintf("cpu: %s QueryStart %v does not cover %d rows", op, l.QueryStart, s.NumRows))
	}
	for b := range B {
		if l.QueryStart[b+1] < l.QueryStart[b] {
			panic(fmt.Sprintf("cpu: %s QueryStart %v not ascending", op, l.QueryStart))
		}
		if l.Pos[b] < 0 {
			panic(fmt.Sprintf("cpu: %s sequence %d at position %d", op, b, l.Pos[b]))
		}
	}
	return l
}

func ints(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// NumSeqs is the number of sequences.
func (l *hostLayout) NumSeqs() int { return len(l.QueryStart) - 1 }

// Rows is the number of rows of the batch.
func (l *hostLayout) Rows() int { return l.QueryStart[len(l.QueryStart)-1] }

// seqLen is the number of positions of sequence b with cache rows after
// this batch.
func (l *hostLayout) seqLen(b int) int { return l.Pos[b] + l.QueryStart[b+1] - l.QueryStart[b] }

// blocks is sequence b's block table.
func (l *hostLayout) blocks(op string, b int) []int32 {
	if l.bt == nil || l.bs < 1 {
		panic(fmt.Sprintf("cpu: %s needs a block table", op))
	}
	return l.bt[b*l.width : (b+1)*l.width]
}

// tokenRow is the per-token cache row of position p of sequence b, checked
// against the cache's rows.
func (l *hostLayout) tokenRow(op string, b, p, rows int) int32 {
	bt := l.blocks(op, b)
	if p < 0 || p >= l.seqLen(b) || p/l.bs >= len(bt) {
		panic(fmt.Sprintf("cpu: %s position %d of sequence %d outside its %d positions", op, p, b, l.seqLen(b)))
	}
	blk := bt[p/l.bs]
	r := int64(blk)*int64(l.bs) + int64(p%l.bs)
	if blk < 0 || r >= int64(rows) {
		panic(fmt.Sprintf("cpu: %s position %d of sequence %d in block %d outside a cache of %d rows", op, p, b, blk, rows))
	}
	return int32(r)
}

// poolRows appends the pooled-key rows of pools [0, n) of sequence b
// (kp tokens each), checked against the cache's rows.
func (l *hostLayout) poolRows(dst []int32, op string, b, n, kp, rows int) []int32 {
	bt := l.blocks(op, b)
	if l.bs%kp != 0 {
		panic(fmt.Sprintf("cpu: %s block size %d is not a multiple of the pool %d", op, l.bs, kp))
	}
	if n*kp > l.seqLen(b) || (n > 0 && (n*kp-1)/l.bs >= len(bt)) {
		panic(fmt.Sprintf("cpu: %s sequence %d has %d positions, not %d pools of %d", op, b, l.seqLen(b), n, kp))
	}
	for i := range n {
		r := npu.PoolRow(bt, i, kp, l.bs)
		if bt[i*kp/l.bs] < 0 || int(r) >= rows {
			panic(fmt.Sprintf("cpu: %s pool %d of sequence %d at row %d outside a cache of %d rows", op, i, b, r, rows))
		}
		dst = append(dst, r)
	}
	return dst
}
