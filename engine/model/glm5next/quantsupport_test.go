package glm5next

import (
	"errors"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/quant"
)

// noMX is a backend that, like an Ascend A2, cannot run W8A8_MXFP8.
type noMX struct{ *cpu.Backend }

func (noMX) SupportsQuant(s npu.QScheme) error {
	if s == npu.QMXFP8 {
		return errors.New("W8A8_MXFP8 needs an Ascend 950")
	}
	return nil
}

// TestSchemesSupported: a checkpoint with a scheme the device cannot run
// is refused at load time, naming the scheme and a tensor.
func TestSchemesSupported(t *testing.T) {
	for _, c := range []struct {
		name    string
		be      npu.Backend
		schemes map[string]quant.Scheme
		want    string // "" = accepted
	}{
		{"int8 on a device without MX", noMX{cpu.New(1)}, map[string]quant.Scheme{"a.weight": quant.W8A8Dynamic, "b.weight": quant.W8A8, "c.weight": quant.Float}, ""},
		{"MX on a device without it", noMX{cpu.New(1)}, map[string]quant.Scheme{"a.weight": quant.W8A8Dynamic, "z.weight": quant.W8A8MXFP8}, "W8A8_MXFP8 (z.weight"},
		{"MX on the cpu backend", cpu.New(1), map[string]quant.Scheme{"z.weight": quant.W8A8MXFP8}, ""},
	} {
		err := schemesSupported(c.be, &quant.Description{Path: "quant_model_description.json", Tensors: c.schemes})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}
