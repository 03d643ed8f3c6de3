package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/npuserve/npuserve/engine/chattemplate"
	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/dp"
	enginemodel "github.com/npuserve/npuserve/engine/model"
	_ "github.com/npuserve/npuserve/engine/model/glm5next" // registers glm5_next
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/server"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/npuserve/npuserve/npu"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
)

// CPU cache sizing: the cache takes --gpu-memory-utilization of host RAM
// minus the weights, but never more than cpuCacheCap nor more than
// max_num_seqs sequences of max_model_len need (memory beyond that can
// never be used).
const cpuCacheCap = int64(4) << 30

// shutdownGrace is how long in-flight requests may run after SIGINT or
// SIGTERM before their connections are cut (a second signal cuts them at
// once).
const shutdownGrace = 30 * time.Second

// The serve command's help line and arguments.
const (
	serveUsage     = "serve a model with an OpenAI-compatible HTTP API (vllm serve's flags)"
	serveArgsUsage = "MODEL_DIR [flags]"
)

// serveCommand is `npuserve serve`. urfave/cli only dispatches it: the
// arguments are vLLM's command line, parsed by serveArgs with the engine
// flags of engine/config, and -h/--help prints their help.
func serveCommand() *cli.Command {
	var help strings.Builder
	writeEngineFlagsHelp(&help, "serve", serveUsage, serveArgsUsage)
	return &cli.Command{
		Name:               "serve",
		Usage:              serveUsage,
		ArgsUsage:          serveArgsUsage,
		SkipFlagParsing:    true,
		HideHelp:           true,
		CustomHelpTemplate: helpTemplate(help.String()), // npuserve help serve
		Action:             runServe,
	}
}

