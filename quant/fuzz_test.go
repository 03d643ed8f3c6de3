package quant

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// FuzzParseDescription feeds arbitrary bytes to the description parser
// (quant_model_description.json of a checkpoint). It must never panic; an
// error names the file; an accepted description is one JSON object whose
// tensors carry schemes npuserve computes with. Marshal then
// ParseDescription gives the same description, up to what Marshal fills
// in by design: the defaults of version ("1.0.0") and model_quant_type
// ("FLOAT"), group_size only when a scheme is MX (else the default 32),
// and the extras compacted. Marshal of that is a fixed point.
func FuzzParseDescription(f *testing.F) {
	// A hand-made msmodelslim description (every scheme), cut down to one
	// module per scheme: the whole file (17 KB) makes the fuzzer spend its
	// time minimizing.
	data, err := os.ReadFile("../testdata/msmodelslim/handmade/quant_model_description.json")
	if err != nil {
		f.Fatal(err)
	}
	full, err := ParseDescription(data)
	if err != nil {
		f.Fatal(err)
	}
	small, keep := *full, map[Scheme]string{}
	small.Tensors = map[string]Scheme{}
	for _, k := range slices.Sorted(maps.Keys(full.Tensors)) {
		s := full.Tensors[k]
		module := k[:strings.LastIndex(k, ".")]
		if keep[s] == "" {
			keep[s] = module
		}
		if keep[s] == module {
			small.Tensors[k] = s
		}
	}
	f.Add(small.Marshal())
	f.Add([]byte(exampleDescription))
	// What `npuserve quantize` writes (engine/model/glm5next/quantize.go).
	for _, s := range []Scheme{W8A8, W8A8Dynamic, W8A8MXFP8} {
		d := &Description{Version: "1.0.0", ModelQuantType: string(s), GroupSize: MXBlock, Tensors: map[string]Scheme{
			"model.embed_tokens.weight": Float, "lm_head.weight": Float,
		}}
		for _, suf := range s.Suffixes() {
			d.Tensors["model.layers.0.mlp.down_proj."+suf] = s
		}
		f.Add(d.Marshal())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDescription(data)
		if err != nil {
			if d != nil {
				t.Fatal("description returned with an error")
			}
			if !strings.HasPrefix(err.Error(), DescriptionFile+": ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted input that is not one JSON value: %q", data)
		}
		check(t, d)
		m := d.Marshal()
		d2, err := ParseDescription(m)
		if err != nil {
			t.Fatalf("Marshal output rejected: %v\n%s", err, m)
		}
		check(t, d2)
		mx := d.ModelQuantType == string(W8A8MXFP8)
		for _, s := range d.Tensors {
			mx = mx || s == W8A8MXFP8
		}
		want := Description{Path: d.Path, Version: cmpOr(d.Version, "1.0.0"), ModelQuantType: cmpOr(d.ModelQuantType, string(Float)),
			GroupSize: MXBlock, Tensors: d.Tensors, Extra: map[string]json.RawMessage{}}
		if mx {
			want.GroupSize = d.GroupSize
		}
		for k, v := range d.Extra {
			want.Extra[k] = compact(t, v)
		}
		if d2.Path != want.Path || d2.Version != want.Version || d2.ModelQuantType != want.ModelQuantType || d2.GroupSize != want.GroupSize {
			t.Fatalf("round trip: globals %q %q %d, want %q %q %d", d2.Version, d2.ModelQuantType, d2.GroupSize, want.Version, want.ModelQuantType, want.GroupSize)
		}
		if !maps.Equal(d2.Tensors, want.Tensors) {
			t.Fatalf("round trip: tensors %v, want %v", d2.Tensors, want.Tensors)
		}
		if !maps.EqualFunc(d2.Extra, want.Extra, func(a, b json.RawMessage) bool { return bytes.Equal(compact(t, a), b) }) {
			t.Fatalf("round trip: extras %q, want %q", d2.Extra, want.Extra)
		}
		if m2 := d2.Marshal(); !bytes.Equal(m2, m) {
			t.Fatalf("Marshal is not a fixed point:\n%s\nthen\n%s", m, m2)
		}
	})
}

// check asserts what every accepted description satisfies.
func check(t *testing.T, d *Description) {
	t.Helper()
	if d.GroupSize <= 0 || d.GroupSize%MXBlock != 0 {
		t.Fatalf("group size %d", d.GroupSize)
	}
	for k, s := range d.Tensors {
		if globalKey(k) {
			t.Fatalf("tensor %q is not a dotted name", k)
		}
		switch s {
		case Float, W8A8, W8A8Dynamic, W8A8MXFP8:
		default:
			t.Fatalf("tensor %q: scheme %q", k, s)
		}
		if len(s.Suffixes()) == 0 {
			t.Fatalf("scheme %q has no tensors", s)
		}
	}
	for k, v := range d.Extra {
		switch k {
		case "version", "model_quant_type", "group_size":
			t.Fatalf("setting %q kept as an extra", k)
		}
		if !globalKey(k) || !json.Valid(v) {
			t.Fatalf("extra %q = %q", k, v)
		}
	}
}

// compact is how Marshal writes a raw value.
func compact(t *testing.T, v json.RawMessage) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("extra %q: %v", v, err)
	}
	return b
}
