// Package ascend is the HCCL transport of package hccl: Huawei's collective
// library on Ascend NPUs, called through cgo with a small C shim
// (shim.c) that dlopens libhccl.so at run time and calls it through
// function pointers. The ACL runtime (libascendcl.so: streams, memory)
// comes from npu/ascend/acl, its one binding, shared with the Ascend
// backend. Nothing of CANN is needed to build:
// the few types used are declared in shim.h from the documented API. A
// binary built with this package runs on machines without CANN; asking
// for the transport there fails at start-up with the reason (Available).
//
// Linking this package registers the "hccl" transport, so hccl.Init
// accepts the root infos that NewRootInfo makes. Each rank's communicator
// is driven from one OS thread per device (ACL contexts are bound to
// threads); collectives are enqueued on a stream (Options.Stream, or the
// communicator's own) and waited for with aclrtSynchronizeStreamWithTimeout
// in 100 ms slices, so the operation timeout, Abort and Close always take
// effect. Reductions run with HCCL's deterministic mode on, so every rank
// gets the same bits; the reduction order is HCCL's, not the TCP
// transport's, so results may differ from it in the last bits. HCCL's own
// timeouts follow ours: before the process's first init the transport sets
// HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT from Options.InitTimeout and
// Timeout unless the user set them, and logs it once (env.go).
//
// Status, honestly: this code has never run on Ascend hardware or against
// a real CANN installation. It is built and vetted on every change, and its
// loader, argument passing, thread model, timeouts and error paths are
// exercised by the conformance suite against a fake CANN library compiled
// by the tests (testdata/fakecann), which implements the documented
// semantics on host memory. The suite also runs over the stand-in CANN's
// libhccl (npu/ascend/testdata/standin/hccl.c, another test double: ranks
// in separate processes, collectives on the stand-in's streams), in rank
// processes (TestStandinProcesses) and in-process with NPUSERVE_TEST_HCCL=1
// ASCEND_HOME_PATH=<stand-in> STANDIN_DEVICES=8. The same suite runs against the real library
// with NPUSERVE_TEST_HCCL=1 on a machine with NPUs; until someone does
// that, treat the binding as unproven. Known gaps: HCCL does not say which
// rank is missing when a collective times out, and an Abort cannot tell
// the peers (they fail at their own timeout).
package ascend

import "github.com/npuserve/npuserve/npu"

// DeviceBuffer is implemented by buffers in device memory: the Ascend
// backend's buffers must implement it for their tensors to be used with an
// HCCL communicator. A buffer that also has a DeviceID() int method is
// checked against the communicator's device.
type DeviceBuffer interface {
	npu.Buffer
	// DevicePointer is the device address of the buffer's first byte.
	DevicePointer() uintptr
}
