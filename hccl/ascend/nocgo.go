//go:build !cgo

package ascend

import (
	"fmt"

	"github.com/npuserve/npuserve/hccl"
)

// Without cgo there is no way to call CANN: the transport registers so that
// asking for it fails with the reason rather than "unknown transport".

func init() { hccl.Register(hccl.TransportHCCL, transport{}) }

var errNoCgo = fmt.Errorf("hccl/ascend: this binary was built with CGO_ENABLED=0 and cannot load libhccl.so: rebuild with cgo or use the CPU backend: %w", hccl.ErrUnavailable)

type transport struct{}

func (transport) Available() error { return errNoCgo }

func (transport) Init(hccl.RootInfo, int, int, hccl.Options) (hccl.Comm, error) { return nil, errNoCgo }

func (transport) NewRootInfo(hccl.RootOptions) (hccl.RootInfo, error) {
	return hccl.RootInfo{}, errNoCgo
}

// Available says why the HCCL transport cannot be used: always, without cgo.
func Available() error { return errNoCgo }

// NewRootInfo fails without cgo.
func NewRootInfo(int) (hccl.RootInfo, error) { return hccl.RootInfo{}, errNoCgo }

// DeviceCount fails without cgo.
func DeviceCount() (int, error) { return 0, errNoCgo }

// Libraries returns no paths without cgo (Available always fails).
func Libraries() (acl, hcclLib, hcomm string) { return "", "", "" }
