package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestGraphs(t *testing.T) {
	for _, c := range []struct {
		name     string
		args     []string
		maxBatch int
		decode   bool
		mode     string
		sizes    []int
		note     string // a substring of some note ("" none expected)
		err      string
	}{
		{"nothing given", []string{"m"}, 8, GraphsByDefault, map[bool]string{false: "NONE", true: "FULL_AND_PIECEWISE"}[GraphsByDefault], map[bool][]int{true: {1, 2, 4, 8}}[GraphsByDefault], "", ""},
		{"decode only", []string{"m", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [8, 1, 2, 4, 2]}`}, 64, true, "FULL_DECODE_ONLY", []int{1, 2, 4, 8}, "", ""},
		{"enforce eager wins", []string{"m", "--enforce-eager", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY"}`}, 64, false, "NONE", nil, "", ""},
		{"default sizes", []string{"m", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY"}`}, 20, true, "FULL_DECODE_ONLY", []int{1, 2, 4, 8, 16}, "", ""},
		{"sizes above the batch", []string{"m", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 4, 16, 32]}`}, 8, true, "FULL_DECODE_ONLY", []int{1, 4}, "[16 32] exceed", ""},
		{"max capture size", []string{"m", "--compilation-config", `{"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 4}`}, 64, true, "FULL", []int{1, 2, 4}, "only decode steps", ""},
		{"vLLM default mode", []string{"m", "--compilation-config", `{"cudagraph_capture_sizes": [2]}`}, 64, true, "FULL_AND_PIECEWISE", []int{2}, "piecewise", ""},
		{"piecewise", []string{"m", "--compilation-config", `{"cudagraph_mode": "PIECEWISE"}`}, 64, false, "PIECEWISE", nil, "not implemented", ""},
		{"none", []string{"m", "--compilation-config", `{"cudagraph_mode": "NONE"}`}, 64, false, "NONE", nil, "", ""},
		{"no size fits", []string{"m", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [16]}`}, 8, false, "FULL_DECODE_ONLY", nil, "every step runs eagerly", ""},
		{"bad max size", []string{"m", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY", "max_cudagraph_capture_size": 0}`}, 8, false, "", nil, "", "max_cudagraph_capture_size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := mustServe(t, c.args...)
			p, err := a.Graphs(c.maxBatch)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Decode != c.decode || p.Mode != c.mode || !reflect.DeepEqual(p.Sizes, c.sizes) {
				t.Errorf("plan %+v, want decode %v mode %s sizes %v", p, c.decode, c.mode, c.sizes)
			}
			notes := strings.Join(p.Notes, "; ")
			if (c.note == "") != (notes == "") || !strings.Contains(notes, c.note) {
				t.Errorf("notes %q, want %q", notes, c.note)
			}
		})
	}
}

func TestGraphsWithoutEffect(t *testing.T) {
	a := mustServe(t, "m", "--enforce-eager", "--compilation-config", `{"cudagraph_mode": "FULL_DECODE_ONLY"}`)
	for _, c := range []struct {
		backend string
		listed  bool
	}{{"cpu", true}, {"ascend", false}, {"cuda", false}} {
		var flags []string
		for _, x := range a.WithoutEffect(c.backend) {
			if x.Flag == "--compilation-config" || x.Flag == "--enforce-eager" {
				flags = append(flags, x.Flag)
			}
		}
		if (len(flags) == 2) != c.listed || (!c.listed && len(flags) != 0) {
			t.Errorf("%s: graph flags without effect %v, want listed %v", c.backend, flags, c.listed)
		}
	}
}

func TestDefaultCaptureSizes(t *testing.T) {
	for _, c := range []struct {
		max  int
		want []int
	}{{1, []int{1}}, {3, []int{1, 2}}, {24, []int{1, 2, 4, 8, 16, 24}}} {
		if got := DefaultCaptureSizes(c.max); !reflect.DeepEqual(got, c.want) {
			t.Errorf("DefaultCaptureSizes(%d) = %v, want %v", c.max, got, c.want)
		}
	}
	s := DefaultCaptureSizes(512)
	if len(s) != 3+32+16 || s[len(s)-1] != 512 || s[35] != 272 {
		t.Errorf("DefaultCaptureSizes(512) = %v", s)
	}
}
