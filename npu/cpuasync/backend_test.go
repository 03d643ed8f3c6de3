package cpuasync

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// newBackend returns a backend closed at the end of the test.
func newBackend(t *testing.T) *Backend {
	t.Helper()
	b := New(2)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// blockStream parks b's stream inside a RunOnStream issued from another
// goroutine and returns once the stream is parked there; release (safe to
// call more than once, also called at the end of the test) lets it go and
// waits for that RunOnStream to return. While parked, no queued op runs,
// so the test can observe what a call did before its op ran.
func blockStream(t *testing.T, b *Backend) (release func()) {
	t.Helper()
	started, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- b.RunOnStream(func() error {
			close(started)
			<-unblock
			return nil
		})
	}()
	<-started
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(unblock)
			if err := <-done; err != nil {
				t.Errorf("blocking RunOnStream: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// queued is the number of items waiting behind the one the stream runs.
func queued(b *Backend) int {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return len(b.s.queue)
}

func upload(t *testing.T, be npu.Backend, dt npu.DType, data []byte, shape ...int) *npu.Tensor {
	t.Helper()
	x := npu.Must(be.Alloc(dt, shape...))
	if err := be.Upload(x, data); err != nil {
		t.Fatal(err)
	}
	return x
}

func download(t *testing.T, be npu.Backend, x *npu.Tensor) []byte {
	t.Helper()
	got := make([]byte, x.Bytes())
	if err := be.Download(got, x); err != nil {
		t.Fatal(err)
	}
	return got
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

func floats(v float32, n int) []byte {
	f := make([]float32, n)
	for i := range f {
		f[i] = v
	}
	return npu.EncodeFloats(f, npu.F32)
}

// program runs a mix of ops on be, through an uploaded SeqLayout and with
// a scratch buffer freed and reallocated, and downloads the results.
func program(t *testing.T, be npu.Backend) map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	randf := func(n int, lo, hi float32) []byte {
		f := make([]float32, n)
		for i := range f {
			f[i] = lo + (hi-lo)*rng.Float32()
		}
		return npu.EncodeFloats(f, npu.F32)
	}
	const T, K, N = 6, 16, 8
	res := map[string]*npu.Tensor{}

	x := upload(t, be, npu.F32, randf(T*K, -1, 1), T, K)
	w := npu.Must(be.FromHost(npu.F32, randf(N*K, -1, 1), N, K))
	y := npu.Must(be.Alloc(npu.F32, T, N))
	be.MatMul(y, x, w)
	nw := upload(t, be, npu.F32, randf(N, 0.5, 1.5), N)
	y2 := npu.Must(be.Alloc(npu.F32, T, N))
	be.RMSNorm(y2, y, nw, 1e-6)
	res["matmul"], res["rmsnorm"] = y, y2

	// A scratch tensor freed and reallocated (recycled on cpu-async, once
	// the stream has passed the Free): correct code cannot tell.
	tmp := npu.Must(be.Alloc(npu.F32, T, N))
	be.Scale(tmp, y2, 3)
	be.Free(tmp)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	tmp = npu.Must(be.Alloc(npu.F32, T, N))
	be.Add(tmp, tmp, y2) // zero-filled: equals y2
	res["recycled"] = tmp

	g := npu.Must(be.Alloc(npu.F32, 4, N))
	be.Gather(g, y2, upload(t, be, npu.I32, npu.EncodeInt32s([]int32{5, 0, 3, 3}), 4))
	cache := npu.Must(be.Alloc(npu.BF16, 10, N))
	be.Scatter(cache, g, upload(t, be, npu.I32, npu.EncodeInt32s([]int32{9, 2, 4, 7}), 4))
	vals, idx := npu.Must(be.Alloc(npu.F32, T, 3)), npu.Must(be.Alloc(npu.I32, T, 3))
	be.TopK(vals, idx, y2, 3)
	res["gather"], res["scatter"], res["topk.vals"], res["topk.idx"] = g, cache, vals, idx

	// Two sequences (2 new rows at position 0, 4 new rows after 3 cached).
	bl := npu.BatchLayout{QueryStart: []int{0, 2, 6}, Pos: []int{0, 3}, StateSlot: []int{1, 0}, BlockSize: 4, BlockTables: [][]int32{{0}, {1, 2}}}
	seqs, lbuf, err := bl.Upload(be)
	if err != nil {
		t.Fatal(err)
	}
	cstate := upload(t, be, npu.F32, randf(2*3*N, -1, 1), 2, 3, N)
	cout := npu.Must(be.Alloc(npu.F32, T, N))
	be.Conv1d(cout, y2, cstate, upload(t, be, npu.F32, randf(N*4, -1, 1), N, 4), seqs, true)
	res["conv1d"], res["conv1d.state"] = cout, cstate

	const H, D = 2, 4
	qkv := upload(t, be, npu.F32, randf(T*3*H*D, -1, 1), T, 3*H*D)
	gate := upload(t, be, npu.F32, randf(T*H*D, -0.5, -0.01), T, H*D)
	beta := upload(t, be, npu.F32, randf(T*H, 0.1, 0.9), T, H)
	for _, chunk := range []int{0, 2} {
		st := upload(t, be, npu.F32, randf(2*H*D*D, -0.1, 0.1), 2, H, D, D)
		out := npu.Must(be.Alloc(npu.F32, T, H*D))
		be.KDA(out, qkv, gate, beta, st, seqs, H, D, chunk)
		res[fmt.Sprintf("kda%d", chunk)], res[fmt.Sprintf("kda%d.state", chunk)] = out, st
	}
	be.Free(lbuf)

	q := make([]byte, N*K)
	for i := range q {
		q[i] = byte(rng.IntN(255) - 127)
	}
	qw := &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: npu.Must(be.FromHost(npu.I8, q, N, K)), Scale: upload(t, be, npu.F32, randf(N, 0.001, 0.01), N)}
	be.PrepareQuant(qw)
	qout := npu.Must(be.Alloc(npu.F32, T, N))
	be.MatMulQ(qout, x, qw)
	res["matmulq"] = qout

	out := map[string][]byte{}
	for k, v := range res {
		out[k] = download(t, be, v)
	}
	return out
}

// TestSameResultsAsCPU: the same ops give bit-identical results on the CPU
// backend and queued on the stream.
func TestSameResultsAsCPU(t *testing.T) {
	want := program(t, cpu.New(2))
	got := program(t, newBackend(t))
	for k, w := range want {
		if !bytes.Equal(got[k], w) {
			t.Errorf("%s differs from the CPU backend:\n got %v\nwant %v", k, got[k], w)
		}
	}
	if !bytes.Equal(got["recycled"], got["rmsnorm"]) {
		t.Errorf("recycled scratch was not zero-filled: got %v, want %v", f32s(got["recycled"]), f32s(got["rmsnorm"]))
	}
}

// TestOpReturnsBeforeItRuns: with the stream parked, an op call returns and
// its output is untouched until the stream goes on.
func TestOpReturnsBeforeItRuns(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 4))
	release := blockStream(t, b)
	b.Fill(x, 1)
	// Race-free: the parked stream has not touched x, and its Fill happens
	// after release.
	for i, v := range cpu.F32(x) {
		if v != 0 {
			t.Fatalf("x[%d] = %v before the stream ran the Fill: the op ran on the caller", i, v)
		}
	}
	if n := queued(b); n != 1 {
		t.Fatalf("%d items queued behind the parked stream, want the Fill", n)
	}
	release()
	if got := f32s(download(t, b, x)); !reflect.DeepEqual(got, []float32{1, 1, 1, 1}) {
		t.Fatalf("after the stream ran: %v", got)
	}
}

