package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// elemGrain is the smallest number of elements worth a goroutine in the
// elementwise ops.
const elemGrain = 1 << 14

// binaryOperands validates out = a op b with Add's broadcasting and returns
// the F32 views plus b widened to F32 (b may be F32, BF16 or F16).
func binaryOperands(op string, out, a, b *npu.Tensor) (o, av, bv []float32) {
	if out.Numel() != a.Numel() {
		panic(fmt.Sprintf("cpu: %s out %v does not match a %v", op, out, a))
	}
	n := a.Numel()
	if b.Numel() != n && (a.Rank() == 0 || b.Numel() != a.Dim(-1)) {
		panic(fmt.Sprintf("cpu: %s b %v neither matches a %v nor its last dimension", op, b, a))
	}
	o, av = F32(out), F32(a)
	if b.DType() == npu.F32 {
		bv = F32(b)
	} else {
		bv = weightF32(b)
	}
	return o, av, bv
}

// Add computes out = a + b; b has a's shape or is one row broadcast over
// a's rows. out may alias a.
func (be *Backend) Add(out, a, b *npu.Tensor) {
	o, av, bv := binaryOperands("Add", out, a, b)
	if len(bv) == len(av) {
		be.parallelFor(len(av), elemGrain, func(lo, hi int) {
			oo, aa, bb := o[lo:hi], av[lo:hi], bv[lo:hi]
			for i := range oo {
				oo[i] = aa[i] + bb[i]
			}
		})
		return
	}
	d := len(bv)
	be.parallelFor(len(av)/d, max(1, elemGrain/d), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			oo, aa := o[r*d:(r+1)*d], av[r*d:(r+1)*d]
			for i := range oo {
				oo[i] = aa[i] + bv[i]
			}
		}
	})
}

// Mul computes out = a * b with Add's broadcasting. out may alias a.
func (be *Backend) Mul(out, a, b *npu.Tensor) {
	o, av, bv := binaryOperands("Mul", out, a, b)
	if len(bv) == len(av) {
		be.parallelFor(len(av), elemGrain, func(lo, hi int) {
			oo, aa, bb := o[lo:hi], av[lo:hi], bv[lo:hi]
			for i := range oo {
				oo[i] = aa[i] * bb[i]
			}
		})
		return
	}
	d := len(bv)
	be.parallelFor(len(av)/d, max(1, elemGrain/d), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			oo, aa := o[r*d:(r+1)*d], av[r*d:(r+1)*d]
			for i := range oo {
				oo[i] = aa[i] * bv[i]
			}
		}
	})
}

// unaryOperands validates an elementwise out = f(x).
func unaryOperands(op string, out, x *npu.Tensor) (o, xv []float32) {
	if out.Numel() != x.Numel() {
		panic(fmt.Sprintf("cpu: %s out %v does not match x %v", op, out, x))
	}
	return F32(out), F32(x)
}

// Scale computes out = s * x. out may alias x.
func (be *Backend) Scale(out, x *npu.Tensor, s float32) {
	o, xv := unaryOperands("Scale", out, x)
	be.parallelFor(len(xv), elemGrain, func(lo, hi int) {
		oo, xx := o[lo:hi], xv[lo:hi]
		for i := range oo {
			oo[i] = s * xx[i]
		}
	})
}

// sigmoid32 is 1/(1+exp(-x)) in float32, through exp32: within 4 ulp of
// the correctly rounded result (see TestSigmoid32Accuracy).
func sigmoid32(x float32) float32 {
	if x < 0 { // e/(1+e) keeps tiny (subnormal) results that 1/(1+exp(-x)) would flush
		e := exp32(x)
		return e / (1 + e)
	}
	return 1 / (1 + exp32(-x))
}

// exp32 constants: Cephes expf (range reduction by ln 2 split into a
// short high part and a correction, degree-5 minimax polynomial).
const (
	exp32Log2e = 1.44269504088896341
	exp32C1    = 0.693359375
	exp32C2    = -2.12194440e-4
	exp32Max   = 88.72283905206835 // largest x with a finite exp(x) (ln(MaxFloat32) rounded up)
	exp32Min   = -103.97208405     // below this exp(x) rounds to 0
	exp32Round = 12582912          // 1.5·2^23: adding it rounds a float32 to an integer
)

// expPoly is e^r for |r| ≤ ln2/2: Cephes expf's polynomial (relative
// error about 1e-7 in float32).
func expPoly(r float32) float32 {
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*(r*r) + r + 1
	return y
}

