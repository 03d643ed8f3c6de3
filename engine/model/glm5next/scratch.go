package glm5next

import (
	"fmt"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/npu"
)

// scratch keeps the forward pass's intermediate tensors between calls: one
// device buffer per name, grown when a batch needs more, so steady-state
// decode allocates nothing and a step's buffers depend only on its size
// (what graph capture will need). Names must be distinct for tensors that
// are live at the same time.
type scratch struct {
	be   npu.Backend
	bufs map[string]*npu.Tensor
}

// get returns a tensor of dtype dt and the given shape backed by the
// buffer called name. Its contents are whatever the last user left.
func (s *scratch) get(name string, dt npu.DType, shape ...int) *npu.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	b := s.bufs[name]
	if b == nil || b.Numel() < n || b.DType() != dt {
		c := max(n, 1)
		if b != nil && b.DType() == dt {
			c = max(c, b.Numel()*5/4) // grow geometrically for slowly rising batch sizes
		}
		// Allocate before freeing the old buffer: during a graph capture
		// the Alloc is what fails, clearly, before anything is freed.
		nb, err := s.be.Alloc(dt, c)
		if err != nil {
			fail(fmt.Errorf("glm5next: scratch %s: %w", name, err))
		}
		if b != nil {
			s.be.Free(b)
		}
		b = nb
		if s.bufs == nil {
			s.bufs = map[string]*npu.Tensor{}
		}
		s.bufs[name] = b
	}
	return b.Rows(0, n).Reshape(shape...)
}

// upload copies host int32 values into the I32 scratch buffer name.
func (s *scratch) upload(name string, v []int32) *npu.Tensor {
	t := s.get(name, npu.I32, len(v))
	if len(v) > 0 {
		if err := s.be.Upload(t, npu.EncodeInt32s(v)); err != nil {
			fail(fmt.Errorf("glm5next: uploading %s: %w", name, err))
		}
	}
	return t
}

// release frees every scratch buffer.
func (s *scratch) release() {
	for k, b := range s.bufs {
		s.be.Free(b)
		delete(s.bufs, k)
	}
}

// DownloadRows copies a F32 tensor [rows, n] (logits) to the host: the
// synchronisation point between device and host (model.DownloadRows).
func DownloadRows(be npu.Backend, t *npu.Tensor) ([][]float32, error) {
	return model.DownloadRows(be, t)
}
