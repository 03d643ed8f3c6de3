package glm5next_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/engine/internal/runner"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// Parity against golden fixtures written by transformers 5.17
// (tools/golden/make_fixtures.py): testdata/glm5next/<name>/ with f32
// weights and reference outputs, <name>-bf16/ with the same weights rounded
// to bf16.

const fixtureRoot = "../../../testdata/glm5next"

// logitTol bounds max|Δlogit| / max|logit|.
const logitTol = 1e-4

// minSelMargin is the relative top-k margin above which indexer selections
// must match exactly (as sets).
const minSelMargin = 1e-4

type goldenMeta struct {
	Prompts            [][]int32 `json:"prompts"`
	Greedy             [][]int32 `json:"greedy"`
	GreedyBF16         [][]int32 `json:"greedy_bf16"`
	GreedySteps        int       `json:"greedy_steps"`
	DecodePrompt       int       `json:"decode_prompt"`
	DecodeTokens       []int32   `json:"decode_tokens"`
	Chunk              *int      `json:"chunk"`
	IndexPrompt        int       `json:"index_prompt"`
	IndexLayers        []int     `json:"index_layers"`
	TokenByToken       bool      `json:"token_by_token_reference"`
	TextPromptIDs      []int32   `json:"text_prompt_ids"`
	TextGreedy         []int32   `json:"text_greedy"`
	TextGreedyBF16     []int32   `json:"text_greedy_bf16"`
	TransformersVerson string    `json:"transformers_version"`
}

// fixture is one golden case.
type fixture struct {
	name string
	dir  string
	meta goldenMeta
	gold *safetensors.Checkpoint
}

func fixtures(t *testing.T) []*fixture {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(fixtureRoot, "*", "golden.json"))
	if len(paths) == 0 {
		t.Skip("no golden fixtures under " + fixtureRoot)
	}
	var out []*fixture
	for _, p := range paths {
		dir := filepath.Dir(p)
		if filepath.Base(dir) == "mtp" {
			continue // MTP goldens have their own schema (mtp_test.go)
		}
		f := &fixture{name: filepath.Base(dir), dir: dir}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &f.meta); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if f.gold, err = safetensors.Open(filepath.Join(dir, "golden.safetensors")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.gold.Close() })
		out = append(out, f)
	}
	return out
}

// f32 returns golden tensor name as rows of its last dimension.
func (f *fixture) f32(t *testing.T, name string) [][]float32 {
	t.Helper()
	info, ok := f.gold.Info(name)
	if !ok {
		t.Fatalf("%s: golden tensor %s missing", f.name, name)
	}
	data, err := f.gold.Data(name)
	if err != nil {
		t.Fatal(err)
	}
	if info.DType != npu.F32 {
		t.Fatalf("%s: golden %s is %v", f.name, name, info.DType)
	}
	n := info.Shape[len(info.Shape)-1]
	rows := make([][]float32, info.Numel()/n)
	for i := range rows {
		rows[i] = make([]float32, n)
		for j := range rows[i] {
			rows[i][j] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*(i*n+j):]))
		}
	}
	return rows
}

func (f *fixture) has(name string) bool {
	_, ok := f.gold.Info(name)
	return ok
}

// i32 returns an I32 golden tensor [rows, n].
func (f *fixture) i32(t *testing.T, name string) [][]int32 {
	t.Helper()
	info, ok := f.gold.Info(name)
	if !ok || info.DType != npu.I32 {
		t.Fatalf("%s: golden I32 tensor %s missing", f.name, name)
	}
	data, _ := f.gold.Data(name)
	n := info.Shape[len(info.Shape)-1]
	rows := make([][]int32, info.Numel()/n)
	for i := range rows {
		rows[i] = make([]int32, n)
		for j := range rows[i] {
			rows[i][j] = int32(binary.LittleEndian.Uint32(data[4*(i*n+j):]))
		}
	}
	return rows
}

