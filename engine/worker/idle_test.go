package worker_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
)

// TestIdleTPGroupStaysUp: a TP group whose engine has no requests for
// several times the communicators' timeout still serves afterwards (the
// followers wait for the leader's next command in a bounded broadcast;
// the leader's keepalive keeps that wait short).
func TestIdleTPGroupStaysUp(t *testing.T) {
	cfg, err := config.LoadModel(filepath.Join(fixtures, "tiny"))
	if err != nil {
		t.Fatal(err)
	}
	const idle = 7 * time.Second
	opts := hccl.Options{Timeout: 3 * time.Second, InitTimeout: 20 * time.Second, Name: "world"}
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	topo := worker.Topology{DP: 1, TP: 2}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				world, err := hccl.Init(ri, r, 2, opts)
				if err != nil {
					return err
				}
				groups, err := worker.Join(world, topo, worker.JoinOptions{Comm: opts})
				if err != nil {
					return err
				}
				defer groups.Close()
				rk, err := worker.Start(worker.Config{
					Topology: topo, TPRank: r, Groups: groups, Random: cfg, RandomDType: "float32", Seed: 3, Threads: 1,
					Engine: core.Options{MaxNumSeqs: 2, MaxNumBatchedTokens: 32, NumBlocks: 16},
				})
				if err != nil {
					return err
				}
				if !rk.Leader() {
					return rk.Wait()
				}
				defer rk.Close()
				select {
				case <-rk.Done():
					return fmt.Errorf("the group stopped while idle: %v", rk.Wait())
				case <-time.After(idle):
				}
				p := sampling.DefaultParams()
				p.Temperature = sampling.Ptr(0.0)
				p.MaxTokens = sampling.Ptr(4)
				p.IgnoreEOS = true
				ch, err := rk.Engine().Add(&core.Request{ID: "after-idle", PromptTokens: []int32{5, 6, 7, 8}, Params: p})
				if err != nil {
					return err
				}
				var n int
				for o := range ch {
					n += len(o.Tokens)
					if o.Finished && o.FinishReason != "length" {
						return fmt.Errorf("request after %v idle: %q %v", idle, o.FinishReason, o.Err)
					}
				}
				if n != 4 {
					return fmt.Errorf("request after %v idle: %d tokens, want 4", idle, n)
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("TP rank %d: %v", r, err)
		}
	}
}
