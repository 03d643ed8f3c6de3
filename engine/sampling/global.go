package sampling

import (
	"math/rand/v2"
	"sync"
)

// The source of generator seeds for requests that give no seed. By default
// it is the runtime's random source; SetGlobalSeed (the server's --seed)
// makes it a seeded PCG, so a server restarted with the same --seed and fed
// the same requests in the same order samples the same tokens, as vLLM's
// --seed does for its global generator.
var global struct {
	mu  sync.Mutex
	rng *rand.Rand // nil: runtime randomness
}

// SetGlobalSeed seeds the generator that hands out seeds to unseeded
// requests.
func SetGlobalSeed(seed uint64) {
	global.mu.Lock()
	defer global.mu.Unlock()
	global.rng = rand.New(rand.NewPCG(seed, 0x6e7075736572)) // "npuser"
}

// unseeded returns the PCG seed pair for a request without a seed.
func unseeded() (uint64, uint64) {
	global.mu.Lock()
	defer global.mu.Unlock()
	if global.rng == nil {
		return rand.Uint64(), rand.Uint64()
	}
	return global.rng.Uint64(), global.rng.Uint64()
}