// rel is max|a-b| / max|b|.
func rel(a, b [][]float32) float64 {
	var num, den float64
	for i := range b {
		for j := range b[i] {
			num = math.Max(num, math.Abs(float64(a[i][j])-float64(b[i][j])))
			den = math.Max(den, math.Abs(float64(b[i][j])))
		}
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	return num / den
}

// engine runs sequences through a loaded model.
type engine struct {
	t     *testing.T
	m     *glm5next.Model
	mgr   *kvcache.Manager
	cache *glm5next.Cache
}

func newEngine(t *testing.T, m *glm5next.Model, slots int) *engine {
	t.Helper()
	bs := 8 * m.Config().IndexKPool
	const blocks = 64
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: blocks, NumStateSlots: slots, KPool: m.Config().IndexKPool})
	if err != nil {
		t.Fatal(err)
	}
	// The goldens are fp32 references: an fp32 cache on every backend
	// (accelerators default to bf16).
	if err := m.SetCacheDType(npu.F32); err != nil {
		t.Fatal(err)
	}
	c, err := m.NewCache(blocks, bs, slots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Free(m.Backend()) })
	return &engine{t: t, m: m, mgr: mgr, cache: c}
}

// job is one sequence fed in chunks of chunk tokens.
type job struct {
	tokens []int32
	chunk  int
	seq    *kvcache.Seq
	fed    int
	last   int // tokens fed by the latest step
	logits [][]float32
}

// nextBatch appends every unfinished job's next chunk to mgr and returns
// the step's batch (logits of every row) with the jobs in it; nil when
// every job is done.
func nextBatch(mgr *kvcache.Manager, jobs []*job) (*glm5next.Batch, []*job, error) {
	var seqs []*kvcache.Seq
	var rows []int
	var toks []int32
	var active []*job
	for _, j := range jobs {
		if j.fed == len(j.tokens) {
			continue
		}
		n := min(j.chunk, len(j.tokens)-j.fed)
		if err := mgr.Append(j.seq, n); err != nil {
			return nil, nil, err
		}
		seqs, rows = append(seqs, j.seq), append(rows, n)
		toks = append(toks, j.tokens[j.fed:j.fed+n]...)
		active = append(active, j)
		j.fed, j.last = j.fed+n, n
	}
	if len(active) == 0 {
		return nil, nil, nil
	}
	all := make([]int, len(toks))
	for i := range all {
		all[i] = i
	}
	return &glm5next.Batch{Tokens: toks, Layout: mgr.Layout(seqs, rows), LogitRows: all}, active, nil
}

// takeLogits downloads and frees a step's logits and appends each active
// job's rows to it.
func takeLogits(m *glm5next.Model, lg *npu.Tensor, err error, active []*job) {
	if err != nil {
		panic(err)
	}
	out := mustRows(glm5next.DownloadRows(m.Backend(), lg))
	m.Backend().Free(lg)
	r := 0
	for _, j := range active {
		j.logits = append(j.logits, out[r:r+j.last]...)
		r += j.last
	}
}

// run feeds all jobs concurrently (one batch per step, each job its next
// chunk) and returns the logits of every position of every job. batch
// hooks (Observe*) apply to the first step.
func (e *engine) run(jobs []*job, hooks *glm5next.Batch) {
	e.t.Helper()
	for _, j := range jobs {
		var err error
		if j.seq, err = e.mgr.Allocate(); err != nil {
			e.t.Fatal(err)
		}
	}
	first := true
	for {
		b, active, err := nextBatch(e.mgr, jobs)
		if err != nil {
			e.t.Fatal(err)
		}
		if b == nil {
			break
		}
		if first && hooks != nil {
			b.Observe, b.ObserveIndex = hooks.Observe, hooks.ObserveIndex
		}
		first = false
		lg, err := e.m.Forward(e.cache, b)
		takeLogits(e.m, lg, err, active)
	}
	for _, j := range jobs {
		e.mgr.Free(j.seq)
	}
	if e.mgr.UsedBlocks() != 0 || e.mgr.UsedStateSlots() != 0 {
		e.t.Fatalf("cache usage after freeing every sequence: %d blocks, %d slots", e.mgr.UsedBlocks(), e.mgr.UsedStateSlots())
	}
}

func (e *engine) logits(tokens []int32, chunk int) [][]float32 {
	j := &job{tokens: tokens, chunk: chunk}
	e.run([]*job{j}, nil)
	return j.logits
}

