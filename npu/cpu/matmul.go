package cpu

import (
	"os"
	"sync"

	"github.com/npuserve/npuserve/npu"
)

// MatMul computes out[M,N] = x[M,K] · w[N,K]^T (PyTorch Linear layout).
// x and out are F32; w is F32, BF16 or F16. Leading dimensions are
// flattened: K is w's last dimension, N = w.Numel()/K, M = x.Numel()/K.
//
// Decode (M == 1) streams w once through a matrix-vector kernel, small
// batches (M <= 24) stream it once through a 4x4 kernel that reads w in
// place, and larger M packs panels of x and w (converting w to f32) for a
// register-blocked dot-product micro-kernel. They use SIMD assembly when
// the CPU has it (AVX-512 or AVX2+FMA+F16C) unless NPUSERVE_CPU_SIMD=0
// forces the portable Go kernels.
func (be *Backend) MatMul(out, x, w *npu.Tensor) {
	M, N, K, err := npu.MatMulDims(out, x, w)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	o, xv := F32(out), F32(x)
	if M == 0 || N == 0 {
		return
	}
	if K == 0 {
		clear(o)
		return
	}
	wb := bytesOf(w)
	k := activeKernels
	if M == 1 {
		be.gemv(k, o, xv, wb, w.DType(), N, K)
		return
	}
	if M <= smallM && k.small4x4 != nil {
		be.gemmSmall(k, o, xv, wb, w.DType(), M, N, K)
		return
	}
	be.gemm(k, o, bytesOf(x), wb, w.DType(), M, N, K)
}

// matmulKernels is one implementation of the MatMul inner loops.
type matmulKernels struct {
	name string
	// mr x nr is the register tile: mr rows of x against nr rows of w.
	mr, nr int
	// vl is the number of floats per packed chunk (the SIMD width).
	vl int
	// dot computes the mr*nr dot products of packed panels
	// xp [kv][mr][vl] and wp [kv][nr][vl] into tile[i*nr+j].
	dot func(kv int, xp, wp, tile []float32)
	// pack converts n chunks of vl elements of src (dtype dt) into dst,
	// chunk q going to dst[q*stride:q*stride+vl].
	pack func(dst []float32, stride int, src []byte, dt npu.DType, n int)
	// gemv4 computes the dot products of x (k elements, k a multiple of vl)
	// with 4 rows of w (dtype dt, rows ldw elements apart) into out.
	gemv4 func(x []float32, w []byte, dt npu.DType, ldw, k int, out *[4]float32)
	// small4x4, when set, computes the 16 dot products of 4 rows of x
	// (ldx floats apart) with 4 rows of w (dtype dt, ldw elements apart)
	// over k elements (a multiple of vl) into out[4r+j], reading w in
	// place: the product for small M, where w comes from memory once.
	small4x4 func(x []float32, ldx int, w []byte, dt npu.DType, ldw, k int, out *[16]float32)
}

// fmaPeakLoop is a register-only FMA loop for measuring the machine's
// peak: run does iters iterations and returns the flops done.
type fmaPeakLoop struct {
	name string
	run  func(iters int) int64
}

// activeKernels is the MatMul implementation in use (portable or SIMD).
var activeKernels = selectKernels(os.Getenv("NPUSERVE_CPU_SIMD"))

// selectKernels picks the MatMul kernels for the NPUSERVE_CPU_SIMD setting
// env: "0" (or "off", "false", "go") forces the portable Go kernels, the
// name of a kernel set ("avx2", "avx512") selects it when the CPU supports
// it, and anything else selects the best the CPU supports.
func selectKernels(env string) *matmulKernels {
	switch env {
	case "0", "off", "false", "go":
		return &goKernels
	}
	ks := supportedSIMDKernels()
	for _, k := range ks {
		if k.name == env {
			return k
		}
	}
	if len(ks) > 0 {
		return ks[len(ks)-1]
	}
	return &goKernels
}

// MatMulKernel names the MatMul implementation in use ("go", "avx2",
// "avx512"), for logs.
func MatMulKernel() string { return activeKernels.name }

// Blocking parameters: kc floats of K per packed block (the w panel of
// nr*kc floats stays in L1), mc rows of x per block (mc*kc floats in L2).
const (
	gemmKC = 1024
	gemmMC = 128
)

