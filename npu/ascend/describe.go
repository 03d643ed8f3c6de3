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
// documented for it alone); the int8 schemes run everywhere.
func (b *Backend) SupportsQuant(s npu.QScheme) error {
	if s == npu.QMXFP8 && Preset(b.SocName()) != "950dt" {
		return fmt.Errorf("ascend: %v needs an Ascend 950 (aclnnDynamicMxQuant); this SoC is %s", s, b.SocName())
	}
	return nil
}
