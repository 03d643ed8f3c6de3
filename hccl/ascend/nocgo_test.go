//go:build !cgo

package ascend_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/ascend"
)

// Without cgo the transport is registered but says why it cannot work.
func TestUnavailableWithoutCgo(t *testing.T) {
	err := hccl.Available(hccl.TransportHCCL)
	if !errors.Is(err, hccl.ErrUnavailable) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("Available(hccl) = %v", err)
	}
	if _, err := ascend.NewRootInfo(0); !errors.Is(err, hccl.ErrUnavailable) {
		t.Fatalf("NewRootInfo = %v", err)
	}
}
