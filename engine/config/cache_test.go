package config

import (
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestCacheDType: --kv-cache-dtype and the backend choose the cache dtype;
// only the implemented choices take effect, the others are reported.
func TestCacheDType(t *testing.T) {
	cases := []struct {
		flag, backend, act, want string
		withoutEffect            bool
	}{
		{"auto", "cpu", fmtF32, fmtF32, false},
		{"auto", "cpu-async", fmtF32, fmtF32, false},
		{"auto", "ascend", fmtBF16, fmtBF16, false},
		{"auto", "cuda", fmtF16, fmtF16, false},
		{"bfloat16", "cpu", fmtF32, fmtBF16, false},
		{"float16", "ascend", fmtBF16, fmtF16, false},
		{"float32", "cuda", fmtBF16, fmtF32, false},
		{"fp8", "cpu", fmtF32, fmtF32, true},
		{"int8", "ascend", fmtBF16, fmtBF16, true},
	}
	for _, tc := range cases {
		if got := CacheDType(tc.flag, tc.backend, tc.act); got != tc.want {
			t.Errorf("CacheDType(%s, %s, %s) = %s, want %s", tc.flag, tc.backend, tc.act, got, tc.want)
		}
		a := mustServe(t, "m", "--kv-cache-dtype", tc.flag)
		listed := false
		for _, x := range a.WithoutEffect(tc.backend) {
			listed = listed || x.Flag == "--kv-cache-dtype"
		}
		if listed != tc.withoutEffect {
			t.Errorf("--kv-cache-dtype %s on %s: listed without effect %v, want %v", tc.flag, tc.backend, listed, tc.withoutEffect)
		}
	}
	for name, dt := range map[string]npu.DType{fmtF32: npu.F32, fmtBF16: npu.BF16, fmtF16: npu.F16} {
		if CacheNPUDType(name) != dt {
			t.Errorf("CacheNPUDType(%s) = %v", name, CacheNPUDType(name))
		}
	}
}

// TestCacheBlocks: state slots first, then whole blocks; too small a budget
// is an error naming the sizes.
func TestCacheBlocks(t *testing.T) {
	n, err := CacheBlocks(10_000, 4, 2, 100, 1_000)
	if err != nil || n != (10_000-2_000)/400 {
		t.Fatalf("CacheBlocks = %d, %v", n, err)
	}
	if _, err := CacheBlocks(2_300, 4, 2, 100, 1_000); err == nil {
		t.Fatal("a budget without room for one block was accepted")
	}
}
