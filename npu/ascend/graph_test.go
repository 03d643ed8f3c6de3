//go:build cgo

package ascend

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
	"github.com/npuserve/npuserve/npu/cpu"
)

// TestGraphReplay captures MatMul (BF16 weight: a cast into graph
// scratch), Add, RMSNorm (weighted, and unweighted with a width never
// seen before: a unit gamma made inside the capture) and replays it with
// inputs uploaded into the same buffers: each replay equals the eager
// run on the same inputs, bit for bit, and the CPU backend within fp32
// rounding.
func TestGraphReplay(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	r := rand.New(rand.NewPCG(3, 4))
	const M, K, N = 5, 12, 9 // N: no unit gamma of width 9 exists yet
	w := put(t, b, c, npu.BF16, randF32(r, N*K), N, K)
	g := put(t, b, c, npu.F16, randF32(r, N), N)
	x, bias := zeros(t, b, c, npu.F32, M, K), zeros(t, b, c, npu.F32, N)
	mm, sum, y1, y2 := zeros(t, b, c, npu.F32, M, N), zeros(t, b, c, npu.F32, M, N), zeros(t, b, c, npu.F32, M, N), zeros(t, b, c, npu.F32, M, N)
	step := func(be npu.Backend, p func(pair) *npu.Tensor) {
		be.MatMul(p(mm), p(x), p(w))
		be.Add(p(sum), p(mm), p(bias))
		be.RMSNorm(p(y1), p(sum), p(g), 1e-6)
		be.RMSNorm(p(y2), p(sum), nil, 1e-5)
	}
	onA := func(q pair) *npu.Tensor { return q.a }
	onC := func(q pair) *npu.Tensor { return q.c }

	if err := b.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	step(b, onA)
	gr, err := b.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := gr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if gr.Bytes() <= 0 {
		t.Errorf("Bytes = %d, want the graph's scratch (cast weight, rstd, unit gamma)", gr.Bytes())
	}
	for i, v := range download(t, b, y1.a) {
		if v != 0 {
			t.Fatalf("y1[%d] = %v after the capture alone: captured ops ran", i, v)
		}
	}
	for rep := range 3 {
		xs, bs := randF32(r, M*K), randF32(r, N)
		for _, be := range []npu.Backend{b, c} {
			p := onA
			if be == npu.Backend(c) {
				p = onC
			}
			if err := be.Upload(p(x), npu.EncodeFloats(xs, npu.F32)); err != nil {
				t.Fatal(err)
			}
			if err := be.Upload(p(bias), npu.EncodeFloats(bs, npu.F32)); err != nil {
				t.Fatal(err)
			}
		}
		if err := gr.Launch(); err != nil {
			t.Fatal(err)
		}
		step(c, onC)
		got1, got2 := download(t, b, y1.a), download(t, b, y2.a)
		step(b, onA) // eager, same inputs and outputs
		eager1, eager2 := download(t, b, y1.a), download(t, b, y2.a)
		want1, want2 := download(t, c, y1.c), download(t, c, y2.c)
		for i := range want1 {
			if got1[i] != eager1[i] || got2[i] != eager2[i] {
				t.Fatalf("replay %d element %d: graph (%v, %v), eager (%v, %v)", rep, i, got1[i], got2[i], eager1[i], eager2[i])
			}
			for _, d := range [][2]float32{{got1[i], want1[i]}, {got2[i], want2[i]}} {
				if math.Abs(float64(d[0]-d[1])) > 1e-5*math.Max(1, math.Abs(float64(d[1]))) {
					t.Fatalf("replay %d element %d: ascend %v, cpu %v", rep, i, d[0], d[1])
				}
			}
		}
	}
	// The unit gamma made inside the capture belongs to the graph: eager
	// RMSNorm of that width makes and fills its own.
	out := zeros(t, b, c, npu.F32, M, N)
	b.RMSNorm(out.a, sum.a, nil, 1e-5)
	c.RMSNorm(out.c, sum.c, nil, 1e-5)
	got, want := download(t, b, out.a), download(t, c, out.c)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("eager unweighted RMSNorm after the capture, element %d: ascend %v, cpu %v", i, got[i], want[i])
		}
	}
}

