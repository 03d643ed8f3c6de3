package worker_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// benchEnv marks a benchmark follower child: its spec, JSON.
const benchEnv = "NPUSERVE_WORKER_BENCH_CHILD"

// benchSpec is a follower rank of the decode benchmark.
type benchSpec struct {
	Root    string
	Rank    int
	TP      int
	Config  string
	Threads int
}

const smallConfig = "../../configs/small/config.json"

// BenchmarkDecodeTP measures decode steps of the small config (random
// bfloat16 weights, 64 tokens of context per sequence) at TP1 (one
// process, every core, and half the cores) and TP2 (this process as the
// leader plus one follower process, cores split between them), through
// the Leader: the
// batch broadcast, two all-reduces per layer, the vocabulary-parallel
// embedding all-reduce and logits all-gather are all in the timing.
//
//	go test ./engine/worker -run '^$' -bench DecodeTP -benchtime 20x
func BenchmarkDecodeTP(b *testing.B) {
	cfg := loadSmallConfig(b)
	cores := runtime.GOMAXPROCS(0)
	for _, d := range []struct{ tp, threads int }{{1, cores}, {1, max(cores/2, 1)}, {2, max(cores/2, 1)}} {
		if d.tp == 1 && d.threads == cores && cores == 1 {
			continue
		}
		tp, threads := d.tp, d.threads
		leader, stop := benchDeployment(b, cfg, tp, threads)
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("TP%d/threads%d/batch%d", tp, threads, batch), func(b *testing.B) {
				benchDecode(b, leader, batch, 64)
			})
		}
		stop()
	}
}

// benchDeployment starts TP tp with this process as the leader; stop
// ends the follower.
func benchDeployment(b *testing.B, cfg *config.ModelConfig, tp, threads int) (*worker.Leader, func()) {
	b.Helper()
	if tp == 1 {
		m, err := glm5next.NewRandomParallel(cpu.New(threads), cfg, "bfloat16", 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		return worker.NewLeader(m, nil), func() { m.Close() }
	}
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var cmds []*exec.Cmd
	for r := 1; r < tp; r++ {
		js, _ := json.Marshal(benchSpec{Root: ri.String(), Rank: r, TP: tp, Config: smallConfig, Threads: threads})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), benchEnv+"="+string(js))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	groups, m, err := benchRank(ri, 0, tp, cfg, threads, true)
	if err != nil {
		b.Fatal(err)
	}
	leader := worker.NewLeader(m, groups.TP)
	return leader, func() {
		leader.Shutdown()
		for _, c := range cmds {
			c.Wait()
		}
		m.Close()
		groups.Close()
	}
}

// benchRank joins rank of a TP-only deployment and builds its model
// (timing its TP collectives when timed).
func benchRank(ri hccl.RootInfo, rank, tp int, cfg *config.ModelConfig, threads int, timed bool) (*worker.Groups, *glm5next.Model, error) {
	opts := hccl.Options{Timeout: 60 * time.Second, InitTimeout: 60 * time.Second, Name: "world"}
	world, err := hccl.Init(ri, rank, tp, opts)
	if err != nil {
		return nil, nil, err
	}
	groups, err := worker.Join(world, worker.Topology{DP: 1, TP: tp}, worker.JoinOptions{Comm: opts})
	if err != nil {
		return nil, nil, err
	}
	if timed {
		groups.TP = &timedComm{Comm: groups.TP}
	}
	m, err := glm5next.NewRandomParallel(cpu.New(threads), cfg, "bfloat16", 1, &glm5next.Parallel{TPSize: tp, TPRank: rank, TP: groups.TP})
	if err != nil {
		groups.Close()
		return nil, nil, err
	}
	return groups, m, nil
}

