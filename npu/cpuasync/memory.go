package cpuasync

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// Buffer ownership. Tensors must stay on the CPU backend's buffers (hccl's
// TCP transport recognises host memory by their dynamic type), and holding
// a table of every allocated buffer would keep alive the tensors callers
// drop without Free (the CPU backend leaves those to the garbage
// collector). So an Alloc'd buffer carries its own record: it is allocated
// tagBytes longer than the tensor, rounded up to 8 bytes first, and the
// tag at the end says which cpu-async backend made it and whether it is
// live, being freed (its Free is queued) or free (poisoned, maybe on the
// free list). No op touches the tag: tensors made on the buffer never
// cover it, and it starts on its own 8-byte word. A FromHost buffer has no
// tag (its size is exactly its tensor's, and its memory is the caller's),
// so Free leaves it alone: poisoning a memory-mapped checkpoint would
// corrupt it or fault.
//
// Tags and free lists of all backends are guarded by memMu: Alloc and Free
// are rare next to ops, and a global lock also covers a tensor freed on the
// wrong backend.
var memMu sync.Mutex

const tagBytes = 16

// tagMagic opens every tag; then the backend id (uint32), the state and the
// padding between the tensor's end and the tag.
var tagMagic = [8]byte{'c', 'p', 'u', 'a', 's', 'y', 'n', 'c'}

// Buffer states.
const (
	stateLive    = 1 // allocated
	stateFreeing = 2 // Free queued, the stream has not reached it
	stateFree    = 3 // poisoned; on the free list or left to the GC
)

// maxCached bounds the bytes of freed buffers a backend keeps for reuse;
// beyond it a freed buffer is still poisoned (queued ops holding it read
// NaN) but then left to the garbage collector.
const maxCached = 1 << 30

type tag struct {
	id         uint32
	state, pad byte
}

// host copies bytes between host slices and CPU buffers; its Upload and
// Download use no backend state.
var host cpu.Backend

var cpuBufferType = reflect.TypeOf(npu.Must(cpu.New(1).Alloc(npu.U8, 1)).Buffer())

// tagOffset is where the tag of a buffer for an n-byte tensor starts.
func tagOffset(n int) int { return (n + 7) &^ 7 }

// readTag reads buf's tag (memMu held); false for a buffer no cpu-async
// backend allocated.
func readTag(buf npu.Buffer) (tag, bool) {
	if reflect.TypeOf(buf) != cpuBufferType {
		return tag{}, false
	}
	off := buf.Bytes() - tagBytes
	if off < 0 || off%8 != 0 {
		return tag{}, false
	}
	var b [tagBytes]byte
	if err := host.Download(b[:], npu.NewTensor(buf, off, npu.U8, tagBytes)); err != nil || [8]byte(b[:8]) != tagMagic {
		return tag{}, false
	}
	return tag{id: binary.LittleEndian.Uint32(b[8:]), state: b[12], pad: b[13]}, true
}

// writeTag writes buf's tag (memMu held, or buf not yet shared).
func writeTag(buf npu.Buffer, t tag) {
	var b [tagBytes]byte
	copy(b[:], tagMagic[:])
	binary.LittleEndian.PutUint32(b[8:], t.id)
	b[12], b[13] = t.state, t.pad
	if err := host.Upload(npu.NewTensor(buf, buf.Bytes()-tagBytes, npu.U8, tagBytes), b[:]); err != nil {
		panic(err) // same size by construction
	}
}

// setState changes the state of a tagged buffer (memMu held).
func setState(buf npu.Buffer, state byte) {
	t, _ := readTag(buf)
	t.state = state
	writeTag(buf, t)
}

// newBuffer allocates a tagged buffer for an n-byte tensor from the CPU
// backend (its budget check and errors).
func (s *stream) newBuffer(n int) (npu.Buffer, error) {
	off := tagOffset(n)
	raw, err := s.cpu.Alloc(npu.U8, off+tagBytes)
	if err != nil {
		return nil, err
	}
	buf := raw.Buffer()
	writeTag(buf, tag{id: s.id, state: stateLive, pad: byte(off - n)})
	return buf, nil
}

// reuse takes a freed buffer for an n-byte tensor off the free list, nil
// if there is none. Buffers reach the list only when the stream has run
// their Free, so no op enqueued before that Free can still use them.
func (s *stream) reuse(n int) npu.Buffer {
	memMu.Lock()
	defer memMu.Unlock()
	l := s.free[n]
	if len(l) == 0 {
		return nil
	}
	buf := l[len(l)-1] // the most recently freed: a stale handle to it shows up soonest
	l[len(l)-1] = nil
	if len(l) == 1 {
		delete(s.free, n)
	} else {
		s.free[n] = l[:len(l)-1]
	}
	s.cached -= int64(n)
	setState(buf, stateLive)
	return buf
}