// TestEveryOpIsQueued calls every method of npu.Ops with zero arguments
// (nil tensors, which every kernel rejects): with the stream parked none
// may panic on the caller, and each must fail on the stream under its own
// name.
func TestEveryOpIsQueued(t *testing.T) {
	b := newBackend(t)
	ops := reflect.TypeFor[npu.Ops]()
	call := func(m reflect.Method) (panicked any) {
		defer func() { panicked = recover() }()
		args := make([]reflect.Value, m.Type.NumIn())
		for i := range args {
			args[i] = reflect.Zero(m.Type.In(i))
		}
		reflect.ValueOf(b).MethodByName(m.Name).Call(args)
		return nil
	}
	release := blockStream(t, b)
	for i := range ops.NumMethod() {
		if r := call(ops.Method(i)); r != nil {
			t.Errorf("%s ran on the caller: %v", ops.Method(i).Name, r)
		}
	}
	if n := queued(b); n != ops.NumMethod() {
		t.Errorf("%d items queued for %d ops", n, ops.NumMethod())
	}
	release()
	var oe *OpError
	if err := b.Sync(); !errors.As(err, &oe) || oe.Op != ops.Method(0).Name || oe.Skipped != ops.NumMethod()-1 {
		t.Fatalf("Sync after all ops = %v; want %s's failure with the other %d ops skipped", err, ops.Method(0).Name, ops.NumMethod()-1)
	}
	for i := range ops.NumMethod() {
		m := ops.Method(i)
		call(m)
		if err := b.Sync(); !errors.As(err, &oe) || oe.Op != m.Name {
			t.Errorf("%s with nil tensors: Sync = %v, want its failure", m.Name, err)
		}
	}
}

