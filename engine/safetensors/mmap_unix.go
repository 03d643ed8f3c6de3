//go:build unix

package safetensors

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the whole file read-only. The mapping outlives the file
// descriptor; unmap releases it. Pages are read lazily by the kernel, so
// opening a checkpoint costs nothing until tensors are touched.
func mapFile(path string) (data []byte, unmap func() error, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("open checkpoint: %w", err)
	}
	size := st.Size()
	if size == 0 { // mmap rejects empty mappings; the header check reports it
		return []byte{}, func() error { return nil }, nil
	}
	if size > math.MaxInt {
		return nil, nil, fmt.Errorf("%s: %d bytes do not fit in the address space", path, size)
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	return data, func() error { return unix.Munmap(data) }, nil
}