// f32Pool recycles packing buffers.
var f32Pool sync.Pool

func getF32(n int) []float32 {
	if p, ok := f32Pool.Get().(*[]float32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]float32, n, n+n/4)
}

func putF32(s []float32) {
	f32Pool.Put(&s)
}

// packPanel packs rows [r0, r0+rows) (of `total` rows, each ld elements
// apart in src with dtype dt) over columns [k0, k0+kc) into dst laid out as
// [kv][pr][vl] with kv = ceil(kc/vl); missing rows and columns are zero.
func (k *matmulKernels) packPanel(dst []float32, pr int, src []byte, dt npu.DType, ld, total, r0, rows, k0, kc int) {
	vl := k.vl
	kv := (kc + vl - 1) / vl
	full := kc / vl
	sz := dt.Size()
	stride := pr * vl
	for r := 0; r < pr; r++ {
		base := dst[r*vl:]
		if r >= rows || r0+r >= total {
			for q := 0; q < kv; q++ {
				clear(base[q*stride : q*stride+vl])
			}
			continue
		}
		off := ((r0+r)*ld + k0) * sz
		if full > 0 {
			k.pack(base, stride, src[off:off+full*vl*sz], dt, full)
		}
		if full < kv {
			tail := base[full*stride : full*stride+vl]
			n := kc - full*vl
			toF32(tail[:n], src[off+full*vl*sz:off+kc*sz], dt)
			clear(tail[n:])
		}
	}
}

// gemm is the blocked matrix multiply for M > smallM (or M > 1 when the
// kernels have no small-M kernel).
func (be *Backend) gemm(k *matmulKernels, o []float32, xbytes, wb []byte, wdt npu.DType, M, N, K int) {
	mr, nr, vl := k.mr, k.nr, k.vl
	nkb := (K + gemmKC - 1) / gemmKC
	kc := (K + nkb - 1) / nkb
	kc = (kc + vl - 1) / vl * vl
	kvMax := kc / vl
	mPanels := (M + mr - 1) / mr
	nPanels := (N + nr - 1) / nr
	mcPanels := max(1, gemmMC/mr)
	xpack := getF32(min(mPanels, mcPanels) * mr * kc)
	defer putF32(xpack)

	// Split the N panels over threads when there are enough of them, else
	// split the M panels of each block.
	threads := be.threads
	splitN := nPanels >= 2*threads || mPanels < 2*threads
	for k0 := 0; k0 < K; k0 += kc {
		kcb := min(kc, K-k0)
		kv := (kcb + vl - 1) / vl
		accumulate := k0 > 0
		for mp0 := 0; mp0 < mPanels; mp0 += mcPanels {
			mp1 := min(mp0+mcPanels, mPanels)
			// Pack this block of x, in parallel over its panels.
			be.parallelFor(mp1-mp0, 4, func(lo, hi int) {
				for p := lo; p < hi; p++ {
					k.packPanel(xpack[p*mr*kv*vl:], mr, xbytes, npu.F32, K, M, (mp0+p)*mr, mr, k0, kcb)
				}
			})
			task := func(np0, np1, mq0, mq1 int) {
				wpack := getF32(nr * kvMax * vl)
				var tile [64]float32
				var pf panelPrefetch
				for np := np0; np < np1; np++ {
					n0 := np * nr
					k.packPanel(wpack, nr, wb, wdt, K, N, n0, nr, k0, kcb)
					nv := min(nr, N-n0)
					// While computing this panel, pull the next one's
					// rows into cache, a slice before each m panel.
					if np+1 < np1 {
						pf.start(wb, wdt, K, N, n0+nr, nr, k0, kcb, mq1-mq0)
					}
					for mp := mq0; mp < mq1; mp++ {
						pf.step()
						k.dot(kv, xpack[(mp-mp0)*mr*kv*vl:], wpack, tile[:mr*nr])
						m0 := mp * mr
						mv := min(mr, M-m0)
						for i := 0; i < mv; i++ {
							row := o[(m0+i)*N+n0 : (m0+i)*N+n0+nv]
							t := tile[i*nr : i*nr+nv]
							if accumulate {
								for j, v := range t {
									row[j] += v
								}
							} else {
								copy(row, t)
							}
						}
					}
					pf.finish()
				}
				putF32(wpack)
			}
			if splitN {
				chunk := max(1, min(8, nPanels/(8*threads)))
				be.parallelChunks(nPanels, chunk, func(lo, hi int) { task(lo, hi, mp0, mp1) })
			} else {
				be.parallelFor(mp1-mp0, 1, func(lo, hi int) { task(0, nPanels, mp0+lo, mp0+hi) })
			}
		}
	}
}

