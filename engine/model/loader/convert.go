package loader

import (
	"encoding/binary"
	"fmt"

	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
)

// convert returns j's data (its slice, if any) in j.out: the mapped
// checkpoint bytes themselves when the dtype already matches and the slice
// is contiguous (so FromHost can alias them), else a new host buffer. Conversion runs on the host so that loading needs no device
// ops.
func convert(ck *safetensors.Checkpoint, j job) ([]byte, error) {
	src, err := ck.Data(j.name)
	if err != nil {
		return nil, err
	}
	if j.scale != nil {
		scale, err := ck.Data(j.scale.Name)
		if err != nil {
			return nil, err
		}
		sc := floats(j.scale.DType, scale)
		if j.spec.Slice != nil {
			return npu.EncodeFloats(dequantFP8Slice(src, j.info.Shape[0], j.info.Shape[1], sc, j.spec.Slice), j.out), nil
		}
		return npu.EncodeFloats(dequantFP8(src, j.info.Shape[0], j.info.Shape[1], sc), j.out), nil
	}
	if j.spec.Slice != nil {
		src = j.spec.Slice.Cut(src, j.info.Shape, j.info.DType.Size())
	}
	if j.info.DType == j.out {
		return src, nil
	}
	switch {
	case j.info.DType == npu.BF16 && j.out == npu.F32:
		out := make([]byte, len(src)*2)
		for i := range len(src) / 2 {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16)
		}
		return out, nil
	case j.info.DType == npu.F32 || j.info.DType == npu.BF16 || j.info.DType == npu.F16:
		return npu.EncodeFloats(floats(j.info.DType, src), j.out), nil
	}
	return nil, fmt.Errorf("%s: tensor %q: no conversion from %v to %v", j.info.File, j.name, j.info.DType, j.out)
}

// floats decodes little-endian F32, BF16 or F16 data (callers checked the
// dtype).
func floats(dt npu.DType, b []byte) []float32 {
	f, err := npu.DecodeFloats(b, dt)
	if err != nil {
		panic("loader: " + err.Error())
	}
	return f
}

// dequantFP8 expands a block-scaled e4m3 weight [rows, cols]:
// w[i][j] = e4m3(q[i][j]) * scale[i/FP8Block][j/FP8Block] (DeepSeek's
// weight_dequant, the official checkpoint's format).
func dequantFP8(q []byte, rows, cols int, scale []float32) []float32 {
	out := make([]float32, rows*cols)
	sc := (cols + FP8Block - 1) / FP8Block
	for i := range rows {
		srow := scale[(i/FP8Block)*sc:]
		row, qrow := out[i*cols:(i+1)*cols], q[i*cols:(i+1)*cols]
		for j, b := range qrow {
			row[j] = npu.E4M3ToF32(b) * srow[j/FP8Block]
		}
	}
	return out
}