func load(t *testing.T, be npu.Backend, dir string) *glm5next.Model {
	t.Helper()
	m, err := glm5next.Load(be, dir, glm5next.LoadOptions{DType: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGolden(t *testing.T) {
	be := nputest.Open(0)
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			m := load(t, be, f.dir)
			e := newEngine(t, m, len(f.meta.Prompts))
			mt := f.meta

			t.Run("full sequence", func(t *testing.T) {
				for i, p := range mt.Prompts {
					d := rel(e.logits(p, len(p)), f.f32(t, fmt.Sprintf("logits.%d", i)))
					t.Logf("prompt %d (%d tokens): max rel logit diff %.3g", i, len(p), d)
					if d > logitTol {
						t.Errorf("prompt %d: max relative logit difference %g > %g", i, d, logitTol)
					}
				}
			})

			t.Run("hidden states", func(t *testing.T) {
				if !f.has("hidden.0") {
					t.Skip("fixture has no per-layer hidden states")
				}
				p := mt.Prompts[0]
				got := map[int][][]float32{}
				hooks := &glm5next.Batch{Observe: func(l int, x *npu.Tensor) {
					got[l] = mustRows(glm5next.DownloadRows(be, x.Reshape(-1, x.Dim(-1))))
				}}
				e.run([]*job{{tokens: p, chunk: len(p)}}, hooks)
				for l := range m.Config().NumHiddenLayers {
					d := rel(got[l], f.f32(t, fmt.Sprintf("hidden.%d", l)))
					t.Logf("layer %d streams: max rel diff %.3g", l, d)
					if d > logitTol {
						t.Errorf("layer %d streams: max relative difference %g", l, d)
					}
				}
				if f.has("final") {
					if d := rel(got[m.Config().NumHiddenLayers], f.f32(t, "final")); d > logitTol {
						t.Errorf("final hidden state: max relative difference %g", d)
					}
				}
			})

			t.Run("chunked prefill", func(t *testing.T) {
				for i, p := range mt.Prompts {
					want := f.f32(t, fmt.Sprintf("logits.%d", i))
					for _, chunk := range []int{1, 7, 64, len(p)} {
						d := rel(e.logits(p, chunk), want)
						if d > logitTol {
							t.Errorf("prompt %d chunk %d: max relative logit difference %g", i, chunk, d)
						}
					}
				}
				if f.has("chunked.logits") && mt.Chunk != nil {
					p := mt.Prompts[mt.DecodePrompt]
					if d := rel(e.logits(p, *mt.Chunk), f.f32(t, "chunked.logits")); d > logitTol {
						t.Errorf("chunk %d vs transformers' chunked prefill: %g", *mt.Chunk, d)
					}
				}
			})

			t.Run("decode", func(t *testing.T) {
				p := mt.Prompts[mt.DecodePrompt]
				want := f.f32(t, "decode.logits")
				toks := append(slices.Clone(p), mt.DecodeTokens[:len(want)-1]...)
				// Another sequence first, so the decode reuses (and must
				// reset) its state slot and blocks.
				e.logits(p[:len(p)/2], 3)
				got := e.logitsPrefillDecode(toks, len(p))[len(p)-1:]
				d := rel(got, want)
				t.Logf("decode: max rel logit diff %.3g over %d steps", d, len(want))
				if d > logitTol {
					t.Errorf("decode: max relative logit difference %g", d)
				}
				for k, row := range got {
					if a := argmax(row); a != mt.DecodeTokens[k] {
						t.Errorf("decode step %d: argmax %d, reference %d", k, a, mt.DecodeTokens[k])
					}
				}
			})

			t.Run("mixed batch", func(t *testing.T) {
				chunks := []int{3, 7, 16, 64, 5}
				var jobs []*job
				for i, p := range mt.Prompts {
					jobs = append(jobs, &job{tokens: p, chunk: chunks[i%len(chunks)]})
				}
				e.run(jobs, nil)
				for i, j := range jobs {
					d := rel(j.logits, f.f32(t, fmt.Sprintf("logits.%d", i)))
					if d > logitTol {
						t.Errorf("prompt %d (chunk %d) in a mixed batch: max relative logit difference %g", i, j.chunk, d)
					}
				}
			})

			t.Run("greedy", func(t *testing.T) {
				checkGreedy(t, m, mt.Prompts, mt.Greedy, mt.TextPromptIDs, mt.TextGreedy, mt.GreedySteps)
			})

			t.Run("indexer selection", func(t *testing.T) {
				p := mt.Prompts[mt.IndexPrompt]
				got := map[int][][]int32{}
				hooks := &glm5next.Batch{ObserveIndex: func(l int, sel *npu.Tensor) {
					got[l] = downloadI32(be, sel)
				}}
				e.run([]*job{{tokens: p, chunk: len(p)}}, hooks)
				for _, l := range mt.IndexLayers {
					want := f.i32(t, fmt.Sprintf("index.%d.sel", l))
					margin := f.f32(t, fmt.Sprintf("index.%d.margin", l))[0]
					checked := 0
					for r := range want {
						if !(float64(margin[r]) >= minSelMargin) {
							continue
						}
						checked++
						if a, b := posSet(got[l][r]), posSet(want[r]); !slices.Equal(a, b) {
							t.Errorf("layer %d row %d: selection %v, reference %v (margin %g)", l, r, a, b, margin[r])
						}
					}
					t.Logf("layer %d: %d/%d rows compared", l, checked, len(want))
				}
			})

			bdir := f.dir + "-bf16"
			if _, err := os.Stat(bdir); err != nil {
				return
			}
			t.Run("bf16 weights", func(t *testing.T) {
				mb := load(t, be, bdir)
				eb := newEngine(t, mb, 1)
				for i, p := range mt.Prompts {
					d := rel(eb.logits(p, len(p)), f.f32(t, fmt.Sprintf("logits_bf16.%d", i)))
					t.Logf("bf16 prompt %d: max rel logit diff %.3g", i, d)
					if d > logitTol {
						t.Errorf("bf16 prompt %d: max relative logit difference %g", i, d)
					}
				}
				checkGreedy(t, mb, mt.Prompts, mt.GreedyBF16, mt.TextPromptIDs, mt.TextGreedyBF16, mt.GreedySteps)
			})
		})
	}
}