// panelPrefetch issues cache prefetches for the rows of the next w panel
// in slices, so that loading it from memory overlaps the current panel's
// arithmetic.
type panelPrefetch struct {
	w         []byte
	row       int // next row to prefetch (index into rows of w)
	rows      int // rows left
	ld, off   int // row pitch and first byte within a row, in bytes
	lines     int // cache lines per row
	line, per int // next line within the current row; lines per step
}

// start arms the prefetcher for rows [r0, r0+rows) of w (dtype dt, ld
// elements per row, total rows) over columns [k0, k0+kc), spread over
// steps calls of step.
func (p *panelPrefetch) start(w []byte, dt npu.DType, ld, total, r0, rows, k0, kc, steps int) {
	sz := dt.Size()
	p.w, p.row, p.rows = w, r0, min(rows, total-r0)
	p.ld, p.off = ld*sz, k0*sz
	p.lines = (kc*sz + 63) / 64
	p.line = 0
	steps = max(1, steps)
	p.per = (p.rows*p.lines + steps - 1) / steps
}

// step prefetches the next slice of lines.
func (p *panelPrefetch) step() {
	n := p.per
	for n > 0 && p.rows > 0 {
		c := min(n, p.lines-p.line)
		off := p.row*p.ld + p.off + p.line*64
		if off < len(p.w) {
			prefetchLines(&p.w[off], min(c, (len(p.w)-off+63)/64))
		}
		n -= c
		p.line += c
		if p.line == p.lines {
			p.line = 0
			p.row++
			p.rows--
		}
	}
}

// finish prefetches whatever is left and disarms the prefetcher.
func (p *panelPrefetch) finish() {
	p.per = p.rows * p.lines
	p.step()
	p.rows = 0
}

// smallM is the largest M that takes the small-M path when the kernels
// have one.
const smallM = 24

// gemmSmall is the product for 2 <= M <= smallM: groups of 4 rows of w are
// read in place (from memory once) and multiplied with every group of 4
// rows of x (zero-padded to a multiple of 4) while they are in cache.
func (be *Backend) gemmSmall(k *matmulKernels, o, xv []float32, wb []byte, wdt npu.DType, M, N, K int) {
	sz := wdt.Size()
	kmain := K / k.vl * k.vl
	x := xv
	if M%4 != 0 {
		x = getF32((M + 3) / 4 * 4 * K)
		defer putF32(x)
		copy(x, xv[:M*K])
		clear(x[M*K:])
	}
	grain := max(1, (1<<16)/max(1, K)/4)
	be.parallelChunks((N+3)/4, grain, func(lo, hi int) {
		var tile [16]float32
		n0, n1 := lo*4, min(hi*4, N)
		n := n0
		if kmain > 0 {
			for ; n+4 <= n1; n += 4 {
				w := wb[n*K*sz:]
				for m0 := 0; m0 < M; m0 += 4 {
					k.small4x4(x[m0*K:], K, w, wdt, K, kmain, &tile)
					for r := 0; r < min(4, M-m0); r++ {
						xr := x[(m0+r)*K : (m0+r+1)*K]
						for j := 0; j < 4; j++ {
							s := tile[r*4+j]
							if kmain < K {
								s += dotTail(xr[kmain:], wb[((n+j)*K+kmain)*sz:(n+j+1)*K*sz], wdt)
							}
							o[(m0+r)*N+n+j] = s
						}
					}
				}
			}
		}
		var buf []float32
		for ; n < n1; n++ {
			if buf == nil && wdt != npu.F32 {
				buf = make([]float32, K)
			}
			row := rowBytesF32(wb[n*K*sz:(n+1)*K*sz], wdt, buf)
			for r := 0; r < M; r++ {
				o[r*N+n] = dotGo(x[r*K:(r+1)*K], row)
			}
		}
	})
}

