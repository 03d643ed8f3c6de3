//go:build cgo

package ascend

import (
	"encoding/binary"
	"fmt"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// Host shadows of small I32 uploads.
//
// The architecture's rule is that the host reads device data only at
// explicit sync points (Download, Sync), never inside an op. The ops that
// plan per sequence on the host (Conv1d, KDA, DSAIndex, SparseMLA) need
// the batch layout's values (QueryStart, Pos, StateSlot, BlockTable), and
// those reach the device from host memory: the model Uploads them once per
// step (npu.BatchLayout.Upload, or its own fixed buffer). So Upload keeps a
// host copy of every I32 upload of at most shadowMaxWords words, and the
// ops read the layout from that copy, with no sync.
//
// A shadow is valid only while nothing has written its bytes since the
// Upload: a later Upload over any of its bytes replaces or drops it, Free
// drops every shadow of the buffer, and each op that can write I32 (Copy,
// Gather, Embedding, Scatter, TopK, Router through TopK, DSAIndex) drops
// the shadows its output overlaps. An op that needs a layout without a
// valid shadow panics: the layout was not uploaded from the host (or was
// overwritten on the device since), which is a programming error; it never
// falls back to a hidden sync.
//
// Cost: one host copy of each small I32 upload (the layout words, token
// ids, slot mappings: O(batch + blocks) per step), kept until the bytes
// are overwritten or freed.

// shadowMaxWords bounds the I32 uploads shadowed (16 MiB of words).
const shadowMaxWords = 1 << 22

// shadow is the host copy of the I32 words uploaded at byte offset off of
// a buffer.
type shadow struct {
	off  int
	data []int32
}

func (s shadow) end() int { return s.off + 4*len(s.data) }

// shadowUpload records (or drops) the shadows of an Upload of src into dst
// (caller's goroutine; the map is only touched from the backend's one
// driving goroutine).
func (b *Backend) shadowUpload(dst *npu.Tensor, src []byte) {
	buf := b.dbuf(dst)
	b.dropShadows(buf, dst.Offset(), dst.Offset()+len(src))
	if dst.DType() != npu.I32 || len(src) == 0 || len(src)/4 > shadowMaxWords {
		return
	}
	v := make([]int32, len(src)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(src[4*i:]))
	}
	if b.shadows == nil {
		b.shadows = map[*buffer][]shadow{}
	}
	b.shadows[buf] = append(b.shadows[buf], shadow{off: dst.Offset(), data: v})
}

