//go:build !cgo

package cuda

import "errors"

// probe cannot call the driver without cgo.
func probe() (int, int, error) {
	return 0, 0, errors.New("this binary was built with CGO_ENABLED=0 and cannot load libcuda.so.1: rebuild with cgo")
}
