package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/npu"
	"github.com/urfave/cli/v2"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "benchmarks",
		Subcommands: []*cli.Command{
			{
				Name:  "decode",
				Usage: "decode throughput of a random-weight model against the memory-bandwidth floor",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "config", Usage: "config.json of the model to build with random weights", Required: true},
					&cli.StringFlag{Name: "batch", Value: "1,32", Usage: "comma-separated batch sizes"},
					&cli.IntFlag{Name: "context", Value: 64, Usage: "prompt tokens per sequence before decoding"},
					&cli.IntFlag{Name: "steps", Value: 16, Usage: "timed decode steps"},
					&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the timed runs to this file (go tool pprof)"},
					&cli.StringFlag{Name: "dtype", Value: "bfloat16", Usage: "weight dtype: float32 or bfloat16"},
					&cli.IntFlag{Name: "threads", Value: 0, Usage: "CPU threads (0 = all)"},
					&cli.BoolFlag{Name: "cudagraph", Usage: "capture each batch's decode step as a device graph (cudagraph_mode FULL_DECODE_ONLY at that size) and time its replays"},
					deviceFlag(),
				},
				Action: runBenchDecode,
			},
			benchServeCommand(),
			benchSpecCommand(),
		},
	}
}

// decodeResult is one line of `bench decode` output.
type decodeResult struct {
	Batch         int     `json:"batch"`
	Context       int     `json:"context"`
	Steps         int     `json:"steps"`
	MsPerStep     float64 `json:"ms_per_step"`
	TokensPerS    float64 `json:"tokens_per_s"`
	WeightBytes   int64   `json:"weight_bytes_per_step"`
	CacheBytes    int64   `json:"cache_bytes_per_step"`
	CopyGBps      float64 `json:"copy_bandwidth_gb_s"`
	FloorTokensPS float64 `json:"floor_tokens_per_s"`
	FractionFloor float64 `json:"fraction_of_floor"`
	Params        int64   `json:"params"`
	ActiveParams  int64   `json:"active_params"`
	// PrefillMs is the wall time of the last sequence's prefill of Context
	// tokens (one forward, synchronised); PrefillTFLOPs counts the
	// matmul FLOPs of the active parameters only (2·active·Context), the
	// figure compared with the device's GEMM rate.
	PrefillMs       float64 `json:"prefill_ms"`
	PrefillTokensPS float64 `json:"prefill_tokens_per_s"`
	PrefillTFLOPs   float64 `json:"prefill_matmul_tflop_s"`
	Threads         int     `json:"threads"`
	ExpertsTouched  float64 `json:"experts_touched_per_moe_layer"`
	// Graphs: the timed steps replayed a captured graph (--cudagraph),
	// which took CaptureMs to warm up and capture and holds GraphBytes.
	Graphs     bool    `json:"graphs"`
	CaptureMs  float64 `json:"graph_capture_ms,omitempty"`
	GraphBytes int64   `json:"graph_bytes,omitempty"`
}