// TestUploadScribblesSource: Upload's source is overwritten before the call
// returns, and the device still receives the original bytes, copied at
// call time (the copy runs later, with the stream parked).
func TestUploadScribblesSource(t *testing.T) {
	for _, tc := range []struct {
		dt   npu.DType
		data []byte
	}{
		{npu.F32, npu.EncodeFloats([]float32{1, 2, 3, 4, 5}, npu.F32)},
		{npu.I32, npu.EncodeInt32s([]int32{-1, 0, 7})},
		{npu.U8, []byte{1, 2, 3, 4, 5, 6, 7}}, // not a whole number of words
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			b := newBackend(t)
			x := npu.Must(b.Alloc(tc.dt, len(tc.data)/tc.dt.Size()))
			src, orig := tc.data, bytes.Clone(tc.data)
			release := blockStream(t, b)
			if err := b.Upload(x, src); err != nil {
				t.Fatal(err)
			}
			for i := range src {
				if src[i] != scribbleChunk[i%4] {
					t.Fatalf("source after Upload = % x, want the scribble pattern", src)
				}
			}
			release()
			if got := download(t, b, x); !bytes.Equal(got, orig) {
				t.Fatalf("device got % x, want the original % x", got, orig)
			}
		})
	}
}

// TestSeqLayoutCapturedAtCall: an op takes its SeqLayout by value, so the
// caller may rebuild the struct for the next op at once.
func TestSeqLayoutCapturedAtCall(t *testing.T) {
	b := newBackend(t)
	bl := npu.BatchLayout{QueryStart: []int{0, 2}, Pos: []int{0}, StateSlot: []int{0}, BlockSize: 4, BlockTables: [][]int32{{0}}}
	seqs, _, err := bl.Upload(b)
	if err != nil {
		t.Fatal(err)
	}
	x := upload(t, b, npu.F32, npu.EncodeFloats([]float32{1, 2, 3, 4}, npu.F32), 2, 2)
	w := upload(t, b, npu.F32, npu.EncodeFloats([]float32{1, 1, 1, 1}, npu.F32), 2, 2)
	state, out := npu.Must(b.Alloc(npu.F32, 1, 1, 2)), npu.Must(b.Alloc(npu.F32, 2, 2))
	release := blockStream(t, b)
	b.Conv1d(out, x, state, w, seqs, false)
	*seqs = npu.SeqLayout{} // the caller reuses its struct
	release()
	if got := f32s(download(t, b, out)); !reflect.DeepEqual(got, []float32{1, 2, 4, 6}) {
		t.Fatalf("Conv1d = %v, want [1 2 4 6] from the layout at call time", got)
	}
}

