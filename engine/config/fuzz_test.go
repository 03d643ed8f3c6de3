package config

import (
	"os"
	"testing"
)

// FuzzParseModel feeds arbitrary bytes to the config parser: it must never
// panic, and an accepted config must satisfy what the engine relies on
// (per-layer lists of num_hidden_layers valid entries).
func FuzzParseModel(f *testing.F) {
	for _, p := range []string{"testdata/tiny/config.json", "testdata/glm5.3-flash/config.json"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseModel(data)
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			return
		}
		n := c.NumHiddenLayers
		if len(c.LayerTypes) != n || len(c.MLPLayerTypes) != n || len(c.IndexerTypes) != n {
			t.Fatalf("list lengths %d/%d/%d for %d layers", len(c.LayerTypes), len(c.MLPLayerTypes), len(c.IndexerTypes), n)
		}
		if c.NumDSALayers()+c.NumKDALayers() != n {
			t.Fatalf("%d DSA + %d KDA layers != %d", c.NumDSALayers(), c.NumKDALayers(), n)
		}
		for l := -1; l <= n+c.NumNextnPredictLayers; l++ {
			if c.SharedIndexer(l) && (!c.IsDSA(l-1) || c.SharedIndexer(l-1)) {
				t.Fatalf("layer %d shares the indexer of layer %d, which has none", l, l-1)
			}
			_ = c.IsMoE(l)
		}
		_ = c.ParamCount() // must not panic (counts may wrap for absurd sizes)
	})
}