// TestGraphRefusals: what cannot be captured fails the capture with
// ErrCapturing, and the backend runs eagerly afterwards.
func TestGraphRefusals(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 4))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Alloc", func() error { _, err := b.Alloc(npu.F32, 4); return err }},
		{"FromHost", func() error { _, err := b.FromHost(npu.F32, make([]byte, 16), 4); return err }},
		{"Upload", func() error { return b.Upload(x, make([]byte, 16)) }},
		{"Download", func() error { return b.Download(make([]byte, 16), x) }},
		{"Sync", b.Sync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := b.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			b.Fill(x, 1)
			if err := tc.call(); !errors.Is(err, npu.ErrCapturing) {
				t.Errorf("%s during capture: %v, want ErrCapturing", tc.name, err)
			}
			if gr, err := b.EndCapture(); err == nil || !errors.Is(err, npu.ErrCapturing) {
				t.Errorf("EndCapture = %v, %v; want the refusal", gr, err)
				if gr != nil {
					gr.Close()
				}
			}
			b.Fill(x, 2)
			if v := download(t, b, x); v[0] != 2 {
				t.Fatalf("after a failed capture: %v", v)
			}
		})
	}
	t.Run("nesting, Launch and Free", func(t *testing.T) {
		if err := b.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		b.Fill(x, 3)
		gr, err := b.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		defer gr.Close()
		if err := b.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		if err := b.BeginCapture(); err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("nested BeginCapture: %v", err)
		}
		if err := gr.Launch(); !errors.Is(err, npu.ErrCapturing) {
			t.Errorf("Graph.Launch during a capture: %v, want ErrCapturing", err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Free during a capture did not panic")
				}
			}()
			b.Free(x)
		}()
		if gr2, err := b.EndCapture(); err != nil {
			t.Errorf("EndCapture of an empty capture: %v", err)
		} else {
			gr2.Close()
		}
		if _, err := b.EndCapture(); err == nil {
			t.Error("EndCapture without BeginCapture succeeded")
		}
		if err := gr.Launch(); err != nil {
			t.Fatal(err)
		}
		if v := download(t, b, x); v[0] != 3 {
			t.Fatalf("replayed Fill: %v, want 3", v)
		}
	})
}