// TestUploadSizeMismatch: argument errors of Upload and Download are
// returned at the call and do not touch the stream's state.
func TestUploadSizeMismatch(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 2))
	src := []byte{1, 2, 3}
	if err := b.Upload(x, src); err == nil || !bytes.Equal(src, []byte{1, 2, 3}) {
		t.Errorf("Upload of 3 bytes into %v: err %v, source % x", x, err, src)
	}
	if err := b.Download(make([]byte, 3), x); err == nil {
		t.Errorf("Download of %v into 3 bytes: no error", x)
	}
}

// TestFreedTensorIsPoisoned: an op queued after Free reads the dtype's
// poison (the patterns documented in memory.go), whatever the dtype.
func TestFreedTensorIsPoisoned(t *testing.T) {
	for _, tc := range []struct {
		dt      npu.DType
		pattern []byte // one element, little-endian
	}{
		{npu.F32, []byte{0x00, 0x00, 0xc0, 0x7f}}, // NaN
		{npu.BF16, []byte{0xc0, 0x7f}},            // NaN
		{npu.F16, []byte{0x00, 0x7e}},             // NaN
		{npu.I32, []byte{0x00, 0x00, 0xc0, 0x7f}}, // 2143289344: no valid index, and not -1 ("unused")
		{npu.I8, []byte{0x80}},                    // -128: outside symmetric int8
		{npu.U8, []byte{0xff}},                    // E8M0 NaN
		{npu.F8E4M3, []byte{0x7f}},                // NaN
		{npu.I64, []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f}},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			b := newBackend(t)
			x := npu.Must(b.Alloc(tc.dt, 5))
			b.Free(x)
			got := make([]byte, x.Bytes())
			if err := b.RunOnStream(func() error { return host.Download(got, x) }); err != nil {
				t.Fatal(err)
			}
			if want := bytes.Repeat(tc.pattern, 5); !bytes.Equal(got, want) {
				t.Fatalf("freed %v reads % x, want % x", x, got, want)
			}
		})
	}
}

// TestUseAfterFree: a float op reading a freed tensor computes NaN; an op
// reading freed indices fails.
func TestUseAfterFree(t *testing.T) {
	b := newBackend(t)
	x, out := npu.Must(b.Alloc(npu.F32, 4)), npu.Must(b.Alloc(npu.F32, 4))
	b.Fill(x, 2)
	b.Free(x)
	b.Copy(out, x)
	for i, v := range f32s(download(t, b, out)) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("out[%d] = %v read from a freed tensor, want NaN", i, v)
		}
	}

	ids := upload(t, b, npu.I32, npu.EncodeInt32s([]int32{0, 1}), 2)
	table, rows := npu.Must(b.Alloc(npu.F32, 4, 3)), npu.Must(b.Alloc(npu.F32, 2, 3))
	b.Free(ids)
	b.Gather(rows, table, ids)
	var oe *OpError
	if err := b.Sync(); !errors.As(err, &oe) || oe.Op != "Gather" {
		t.Fatalf("Gather through freed indices: Sync = %v, want Gather's failure", err)
	}
}

