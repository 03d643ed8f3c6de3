//go:build cgo

package ascend

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

var (
	loadOnce sync.Once
	loadErr  error
	loaded   struct{ acl, hccl, hcomm string } // the paths that loaded
)

// Available loads libascendcl.so and libhccl.so (once per process) and
// says why the HCCL transport cannot be used, or returns nil. The error
// wraps hccl.ErrUnavailable and reads, for example,
//
//	libhccl.so not found: install CANN (and source its set_env.sh) or use the CPU backend (searched: …)
func Available() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

// Libraries returns the paths of the CANN libraries in use (after a
// successful Available), for start-up logs.
func Libraries() (acl, hcclLib, hcomm string) {
	if Available() != nil {
		return "", "", ""
	}
	return loaded.acl, loaded.hccl, loaded.hcomm
}

func load() error {
	dirs := SearchDirs()
	aclPath := findLib("libascendcl.so", dirs)
	hcl := findLib("libhccl.so", dirs)
	hcomm := findLib("libhcomm.so", dirs)
	if err := acl.Load(aclPath); err != nil {
		var le *acl.LoadError
		switch {
		case errors.As(err, &le) && le.TooOld:
			return fmt.Errorf("hccl/ascend: %v: %w", err, hccl.ErrUnavailable)
		case !filepath.IsAbs(hcl): // neither library is installed: name the one that matters
			return notFound("libhccl.so", hcl, dirs, err.Error())
		}
		return notFound("libascendcl.so", aclPath, dirs, err.Error())
	}
	chccl := C.CString(hcl)
	defer C.free(unsafe.Pointer(chccl))
	var chcomm *C.char
	if hcomm != "" {
		chcomm = C.CString(hcomm)
		defer C.free(unsafe.Pointer(chcomm))
	}
	var buf [2048]C.char
	switch rc := C.npu_hccl_load(chccl, chcomm, &buf[0], C.size_t(len(buf))); rc {
	case 0:
		loaded.acl, loaded.hccl, loaded.hcomm = acl.Path(), hcl, hcomm
		return nil
	case -2:
		return notFound("libhccl.so", hcl, dirs, C.GoString(&buf[0]))
	default:
		return fmt.Errorf("hccl/ascend: %s (%s) is too old or not CANN's: %s: %w", hcl, acl.Path(), C.GoString(&buf[0]), hccl.ErrUnavailable)
	}
}

func notFound(lib, tried string, dirs []string, dlerr string) error {
	where := "searched " + strings.Join(dirs, ", ") + " and the dynamic loader's path"
	if filepath.IsAbs(tried) {
		return fmt.Errorf("%s at %s does not load (source CANN's set_env.sh so its dependencies are on LD_LIBRARY_PATH, or use the CPU backend): %s: %w", lib, tried, dlerr, hccl.ErrUnavailable)
	}
	return fmt.Errorf("%s not found: install CANN (and source its set_env.sh) or use the CPU backend (%s): %s: %w", lib, where, dlerr, hccl.ErrUnavailable)
}