func runServe(c *cli.Context) error {
	args, help, err := serveArgs(c.Args().Slice())
	if err != nil {
		return usageError("serve: %v", err)
	}
	if help {
		if err := writeEngineFlagsHelp(c.App.Writer, "serve", serveUsage, serveArgsUsage); err != nil {
			return runError("serve: %v", err)
		}
		return nil
	}
	if args.Device == "auto" {
		// Resolve auto first: the plan depends on the backend.
		be, err := openDevice("auto", args.Threads)
		if err != nil {
			return runError("serve: %v", err)
		}
		args.Device = be.Name()
	}
	// An Ascend weight format that merely implied the Ascend backend runs
	// on it where CANN loads, else on the cpu backend (--dry-run still
	// plans the Ascend deployment vllm-ascend would run).
	var onCPU string
	if !args.DryRun && args.Device == "ascend" {
		onCPU = args.RunImpliedAscendOnCPU(npu.Available("ascend"))
	}
	dir := args.Model
	modelCfg, err := config.LoadModel(dir)
	if err != nil {
		return runError("--model: %v", err)
	}
	gen, err := args.LoadGenerationConfig(dir)
	if err != nil {
		return runError("%v", err)
	}
	plan, planErr := config.BuildPlan(args, modelCfg, gen)
	if args.DryRun {
		if plan != nil {
			b, err := plan.JSON()
			if err != nil {
				return runError("serve: %v", err)
			}
			os.Stdout.Write(b)
		}
		if planErr != nil {
			return usageError("serve: %v", planErr)
		}
		return nil
	}
	if planErr != nil {
		return usageError("serve: %v", planErr)
	}
	if onCPU != "" && os.Getenv(dp.RankEnv) == "" { // once, not in each rank process
		logrus.Warn(onCPU)
	}
	spec, err := config.ParseSpeculative(args.SpeculativeConfig)
	if err != nil {
		return usageError("serve: %v", err)
	}
	graphs, err := args.Graphs(plan.Scheduler.MaxNumSeqs)
	if err != nil {
		return usageError("serve: %v", err)
	}
	if multiRank(args) {
		if graphs.Decode && slices.Contains(config.GraphBackends, plan.Device.Backend) {
			logrus.Warnf("--compilation-config: decode graphs with tensor, data or expert parallelism are not implemented yet; every step runs eagerly")
		}
		if spec != nil && os.Getenv(dp.RankEnv) == "" { // once, not in each rank process
			logSpeculative(spec)
		}
		return runServeParallel(args, dir, modelCfg, gen, plan)
	}
	be, err := openDevice(plan.Device.Backend, args.Threads)
	if err != nil {
		return runError("serve: %v", err)
	}
	logrus.Infof("Device: the %s backend (%s): %s", be.Name(), plan.Device.BackendSource, be.Info().Name)
	for _, x := range args.WithoutEffect(plan.Device.Backend) {
		logrus.Warnf("%s is accepted without effect: %s", x.Flag, x.Reason)
	}

	dtype, err := cpuDType(args.Dtype)
	if err != nil {
		return usageError("--dtype: %v", err)
	}
	t0 := time.Now()
	// The implementation is the one registered for config.json's
	// model_type (engine/model).
	opt := enginemodel.OpenOptions{DType: dtype, Quantization: config.LoaderQuantization(args.Quantization), Log: logrus.Infof,
		Random: args.LoadFormat == "dummy", Seed: args.Seed, MTP: spec != nil}
	if isatty.IsTerminal(os.Stderr.Fd()) && !opt.Random {
		opt.Progress = os.Stderr
	}
	model, err := enginemodel.Open(be, dir, modelCfg, opt)
	switch {
	case err != nil && opt.Random:
		return runError("--load-format dummy: %v", err)
	case err != nil:
		return runError("--model: %v", err)
	case opt.Random:
		logrus.Infof("Built %s with random weights (--load-format dummy) in %.2f s", dir, time.Since(t0).Seconds())
	default:
		logrus.Infof("Loaded %s in %.2f s", dir, time.Since(t0).Seconds())
	}
	defer model.Close()
	if err := model.SetCacheDType(config.CacheNPUDType(plan.Cache.Dtype)); err != nil {
		return runError("--kv-cache-dtype: %v", err)
	}

	var tok *tokenizer.Tokenizer
	if !args.SkipTokenizerInit {
		if tok, err = tokenizer.Load(dir); err != nil {
			return runError("--model: %v (use --skip-tokenizer-init to serve token ids only)", err)
		}
		for _, w := range tok.Warnings() {
			logrus.Warnf("tokenizer: %s", w)
		}
	}
	templates, override, err := loadTemplates(dir, args.ChatTemplate, tok != nil)
	if err != nil {
		return usageError("--chat-template: %v", err)
	}

	eos := eosIDs(tok, gen, modelCfg)
	cacheBytes := cpuCacheBytes(be.Info().MemoryBytes, args.GPUMemoryUtilization, plan, model)
	var srv *server.Server
	engOpt := core.Options{
		MaxNumSeqs:          plan.Scheduler.MaxNumSeqs,
		MaxNumBatchedTokens: plan.Scheduler.MaxNumBatchedTokens,
		MaxModelLen:         plan.Scheduler.MaxModelLen,
		BlockSize:           plan.Scheduler.BlockSize,
		CacheBytes:          cacheBytes,
		EOSTokenIDs:         eos,
		MaxLogprobs:         args.MaxLogprobs,
		OnStep: func(st core.StepStats) {
			if srv != nil {
				srv.OnStep(st)
			}
		},
		Logf: logrus.Errorf,
	}
	if spec != nil {
		engOpt.NumSpeculativeTokens = spec.NumSpeculativeTokens
		logSpeculative(spec)
	}
	if slices.Contains(config.GraphBackends, plan.Device.Backend) {
		for _, n := range graphs.Notes {
			logrus.Warnf("--compilation-config: %s", n)
		}
		if graphs.Decode {
			engOpt.DecodeGraphs = graphs.Sizes
			engOpt.OnGraphs = logGraphs
		}
	}
	eng, err := core.New(model, engOpt)
	if err != nil && !args.Given("max-model-len") && strings.Contains(err.Error(), "max seq len") {
		// max_position_embeddings does not fit in the cache: serve the
		// longest context that does (what --max-model-len auto does).
		logrus.Warnf("%v; serving the longest context that fits", err)
		engOpt.MaxModelLen = 0
		eng, err = core.New(model, engOpt)
	}
	if err != nil {
		return runError("serve: %v (lower --max-model-len or --max-num-seqs, or raise --gpu-memory-utilization)", err)
	}
	defer eng.Close()
	st := eng.Stats()
	logCapacity(st, cacheBytes, model)

	srv, err = server.New(eng, tok, serverOptions(args, dir, templates, override, gen, modelCfg.VocabSize))
	if err != nil {
		return usageError("serve: %v", err)
	}

	host := args.Host
	addr := net.JoinHostPort(host, strconv.Itoa(args.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return runError("--port: %v", err)
	}
	shown := host
	if shown == "" {
		shown = "0.0.0.0"
	}
	logrus.Infof("Starting npuserve API server on http://%s (model %q, max_model_len %d)", net.JoinHostPort(shown, strconv.Itoa(args.Port)),
		args.ServedModelNames()[0], st.MaxModelLen)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	engineDied := false
	go func() {
		select {
		case s := <-sigs:
			logrus.Infof("Received %v: shutting down (in-flight requests may finish for up to %s; signal again to stop now)", s, shutdownGrace)
			stop()
		case <-eng.Done():
			if eng.Err() != nil {
				logrus.Errorf("engine failed: %v", eng.Err())
				engineDied = true
			}
			stop()
			return
		}
		select {
		case <-sigs:
			logrus.Warn("Second signal: aborting in-flight requests")
			srv.ForceClose()
		case <-eng.Done():
		}
	}()
	if err := srv.Serve(ctx, ln, shutdownGrace); err != nil && !errors.Is(err, net.ErrClosed) {
		return runError("serve: %v", err)
	}
	logrus.Info("Server stopped")
	if engineDied {
		return runError("serve: the engine failed: %v", eng.Err())
	}
	return nil
}

// cpuDType maps --dtype to the weight dtype the CPU backend loads.
func cpuDType(d string) (string, error) {
	switch d {
	case "auto", "":
		return "auto", nil
	case "float32", "float":
		return "float32", nil
	case "bfloat16":
		return "bfloat16", nil
	}
	return "", fmt.Errorf("the cpu backend runs auto, float32 or bfloat16 weights, not %s", d)
}

// cpuCacheBytes sizes the cache on the CPU: --gpu-memory-utilization of
// host RAM minus the weights, capped at cpuCacheCap and at what
// max_num_seqs sequences of max_model_len can ever use.
func cpuCacheBytes(ram int64, util float64, plan *config.Plan, m enginemodel.Model) int64 {
	weights := plan.Weights.BytesPerRank
	budget := int64(float64(ram)*util) - weights
	bs := int64(plan.Scheduler.BlockSize)
	perSeq := (int64(plan.Scheduler.MaxModelLen)+bs-1)/bs*bs*m.BytesPerToken() + m.BytesPerSequenceState()
	need := int64(plan.Scheduler.MaxNumSeqs) * perSeq
	c := min(budget, cpuCacheCap, need)
	// At least one full-length sequence and the state slots, so that a
	// small machine still starts (the engine reports what fits).
	floor := int64(plan.Scheduler.MaxNumSeqs)*m.BytesPerSequenceState() + perSeq
	return max(c, floor)
}

// logCapacity logs the cache and how many sequences of max_model_len fit.
// logGraphs logs the decode graphs' capture (vLLM logs "Graph capturing
// finished in N secs, took X GiB"), or why there are none.
func logGraphs(rep enginemodel.GraphReport, err error) {
	if err != nil {
		logrus.Warnf("--compilation-config is accepted without effect: %v; every step runs eagerly", err)
		return
	}
	logrus.Infof("Graph capturing finished in %.2f secs: decode steps of batch sizes %v; graph memory %.1f MiB, fixed buffers %.1f MiB",
		rep.Duration.Seconds(), rep.Sizes, float64(rep.GraphBytes)/(1<<20), float64(rep.ScratchBytes)/(1<<20))
}

func logCapacity(st core.Stats, cacheBytes int64, m enginemodel.Loaded) {
	tokens := st.NumBlocks * st.BlockSize
	perSeq := (st.MaxModelLen + st.BlockSize - 1) / st.BlockSize * st.BlockSize
	conc := 0
	if perSeq > 0 {
		conc = min(tokens/perSeq, st.NumStateSlots)
	}
	logrus.Infof("KV cache: %d blocks of %d tokens = %d tokens (%v, %.1f MiB, %d B/token) + %d sequence state slots (%.1f MiB)",
		st.NumBlocks, st.BlockSize, tokens, m.CacheDType(), float64(int64(tokens)*m.BytesPerToken())/(1<<20), m.BytesPerToken(),
		st.NumStateSlots, float64(int64(st.NumStateSlots)*m.BytesPerSequenceState())/(1<<20))
	logrus.Infof("Capacity: %d concurrent sequences at max-model-len %d (max-num-seqs %d)", conc, st.MaxModelLen, st.NumStateSlots)
}

// eosIDs is the engine's EOS list: the tokenizer's EOS token first, then
// generation_config.json's eos_token_id values (else config.json's).
func eosIDs(tok *tokenizer.Tokenizer, gen *config.GenerationConfig, mc *config.ModelConfig) []int32 {
	var out []int32
	add := func(id int) {
		for _, x := range out {
			if x == int32(id) {
				return
			}
		}
		if id >= 0 && id < mc.VocabSize {
			out = append(out, int32(id))
		}
	}
	if tok != nil {
		if e, ok := tok.EOS(); ok {
			add(e.ID)
		}
	}
	extra := mc.EOSTokenID
	if gen != nil && len(gen.EOSTokenID) > 0 {
		extra = gen.EOSTokenID
	}
	for _, id := range extra {
		add(id)
	}
	return out
}

// loadTemplates loads the model's chat templates and the --chat-template
// override (a file, or the template text itself, as vLLM's
// load_chat_template accepts).
func loadTemplates(dir, override string, haveTokenizer bool) (*chattemplate.ModelTemplates, *chattemplate.Template, error) {
	var templates *chattemplate.ModelTemplates
	if haveTokenizer {
		t, err := chattemplate.LoadFromModelDir(dir)
		if err != nil {
			logrus.Warnf("no chat template: %v (chat requests need --chat-template)", err)
		} else {
			templates = t
		}
	}
	if override == "" {
		return templates, nil, nil
	}
	src := override
	if data, err := os.ReadFile(override); err == nil {
		src = string(data)
	} else if !strings.ContainsAny(override, "{}\n") {
		if filepath.Ext(override) != "" || strings.ContainsRune(override, os.PathSeparator) {
			return nil, nil, fmt.Errorf("the supplied chat template (%s) appears path-like, but doesn't exist", override)
		}
	}
	t, err := chattemplate.Compile(src)
	if err != nil {
		return nil, nil, err
	}
	return templates, t, nil
}

// serverOptions turns the engine arguments into the HTTP server's options,
// for the single-rank and the multi-rank serve paths alike. It also seeds the
// generator that hands out seeds to requests without one (--seed), as
// vLLM's --seed seeds its global generator.
func serverOptions(args *config.EngineArgs, dir string, templates *chattemplate.ModelTemplates, override *chattemplate.Template,
	gen *config.GenerationConfig, vocab int) server.Options {
	if args.Given("seed") {
		sampling.SetGlobalSeed(uint64(args.Seed))
	}
	genDefaults := sampling.GenerationDefaults{}
	if gen != nil {
		genDefaults = sampling.GenerationDefaults{Temperature: gen.Temperature, TopP: gen.TopP, TopK: gen.TopK, MinP: gen.MinP,
			RepetitionPenalty: gen.RepetitionPenalty, MaxTokens: gen.MaxNewTokens}.WithoutHFClassDefaults()
	}
	var keys []string
	if args.APIKey != "" {
		keys = []string{args.APIKey}
	} else if k := os.Getenv("VLLM_API_KEY"); k != "" {
		keys = []string{k}
	}
	maxLogprobs := 20
	if args.Given("max-logprobs") {
		maxLogprobs = args.MaxLogprobs
	}
	return server.Options{
		ServedModelNames: args.ServedModelNames(), ModelPath: dir, APIKeys: keys,
		Templates: templates, ChatTemplate: override, ContentFormat: args.ChatTemplateContentFormat,
		ReasoningParser: args.ReasoningParser, ToolCallParser: args.ToolCallParser, EnableAutoToolChoice: args.EnableAutoToolChoice,
		Generation: genDefaults, DisableLogStats: args.DisableLogStats, LogRequests: args.EnableLogRequests,
		Version: version, VocabSize: vocab, Log: logrus.StandardLogger(),
		MaxLogprobs: maxLogprobs, TrustRequestChatTemplate: args.TrustRequestChatTemplate,
		EnableForceIncludeUsage: args.EnableForceIncludeUsage, ReturnTokensAsTokenIDs: args.ReturnTokensAsTokenIDs,
		CORS: server.CORS{AllowedOrigins: args.AllowedOrigins, AllowedMethods: args.AllowedMethods,
			AllowedHeaders: args.AllowedHeaders, AllowCredentials: args.AllowCredentials},
		MaxBodyBytes: int64(args.MaxRequestBodyBytes), Limits: serverLimits(args),
	}
}

// serverLimits maps the HTTP limit flags to the server's Limits. Without
// --timeout-keep-alive, vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE sets it.
func serverLimits(args *config.EngineArgs) server.Limits {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	keepAlive := sec(args.TimeoutKeepAlive)
	if !args.Given("timeout-keep-alive") {
		keepAlive = envSeconds(keepAlive, "VLLM_HTTP_TIMEOUT_KEEP_ALIVE")
	}
	l := server.Limits{KeepAlive: keepAlive, ReadTimeout: sec(args.TimeoutRead), WriteTimeout: sec(args.TimeoutWrite),
		MaxConnections: args.LimitConcurrency, MaxHeaderBytes: args.H11MaxIncompleteEventSize, MaxHeaderCount: args.H11MaxHeaderCount,
		MaxPromptChars: args.MaxPromptChars}
	if args.MaxNumQueuedReqs >= 0 {
		l.MaxQueuedRequests = &args.MaxNumQueuedReqs
	}
	return l
}