// exp32 is e^x in float32 arithmetic: within 2 ulp of the correctly
// rounded float32 result for normal results, within 1 ulp of the subnormal
// spacing for subnormal ones (TestExp32Accuracy checks both against
// math.Exp over a dense sweep); exp32(+Inf) = +Inf, exp32(-Inf) = 0,
// exp32(NaN) = NaN, and x beyond exp32Max overflows to +Inf.
func exp32(x float32) float32 {
	switch {
	case !(x <= exp32Max): // also NaN
		if x != x {
			return x
		}
		return float32(math.Inf(1))
	case x < exp32Min:
		return 0
	}
	// n = round(x/ln2), r = x - n·ln2 in [-ln2/2, ln2/2].
	t := x*exp32Log2e + exp32Round
	n := t - exp32Round
	r := x - n*exp32C1
	r -= n * exp32C2
	y := expPoly(r)
	e := int32(n)
	if e >= -126 {
		if e > 127 { // x just below exp32Max: y < 1 keeps the result finite
			return y * 2 * math.Float32frombits(uint32(e-1+127)<<23)
		}
		return y * math.Float32frombits(uint32(e+127)<<23)
	}
	// Subnormal result: scale in two steps so 2^e itself need not be
	// representable.
	return y * math.Float32frombits(uint32(e+64+127)<<23) * math.Float32frombits(uint32(-64+127)<<23)
}

// silu32 is x*sigmoid(x).
func silu32(x float32) float32 { return x * sigmoid32(x) }

// siluRow writes dst[i] = silu32(src[i]) for i < len(dst) (dst may alias
// src), with the AVX-512 helper kernel (bitwise equal) when it is on.
func siluRow(dst, src []float32) {
	src = src[:len(dst)]
	i := 0
	if vecAVX512() {
		i = siluSIMD(dst, src)
	}
	for ; i < len(dst); i++ {
		dst[i] = silu32(src[i])
	}
}

// Sigmoid computes out = 1/(1+exp(-x)) elementwise. out may alias x.
func (be *Backend) Sigmoid(out, x *npu.Tensor) {
	o, xv := unaryOperands("Sigmoid", out, x)
	be.parallelFor(len(xv), elemGrain/4, func(lo, hi int) {
		oo, xx := o[lo:hi], xv[lo:hi]
		for i := range oo {
			oo[i] = sigmoid32(xx[i])
		}
	})
}

// SiLU computes out = x*sigmoid(x) elementwise. out may alias x.
func (be *Backend) SiLU(out, x *npu.Tensor) {
	o, xv := unaryOperands("SiLU", out, x)
	be.parallelFor(len(xv), elemGrain/4, func(lo, hi int) {
		siluRow(o[lo:hi], xv[lo:hi])
	})
}

// SwiGLU takes gateUp [M, 2I] (gate columns first, then up) and writes
// out[M, I] = silu(min(gate, limit)) * clamp(up, -limit, limit). A limit
// that is not positive (or is +Inf) means no clamping.
func (be *Backend) SwiGLU(out, gateUp *npu.Tensor, limit float32) {
	if gateUp.Rank() == 0 || gateUp.Dim(-1)%2 != 0 {
		panic(fmt.Sprintf("cpu: SwiGLU gateUp %v needs an even last dimension", gateUp))
	}
	inter := gateUp.Dim(-1) / 2
	rows := gateUp.Numel() / max(1, gateUp.Dim(-1))
	if out.Numel() != rows*inter || (out.Rank() > 0 && out.Dim(-1) != inter) {
		panic(fmt.Sprintf("cpu: SwiGLU out %v does not match gateUp %v", out, gateUp))
	}
	o, gu := F32(out), F32(gateUp)
	clampOn := limit > 0 && !math.IsInf(float64(limit), 1)
	be.parallelFor(rows, max(1, elemGrain/4/max(1, inter)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			g := gu[r*2*inter : r*2*inter+inter]
			u := gu[r*2*inter+inter : (r+1)*2*inter]
			oo := o[r*inter : (r+1)*inter]
			if clampOn {
				for i, gv := range g {
					oo[i] = min(gv, limit)
				}
				siluRow(oo, oo)
				for i, uv := range u {
					oo[i] *= max(min(uv, limit), -limit)
				}
			} else {
				siluRow(oo, g)
				for i, uv := range u {
					oo[i] *= uv
				}
			}
		}
	})
}

// Softmax computes the softmax over the last dimension of x. out may alias
// x. A row whose maximum is -Inf (fully masked) comes out as zeros.
func (be *Backend) Softmax(out, x *npu.Tensor) {
	o, xv := unaryOperands("Softmax", out, x)
	if x.Rank() == 0 || x.Numel() == 0 {
		return
	}
	d := x.Dim(-1)
	be.parallelFor(len(xv)/d, max(1, elemGrain/4/d), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmaxRow(o[r*d:(r+1)*d], xv[r*d:(r+1)*d])
		}
	})
}

// softmaxRow writes softmax(x) to o (which may alias x).
func softmaxRow(o, x []float32) {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m || v != v {
			m = v
		}
	}
	if math.IsInf(float64(m), -1) {
		clear(o)
		return
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		o[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range o {
		o[i] *= inv
	}
}