// TestRecycling: Alloc reuses a buffer the stream has released, zeroed by
// a fill queued after the ops before the Alloc; a stale op queued before
// the Alloc still reads poison, one queued after reads the new owner's
// data.
func TestRecycling(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.I32, 4)) // recycled as F32: same byte size
	early, late := npu.Must(b.Alloc(npu.F32, 4)), npu.Must(b.Alloc(npu.F32, 4))
	b.Free(x)
	if err := b.Sync(); err != nil { // the stream has released x
		t.Fatal(err)
	}
	stale := npu.NewTensor(x.Buffer(), 0, npu.F32, 4) // a dangling view of x
	b.Copy(early, stale)
	y := npu.Must(b.Alloc(npu.F32, 4))
	if y.Buffer() != x.Buffer() {
		t.Fatalf("Alloc of %v after freeing %v did not recycle its buffer", y, x)
	}
	if other := npu.Must(b.Alloc(npu.F32, 5)); other.Buffer() == x.Buffer() {
		t.Fatalf("a buffer of %d bytes recycled for %v", x.Bytes(), other)
	}
	if got := f32s(download(t, b, y)); !reflect.DeepEqual(got, []float32{0, 0, 0, 0}) {
		t.Fatalf("recycled tensor = %v, want zeros", got)
	}
	b.Fill(y, 5)
	b.Copy(late, stale)
	for i, v := range f32s(download(t, b, early)) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("stale read queued before the recycling Alloc: [%d] = %v, want NaN", i, v)
		}
	}
	if got := f32s(download(t, b, late)); !reflect.DeepEqual(got, []float32{5, 5, 5, 5}) {
		t.Fatalf("stale read queued after the recycling Alloc = %v, want the new owner's 5s", got)
	}
}

// TestFreeDefersRelease: a buffer whose Free the stream has not reached is
// not handed out again (ops queued before the Free may still use it).
func TestFreeDefersRelease(t *testing.T) {
	b := newBackend(t)
	x, out := npu.Must(b.Alloc(npu.F32, 4)), npu.Must(b.Alloc(npu.F32, 4))
	release := blockStream(t, b)
	b.Fill(x, 2)
	b.Copy(out, x)
	b.Free(x)
	y := npu.Must(b.Alloc(npu.F32, 4))
	if y.Buffer() == x.Buffer() {
		t.Fatal("Alloc reused a buffer before the stream reached its Free")
	}
	b.Fill(y, 9)
	release()
	if got := f32s(download(t, b, out)); !reflect.DeepEqual(got, []float32{2, 2, 2, 2}) {
		t.Fatalf("op queued before the Free read %v, want 2s", got)
	}
}

// TestFreeMisuse: Free leaves memory it does not own alone and panics on
// frees that would give one buffer two owners.
func TestFreeMisuse(t *testing.T) {
	b := newBackend(t)
	data := npu.EncodeFloats([]float32{1, 2, 3}, npu.F32)
	orig := bytes.Clone(data)
	b.Free(npu.Must(b.FromHost(npu.F32, data, 3)))
	b.Free(npu.Must(cpu.New(1).Alloc(npu.F32, 3)))
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, orig) {
		t.Fatalf("Free of a FromHost tensor changed the caller's data: % x", data)
	}

	mustPanic := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
				t.Errorf("%s: panic %v, want one mentioning %q", what, r, want)
			}
		}()
		f()
	}
	x := npu.Must(b.Alloc(npu.F32, 2, 3))
	mustPanic("Free of a view", "view", func() { b.Free(x.Rows(0, 1)) })
	mustPanic("Free of a reshaped prefix", "view", func() { b.Free(x.Reshape(6).Rows(0, 5)) })
	b.Free(x)
	mustPanic("second Free", "already freed", func() { b.Free(x) })
	other := New(1)
	defer other.Close()
	mustPanic("Free on the wrong backend", "another", func() { other.Free(npu.Must(b.Alloc(npu.F32, 1))) })
}

var errSentinel = errors.New("sentinel")

