package hccltest

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Inputs are a pure function of (seed, rank, count, dtype, op), so every
// rank can compute every other rank's input, and with it the serial
// reference, without communicating: the same cases run unchanged in one
// process or in many.

// rng is splitmix64: tiny, fast and identical everywhere.
type rng struct{ s uint64 }

func newRNG(seed uint64, rank int) *rng {
	return &rng{s: seed*0x9e3779b97f4a7c15 ^ uint64(rank+1)*0xd1b54a32d192ed03}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit is uniform in [0, 1).
func (r *rng) unit() float64 { return float64(r.next()>>11) / (1 << 53) }

// intn is uniform in [lo, hi].
func (r *rng) intn(lo, hi int64) int64 { return lo + int64(r.next()%uint64(hi-lo+1)) }

// gen returns n elements of dt for rank. Values are chosen so the
// reductions stay in range (no integer wrap, no float overflow), which
// keeps the suite valid for implementations whose wrap/saturation rules
// differ (HCCL); wrap-around is tested separately for the TCP transport.
func gen(seed uint64, rank, n int, dt npu.DType, op hccl.ReduceOp) []byte {
	r := newRNG(seed, rank)
	b := make([]byte, n*dt.Size())
	for i := range n {
		switch dt {
		case npu.F32, npu.BF16, npu.F16:
			var v float64
			if op == hccl.Prod {
				v = 0.5 + r.unit()
			} else {
				v = (2*r.unit() - 1) * math.Ldexp(1, int(r.intn(-3, 3)))
			}
			putF(dt, b, i, float32(v))
		case npu.I8:
			var v int64
			switch op {
			case hccl.Sum:
				v = r.intn(-31, 31)
			case hccl.Prod:
				v = r.intn(-2, 2)
			default:
				v = r.intn(-128, 127)
			}
			b[i] = byte(int8(v))
		case npu.I32:
			var v int64
			switch op {
			case hccl.Sum:
				v = r.intn(-1_000_000, 1_000_000)
			case hccl.Prod:
				v = r.intn(-40, 40)
			default:
				v = r.intn(math.MinInt32, math.MaxInt32)
			}
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
		case npu.I64:
			var v int64
			switch op {
			case hccl.Sum:
				v = r.intn(-1_000_000_000_000, 1_000_000_000_000)
			case hccl.Prod:
				v = r.intn(-1000, 1000)
			default:
				v = int64(r.next())
			}
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
		default:
			for j := range dt.Size() {
				b[i*dt.Size()+j] = byte(r.next())
			}
		}
	}
	return b
}

func getF(dt npu.DType, b []byte, i int) float32 {
	switch dt {
	case npu.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	case npu.BF16:
		return npu.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	case npu.F16:
		return npu.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	panic(fmt.Sprintf("getF %v", dt))
}

func putF(dt npu.DType, b []byte, i int, v float32) {
	switch dt {
	case npu.F32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	case npu.BF16:
		binary.LittleEndian.PutUint16(b[2*i:], npu.F32ToBF16(v))
	case npu.F16:
		binary.LittleEndian.PutUint16(b[2*i:], npu.F32ToF16(v))
	default:
		panic(fmt.Sprintf("putF %v", dt))
	}
}

// Reference reduces ins (one per rank, in rank order) serially, element by
// element, with the semantics the hccl package documents: fp32
// accumulation in rank order, one rounding for BF16/F16, wrapping integer
// arithmetic, NaN-propagating max/min. It is written independently of the
// transport's blocked kernels so that each checks the other.
func Reference(dt npu.DType, op hccl.ReduceOp, ins [][]byte) []byte {
	out := make([]byte, len(ins[0]))
	n := len(ins[0]) / dt.Size()
	for i := range n {
		switch dt {
		case npu.F32, npu.BF16, npu.F16:
			acc := getF(dt, ins[0], i)
			for _, in := range ins[1:] {
				x := getF(dt, in, i)
				switch op {
				case hccl.Sum:
					acc += x
				case hccl.Prod:
					acc *= x
				case hccl.Max:
					acc = max(acc, x)
				case hccl.Min:
					acc = min(acc, x)
				}
			}
			putF(dt, out, i, acc)
		case npu.I8:
			acc := int8(ins[0][i])
			for _, in := range ins[1:] {
				acc = intOp(op, acc, int8(in[i]))
			}
			out[i] = byte(acc)
		case npu.I32:
			acc := int32(binary.LittleEndian.Uint32(ins[0][4*i:]))
			for _, in := range ins[1:] {
				acc = intOp(op, acc, int32(binary.LittleEndian.Uint32(in[4*i:])))
			}
			binary.LittleEndian.PutUint32(out[4*i:], uint32(acc))
		case npu.I64:
			acc := int64(binary.LittleEndian.Uint64(ins[0][8*i:]))
			for _, in := range ins[1:] {
				acc = intOp(op, acc, int64(binary.LittleEndian.Uint64(in[8*i:])))
			}
			binary.LittleEndian.PutUint64(out[8*i:], uint64(acc))
		default:
			panic(fmt.Sprintf("Reference: no reduction for %v", dt))
		}
	}
	return out
}

func intOp[T int8 | int32 | int64](op hccl.ReduceOp, a, b T) T {
	switch op {
	case hccl.Sum:
		return a + b
	case hccl.Prod:
		return a * b
	case hccl.Max:
		return max(a, b)
	case hccl.Min:
		return min(a, b)
	}
	panic("intOp: bad op")
}

// compare checks got against want: bit for bit when exact, else with a
// tolerance for float sums and products (reduction order may differ) and
// exactly for everything else.
func compare(dt npu.DType, op hccl.ReduceOp, got, want []byte, ins [][]byte, exact bool) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d bytes, want %d", len(got), len(want))
	}
	float := dt == npu.F32 || dt == npu.BF16 || dt == npu.F16
	if exact || !float || op == hccl.Max || op == hccl.Min {
		for i := range got {
			if got[i] != want[i] {
				e := i / max(dt.Size(), 1)
				return fmt.Errorf("element %d of %d differs: got %s, want %s", e, len(got)/max(dt.Size(), 1), show(dt, got, e), show(dt, want, e))
			}
		}
		return nil
	}
	eps := map[npu.DType]float64{npu.F32: 0x1p-23, npu.BF16: 0x1p-7, npu.F16: 0x1p-10}[dt]
	p := float64(len(ins))
	for i := range len(got) / dt.Size() {
		g, w := float64(getF(dt, got, i)), float64(getF(dt, want, i))
		var tol float64
		if op == hccl.Prod {
			tol = (p + 1) * eps * math.Abs(w)
		} else {
			for _, in := range ins {
				tol += math.Abs(float64(getF(dt, in, i)))
			}
			tol *= (p + 1) * eps
		}
		if math.Abs(g-w) > tol+1e-30 {
			return fmt.Errorf("element %d: got %g, want %g (tolerance %g)", i, g, w, tol)
		}
	}
	return nil
}

// show formats element i of b.
func show(dt npu.DType, b []byte, i int) string {
	switch dt {
	case npu.F32, npu.BF16, npu.F16:
		return fmt.Sprintf("%g (0x%x)", getF(dt, b, i), b[i*dt.Size():(i+1)*dt.Size()])
	case npu.I8:
		return fmt.Sprint(int8(b[i]))
	case npu.I32:
		return fmt.Sprint(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case npu.I64:
		return fmt.Sprint(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return fmt.Sprintf("0x%x", b[i*dt.Size():(i+1)*dt.Size()])
}
