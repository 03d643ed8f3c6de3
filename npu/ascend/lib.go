//go:build cgo

package ascend

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// Libraries are the CANN libraries the backend loaded.
type Libraries struct {
	ACL, NNOpBase string
	OpAPI         []string // operator libraries searched, in order
}

var (
	libOnce sync.Once
	libs    Libraries
	libErr  error
)

// opAPISearch lists the aclnn operator libraries in torch_npu's order
// (OPP op_api_common.cpp L816-880): every libopapi_*.so (the CANN 8.5/9.x
// split: nn, transformer, math) of the first directory that has any, then
// the aggregate libopapi.so. Custom-op packages (libcust_opapi.so) are not
// searched: the backend uses stock operators only.
func opAPISearch(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, "libopapi_*.so"))
		if len(m) > 0 {
			sort.Strings(m)
			out = append(out, m...)
			break
		}
	}
	return append(out, acl.FindLib("libopapi.so", dirs))
}

// load loads libascendcl, libnnopbase and the operator libraries once per
// process. A missing library is an error wrapping npu.ErrUnavailable that
// names it and the directories searched.
func load() (Libraries, error) {
	libOnce.Do(func() { libs, libErr = loadLibs() })
	return libs, libErr
}

func loadLibs() (Libraries, error) {
	dirs := acl.SearchDirs()
	var l Libraries
	l.ACL = acl.FindLib("libascendcl.so", dirs)
	if err := acl.Load(l.ACL); err != nil {
		return l, notFound("libascendcl.so", l.ACL, dirs, err)
	}
	l.NNOpBase = acl.FindLib("libnnopbase.so", dirs)
	l.OpAPI = opAPISearch(dirs)
	cnn := C.CString(l.NNOpBase)
	defer C.free(unsafe.Pointer(cnn))
	cops := make([]*C.char, len(l.OpAPI))
	for i, p := range l.OpAPI {
		cops[i] = C.CString(p)
		defer C.free(unsafe.Pointer(cops[i]))
	}
	var buf [2048]C.char
	switch rc := C.npu_aclnn_load(cnn, &cops[0], C.int(len(cops)), &buf[0], C.size_t(len(buf))); rc {
	case 0:
	case -1:
		return l, notFound("libnnopbase.so", l.NNOpBase, dirs, fmt.Errorf("%s", C.GoString(&buf[0])))
	default:
		return l, fmt.Errorf("device ascend: %s: %w", C.GoString(&buf[0]), npu.ErrUnavailable)
	}
	return l, nil
}

func notFound(lib, tried string, dirs []string, err error) error {
	home := os.Getenv("ASCEND_HOME_PATH")
	if home == "" {
		home = "unset"
	}
	if filepath.IsAbs(tried) {
		return fmt.Errorf("device ascend: %s at %s does not load (source CANN's set_env.sh so its dependencies are on LD_LIBRARY_PATH, or use --device cpu): %v: %w", lib, tried, err, npu.ErrUnavailable)
	}
	return fmt.Errorf("device ascend: %s not found (ASCEND_HOME_PATH %s; searched %s and the dynamic loader's path): install CANN and source its set_env.sh, or use --device cpu: %v: %w",
		lib, home, strings.Join(dirs, ", "), err, npu.ErrUnavailable)
}

// opIDs are the operators the backend calls, by shim id.
var opIDs = func() []C.int {
	ids := make([]C.int, C.NPU_OP_COUNT)
	for i := range ids {
		ids[i] = C.int(i)
	}
	return ids
}()

// missingOps lists the aclnn operators no loaded library has (both halves).
func missingOps() []string {
	var out []string
	for _, id := range opIDs {
		if C.npu_aclnn_op_lib(id) < 0 {
			out = append(out, C.GoString(C.npu_aclnn_op_name(id)))
		}
	}
	return out
}