// logitsPrefillDecode prefills toks[:prefill] in one step, then feeds the
// rest one token per step, returning every position's logits.
func (e *engine) logitsPrefillDecode(toks []int32, prefill int) [][]float32 {
	seq, err := e.mgr.Allocate()
	if err != nil {
		e.t.Fatal(err)
	}
	defer e.mgr.Free(seq)
	var out [][]float32
	for pos := 0; pos < len(toks); {
		n := 1
		if pos == 0 {
			n = prefill
		}
		if err := e.mgr.Append(seq, n); err != nil {
			e.t.Fatal(err)
		}
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		lg, err := e.m.Forward(e.cache, &glm5next.Batch{Tokens: toks[pos : pos+n], Layout: e.mgr.Layout([]*kvcache.Seq{seq}, []int{n}), LogitRows: all})
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, mustRows(glm5next.DownloadRows(e.m.Backend(), lg))...)
		e.m.Backend().Free(lg)
		pos += n
	}
	return out
}

// checkGreedy runs every prompt (and the text prompt) through the runner
// in one batch with chunked prefill and compares greedy continuations.
func checkGreedy(t *testing.T, m *glm5next.Model, prompts, want [][]int32, text, textWant []int32, steps int) {
	t.Helper()
	var reqs []runner.Request
	for _, p := range prompts {
		reqs = append(reqs, runner.Request{Prompt: p, MaxNewTokens: steps})
	}
	if len(text) > 0 {
		reqs = append(reqs, runner.Request{Prompt: text, MaxNewTokens: len(textWant)})
		want = append(slices.Clone(want), textWant)
	}
	got, err := runner.Generate(m, reqs, runner.Options{ChunkSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d: greedy %v, reference %v", i, got[i], want[i])
		}
	}
}

func argmax(row []float32) int32 {
	b := 0
	for i, v := range row {
		if v > row[b] {
			b = i
		}
	}
	return int32(b)
}

// posSet is the sorted set of selected positions (-1 dropped).
func posSet(row []int32) []int32 {
	var s []int32
	for _, v := range row {
		if v >= 0 && !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	slices.Sort(s)
	return s
}

func downloadI32(be npu.Backend, t *npu.Tensor) [][]int32 {
	flat := npu.MustI32(be, t)
	n := t.Dim(-1)
	rows := make([][]int32, len(flat)/n)
	for i := range rows {
		rows[i] = flat[i*n : (i+1)*n]
	}
	return rows
}

// mustRows returns the downloaded rows, panicking on a failed download.
func mustRows(rows [][]float32, err error) [][]float32 {
	if err != nil {
		panic(err)
	}
	return rows
}
