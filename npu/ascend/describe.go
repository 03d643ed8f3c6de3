//go:build cgo

package ascend

import (
	"fmt"
	"strings"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

var _ npu.Describer = (*Backend)(nil)

// Describe reports what ran, for `npuserve selftest`: the CANN package
// versions (aclsysGetVersionStr of "runtime" and "opbase"), the ACL API
// version, the SoC and its planner preset, the device's HBM (total and
// free, aclrtGetMemInfo) and the libraries loaded.
func (b *Backend) Describe() map[string]string {
	d := map[string]string{"soc": b.soc, "preset": Preset(b.soc), "device": fmt.Sprint(b.dev)}
	if d["preset"] == "" {
		d["preset"] = "unknown (not an A2, A3 or 950 SoC name)"
	}
	b.do(func() {
		for key, pkg := range map[string]string{"cann": "runtime", "cann_opbase": "opbase"} {
			if v, err := acl.VersionStr(pkg); err == nil && v != "" {
				d[key] = v
			} else if err != nil {
				d[key] = "unknown: " + err.Error()
			}
		}
		if ma, mi, pa, err := acl.APIVersion(); err == nil {
			d["acl_api"] = fmt.Sprintf("%d.%d.%d", ma, mi, pa)
		}
		if free, total, err := acl.MemInfo(acl.HBM); err == nil {
			d["hbm_total_bytes"], d["hbm_free_bytes"] = fmt.Sprint(total), fmt.Sprint(free)
		}
	})
	if l, err := load(); err == nil {
		d["libascendcl"], d["libnnopbase"] = l.ACL, l.NNOpBase
		d["opapi_libs"] = strings.Join(l.OpAPI, ", ")
	}
	return d
}

// SupportsQuant implements npu.QuantSupporter: W8A8_MXFP8 runs on the
// Ascend 950 only (aclnnDynamicMxQuant and the MX quant matmul are
// documented for it alone); the int8 schemes run everywhere;
// FP8_BLOCK128 runs nowhere (see quantSupport).
func (b *Backend) SupportsQuant(s npu.QScheme) error {
	return quantSupport(s, b.SocName())
}

// quantSupport says why scheme s cannot run on SoC soc (nil when it can).
// FP8_BLOCK128 is refused on every SoC: no path for 128x128 weight blocks
// with F32 scales (and 128-column activation groups) is written against
// CANN's quant matmuls, so loaders dequantise such checkpoints instead.
func quantSupport(s npu.QScheme, soc string) error {
	switch s {
	case npu.QW8A8Dynamic, npu.QW8A8:
		return nil
	case npu.QMXFP8:
		if Preset(soc) != "950dt" {
			return fmt.Errorf("ascend: %v needs an Ascend 950 (aclnnDynamicMxQuant); this SoC is %s", s, soc)
		}
		return nil
	case npu.QFP8Block:
		return fmt.Errorf("ascend: %v (128x128 F32 block scales) has no CANN path in npuserve; dequantise the weights", s)
	}
	return fmt.Errorf("ascend: unknown quantization scheme %v", s)
}
