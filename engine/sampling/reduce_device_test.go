package sampling

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/cpuasync"
)

// deviceStep samples one step of a batch the way the engine will: rows
// whose sampler is reducible go through the device reduction
// (SampleReduce on the whole [R, V] logits tensor with the batch's largest
// k, a Gather of the touched ids' raw values from the flattened logits)
// and SampleReducedBatch; the others are sampled from the whole row. It
// returns the results and the bytes downloaded for the reduced rows.
func deviceStep(t *testing.T, be npu.Backend, rows [][]float32, samplers []*Sampler) (toks []Token, errs []error, crossed, reducedRows int) {
	t.Helper()
	R, V := len(rows), len(rows[0])
	flat := make([]float32, 0, R*V)
	for _, r := range rows {
		flat = append(flat, r...)
	}
	logits := npu.Must(be.Alloc(npu.F32, R, V))
	defer be.Free(logits)
	if err := be.Upload(logits, npu.EncodeFloats(flat, npu.F32)); err != nil {
		t.Fatal(err)
	}
	sr, ok := be.(npu.SampleReducer)
	if !ok {
		t.Fatalf("%s is no npu.SampleReducer", be.Name())
	}
	type plan struct {
		k       int
		touched []int32
		ok      bool
	}
	plans := make([]plan, R)
	kmax, nt := 0, 0
	var gidx []int32
	for i, s := range samplers {
		k, touched, ok := s.Reducible(V, false)
		plans[i] = plan{k, touched, ok}
		if ok {
			kmax = max(kmax, k)
			nt += len(touched)
			for _, id := range touched {
				gidx = append(gidx, int32(i*V)+id)
			}
		}
	}
	toks, errs = make([]Token, R), make([]error, R)
	var reds []Reduced
	var redS []*Sampler
	var redRow []int
	if kmax > 0 {
		vals, ids := npu.Must(be.Alloc(npu.F32, R, kmax)), npu.Must(be.Alloc(npu.I32, R, kmax))
		stats := npu.Must(be.Alloc(npu.I32, R, 2))
		defer be.Free(vals)
		defer be.Free(ids)
		defer be.Free(stats)
		sr.SampleReduce(vals, ids, stats, logits, kmax)
		var gathered []float32
		if nt > 0 {
			gi := npu.Must(be.Alloc(npu.I32, nt))
			g := npu.Must(be.Alloc(npu.F32, nt, 1))
			defer be.Free(gi)
			defer be.Free(g)
			if err := be.Upload(gi, npu.EncodeInt32s(gidx)); err != nil {
				t.Fatal(err)
			}
			be.Gather(g, logits.Reshape(R*V, 1), gi)
			gathered = npu.MustF32(be, g)
			crossed += g.Bytes()
		}
		hv, hi, hs := npu.MustF32(be, vals), npu.MustI32(be, ids), npu.MustI32(be, stats)
		crossed += vals.Bytes() + ids.Bytes() + stats.Bytes()
		off := 0
		for i, p := range plans {
			if !p.ok {
				continue
			}
			reds = append(reds, Reduced{
				Vocab: V,
				IDs:   hi[i*kmax : (i+1)*kmax], Vals: hv[i*kmax : (i+1)*kmax],
				Touched: p.touched, TouchedVals: gathered[off : off+len(p.touched)],
				NaN: int(hs[2*i]), PosInf: int(hs[2*i+1]),
			})
			off += len(p.touched)
			redS, redRow = append(redS, samplers[i]), append(redRow, i)
		}
	}
	rt, re := SampleReducedBatch(reds, redS)
	for j, i := range redRow {
		toks[i], errs[i] = rt[j], re[j]
	}
	for i, p := range plans {
		if !p.ok {
			toks[i], errs[i] = samplers[i].Sample(rows[i])
		}
	}
	return toks, errs, crossed, len(redRow)
}