// TestGraphStandinRules: the stand-in's capture rules (ascend-api.md §5)
// catch calls outside them, naming the rule, and a capture that broke one
// does not end in a graph.
func TestGraphStandinRules(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 8))
	// onThread runs fn on a fresh OS thread, with b's context when ctx.
	onThread := func(ctx bool, fn func() error) error {
		ch := make(chan error)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if ctx {
				if err := acl.SetCurrentContext(b.ctx); err != nil {
					ch <- err
					return
				}
			}
			ch <- fn()
		}()
		return <-ch
	}
	endRaw := func() error {
		var err error
		b.do(func() {
			var m uintptr
			m, err = acl.CaptureEnd(b.stream)
			if m != 0 {
				_ = acl.DestroyModel(m)
			}
		})
		return err
	}
	for _, tc := range []struct {
		name, rule string
		run        func() error // returns the error that must name rule
	}{
		{"sync of a capturing stream", "no-sync-in-capture", func() error {
			var err error
			b.do(func() {
				if err = acl.CaptureBegin(b.stream, acl.CaptureModeRelaxed); err == nil {
					err = acl.SynchronizeStream(b.stream)
				}
			})
			var st int
			var ierr error
			b.do(func() { st, _, ierr = acl.CaptureInfo(b.stream) })
			if ierr != nil || st != acl.CaptureStatusInvalidated {
				t.Errorf("capture status after the refused sync: %d, %v; want invalidated", st, ierr)
			}
			if eerr := endRaw(); eerr == nil || !strings.Contains(eerr.Error(), "rule capture-invalidated") {
				t.Errorf("CaptureEnd of the invalidated capture: %v", eerr)
			}
			return err
		}},
		{"capture on a thread without the context", "context-on-thread", func() error {
			return onThread(false, func() error { return acl.CaptureBegin(b.stream, acl.CaptureModeThreadLocal) })
		}},
		{"capture ended on another thread", "capture-same-thread", func() error {
			var err error
			b.do(func() { err = acl.CaptureBegin(b.stream, acl.CaptureModeThreadLocal) })
			if err != nil {
				return err
			}
			err = onThread(true, func() error { _, err := acl.CaptureEnd(b.stream); return err })
			if eerr := endRaw(); eerr != nil {
				t.Errorf("CaptureEnd on the capturing thread: %v", eerr)
			}
			return err
		}},
		{"sync memcpy while capturing thread-local", "capture-mode-unsafe-call", func() error {
			var err error
			b.do(func() {
				if err = acl.CaptureBegin(b.stream, acl.CaptureModeThreadLocal); err == nil {
					err = acl.Memset(b.dbuf(x).ptr, 32, 0, 32)
				}
			})
			// Another thread may make the call in THREAD_LOCAL mode.
			if oerr := onThread(true, func() error { return acl.Memset(b.dbuf(x).ptr, 32, 0, 32) }); oerr != nil {
				t.Errorf("aclrtMemset on another thread during a THREAD_LOCAL capture: %v", oerr)
			}
			if eerr := endRaw(); eerr == nil {
				t.Error("CaptureEnd after a refused aclrtMemset succeeded")
			}
			return err
		}},
		{"single-use executor replayed twice", "graph-executor-repeatable", func() error {
			if err := b.BeginCapture(); err != nil {
				return err
			}
			b.cap.singleUse = true
			b.Fill(x, 5)
			gr, err := b.EndCapture()
			if err != nil {
				return err
			}
			defer gr.Close()
			for i := range 2 {
				if err := gr.Launch(); err != nil {
					return err
				}
				if err := b.Sync(); err != nil {
					if i == 0 {
						t.Errorf("first replay: %v", err)
					}
					return err
				}
			}
			return nil
		}},
		{"destroy with a replay queued", "destroy-after-replays", func() error {
			if err := b.BeginCapture(); err != nil {
				return err
			}
			b.Fill(x, 6)
			gr, err := b.EndCapture()
			if err != nil {
				return err
			}
			defer gr.Close()
			if err := gr.Launch(); err != nil {
				return err
			}
			b.do(func() { err = acl.DestroyModel(gr.(*graph).model) })
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), "rule "+tc.rule) {
				t.Fatalf("got %v, want the stand-in's rule %q", err, tc.rule)
			}
			if err := b.Sync(); err != nil {
				t.Fatalf("Sync afterwards: %v", err)
			}
		})
	}
	// RELAXED allows the synchronous memory calls on the capturing thread.
	var err error
	b.do(func() {
		if err = acl.CaptureBegin(b.stream, acl.CaptureModeRelaxed); err == nil {
			err = acl.Memset(b.dbuf(x).ptr, 32, 0, 32)
		}
	})
	if eerr := endRaw(); err != nil || eerr != nil {
		t.Errorf("aclrtMemset in a RELAXED capture: %v; end: %v", err, eerr)
	}
}

// TestGraphReplayQuantized captures a W8A8_DYNAMIC MatMulQ (the quantized
// operators' own launch path) and replays it with new inputs: each replay
// equals the eager run bit for bit. The stand-in runs an executor once
// unless it was made repeatable, so a quantized operator the capture did
// not keep fails its second replay.
func TestGraphReplayQuantized(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	const M, N, K = 3, 40, 64
	wv := make([]byte, N*K)
	for i := range wv {
		wv[i] = byte(int8(r.IntN(255) - 127))
	}
	w := &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: npu.Must(b.FromHost(npu.I8, wv, N, K)),
		Scale: npu.Must(b.FromHost(npu.F32, npu.EncodeFloats(randF32(r, N), npu.F32), N))}
	b.PrepareQuant(w)
	x := npu.Must(b.Alloc(npu.F32, M, K))
	out := npu.Must(b.Alloc(npu.F32, M, N))
	if err := b.Upload(x, npu.EncodeFloats(randF32(r, M*K), npu.F32)); err != nil {
		t.Fatal(err)
	}
	b.MatMulQ(out, x, w) // the first eager run allocates what it keeps
	if err := b.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	b.MatMulQ(out, x, w)
	gr, err := b.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := gr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	for rep := range 3 {
		if err := b.Upload(x, npu.EncodeFloats(randF32(r, M*K), npu.F32)); err != nil {
			t.Fatal(err)
		}
		if err := gr.Launch(); err != nil {
			t.Fatal(err)
		}
		got := download(t, b, out)
		b.MatMulQ(out, x, w)
		eager := download(t, b, out)
		for i := range eager {
			if got[i] != eager[i] {
				t.Fatalf("replay %d element %d: graph %v, eager %v", rep, i, got[i], eager[i])
			}
		}
	}
}