// startCPUProfile starts the --cpuprofile of a bench command (stop is a
// no-op without one).
func startCPUProfile(c *cli.Context) (stop func(), err error) {
	p := c.String("cpuprofile")
	if p == "" {
		return func() {}, nil
	}
	f, err := os.Create(p)
	if err != nil {
		return nil, runError("--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, runError("--cpuprofile: %v", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func runBenchDecode(c *cli.Context) error {
	stop, err := startCPUProfile(c)
	if err != nil {
		return err
	}
	defer stop()
	data, err := os.ReadFile(c.String("config"))
	if err != nil {
		return runError("--config: %v", err)
	}
	cfg, err := config.ParseModel(data)
	if err != nil {
		return runError("--config: %s: %v", c.String("config"), err)
	}
	var batches []int
	for _, f := range strings.Split(c.String("batch"), ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b < 1 {
			return usageError("--batch: %q is not a positive integer", f)
		}
		batches = append(batches, b)
	}
	ctxLen, steps := c.Int("context"), c.Int("steps")
	if ctxLen < 1 || steps < 1 {
		return usageError("--context and --steps must be >= 1")
	}
	dt := c.String("dtype")
	if dt != "float32" && dt != "bfloat16" {
		return usageError("--dtype: want float32 or bfloat16, got %q", dt)
	}
	be, err := openDeviceFlag(c)
	if err != nil {
		return err
	}
	m, err := glm5next.NewRandomParallel(be, cfg, dt, 1, nil)
	if err != nil {
		return runError("%v", err)
	}
	var bw float64
	if be.Info().Accelerator {
		if bw, err = deviceCopyBandwidth(be); err != nil {
			return runError("measuring the device's copy bandwidth: %v", err)
		}
	} else {
		bw = copyBandwidth(max(backendThreads(be), 1))
	}
	pc := cfg.ParamCount()
	wsize := int64(2)
	if dt == "float32" {
		wsize = 4
	}
	if c.Bool("cudagraph") {
		if _, ok := be.(npu.GraphCapturer); !ok {
			return usageError("--cudagraph: the %s backend cannot capture graphs", be.Name())
		}
	}
	for _, B := range batches {
		res, err := benchDecodeOnce(m, B, ctxLen, steps, c.Bool("cudagraph"))
		if err != nil {
			return runError("%v", err)
		}
		// Bytes read per step: every active matrix once, routed experts
		// counted by the expected number of distinct experts the batch
		// touches under uniform routing, plus the DSA cache rows attended.
		E, k := float64(cfg.NRoutedExperts), float64(cfg.NumExpertsPerTok)
		touched := 0.0
		if E > 0 {
			touched = E * (1 - math.Pow(1-k/E, float64(B)))
		}
		expert := int64(3 * cfg.HiddenSize * cfg.MoEIntermediateSize)
		moeLayers := 0
		for l := 0; l < cfg.NumHiddenLayers; l++ {
			if cfg.IsMoE(l) {
				moeLayers++
			}
		}
		routedActive := int64(moeLayers) * int64(k) * expert
		params := pc.Active - routedActive + int64(float64(moeLayers)*touched*float64(expert))
		res.WeightBytes = params * wsize
		res.CacheBytes = int64(B) * int64(ctxLen+steps/2) * m.BytesPerToken()
		res.CopyGBps = bw / 1e9
		res.FloorTokensPS = bw / float64(res.WeightBytes+res.CacheBytes) * float64(B)
		res.FractionFloor = res.TokensPerS / res.FloorTokensPS
		res.Params, res.ActiveParams = pc.Total, pc.Active
		res.Threads = backendThreads(be)
		res.ExpertsTouched = touched
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
	return nil
}

func benchDecodeOnce(m *glm5next.Model, B, ctxLen, steps int, graphs bool) (decodeResult, error) {
	cfg := m.Config()
	bs := 64
	perSeq := (ctxLen + steps + 1 + bs - 1) / bs
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: perSeq * B, NumStateSlots: B, KPool: cfg.IndexKPool})
	if err != nil {
		return decodeResult{}, err
	}
	// With graphs: one padding block and the padding slots past the
	// manager's (the engine's layout, see core.Options.DecodeGraphs).
	extraBlocks, extraSlots := 0, 0
	if graphs {
		extraBlocks, extraSlots = 1, glm5next.GraphPadSlots([]int{B})
	}
	cache, err := m.NewCache(perSeq*B+extraBlocks, bs, B+extraSlots)
	if err != nil {
		return decodeResult{}, err
	}
	be := m.Backend()
	defer cache.Free(be)
	var rep glm5next.GraphReport
	if graphs {
		rep, err = m.CaptureDecodeGraphs(cache, glm5next.GraphOptions{Sizes: []int{B}, MaxBlocks: perSeq,
			PadBlock: perSeq * B, PadSlot: B, PadSlots: extraSlots})
		if err != nil {
			return decodeResult{}, err
		}
		defer m.ReleaseGraphs()
	}
	r := rand.New(rand.NewPCG(1, 2))
	var prefill time.Duration
	seqs := make([]*kvcache.Seq, B)
	for i := range seqs {
		if seqs[i], err = mgr.Allocate(); err != nil {
			return decodeResult{}, err
		}
		// Prefill each sequence on its own.
		toks := make([]int32, ctxLen)
		for j := range toks {
			toks[j] = int32(r.IntN(cfg.VocabSize))
		}
		if err := mgr.Append(seqs[i], ctxLen); err != nil {
			return decodeResult{}, err
		}
		if i == len(seqs)-1 {
			// The earlier prefills' work may still be running on an
			// asynchronous device: the timed one starts on an idle one.
			if err := be.Sync(); err != nil {
				return decodeResult{}, err
			}
		}
		t0 := time.Now()
		lg, err := m.Forward(cache, &glm5next.Batch{Tokens: toks, Layout: mgr.Layout(seqs[i:i+1], []int{ctxLen})})
		if err != nil {
			return decodeResult{}, err
		}
		if i == len(seqs)-1 { // the last prefill is timed (the earlier ones warmed up)
			if err := be.Sync(); err != nil {
				be.Free(lg)
				return decodeResult{}, err
			}
			prefill = time.Since(t0)
		}
		be.Free(lg)
	}
	// A backend's kernel profile (cuda with NPUSERVE_CUDA_PROFILE=1), by
	// phase, to stderr.
	profile := func(phase string) {
		if p, ok := be.(interface{ Profile() string }); ok {
			if s := p.Profile(); s != "" {
				fmt.Fprintf(os.Stderr, "%s, batch %d, context %d: %s", phase, B, ctxLen, s)
			}
		}
	}
	profile("prefill")
	rows := make([]int, B)
	toks := make([]int32, B)
	var elapsed time.Duration
	for s := 0; s <= steps; s++ {
		for i := range seqs {
			rows[i] = 1
			toks[i] = int32(r.IntN(cfg.VocabSize))
			if err := mgr.Append(seqs[i], 1); err != nil {
				return decodeResult{}, err
			}
		}
		t0 := time.Now()
		lg, err := m.Forward(cache, &glm5next.Batch{Tokens: toks, Layout: mgr.Layout(seqs, rows)})
		if err != nil {
			return decodeResult{}, err
		}
		host := make([]byte, lg.Bytes())
		err = be.Download(host, lg) // the per-step sync point, as in serving
		be.Free(lg)
		if err != nil {
			return decodeResult{}, err
		}
		if s > 0 { // step 0 warms up
			elapsed += time.Since(t0)
		}
	}
	profile("decode")
	ms := float64(elapsed.Microseconds()) / 1e3 / float64(steps)
	pms := float64(prefill.Microseconds()) / 1e3
	active := cfg.ParamCount().Active
	return decodeResult{Batch: B, Context: ctxLen, Steps: steps, MsPerStep: ms, TokensPerS: float64(B) * 1e3 / ms,
		PrefillMs: pms, PrefillTokensPS: float64(ctxLen) * 1e3 / pms, PrefillTFLOPs: 2 * float64(active) * float64(ctxLen) / (pms * 1e9),
		Graphs: graphs, CaptureMs: float64(rep.Duration.Microseconds()) / 1e3, GraphBytes: rep.GraphBytes}, nil
}

// deviceCopyBandwidth measures an accelerator's memory bandwidth the
// same way as copyBandwidth, with the backend's Copy of a 1 GiB tensor
// (bytes read + written per second, best of five timed batches of ten
// copies, each batch ended by Sync).
func deviceCopyBandwidth(be npu.Backend) (float64, error) {
	const n = 256 << 20 // F32 elements: 1 GiB
	src, err := be.Alloc(npu.F32, n)
	if err != nil {
		return 0, err
	}
	defer be.Free(src)
	dst, err := be.Alloc(npu.F32, n)
	if err != nil {
		return 0, err
	}
	defer be.Free(dst)
	be.Copy(dst, src) // warm up
	if err := be.Sync(); err != nil {
		return 0, err
	}
	best := 0.0
	for rep := 0; rep < 5; rep++ {
		t0 := time.Now()
		for range 10 {
			be.Copy(dst, src)
		}
		if err := be.Sync(); err != nil {
			return 0, err
		}
		best = max(best, 2*float64(10*4*n)/time.Since(t0).Seconds())
	}
	return best, nil
}

// copyBandwidth measures memory copy bandwidth (bytes read + written per
// second) with one goroutine per thread over buffers far larger than the
// caches: the physical limit a memory-bound decode step is compared with.
func copyBandwidth(threads int) float64 {
	const per = 64 << 20
	srcs := make([][]byte, threads)
	dsts := make([][]byte, threads)
	for i := range srcs {
		srcs[i] = make([]byte, per)
		dsts[i] = make([]byte, per)
		for j := 0; j < per; j += 4096 {
			srcs[i][j] = byte(j)
			dsts[i][j] = 0
		}
	}
	best := 0.0
	for rep := 0; rep < 5; rep++ {
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range srcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dsts[i], srcs[i])
			}()
		}
		wg.Wait()
		sec := time.Since(t0).Seconds()
		// STREAM's convention: a copy moves every byte twice (read and
		// write). Counting both is the conservative (higher) estimate of
		// the bandwidth a pure weight stream could reach.
		best = max(best, 2*float64(per*threads)/sec)
	}
	runtime.KeepAlive(dsts)
	return best
}