// benchDecode prefills batch sequences of ctx tokens, then times decode
// steps (one token per sequence each).
func benchDecode(b *testing.B, l *worker.Leader, batch, ctx int) {
	cfg := l.Config()
	kp := cfg.IndexKPool
	bs := (64 + kp - 1) / kp * kp
	blocks := batch * ((ctx + b.N + 1 + bs - 1) / bs)
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: blocks, NumStateSlots: batch, KPool: kp})
	if err != nil {
		b.Fatal(err)
	}
	c, err := l.NewCache(blocks, bs, batch)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Release()
	seqs := make([]*kvcache.Seq, batch)
	rows := make([]int, batch)
	var toks []int32
	for i := range seqs {
		if seqs[i], err = mgr.Allocate(); err != nil {
			b.Fatal(err)
		}
		if err := mgr.Append(seqs[i], ctx); err != nil {
			b.Fatal(err)
		}
		rows[i] = ctx
		for p := range ctx {
			toks = append(toks, int32((i*131+p*17)%cfg.VocabSize))
		}
	}
	if lg, err := l.Forward(c, &glm5next.Batch{Tokens: toks, Layout: mgr.Layout(seqs, rows)}); err != nil {
		b.Fatal(err)
	} else {
		l.Backend().Free(lg)
	}
	toks = toks[:batch]
	for i := range rows {
		rows[i] = 1
	}
	tc, _ := l.Comm().(*timedComm)
	if tc != nil {
		tc.reset()
	}
	b.ResetTimer()
	start := time.Now()
	for step := range b.N {
		for i := range seqs {
			if err := mgr.Append(seqs[i], 1); err != nil {
				b.Fatal(err)
			}
			toks[i] = int32((i*7 + step*13) % cfg.VocabSize)
		}
		lg, err := l.Forward(c, &glm5next.Batch{Tokens: toks, Layout: mgr.Layout(seqs, rows)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := glm5next.DownloadRows(l.Backend(), lg); err != nil {
			b.Fatal(err)
		}
		l.Backend().Free(lg)
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Microseconds())/1000/float64(b.N), "ms/step")
	b.ReportMetric(float64(batch*b.N)/el.Seconds(), "tokens/s")
	if tc != nil {
		b.ReportMetric(float64(tc.spent.Microseconds())/1000/float64(b.N), "comm-ms/step")
		b.ReportMetric(float64(tc.calls)/float64(b.N), "collectives/step")
	}
}

// timedComm times the leader's TP collectives: the time spent in them,
// waiting for the follower included (its skew is part of the cost).
type timedComm struct {
	hccl.Comm
	spent time.Duration
	calls int
}

func (c *timedComm) reset() { c.spent, c.calls = 0, 0 }

func (c *timedComm) time(f func() error) error {
	t := time.Now()
	err := f()
	c.spent += time.Since(t)
	c.calls++
	return err
}

func (c *timedComm) AllReduce(t *npu.Tensor, op hccl.ReduceOp) error {
	return c.time(func() error { return c.Comm.AllReduce(t, op) })
}

func (c *timedComm) AllGather(out, in *npu.Tensor) error {
	return c.time(func() error { return c.Comm.AllGather(out, in) })
}

func (c *timedComm) Broadcast(t *npu.Tensor, root int) error {
	return c.time(func() error { return c.Comm.Broadcast(t, root) })
}

// runBenchChild is a benchmark follower: it follows the leader until it
// shuts the deployment down.
func runBenchChild(js string) int {
	var s benchSpec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	data, err := os.ReadFile(s.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg, err := config.ParseModel(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ri, err := hccl.ParseRootInfo(s.Root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	groups, m, err := benchRank(ri, s.Rank, s.TP, cfg, s.Threads, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer groups.Close()
	defer m.Close()
	if err := worker.Follow(m, groups.TP); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// BenchmarkTPCollectives is the communication floor of a TP2 decode step
// of the small config: the collectives BenchmarkDecodeTP's step runs
// (two broadcasts of the step, 25 all-reduces of [batch, hidden] — the
// embedding and two per layer — and the logits all-gather), back to back
// with no compute, between two ranks of this process over loopback TCP.
func BenchmarkTPCollectives(b *testing.B) {
	cfg := loadSmallConfig(b)
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	comms := make([]hccl.Comm, 2)
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			var err error
			comms[r], err = hccl.Init(ri, r, 2, hccl.Options{Name: "tp"})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	defer comms[0].Close()
	defer comms[1].Close()
	step := func(c hccl.Comm, batch int) error {
		be := cpu.New(1)
		hdr := npu.Must(be.Alloc(npu.I32, 5))
		payload := npu.Must(be.Alloc(npu.I32, 4+3*batch+3*batch+batch))
		h := npu.Must(be.Alloc(npu.F32, batch, cfg.HiddenSize))
		part := npu.Must(be.Alloc(npu.F32, batch, cfg.VocabSize/2))
		all := npu.Must(be.Alloc(npu.F32, 2, batch, cfg.VocabSize/2))
		if err := c.Broadcast(hdr, 0); err != nil {
			return err
		}
		if err := c.Broadcast(payload, 0); err != nil {
			return err
		}
		for range 1 + 2*cfg.NumHiddenLayers {
			if err := c.AllReduce(h, hccl.Sum); err != nil {
				return err
			}
		}
		return c.AllGather(all, part)
	}
	for _, batch := range []int{1, 8} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			done := make(chan error, 1)
			go func() {
				for range b.N {
					if err := step(comms[1], batch); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b.ResetTimer()
			for range b.N {
				if err := step(comms[0], batch); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/step")
		})
	}
}

// loadSmallConfig parses configs/small/config.json (skipping the
// benchmark when it is not there).
func loadSmallConfig(b *testing.B) *config.ModelConfig {
	data, err := os.ReadFile(smallConfig)
	if err != nil {
		b.Skip(err)
	}
	cfg, err := config.ParseModel(data)
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}