// gemv is the matrix-vector product for M == 1: w is streamed once, split
// over threads by rows.
func (be *Backend) gemv(k *matmulKernels, o, xv []float32, wb []byte, wdt npu.DType, N, K int) {
	sz := wdt.Size()
	kmain := K / k.vl * k.vl
	grain := max(4, (1<<16)/max(1, K))
	grain = (grain + 3) / 4 * 4
	be.parallelChunks((N+3)/4, (grain+3)/4, func(lo, hi int) {
		var buf []float32
		var part [4]float32
		n0, n1 := lo*4, min(hi*4, N)
		n := n0
		if kmain > 0 && k.gemv4 != nil {
			for ; n+4 <= n1; n += 4 {
				k.gemv4(xv, wb[n*K*sz:], wdt, K, kmain, &part)
				for r := 0; r < 4; r++ {
					s := part[r]
					if kmain < K {
						s += dotTail(xv[kmain:K], wb[((n+r)*K+kmain)*sz:(n+r+1)*K*sz], wdt)
					}
					o[n+r] = s
				}
			}
		}
		for ; n < n1; n++ {
			if buf == nil && wdt != npu.F32 {
				buf = make([]float32, K)
			}
			row := rowBytesF32(wb[n*K*sz:(n+1)*K*sz], wdt, buf)
			o[n] = dotGo(xv[:K], row)
		}
	})
}

// rowBytesF32 returns the elements of b (dtype dt) as float32, aliasing b
// when dt is F32, else converting into buf.
func rowBytesF32(b []byte, dt npu.DType, buf []float32) []float32 {
	if dt == npu.F32 {
		return f32s(b)
	}
	n := len(b) / dt.Size()
	toF32(buf[:n], b, dt)
	return buf[:n]
}

// dotTail is the dot product of x with the row w (dtype dt) for short tails.
func dotTail(x []float32, w []byte, dt npu.DType) float32 {
	var buf [64]float32
	var s float32
	for len(x) > 0 {
		n := min(len(x), len(buf))
		row := rowBytesF32(w[:n*dt.Size()], dt, buf[:])
		s += dotGo(x[:n], row)
		x, w = x[n:], w[n*dt.Size():]
	}
	return s
}

// dotGo is a portable dot product with four partial sums.
func dotGo(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// goKernels is the portable implementation.
var goKernels = matmulKernels{
	name: "go", mr: 4, nr: 4, vl: 8,
	dot:   dotGo4x4,
	pack:  packGo,
	gemv4: gemv4Go,
}

// packGo converts n chunks of 8 elements into dst at the given stride.
func packGo(dst []float32, stride int, src []byte, dt npu.DType, n int) {
	sz := dt.Size()
	for q := 0; q < n; q++ {
		toF32(dst[q*stride:q*stride+8], src[q*8*sz:(q+1)*8*sz], dt)
	}
}

// gemv4Go computes four dot products of x with rows of w.
func gemv4Go(x []float32, w []byte, dt npu.DType, ldw, k int, out *[4]float32) {
	sz := dt.Size()
	var buf [4][256]float32
	var s [4]float32
	for k0 := 0; k0 < k; k0 += 256 {
		n := min(256, k-k0)
		for r := 0; r < 4; r++ {
			off := (r*ldw + k0) * sz
			row := rowBytesF32(w[off:off+n*sz], dt, buf[r][:])
			s[r] += dotGo(x[k0:k0+n], row)
		}
	}
	*out = s
}

// dotGo4x4 is the portable 4x4 micro-kernel over [kv][4][8] panels.
func dotGo4x4(kv int, xp, wp, tile []float32) {
	var c [4][4]float32
	xp, wp = xp[:kv*32], wp[:kv*32]
	for q := 0; q < kv; q++ {
		xq, wq := xp[q*32:q*32+32], wp[q*32:q*32+32]
		for i := 0; i < 4; i++ {
			xi := xq[i*8 : i*8+8]
			var a0, a1, a2, a3 float32
			for l, xv := range xi {
				a0 += xv * wq[l]
				a1 += xv * wq[8+l]
				a2 += xv * wq[16+l]
				a3 += xv * wq[24+l]
			}
			c[i][0] += a0
			c[i][1] += a1
			c[i][2] += a2
			c[i][3] += a3
		}
	}
	for i := 0; i < 4; i++ {
		copy(tile[i*4:i*4+4], c[i][:])
	}
}
