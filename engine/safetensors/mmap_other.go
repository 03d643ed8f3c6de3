//go:build !unix

package safetensors

import (
	"fmt"
	"os"
)

// mapFile reads the whole file: the fallback where mmap is not available.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open checkpoint: %w", err)
	}
	return data, func() error { return nil }, nil
}