// markFreeing checks that t is a live tensor this backend allocated and
// marks its buffer as being freed; false for memory it does not own
// (FromHost tensors, tensors of the CPU backend). Freeing a view, a tensor
// of another cpu-async backend or a tensor twice panics: those would hand
// one buffer to two owners.
func (s *stream) markFreeing(t *npu.Tensor) bool {
	memMu.Lock()
	defer memMu.Unlock()
	buf := t.Buffer()
	tg, ok := readTag(buf)
	if !ok {
		return false
	}
	switch {
	case tg.id != s.id:
		panic(fmt.Sprintf("cpu-async: Free of %v allocated by another cpu-async backend", t))
	case t.Offset() != 0 || t.Bytes() != buf.Bytes()-tagBytes-int(tg.pad):
		panic(fmt.Sprintf("cpu-async: Free of a view %v (offset %d) instead of the tensor Alloc returned", t, t.Offset()))
	case tg.state != stateLive:
		panic(fmt.Sprintf("cpu-async: Free of %v, which was already freed", t))
	}
	tg.state = stateFreeing
	writeTag(buf, tg)
	return true
}

// recycle marks a poisoned buffer free and lists it for reuse (on the
// stream, when it reaches the Free).
func (s *stream) recycle(buf npu.Buffer, n int) {
	memMu.Lock()
	defer memMu.Unlock()
	setState(buf, stateFree)
	if s.cached+int64(n) > maxCached {
		return
	}
	s.free[n] = append(s.free[n], buf)
	s.cached += int64(n)
}

// Fill patterns. A freed tensor is overwritten with its dtype's poison so
// that an op still reading it (a use after Free) computes garbage that
// shows, and a recycled buffer is zeroed (Alloc's contract) by an item
// queued after everything enqueued before the Alloc.
//
//	F32, I32  0x7fc00000  F32: quiet NaN. I32: 2143289344, out of range
//	                      as any index, row, position or count, so ops
//	                      reading it as one panic; deliberately not -1,
//	                      which block tables and selections read as
//	                      "unused" and would skip silently.
//	BF16      0x7fc0      NaN
//	F16       0x7e00      NaN
//	F8E4M3    0x7f        NaN (the fn format's NaN pattern)
//	I8        0x80        -128, which symmetric int8 quantization never
//	                      produces (it clamps to [-127, 127])
//	U8        0xff        NaN as an E8M0 scale; 255 as a byte
//	I64       0x7ff8000000000000  float64 NaN; out of range as an index
//
// Upload scribbles the caller's source with the 32-bit word 0x7fc07fc0
// (bytes c0 7f c0 7f): a NaN read as F32, BF16 or F16 and 2143322048 read
// as I32, whatever the dtype the caller meant.
const chunkBytes = 16 << 10

var (
	zeroChunk     = make([]byte, chunkBytes)
	scribbleChunk = repeat([]byte{0xc0, 0x7f, 0xc0, 0x7f})
	poisonChunks  = map[npu.DType][]byte{
		npu.F32:    repeat(le32(0x7fc00000)),
		npu.I32:    repeat(le32(0x7fc00000)),
		npu.BF16:   repeat([]byte{0xc0, 0x7f}),
		npu.F16:    repeat([]byte{0x00, 0x7e}),
		npu.F8E4M3: repeat([]byte{0x7f}),
		npu.I8:     repeat([]byte{0x80}),
		npu.U8:     repeat([]byte{0xff}),
		npu.I64:    repeat(binary.LittleEndian.AppendUint64(nil, 0x7ff8000000000000)),
	}
)

// poison is the fill pattern of a freed dt tensor.
func poison(dt npu.DType) []byte {
	if p, ok := poisonChunks[dt]; ok {
		return p
	}
	return poisonChunks[npu.U8]
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// repeat fills a chunk with pat (whose length divides chunkBytes).
func repeat(pat []byte) []byte {
	c := make([]byte, chunkBytes)
	for i := 0; i < len(c); i += copy(c[i:], pat) {
	}
	return c
}

// fill writes the periodic chunk over the first n bytes of buf.
func fill(buf npu.Buffer, n int, chunk []byte) {
	for off := 0; off < n; off += len(chunk) {
		m := min(len(chunk), n-off)
		if err := host.Upload(npu.NewTensor(buf, off, npu.U8, m), chunk[:m]); err != nil {
			panic(err) // same size by construction
		}
	}
}

// scribble overwrites an Upload's source once it has been copied. Memory
// the caller cannot write (a read-only mapping) faults; that fault is
// turned into a panic and ignored: such a source cannot be reused anyway.
func scribble(src []byte) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { _ = recover() }()
	for off := 0; off < len(src); off += copy(src[off:], scribbleChunk) {
	}
}
