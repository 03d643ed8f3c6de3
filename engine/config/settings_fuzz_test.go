package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzSettingsJSON and FuzzSettingsTOML feed arbitrary files to the
// settings loader (--config FILE) under a .json, a .toml and an
// extensionless name (sniffed by content). It must never panic; every
// error names the file; a .json file is accepted only when it is one JSON
// value. An accepted file's values are then applied as Build does,
// and Build itself (the path every command line takes) runs on it.
func FuzzSettingsJSON(f *testing.F) {
	fuzzSettings(f, "s.json", []string{"blog-settings.json"}, []string{
		`{"tensor-parallel-size": 4, "port": "9000", "enforce_eager": true,
		"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}, "served-model-name": "one"}`,
		`{"speculative": {"mtp": true, "draft_tokens": 3}, "moe": {"expert_parallel_size": 8, "num_experts": 288}}`,
		`{"attention": {"interleave_pattern": "3linear_1sparse"}, "max_model_len": "128K"}`,
		`{"served_model_name": ["a", 1]}`,
		`{"speculative_config": "{bad"}`,
		`{"port": 1}}`,
		`{"port": `,
		`[1, 2]`,
	})
}

func FuzzSettingsTOML(f *testing.F) {
	fuzzSettings(f, "s.toml", []string{"blog-config.toml", "flat.toml"}, []string{
		"max_num_seqs = 7\n",
		"[moe]\nnum_experts = 288\nexpert_parallel = 8\n[speculative]\nmtp = true\n",
		"max_model_len = 1.5\n",
		"limit_mm_per_prompt = { image = inf }\n",
		"[[servers]]\n",
		"a = 1979-05-27\n",
		"[a]\nx = 1\n[a]\ny = 2\n",
		"port = \n",
	})
}

func fuzzSettings(f *testing.F, name string, files, bodies []string) {
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join("testdata", "settings", file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, b := range bodies {
		f.Add([]byte(b))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, n := range []string{name, "settings"} {
			p := filepath.Join(dir, n)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := loadSettings(p)
			if err != nil {
				if st != nil {
					t.Fatal("settings returned with an error")
				}
				if !strings.HasPrefix(err.Error(), "--config "+p+": ") {
					t.Fatalf("error does not name the file: %v", err)
				}
			} else {
				if n == "s.json" && !json.Valid(data) {
					t.Fatalf("accepted a .json file that is not one JSON value: %q", data)
				}
				if err := st.apply(Defaults()); err != nil && !strings.HasPrefix(err.Error(), "--config "+p+": ") {
					t.Fatalf("error does not name the file: %v", err)
				}
			}
			a, err := Build([]Assignment{{Flag: "--config", Value: p}}, []string{"m"})
			if (err == nil) != (a != nil) {
				t.Fatalf("Build = %v, %v", a, err)
			}
			if err == nil && st == nil {
				t.Fatal("Build accepted a file loadSettings rejects")
			}
		}
	})
}