// TestOpPanicBecomesStickyError: an op's panic is the failure of the next
// sync point, later ops are skipped meanwhile, and the backend works again
// afterwards.
func TestOpPanicBecomesStickyError(t *testing.T) {
	b := newBackend(t)
	y := npu.Must(b.Alloc(npu.F32, 3))
	bad := func() {
		b.MatMul(npu.Must(b.Alloc(npu.F32, 2, 4)), npu.Must(b.Alloc(npu.F32, 2, 3)), npu.Must(b.Alloc(npu.F32, 4, 5)))
	}
	check := func(what string, err error) {
		t.Helper()
		var oe *OpError
		if !errors.As(err, &oe) || oe.Op != "MatMul" || !strings.HasSuffix(strings.Split(oe.Site, ":")[0], "backend_test.go") {
			t.Fatalf("%s after a bad MatMul = %v, want MatMul's failure enqueued here", what, err)
		}
	}

	bad()
	b.Fill(y, 5) // skipped
	err := b.Sync()
	check("Sync", err)
	if oe := err.(*OpError); oe.Skipped != 1 || !strings.Contains(err.Error(), "1 later ops skipped") {
		t.Errorf("failure %v: Skipped %d, want 1", err, oe.Skipped)
	}
	if got := f32s(download(t, b, y)); !reflect.DeepEqual(got, []float32{0, 0, 0}) {
		t.Fatalf("Fill queued after the failure ran: %v", got)
	}

	bad()
	got := make([]byte, y.Bytes())
	check("Download", b.Download(got, y))
	b.Fill(y, 7)
	if got := f32s(download(t, b, y)); !reflect.DeepEqual(got, []float32{7, 7, 7}) {
		t.Fatalf("after the failure was reported: %v", got)
	}

	bad()
	ran := false
	check("RunOnStream", b.RunOnStream(func() error { ran = true; return nil }))
	if ran {
		t.Fatal("RunOnStream ran its function after a failure")
	}
	if err := b.RunOnStream(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("RunOnStream after the failure was reported: %v, ran %v", err, ran)
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("Sync after recovering: %v", err)
	}
}

// TestErrorsUnwrap: errors.Is and errors.As see through a queued op's
// failure to its panic value, and RunOnStream returns its function's error
// or panic.
func TestErrorsUnwrap(t *testing.T) {
	b := newBackend(t)
	b.op("Custom", func(*cpu.Backend) { panic(fmt.Errorf("transport: %w", errSentinel)) })
	if err := b.Sync(); !errors.Is(err, errSentinel) {
		t.Errorf("Sync = %v, want it to wrap the panic's error", err)
	}
	if err := b.RunOnStream(func() error { return fmt.Errorf("collective: %w", errSentinel) }); !errors.Is(err, errSentinel) {
		t.Errorf("RunOnStream = %v, want fn's error", err)
	}
	var oe *OpError
	if err := b.RunOnStream(func() error { panic(errSentinel) }); !errors.As(err, &oe) || oe.Op != "RunOnStream" || !errors.Is(err, errSentinel) {
		t.Errorf("RunOnStream of a panicking fn = %v", err)
	}
	if err := b.Sync(); err != nil {
		t.Errorf("RunOnStream's own failures are not sticky: Sync = %v", err)
	}
}

// TestDownloadWaits: Download returns the result of the ops enqueued
// before it. The stream is parked until Download's marker is queued, so a
// Download that did not wait would copy the zeros from before the Fill.
func TestDownloadWaits(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 1<<12))
	release := blockStream(t, b)
	b.Fill(x, 3)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for queued(b) < 2 { // the Fill and the Download
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
		release()
	}()
	for i, v := range f32s(download(t, b, x)) {
		if v != 3 {
			t.Fatalf("x[%d] = %v: Download did not wait for the Fill", i, v)
		}
	}
}

// TestRunOnStreamSeesEarlierOps: a function on the stream (hccl's TCP
// collectives) reads the results of the ops enqueued before it.
func TestRunOnStreamSeesEarlierOps(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 1<<12))
	b.Fill(x, 4)
	var got float32
	if err := b.RunOnStream(func() error { got = cpu.F32(x)[len(cpu.F32(x))-1]; return nil }); err != nil || got != 4 {
		t.Fatalf("RunOnStream read %v (err %v), want 4", got, err)
	}
}

// TestConcurrentCallers: calls from several goroutines are each ordered on
// the one stream.
func TestConcurrentCallers(t *testing.T) {
	b := newBackend(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			x := npu.Must(b.Alloc(npu.F32, 64))
			for i := range 50 {
				b.Fill(x, float32(g*1000+i))
				if i%10 == 0 {
					b.Free(npu.Must(b.Alloc(npu.F32, 64)))
				}
			}
			got := make([]byte, x.Bytes())
			if err := b.Download(got, x); err != nil {
				t.Error(err)
				return
			}
			if v := f32s(got)[63]; v != float32(g*1000+49) {
				t.Errorf("goroutine %d: last Fill gave %v", g, v)
			}
		})
	}
	wg.Wait()
}

