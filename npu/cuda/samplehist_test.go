package cuda

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestSampleHistKernelConstants: kernels/samplehist.cu's sizes are the Go
// side's, and its polynomial constants are Go's float64 values of
// npu.SampleBin's (written in hex, so that the kernel's are these bits).
func TestSampleHistKernelConstants(t *testing.T) {
	text, defs := kernelDefines(t, "kernels/samplehist.cu")
	for name, want := range map[string]int{
		"HIST_PER_UNIT": npu.SampleBinsPerUnit, "HIST_RANGE": npu.SampleHistRange,
		"HIST_THREADS": sampleHistThreads, "HIST_CHUNK": sampleHistChunk, "MEM_THREADS": sampleMembersThreads,
	} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("samplehist.cu: %s = %d (defined %v), Go has %d", name, got, ok, want)
		}
	}
	for _, c := range []float64{-1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / npu.SampleBinsPerUnit} {
		if lit := strconv.FormatFloat(c, 'x', -1, 64); !strings.Contains(text, lit) {
			t.Errorf("samplehist.cu lacks %s (Go's float64 %v)", lit, c)
		}
	}
	if lit := strconv.FormatFloat(1<<npu.SampleQBits, 'f', 1, 64); !strings.Contains(text, lit) {
		t.Errorf("samplehist.cu lacks 2^%d = %s", npu.SampleQBits, lit)
	}
}

// The sampling-histogram ops check their arguments on the host before
// anything reaches the device (the tensors live on no backend).
func TestSampleHistArgumentChecks(t *testing.T) {
	b := &Backend{}
	f32, i32, i64, bins := npu.F32, npu.I32, npu.I64, npu.SampleHistBins
	cases := []struct {
		name, want string
		call       func()
	}{
		{"SampleHist rank", "SampleHist of logits", func() { b.SampleHist(ft(i64, 2, bins), ft(f32, 9), ft(i32, 2), ft(i64, 2, 2)) }},
		{"SampleHist nil rows", "SampleHist of logits", func() { b.SampleHist(ft(i64, 2, bins), ft(f32, 2, 9), nil, ft(i64, 2, 2)) }},
		{"SampleHist logits dtype", "want F32", func() {
			b.SampleHist(ft(i64, 2, bins), ft(npu.BF16, 2, 9), ft(i32, 2), ft(i64, 2, 2))
		}},
		{"SampleHist rows dtype", "rows", func() { b.SampleHist(ft(i64, 2, bins), ft(f32, 2, 9), ft(f32, 2), ft(i64, 2, 2)) }},
		{"SampleHist params", "do not hold 2x2 I64", func() { b.SampleHist(ft(i64, 2, bins), ft(f32, 2, 9), ft(i32, 2), ft(i64, 3, 2)) }},
		{"SampleHist params dtype", "do not hold 2x2 I64", func() { b.SampleHist(ft(i64, 2, bins), ft(f32, 2, 9), ft(i32, 2), ft(i32, 2, 2)) }},
		{"SampleHist hist", "does not hold 2x3328", func() { b.SampleHist(ft(i64, 1, bins), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2)) }},
		{"SampleHist hist dtype", "does not hold 2x3328", func() { b.SampleHist(ft(i32, 2, bins), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2)) }},
		{"SampleBinMembers bins", "SampleBinMembers bins", func() {
			b.SampleBinMembers(nil, nil, ft(i32, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 3))
		}},
		{"SampleBinMembers counts", "SampleBinMembers bins", func() {
			b.SampleBinMembers(nil, nil, ft(i32, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 2))
		}},
		{"SampleBinMembers counts dtype", "SampleBinMembers bins", func() {
			b.SampleBinMembers(nil, nil, ft(i64, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 2))
		}},
		{"SampleBinMembers ids", "SampleBinMembers outputs", func() {
			b.SampleBinMembers(ft(f32, 2, 4), nil, ft(i32, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 2))
		}},
		{"SampleBinMembers ragged", "SampleBinMembers outputs", func() {
			b.SampleBinMembers(ft(f32, 7), ft(i32, 7), ft(i32, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 2))
		}},
		{"SampleBinMembers vals dtype", "want F32", func() {
			b.SampleBinMembers(ft(i32, 2, 4), ft(i32, 2, 4), ft(i32, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 2))
		}},
		{"SampleBinMembers ids dtype", "want I32", func() {
			b.SampleBinMembers(ft(f32, 2, 4), ft(f32, 2, 4), ft(i32, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2, 2), ft(i32, 2))
		}},
		{"SampleBinMembers params", "do not hold 2x2 I64", func() {
			b.SampleBinMembers(nil, nil, ft(i32, 2, 2), ft(f32, 2, 9), ft(i32, 2), ft(i64, 2), ft(i32, 2))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantPanic(t, c.want, c.call) })
	}
	for _, c := range []struct {
		op   int32
		name string
	}{{opSampleHist, "SampleHist"}, {opSampleBinMembers, "SampleBinMembers"}} {
		if e := deviceError(devErrIndex, c.op, 9); e.Op != c.name || !strings.Contains(e.Error(), "index 9") {
			t.Errorf("op %d: %v", c.op, e)
		}
	}
}

// kernelDefines reads an embedded kernel file and its integer #defines,
// for the tests that check the kernels' sizes against the Go side's.
func kernelDefines(t *testing.T, name string) (string, map[string]int) {
	t.Helper()
	src, err := kernelFS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	defs := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) (\d+)\b`).FindAllStringSubmatch(text, -1) {
		defs[m[1]], _ = strconv.Atoi(m[2])
	}
	return text, defs
}