// TestSampleReduceOnDevice runs batches through the CPU backends' op
// (eager and queued on the checking asynchronous stream, with one and
// three threads; the long rows take the CPU kernel's split path): every
// row's token and error equal SampleBatch's on the whole rows with twin
// samplers, steps after step, with non-reducible requests (random
// sampling, logprobs, a long prompt under the repetition penalty) mixed in.
func TestSampleReduceOnDevice(t *testing.T) {
	type dev struct {
		name string
		be   func(t *testing.T) npu.Backend
	}
	devs := []dev{
		{"cpu1", func(*testing.T) npu.Backend { return cpu.New(1) }},
		{"cpu3", func(*testing.T) npu.Backend { return cpu.New(3) }},
		{"cpu-async", func(t *testing.T) npu.Backend {
			b := cpuasync.New(2)
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return b
		}},
	}
	for _, d := range devs {
		for _, sh := range [][2]int{{6, 1003}, {2, 40001}, {1, 7}} {
			R, V := sh[0], sh[1]
			t.Run(fmt.Sprintf("%s/%dx%d", d.name, R, V), func(t *testing.T) {
				be := d.be(t)
				rng := rand.New(rand.NewPCG(uint64(R), uint64(V)))
				var full, red []*Sampler
				for i := range R {
					c := randomCase(rng, i)
					switch i % 5 {
					case 3:
						c.p.Temperature, c.p.TopK = Ptr(0.8), Ptr(20) // random, seeded
					case 4:
						c.p.Logprobs = Ptr(2)
					}
					if i == 2 {
						c.p.RepetitionPenalty = Ptr(1.1)
						for j := range MaxReducedTouched + 1 {
							c.prompt = append(c.prompt, int32(j%V))
						}
					}
					full, red = append(full, mustSampler(t, c.p, c.prompt)), append(red, mustSampler(t, c.p, c.prompt))
				}
				for step := range 6 {
					rows := make([][]float32, R)
					for i := range rows {
						_, touched, _ := red[i].Reducible(V, false)
						rows[i] = randomRow(rng, V, touched)
					}
					wt, we := SampleBatch(rows, full)
					gt, ge, _, n := deviceStep(t, be, rows, red)
					if n == 0 {
						t.Fatal("no row was reduced")
					}
					for i := range rows {
						if !sameOutcome(gt[i], ge[i], wt[i], we[i]) || !slices.Equal(red[i].Output(), full[i].Output()) {
							t.Fatalf("step %d row %d: device (%+v, %v), full (%+v, %v)", step, i, gt[i], ge[i], wt[i], we[i])
						}
					}
				}
			})
		}
	}
}

// TestSampleReduceBytes counts what crosses to the host for a decode batch
// of 8 greedy rows of a 151936-entry vocabulary (Qwen's): no processor
// (|T| = 0, k = 1) and 16 biased ids (k = 17), against the 4*V bytes of a
// whole row.
func TestSampleReduceBytes(t *testing.T) {
	const R, V = 8, 151936
	be := cpu.New(0)
	rng := rand.New(rand.NewPCG(3, 4))
	rows := make([][]float32, R)
	for i := range rows {
		rows[i] = make([]float32, V)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64() * 3)
		}
	}
	for _, nt := range []int{0, 16} {
		var full, red []*Sampler
		for range R {
			p := greedyParams()
			if nt > 0 {
				p.LogitBias = map[int32]float64{}
				for j := range nt {
					p.LogitBias[int32(rng.IntN(V))] = 100 * (1 - 2*float64(j%2))
				}
			}
			full, red = append(full, mustSampler(t, p, nil)), append(red, mustSampler(t, p, nil))
		}
		wt, we := SampleBatch(rows, full)
		gt, ge, crossed, _ := deviceStep(t, be, rows, red)
		for i := range rows {
			if !sameOutcome(gt[i], ge[i], wt[i], we[i]) {
				t.Fatalf("row %d: device (%+v, %v), full (%+v, %v)", i, gt[i], ge[i], wt[i], we[i])
			}
		}
		k := nt + 1
		want := R * (k*(4+4) + 2*4 + nt*4)
		if crossed != want {
			t.Fatalf("|T|=%d: %d bytes crossed, want R*(k*(4+4) + 8 + |T|*4) = %d", nt, crossed, want)
		}
		t.Logf("|T|=%d: %d bytes per row cross (plus %d uploaded), instead of %d (%.4f%%)",
			nt, crossed/R, 4*nt, 4*V, 100*float64(crossed)/float64(4*R*V))
	}
}

// TestSampleReduceQueued: on the checking asynchronous backend the op is
// queued (bad arguments fail on the stream under its name, not on the
// caller).
func TestSampleReduceQueued(t *testing.T) {
	b := cpuasync.New(1)
	defer b.Close()
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("SampleReduce ran on the caller: %v", r)
			}
		}()
		b.SampleReduce(nil, nil, nil, nil, 0)
	}()
	var oe *cpuasync.OpError
	if err := b.Sync(); !errors.As(err, &oe) || oe.Op != "SampleReduce" {
		t.Fatalf("Sync = %v, want SampleReduce's failure", err)
	}
}