// TestDroppedBackendsStopTheirStreams: a backend nobody references stops
// its stream goroutine (and its thread) without Close.
func TestDroppedBackendsStopTheirStreams(t *testing.T) {
	runtime.GC()
	before := runtime.NumGoroutine()
	const n = 40
	for range n {
		b := New(1)
		x := npu.Must(b.Alloc(npu.F32, 8))
		b.Fill(x, 1)
		b.Free(x)
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		g := runtime.NumGoroutine()
		if g <= before+4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after dropping %d backends, %d before", g, n, before)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the cleanups, not asserting
	}
}

// TestClose: Close reports a failure nobody collected, stops the stream,
// and later calls fail.
func TestClose(t *testing.T) {
	b := New(1)
	x := npu.Must(b.Alloc(npu.F32, 2))
	b.Copy(x, npu.Must(b.Alloc(npu.F32, 3)))
	var oe *OpError
	if err := b.Close(); !errors.As(err, &oe) || oe.Op != "Copy" {
		t.Fatalf("Close = %v, want the uncollected Copy failure", err)
	}
	select {
	case <-b.s.exited:
	default:
		t.Fatal("stream goroutine still running after Close")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := b.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close = %v", err)
	}
	if err := b.Download(make([]byte, 8), x); !errors.Is(err, ErrClosed) {
		t.Errorf("Download after Close = %v", err)
	}
	if _, err := b.Alloc(npu.F32, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v", err)
	}
	func() {
		defer func() {
			if r, _ := recover().(error); !errors.Is(r, ErrClosed) {
				t.Errorf("Fill after Close: panic %v, want ErrClosed", r)
			}
		}()
		b.Fill(x, 1)
	}()
	b.Free(x) // no stream to poison it: nothing happens
}

// TestAllocErrors: out-of-memory and bad shapes are *npu.AllocErrors naming
// what the caller asked for.
func TestAllocErrors(t *testing.T) {
	b := newBackend(t)
	var ae *npu.AllocError
	_, err := b.Alloc(npu.F32, 1<<20, 1<<20) // 4 TiB
	if !errors.As(err, &ae) || !errors.Is(err, npu.ErrOutOfMemory) || ae.Device != Name || ae.DType != npu.F32 || !reflect.DeepEqual(ae.Shape, []int{1 << 20, 1 << 20}) || ae.Bytes != 4<<40 {
		t.Errorf("4 TiB Alloc = %#v", err)
	}
	if _, err := b.Alloc(npu.F32, -1); !errors.As(err, &ae) {
		t.Errorf("Alloc of a negative dimension = %v", err)
	}
}

// TestRegistered: "cpu-async" opens through the registry, is not an
// accelerator ("auto" never picks it), keeps the CPU backend's buffers
// (hccl's TCP transport recognises them by type) and reports its threads.
func TestRegistered(t *testing.T) {
	r, ok := npu.Lookup(Name)
	if !ok || r.Accelerator {
		t.Fatalf("registration %+v, found %v", r, ok)
	}
	be, err := npu.Open(Name, npu.OpenOptions{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer be.(*Backend).Close()
	if be.Name() != Name || be.Info().Accelerator {
		t.Errorf("Name %q, Info %+v", be.Name(), be.Info())
	}
	if th := be.(interface{ Threads() int }).Threads(); th != 3 {
		t.Errorf("Threads() = %d, want 3", th)
	}
	if got, want := reflect.TypeOf(npu.Must(be.Alloc(npu.F32, 1)).Buffer()), reflect.TypeOf(npu.Must(cpu.New(1).Alloc(npu.F32, 1)).Buffer()); got != want {
		t.Errorf("buffer type %v, want the CPU backend's %v", got, want)
	}
}