// dropShadows forgets the shadows of buf overlapping bytes [lo, hi).
func (b *Backend) dropShadows(buf *buffer, lo, hi int) {
	list := b.shadows[buf]
	if len(list) == 0 {
		return
	}
	kept := list[:0]
	for _, s := range list {
		if s.end() <= lo || s.off >= hi {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		delete(b.shadows, buf)
		return
	}
	b.shadows[buf] = kept
}

// wrote drops the shadows of t's bytes: an op is about to write t.
func (b *Backend) wrote(t *npu.Tensor) {
	if t == nil || len(b.shadows) == 0 {
		return
	}
	if buf, ok := t.Buffer().(*buffer); ok {
		b.dropShadows(buf, t.Offset(), t.Offset()+t.Bytes())
	}
}

// hostI32 is t's values from its upload's shadow, or ok false when no
// valid shadow covers t.
func (b *Backend) hostI32(t *npu.Tensor) (v []int32, ok bool) {
	if t.DType() != npu.I32 {
		return nil, false
	}
	buf, isOurs := t.Buffer().(*buffer)
	if !isOurs {
		return nil, false
	}
	lo, hi := t.Offset(), t.Offset()+t.Bytes()
	for _, s := range b.shadows[buf] {
		if s.off <= lo && hi <= s.end() && (lo-s.off)%4 == 0 {
			return s.data[(lo-s.off)/4 : (hi-s.off)/4], true
		}
	}
	return nil, false
}

// mustHostI32 is hostI32 for an op's layout tensor; a missing shadow is a
// programming error.
func (b *Backend) mustHostI32(op, what string, t *npu.Tensor) []int32 {
	if t == nil {
		panic(fmt.Sprintf("ascend: %s needs the layout's %s", op, what))
	}
	v, ok := b.hostI32(t)
	if !ok {
		panic(fmt.Sprintf("ascend: %s: the layout's %s %v has no host shadow: it must be Uploaded from the host (BatchLayout.Upload) "+
			"and not written on the device since; the backend reads layouts only from their uploads, never by a sync", op, what, t))
	}
	return v
}

// hostLayout is a SeqLayout's values read from the shadows of its upload.
type hostLayout struct {
	qs, pos, slots []int32 // B+1, B, B
	bt             []int32 // B*width, nil when the op needs none
	width, bs      int
}

// layout reads seqs from its shadows and checks it: QueryStart ascends
// from 0 to NumRows, positions are non-negative, and with blocks the
// block table is there.
func (b *Backend) layout(op string, seqs *npu.SeqLayout, blocks bool) *hostLayout {
	if seqs == nil || seqs.QueryStart == nil || seqs.Pos == nil || seqs.StateSlot == nil {
		panic(fmt.Sprintf("ascend: %s needs a SeqLayout with its tensors", op))
	}
	B := seqs.NumSeqs
	if B < 0 || seqs.QueryStart.Numel() < B+1 || seqs.Pos.Numel() < B || seqs.StateSlot.Numel() < B {
		panic(fmt.Sprintf("ascend: %s layout of %d sequences has QueryStart %v, Pos %v, StateSlot %v", op, B, seqs.QueryStart, seqs.Pos, seqs.StateSlot))
	}
	l := &hostLayout{
		qs:    b.mustHostI32(op, "QueryStart", seqs.QueryStart.Reshape(-1).Rows(0, B+1)),
		pos:   b.mustHostI32(op, "Pos", seqs.Pos.Reshape(-1).Rows(0, B)),
		slots: b.mustHostI32(op, "StateSlot", seqs.StateSlot.Reshape(-1).Rows(0, B)),
		width: seqs.MaxBlocks, bs: seqs.BlockSize,
	}
	if blocks {
		if seqs.BlockTable == nil || seqs.BlockTable.Numel() != B*seqs.MaxBlocks || seqs.BlockSize < 1 {
			panic(fmt.Sprintf("ascend: %s needs a block table of %d sequences by %d blocks of %d; got %v", op, B, seqs.MaxBlocks, seqs.BlockSize, seqs.BlockTable))
		}
		l.bt = b.mustHostI32(op, "BlockTable", seqs.BlockTable)
	}
	if int(l.qs[0]) != 0 || int(l.qs[B]) != seqs.NumRows {
		panic(fmt.Sprintf("ascend: %s QueryStart %v does not cover %d rows", op, l.qs, seqs.NumRows))
	}
	for i := range B {
		if l.qs[i+1] < l.qs[i] || l.pos[i] < 0 {
			panic(fmt.Sprintf("ascend: %s sequence %d: rows [%d, %d) at position %d", op, i, l.qs[i], l.qs[i+1], l.pos[i]))
		}
	}
	return l
}

// blocks is sequence s's block table.
func (l *hostLayout) blocks(s int) []int32 { return l.bt[s*l.width : (s+1)*l.width] }

// tokenRow is the per-token cache row of position p of sequence s, checked
// against the cache's rows.
func (l *hostLayout) tokenRow(op string, s, p, rows int) int32 {
	bt := l.blocks(s)
	if p/l.bs >= len(bt) || bt[p/l.bs] < 0 {
		panic(fmt.Sprintf("ascend: %s sequence %d position %d has no block in %v", op, s, p, bt))
	}
	r := bt[p/l.bs]*int32(l.bs) + int32(p%l.bs)
	if int(r) >= rows {
		panic(fmt.Sprintf("ascend: %s sequence %d position %d maps to cache row %d of %d", op, s, p, r, rows))
	}
	return r
}

// poolRow is the pooled-key row of complete pool i of kp tokens of
// sequence s, checked against the pooled cache's rows.
func (l *hostLayout) poolRow(op string, s, i, kp, rows int) int32 {
	bt := l.blocks(s)
	if l.bs%kp != 0 || i*kp/l.bs >= len(bt) || bt[i*kp/l.bs] < 0 {
		panic(fmt.Sprintf("ascend: %s sequence %d pool %d of %d tokens has no block of %d in %v", op, s, i, kp, l.bs, bt))
	}
	r := npu.PoolRow(bt, i, kp, l.bs)
	if int(r) >= rows {
		panic(fmt.Sprintf("ascend: %s sequence %d pool %d maps to pooled row %d of %d", op, s, i, r, rows))
	}
	return r
}

// stage makes a scratch tensor holding data (little-endian dt elements)
// by an enqueued host-to-device copy from page-locked staging memory, both
// freed at the next Sync (device thread). It is how an op's host plan
// (from shadows) reaches the device: an upload, never a read back.
func (b *Backend) stage(dt npu.DType, data []byte, shape ...int) *npu.Tensor {
	t := b.scratch(dt, shape...)
	if len(data) != t.Bytes() {
		panic(fmt.Sprintf("ascend: staging %d bytes into %v", len(data), t))
	}
	if len(data) == 0 {
		return t
	}
	h, err := acl.MallocHost(len(data))
	if err != nil {
		panic(fmt.Sprintf("ascend: staging %d bytes: %v", len(data), err))
	}
	acl.HostWrite(h, data)
	b.hostPending = append(b.hostPending, h)
	buf := t.Buffer().(*buffer)
	if err := acl.MemcpyAsync(buf.ptr, buf.n, h, len(data), acl.HostToDevice, b.stream); err != nil {
		b.fail(fmt.Errorf("ascend: staging %v: %w", t, err))
	}
	return t
}

func stageI32(b *Backend, v []int32, shape ...int) *npu.Tensor {
	return b.stage(npu.I32, npu.EncodeInt32s(v), shape...)
}

func stageF32(b *Backend, v []float32, shape ...int) *npu.Tensor {
	return b.stage(npu.F32, npu.EncodeFloats(v, npu.F32), shape...)
}
