package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

var _ npu.SampleHistogrammer = (*Backend)(nil)

// SampleHistogrammer launch shapes (kernels/samplehist.cu).
const (
	sampleHistThreads = 256  // threads of a SampleHist block (HIST_THREADS)
	sampleHistChunk   = 4096 // entries of a row per SampleHist block (HIST_CHUNK): 38 blocks for 154,880
	// sampleMembersThreads is the one block per query of SampleBinMembers
	// (MEM_THREADS), walking its row in tiles of 8 entries a thread.
	sampleMembersThreads = 1024
)

// Op codes of the sampling-histogram ops' device reports (a row index out
// of range), registered in opNames by init.
const (
	opSampleHist       = 42
	opSampleBinMembers = 43
)

func init() {
	opNames[opSampleHist] = "SampleHist"
	opNames[opSampleBinMembers] = "SampleBinMembers"
}

// histQueries checks SampleHist's and SampleBinMembers' common operands and
// returns the rows R and their length V of logits, and the query count Q.
// The row indices live on the device: one outside [0, R) is reported by
// the kernel (a DeviceError at the next Sync), where the CPU backend panics.
func histQueries(op string, logits, rows, params *npu.Tensor) (R, V, Q int) {
	if logits == nil || logits.Rank() != 2 || rows == nil || params == nil {
		panic(fmt.Sprintf("cuda: %s of logits %v, rows %v, params %v", op, logits, rows, params))
	}
	wantF32(op, logits)
	if rows.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: %s rows %v: want I32", op, rows))
	}
	Q = rows.Numel()
	if params.Numel() != 2*Q || params.DType() != npu.I64 {
		panic(fmt.Sprintf("cuda: %s params %v do not hold %dx2 I64", op, params, Q))
	}
	return logits.Dim(0), logits.Dim(1), Q
}

// SampleHist writes each query's histogram of SampleBin's q sums (hist I64
// [Q, npu.SampleHistBins]). See npu.SampleHistogrammer.
//
// Blocks of (a query, a 4096-entry chunk of its row) add their entries' q
// into a shared-memory histogram and then its nonzero bins into hist,
// zeroed first on the stream: integer atomics, exact in any order. Nothing
// is read back to the host.
func (b *Backend) SampleHist(hist, logits, rows, params *npu.Tensor) {
	R, V, Q := histQueries("SampleHist", logits, rows, params)
	if hist == nil || hist.Numel() != Q*npu.SampleHistBins || hist.DType() != npu.I64 {
		panic(fmt.Sprintf("cuda: SampleHist hist %v does not hold %dx%d I64", hist, Q, npu.SampleHistBins))
	}
	if Q == 0 {
		return
	}
	ph := b.ptr(hist)
	if err := drvMemsetD8(b.ctx, ph, 0, 8*Q*npu.SampleHistBins, b.stream); err != nil {
		b.fail(fmt.Errorf("cuda: SampleHist: %w", err))
		return
	}
	// At least one chunk, so that an empty row still has its index checked.
	chunks := max(1, (V+sampleHistChunk-1)/sampleHistChunk)
	b.launchChecked("k_sample_hist", d2(Q, chunks), d1(sampleHistThreads), 0,
		ph, b.ptr(logits), b.ptr(rows), b.ptr(params), pI32(R), pI32(V), b.errWord, pI32(opSampleHist))
}

// SampleBinMembers writes each query's members of bin bins[j] in id order
// (the first C into vals F32 [Q, C] and ids I32 [Q, C]; vals may be nil)
// and its counts (I32 [Q, 2]). See npu.SampleHistogrammer.
//
// One block per query walks its row in tiles of 8192 entries; a
// block-wide scan of the warps' member ballots gives each member its
// position, so the order is the ids' whatever the timing. Entries of vals
// and ids past the member count are left as they are. Nothing is read
// back to the host.
func (b *Backend) SampleBinMembers(vals, ids, counts, logits, rows, params, bins *npu.Tensor) {
	R, V, Q := histQueries("SampleBinMembers", logits, rows, params)
	if bins == nil || bins.Numel() != Q || bins.DType() != npu.I32 || counts == nil || counts.Numel() != 2*Q || counts.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: SampleBinMembers bins %v, counts %v for %d queries: want I32 [%d], [%d, 2]", bins, counts, Q, Q, Q))
	}
	if Q == 0 {
		return
	}
	C := 0
	if vals != nil {
		C = vals.Numel() / Q
		if vals.Numel() != Q*C || ids == nil || ids.Numel() != Q*C {
			panic(fmt.Sprintf("cuda: SampleBinMembers outputs %v, %v for %d queries", vals, ids, Q))
		}
		wantF32("SampleBinMembers", vals)
		if ids.DType() != npu.I32 {
			panic(fmt.Sprintf("cuda: SampleBinMembers ids %v: want I32", ids))
		}
	}
	var pv, pi uint64
	if C > 0 {
		pv, pi = b.ptr(vals), b.ptr(ids)
	}
	b.launchChecked("k_sample_bin_members", d1(Q), d1(sampleMembersThreads), 0,
		pv, pi, b.ptr(counts), b.ptr(logits), b.ptr(rows), b.ptr(params), b.ptr(bins),
		pI32(R), pI32(V), pI32(C), b.errWord, pI32(opSampleBinMembers))
}
