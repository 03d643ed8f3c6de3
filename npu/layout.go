package npu

import "fmt"

// BatchLayout is the host description of one step's batch, built once by
// the cache manager (kvcache.Manager.Layout), broadcast as is by a TP
// leader and uploaded once per step into a SeqLayout. Its size is
// O(batch + blocks of the batch's sequences): per sequence its block table
// and nothing per cached token.
type BatchLayout struct {
	// QueryStart has len B+1: rows [QueryStart[b], QueryStart[b+1]) of the
	// batch belong to sequence b.
	QueryStart []int
	// Pos[b] is the number of sequence b's tokens already in the cache
	// (the absolute position of its first row).
	Pos []int
	// StateSlot[b] is sequence b's fixed-state slot.
	StateSlot []int
	// BlockSize is the tokens per cache block.
	BlockSize int
	// BlockTables[b] are sequence b's cache blocks in order, at least
	// enough for every position up to its last row.
	BlockTables [][]int32
}

// NumSeqs is the number of sequences in the layout.
func (l *BatchLayout) NumSeqs() int { return len(l.QueryStart) - 1 }

// Rows is the number of rows (tokens) in the batch.
func (l *BatchLayout) Rows() int { return l.QueryStart[len(l.QueryStart)-1] }

// SeqRows is the number of rows of sequence b.
func (l *BatchLayout) SeqRows(b int) int { return l.QueryStart[b+1] - l.QueryStart[b] }

// TokenRow is the per-token cache row of position p of sequence b.
func (l *BatchLayout) TokenRow(b, p int) int32 {
	return l.BlockTables[b][p/l.BlockSize]*int32(l.BlockSize) + int32(p%l.BlockSize)
}

// PoolRow is the pooled-key cache row of complete pool i (kp tokens) of
// sequence b.
func (l *BatchLayout) PoolRow(b, i, kp int) int32 {
	return PoolRow(l.BlockTables[b], i, kp, l.BlockSize)
}

// PoolRow is the pooled-key cache row of complete pool i of kp tokens for a
// sequence with block table bt and block size bs: pools never straddle
// blocks (bs is a multiple of kp), so block bt[i*kp/bs] holds bs/kp pools.
func PoolRow(bt []int32, i, kp, bs int) int32 {
	return bt[i*kp/bs]*int32(bs/kp) + int32((i*kp%bs)/kp)
}

// MaxBlocks is the widest block table any sequence needs for this batch.
func (l *BatchLayout) MaxBlocks() int {
	w := 0
	for b := range l.NumSeqs() {
		w = max(w, (l.Pos[b]+l.SeqRows(b)+l.BlockSize-1)/l.BlockSize)
	}
	return w
}

// Check validates the layout's shape: lengths, ascending QueryStart from
// 0, non-negative positions and block tables covering every row. Slot and
// block ranges are the cache's to check.
func (l *BatchLayout) Check() error {
	B := len(l.QueryStart) - 1
	if B < 0 || l.QueryStart[0] != 0 {
		return fmt.Errorf("npu: layout QueryStart %v must start at 0", l.QueryStart)
	}
	if len(l.Pos) != B || len(l.StateSlot) != B || len(l.BlockTables) != B {
		return fmt.Errorf("npu: layout of %d sequences has %d Pos, %d StateSlot and %d block tables", B, len(l.Pos), len(l.StateSlot), len(l.BlockTables))
	}
	if l.BlockSize < 1 {
		return fmt.Errorf("npu: layout block size %d", l.BlockSize)
	}
	for b := range B {
		n := l.SeqRows(b)
		if n < 0 || l.Pos[b] < 0 {
			return fmt.Errorf("npu: layout sequence %d has %d rows at position %d", b, n, l.Pos[b])
		}
		if need := (l.Pos[b] + n + l.BlockSize - 1) / l.BlockSize; len(l.BlockTables[b]) < need {
			return fmt.Errorf("npu: layout sequence %d at positions [%d, %d) has %d blocks of %d, needs %d", b, l.Pos[b], l.Pos[b]+n, len(l.BlockTables[b]), l.BlockSize, need)
		}
	}
	return nil
}

// SlotMapping appends to dst the per-token cache row of every row of the
// batch (the rows the step writes), in row order.
func (l *BatchLayout) SlotMapping(dst []int32) []int32 {
	for b := range l.NumSeqs() {
		for p := l.Pos[b]; p < l.Pos[b]+l.SeqRows(b); p++ {
			dst = append(dst, l.TokenRow(b, p))
		}
	}
	return dst
}

// LayoutWords is the number of I32 words Encode writes: QueryStart, Pos,
// StateSlot and the [B, MaxBlocks] block table.
func (l *BatchLayout) LayoutWords() int {
	B := l.NumSeqs()
	return (B + 1) + 2*B + B*l.MaxBlocks()
}

// Encode appends the device form of the layout to dst: QueryStart (B+1),
// Pos (B), StateSlot (B), then the block table [B, MaxBlocks] padded with
// -1 (only the blocks each sequence needs for this batch).
func (l *BatchLayout) Encode(dst []int32) []int32 {
	B, w := l.NumSeqs(), l.MaxBlocks()
	for _, q := range l.QueryStart {
		dst = append(dst, int32(q))
	}
	for _, p := range l.Pos {
		dst = append(dst, int32(p))
	}
	for _, s := range l.StateSlot {
		dst = append(dst, int32(s))
	}
	for b := range B {
		need := (l.Pos[b] + l.SeqRows(b) + l.BlockSize - 1) / l.BlockSize
		dst = append(dst, l.BlockTables[b][:need]...)
		for range w - need {
			dst = append(dst, -1)
		}
	}
	return dst
}

// Views returns the SeqLayout whose tensors are views of buf, an I32
// tensor holding at least LayoutWords elements written by Encode (already
// uploaded or enqueued for upload).
func (l *BatchLayout) Views(buf *Tensor) *SeqLayout {
	B, w := l.NumSeqs(), l.MaxBlocks()
	if buf.DType() != I32 || buf.Numel() < l.LayoutWords() {
		panic(fmt.Sprintf("npu: layout of %d sequences does not fit in %v", B, buf))
	}
	flat := buf.Reshape(buf.Numel())
	o := 0
	take := func(n int) *Tensor {
		t := flat.Rows(o, o+n)
		o += n
		return t
	}
	s := &SeqLayout{NumSeqs: B, NumRows: l.Rows(), MaxBlocks: w, BlockSize: l.BlockSize}
	s.QueryStart = take(B + 1)
	s.Pos = take(B)
	s.StateSlot = take(B)
	s.BlockTable = take(B*w).Reshape(B, w)
	return s
}

// Upload allocates a device tensor for the layout, uploads it and returns
// the SeqLayout with its tensor (for tests and one-off callers; the model
// keeps the buffer in its scratch). The caller frees the returned tensor.
func (l *BatchLayout) Upload(m Memory) (*SeqLayout, *Tensor, error) {
	if err := l.Check(); err != nil {
		return nil, nil, err
	}
	words := l.Encode(make([]int32, 0, l.LayoutWords()))
	buf, err := m.Alloc(I32, max(len(words), 1))
	if err != nil {
		return nil, nil, err
	}
	if err := m.Upload(buf.Rows(0, len(words)), EncodeInt32s(words)); err != nil {
		m.Free(buf)
		return nil, nil, err
	}
	return l.Views(buf), buf, nil
}
