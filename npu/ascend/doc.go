// Package ascend is the Ascend NPU backend, `--device ascend`: CANN's ACL
// runtime (through npu/ascend/acl, the one binding of libascendcl shared
// with hccl/ascend) and the aclnn operators (libnnopbase and the operator
// libraries: every libopapi_*.so of the CANN 8.5/9.x split, then the
// aggregate libopapi.so, in torch_npu's order), dlopened at run time
// through a cgo shim with our own declarations (shim.c), each foreign
// symbol declared once. Nothing of CANN is needed to build.
//
// Shared declarations: the ACL runtime symbols were moved out of
// hccl/ascend's shim into npu/ascend/acl, which both packages call (Go
// functions over one C function table); hccl/ascend keeps only HCCL's.
//
// One goroutine locked to an OS thread per device calls aclrtSetDevice and
// then makes every ACL and aclnn call of the device, on one stream. Each
// operator is a two-phase call: XxxGetWorkspaceSize on the device thread,
// a workspace (one buffer, grown as needed, reused in stream order), Xxx
// on the stream; the single-use executor is released by aclnn after
// phase 2 and the descriptors are destroyed once it is enqueued. Device
// memory is aclrtMalloc'd; failures are *npu.AllocError values wrapping
// npu.ErrOutOfMemory with aclrtGetMemInfo's free bytes. Preset maps
// aclrtGetSocName to the planner's atlas-800-a2 / atlas-800-a3 / 950dt.
//
// Implemented: npu.Memory, Copy, Fill, Add, Mul, Scale, MatMul, RMSNorm,
// Softmax, Sigmoid and SiLU. The other ops are in unimplementedOps, and
// Open refuses while that list is not empty (as npu/cuda does), so
// `--device ascend` never runs a partial backend; tests construct the
// backend with New.
//
// Status, honestly: this code has run only against the stand-in CANN in
// testdata/standin, a test double written by us from the public API
// documentation (ascend-api.md), which the tests compile with the system C
// compiler. It has never run against a real CANN installation or on an
// NPU. The signatures of aclnnAdd, aclnnMul, aclnnMuls,
// aclnnInplaceFillScalar and aclnnSilu are from the CANN aclnn reference
// as we recall it, not from a header read for ascend-api.md: check them
// first on a real CANN. The stand-in checks what the documentation states
// (dtypes, ND format, views inside device storage, 32-byte aligned
// tensorData, workspace size, single-use executors, a current context on
// the calling thread, the stream belonging to it); where a real operator is
// stricter or looser (mixed dtypes in aclnnAdd, fp32 aclnnMatmul with
// cubeMathType 0) only a real NPU will tell.
package ascend
