package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/dp"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/server"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/sirupsen/logrus"
)

// multiRank reports whether args ask for more than one device rank or for
// a headless node: those run through engine/dp.
func multiRank(a *config.EngineArgs) bool {
	return a.Headless || a.DataParallelSize > 1 || a.TensorParallelSize > 1 || a.EnableExpertParallel
}

// envSeconds reads a duration in seconds from the first set variable.
func envSeconds(def time.Duration, names ...string) time.Duration {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
				return time.Duration(s * float64(time.Second))
			}
			logrus.Warnf("%s=%q is not a number of seconds; using %s", n, v, def)
		}
	}
	return def
}

// nodeIP is this node's address for the other nodes: NPUSERVE_HOST_IP,
// VLLM_HOST_IP or HCCL_IF_IP when set ("" lets engine/dp find the
// interface that routes to the head).
func nodeIP() string {
	for _, n := range []string{"NPUSERVE_HOST_IP", "VLLM_HOST_IP", "HCCL_IF_IP"} {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// rankSpec is the node's rank layout and per-rank engine options.
func rankSpec(args *config.EngineArgs, dir string, mc *config.ModelConfig, gen *config.GenerationConfig, plan *config.Plan, local int) (dp.RankSpec, error) {
	dtype, err := cpuDType(args.Dtype)
	if err != nil {
		return dp.RankSpec{}, fmt.Errorf("--dtype: %v", err)
	}
	ranks := local * args.TensorParallelSize
	threads := args.Threads
	if threads == 0 {
		threads = max(1, runtime.NumCPU()/ranks)
	}
	// The cache of one rank: what max_num_seqs sequences of max_model_len
	// need at the plan's cache dtype, within the CPU cap shared by the
	// node's ranks.
	need := int64(plan.Scheduler.MaxNumSeqs) * plan.Cache.BytesPerMaxLenSequence
	cacheBytes := max(min(need, cpuCacheCap/int64(ranks)), 16<<20)
	spec := dp.RankSpec{
		Topology:   worker.Topology{DP: args.DataParallelSize, TP: args.TensorParallelSize, EP: args.EnableExpertParallel},
		Threads:    threads,
		Device:     plan.Device.Backend,
		CacheDType: config.CacheNPUDType(plan.Cache.Dtype),
		Engine: core.Options{MaxNumSeqs: plan.Scheduler.MaxNumSeqs, MaxNumBatchedTokens: plan.Scheduler.MaxNumBatchedTokens,
			MaxModelLen: plan.Scheduler.MaxModelLen, BlockSize: plan.Scheduler.BlockSize, CacheBytes: cacheBytes,
			EOSTokenIDs: eosIDs(nil, gen, mc), Logf: logrus.Errorf},
	}
	// HCCL_EXEC_TIMEOUT (seconds, as HCCL reads it) bounds every
	// collective of the ranks' communicators, the TCP transport's too.
	spec.Comm.Timeout = envSeconds(0, "HCCL_EXEC_TIMEOUT")
	if args.LoadFormat == "dummy" {
		spec.Random, spec.RandomDType, spec.Seed = mc, dtype, args.Seed
	} else {
		spec.ModelDir, spec.Load = dir, glm5next.LoadOptions{DType: dtype, Quantization: config.LoaderQuantization(args.Quantization)}
	}
	sp, err := config.ParseSpeculative(args.SpeculativeConfig)
	if err != nil {
		return dp.RankSpec{}, err
	}
	if sp != nil {
		// Every rank loads (or, dummy, draws) its share of the MTP layer.
		spec.Load.MTP, spec.Engine.NumSpeculativeTokens = true, sp.NumSpeculativeTokens
	}
	return spec, nil
}

// runServeParallel serves a multi-rank layout: a --headless node runs its
// DP ranks for the head; the head (any other node) runs the API server,
// the DP coordinator on --data-parallel-rpc-port and its local DP ranks.
// Either node runs each local device rank as a child process (this
// command re-executed with dp.RankEnv set), which takes the same path up
// to here and then runs dp.RunRank.
func runServeParallel(args *config.EngineArgs, dir string, mc *config.ModelConfig, gen *config.GenerationConfig, plan *config.Plan) error {
	if _, err := openDevice(plan.Device.Backend, 1); err != nil { // fail fast, before any rank starts
		return runError("serve: %v", err)
	}
	local := args.DataParallelSizeLocal
	if local < 0 {
		local = args.DataParallelSize - args.DataParallelStartRank
	}
	settings, err := dp.SettingsFrom(args, mc, plan)
	if err != nil {
		return runError("serve: %v", err)
	}
	var tok *tokenizer.Tokenizer
	if !args.SkipTokenizerInit {
		if tok, err = tokenizer.Load(dir); err != nil {
			return runError("--model: %v (use --skip-tokenizer-init to serve token ids only)", err)
		}
	}
	spec, err := rankSpec(args, dir, mc, gen, plan, local)
	if err != nil {
		return usageError("%v", err)
	}
	spec.Engine.EOSTokenIDs = eosIDs(tok, gen, mc)
	spec.ListenHost = nodeIP()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// A rank process: the node's main process started this one for a
	// single device rank (engine/dp spawns one per local device rank).
	if role, ok, err := dp.RoleFromEnv(); ok {
		if err != nil {
			return runError("serve: %v", err)
		}
		if err := dp.RunRank(ctx, spec, settings, role, logrus.Infof); err != nil {
			logrus.Errorf("DP rank %d TP rank %d exiting: %v", role.DPRank, role.TPRank, err)
			return runError("serve: rank process: %v", err)
		}
		return nil
	}

	for _, x := range args.WithoutEffect(plan.Device.Backend) {
		logrus.Warnf("%s is accepted without effect: %s", x.Flag, x.Reason)
	}
	if args.Headless {
		logrus.Infof("Headless node: DP ranks %d..%d of %d (TP %d, expert parallel %v); head %s:%d",
			args.DataParallelStartRank, args.DataParallelStartRank+local-1, args.DataParallelSize, args.TensorParallelSize,
			args.EnableExpertParallel, args.DataParallelAddress, args.DataParallelRPCPort)
		err := dp.RunHeadless(ctx, dp.HeadlessConfig{Spec: spec, Settings: settings, Start: args.DataParallelStartRank, Local: local,
			HeadAddress: args.DataParallelAddress, RPCPort: args.DataParallelRPCPort, Host: nodeIP(),
			ConnectTimeout: envSeconds(dp.DefaultConnectTimeout, "NPUSERVE_DP_CONNECT_TIMEOUT"), Logf: logrus.Infof})
		if err != nil {
			logrus.Errorf("headless node exiting: %v", err)
			return runError("serve: --headless: %v", err)
		}
		logrus.Info("Headless node stopped")
		return nil
	}
	if args.DataParallelStartRank != 0 {
		return usageError("serve: --data-parallel-start-rank %d without --headless: only the head (start rank 0) runs the API server in this build", args.DataParallelStartRank)
	}
	address := args.DataParallelAddress
	if address == "" {
		address = nodeIP()
	}
	if address == "" && local < args.DataParallelSize {
		return usageError("serve: --data-parallel-address: DP ranks %d..%d run on other nodes, which must reach this head: give its address (or set HCCL_IF_IP)",
			local, args.DataParallelSize-1)
	}
	head, err := dp.StartHead(ctx, dp.HeadConfig{Spec: spec, Settings: settings, Local: local, Address: address,
		RPCPort: args.DataParallelRPCPort, StartTimeout: envSeconds(dp.DefaultStartTimeout, "VLLM_ENGINE_READY_TIMEOUT_S"), Logf: logrus.Infof})
	if err != nil {
		return runError("serve: %v", err)
	}
	defer head.Close()

	templates, override, err := loadTemplates(dir, args.ChatTemplate, tok != nil)
	if err != nil {
		return usageError("--chat-template: %v", err)
	}
	srv, err := server.New(head, tok, serverOptions(args, dir, templates, override, gen, mc.VocabSize))
	if err != nil {
		return usageError("serve: %v", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(args.Host, strconv.Itoa(args.Port)))
	if err != nil {
		return runError("--port: %v", err)
	}
	logrus.Infof("Starting npuserve API server on http://%s (model %q, DP %d × TP %d, expert parallel %v, max_model_len %d)",
		ln.Addr(), args.ServedModelNames()[0], args.DataParallelSize, args.TensorParallelSize, args.EnableExpertParallel, plan.Scheduler.MaxModelLen)
	// A failed DP group keeps answering 503 (health included) until
	// stopped: the operator restarts every node.
	if err := srv.Serve(ctx, ln, shutdownGrace); err != nil && !errors.Is(err, net.ErrClosed) {
		return runError("serve: %v", err)
	}
	logrus.Info("Server stopped")
	if err := head.Err(); err != nil {
		return runError("serve: the data-parallel group failed: %v", err)
	}
	return nil
}
