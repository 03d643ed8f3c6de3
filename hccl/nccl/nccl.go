package nccl

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

func init() { hccl.Register(hccl.TransportNCCL, transport{}) }

type transport struct{}

func (transport) Available() error { return Available() }

func (transport) Init(ri hccl.RootInfo, rank, size int, opts hccl.Options) (hccl.Comm, error) {
	return initComm(ri, rank, size, opts)
}

func (transport) NewRootInfo(hccl.RootOptions) (hccl.RootInfo, error) { return NewRootInfo() }

// The shim's values (shim.h; TestShimConstants checks that they agree).
const (
	uniqueIDBytes     = 128
	shimSymbolMissing = -99998
	shimNotLoaded     = -99997
)

// ncclResult_t values.
const (
	ncclSuccess            = 0
	ncclUnhandledCudaError = 1
	ncclSystemError        = 2
	ncclInternalError      = 3
	ncclInvalidArgument    = 4
	ncclInvalidUsage       = 5
	ncclRemoteError        = 6
	ncclInProgress         = 7
	ncclTimeout            = 8
)

// ncclDataType_t values.
const (
	ncclInt8     = 0
	ncclUint8    = 1
	ncclInt32    = 2
	ncclInt64    = 4
	ncclFloat16  = 6
	ncclFloat32  = 7
	ncclBfloat16 = 9
)

// reduceTypes maps the dtypes NCCL reduces to ncclDataType_t. Data
// movement (AllGather, AllToAll(V), Broadcast, Send/Recv) moves bytes
// (ncclUint8) and so takes every dtype.
var reduceTypes = map[npu.DType]int{
	npu.I8: ncclInt8, npu.U8: ncclUint8, npu.I32: ncclInt32, npu.I64: ncclInt64,
	npu.F16: ncclFloat16, npu.F32: ncclFloat32, npu.BF16: ncclBfloat16,
}

// reduceOps maps hccl reductions to ncclRedOp_t: the values happen to be
// the same (sum, prod, max, min), but say so explicitly.
var reduceOps = map[hccl.ReduceOp]int{hccl.Sum: 0, hccl.Prod: 1, hccl.Max: 2, hccl.Min: 3}

// symbolInfo is one entry of the shim's symbol table.
type symbolInfo struct {
	Name     string
	Required bool
	Resolved bool
}

// DefaultLibrary is the NCCL library loaded when NPUSERVE_NCCL_LIBRARY is
// unset, found by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache).
const DefaultLibrary = "libnccl.so.2"

// LibraryEnv names the environment variable that overrides
// DefaultLibrary with a path (e.g. PyTorch's copy under
// site-packages/nvidia/nccl/lib).
const LibraryEnv = "NPUSERVE_NCCL_LIBRARY"

// Library is the NCCL library this process loads (or would).
func Library() string {
	if p := os.Getenv(LibraryEnv); p != "" {
		return p
	}
	return DefaultLibrary
}

var (
	loadOnce sync.Once
	loadErr  error
	version  int
)

// loadLibrary loads path into the shim's table, returning an error that
// wraps hccl.ErrUnavailable and names the library when it cannot.
func loadLibrary(path string) error {
	switch rc, msg := libLoad(path); rc {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("hccl/nccl: %s does not load (set %s to the library's path, or install NCCL where the dynamic loader finds it): %s: %w", path, LibraryEnv, msg, hccl.ErrUnavailable)
	default:
		return fmt.Errorf("hccl/nccl: %s loads but is not a usable NCCL: %s: %w", path, msg, hccl.ErrUnavailable)
	}
}

// Available loads NCCL (once per process) and says why the transport
// cannot be used, or returns nil.
func Available() error {
	loadOnce.Do(func() {
		if loadErr = loadLibrary(Library()); loadErr != nil {
			return
		}
		v, rc := libVersion()
		if rc != ncclSuccess {
			loadErr = fmt.Errorf("hccl/nccl: %s: %w: %w", Library(), resultError("ncclGetVersion", rc, 0), hccl.ErrUnavailable)
			return
		}
		version = v
	})
	return loadErr
}

// Version is the loaded NCCL's version code (major*10000 + minor*100 +
// patch, e.g. 22803 for 2.28.3), or 0 when it does not load.
func Version() int {
	if Available() != nil {
		return 0
	}
	return version
}

// VersionString formats a version code as "2.28.3".
func VersionString(v int) string {
	if v < 10000 { // NCCL_VERSION before 2.9: major*1000 + minor*100 + patch
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// NewRootInfo creates the root info of a new NCCL communicator
// (ncclGetUniqueId): call it in rank 0's process, which then hosts
// NCCL's bootstrap root (a thread listening on the interface that
// NCCL_SOCKET_IFNAME selects) until the ranks have joined, and pass its
// String() to every rank's hccl.Init.
func NewRootInfo() (hccl.RootInfo, error) {
	if err := Available(); err != nil {
		return hccl.RootInfo{}, err
	}
	id, rc := libUniqueID()
	if rc != ncclSuccess {
		return hccl.RootInfo{}, fmt.Errorf("hccl/nccl: %w", resultError("ncclGetUniqueId", rc, 0))
	}
	return encodeRootInfo(id), nil
}

func encodeRootInfo(id [uniqueIDBytes]byte) hccl.RootInfo {
	return hccl.MakeRootInfo(hccl.TransportNCCL, base64.StdEncoding.EncodeToString(id[:]))
}

// decodeRootInfo returns the ncclUniqueId of an NCCL root info.
func decodeRootInfo(ri hccl.RootInfo) ([uniqueIDBytes]byte, error) {
	var id [uniqueIDBytes]byte
	if ri.Transport() != hccl.TransportNCCL {
		return id, hccl.Errorf(hccl.ErrInvalid, "root info of transport %q given to NCCL", ri.Transport())
	}
	blob, err := base64.StdEncoding.DecodeString(ri.Data())
	if err != nil || len(blob) != uniqueIDBytes {
		return id, hccl.Errorf(hccl.ErrInvalid, "not an NCCL root info (%d bytes of base64 data, want the %d of an ncclUniqueId)", len(blob), uniqueIDBytes)
	}
	copy(id[:], blob)
	return id, nil
}

// resultNames are ncclResult_t's names.
var resultNames = []string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}

// resultError describes a failed NCCL call (nil for ncclSuccess), with the
// kind an hccl caller can test for and NCCL's last message for comm when
// it has one.
func resultError(what string, rc int, comm uintptr) error {
	if rc == ncclSuccess {
		return nil
	}
	switch rc {
	case shimSymbolMissing:
		return fmt.Errorf("%s: not in this NCCL (%s)", what, VersionString(version))
	case shimNotLoaded:
		return fmt.Errorf("%s: NCCL is not loaded: %w", what, hccl.ErrUnavailable)
	}
	name := fmt.Sprintf("ncclResult_t %d", rc)
	if rc >= 0 && rc < len(resultNames) {
		name = resultNames[rc]
	}
	msg := fmt.Sprintf("%s: %s", what, name)
	if s := libErrorString(rc); s != "" {
		msg += " (" + s + ")"
	}
	if s := libLastError(comm); s != "" {
		msg += ": " + s
	}
	switch rc {
	case ncclTimeout:
		return hccl.Errorf(hccl.ErrTimeout, "%s", msg)
	case ncclSystemError, ncclRemoteError:
		return hccl.Errorf(hccl.ErrPeerLost, "%s", msg)
	case ncclInvalidArgument, ncclInvalidUsage:
		return hccl.Errorf(hccl.ErrInvalid, "%s", msg)
	}
	return errors.New(msg)
}
