package dp

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
)

// RankSpec says how a node starts its device ranks (one goroutine per
// device rank on the CPU backend; every DP rank's TP group lives on one
// node).
type RankSpec struct {
	Topology worker.Topology
	// The model: a checkpoint directory, or random weights (Random).
	ModelDir    string
	Load        glm5next.LoadOptions
	Random      *config.ModelConfig
	RandomDType string
	Seed        int64
	// Threads per rank for the CPU backend (0: 1).
	Threads int
	// Engine configures every DP rank's engine.
	Engine   core.Options
	IdleWait time.Duration
	// ListenHost is this node's address on the network the nodes share:
	// the communicators' listeners bind and advertise it.
	ListenHost string
	// Comm are the communicators' options (operation and init timeouts).
	Comm hccl.Options
}

// dpRank is one local DP rank: its TP ranks, leader first.
type dpRank struct {
	dp     int
	ranks  []*worker.Rank
	groups []*worker.Groups
}

// engine is the DP rank's engine (its leader's).
func (d *dpRank) engine() *core.Engine { return d.ranks[0].Engine() }

// abort poisons the rank's communicators so that blocked collectives
// return.
func (d *dpRank) abort(reason error) {
	for _, g := range d.groups {
		g.Abort(reason)
	}
}

// close stops the rank (bounded: a rank stuck in a collective is aborted
// first by the caller) and closes its communicators.
func (d *dpRank) close() {
	for i := len(d.ranks) - 1; i >= 0; i-- {
		d.ranks[i].Close()
	}
	for _, g := range d.groups {
		g.Close()
	}
}

// startRanks starts DP ranks [start, start+local) of spec's topology on
// this node: every device rank joins the world communicator of ri, builds
// its groups and loads its share of the model. All device ranks of the
// deployment must start for any Init to return; a failure aborts the
// ranks already up.
func startRanks(spec RankSpec, ri hccl.RootInfo, start, local int) ([]*dpRank, error) {
	topo := spec.Topology
	size := topo.Size()
	out := make([]*dpRank, local)
	for i := range out {
		out[i] = &dpRank{dp: start + i, ranks: make([]*worker.Rank, topo.TP), groups: make([]*worker.Groups, topo.TP)}
	}
	threads := spec.Threads
	if threads <= 0 {
		threads = 1
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	abortAll := func(err error) {
		for _, d := range out {
			for _, g := range d.groups {
				if g != nil {
					g.Abort(err)
				}
			}
		}
	}
	for i := range out {
		for t := 0; t < topo.TP; t++ {
			wg.Add(1)
			go func(d *dpRank, t int) {
				defer wg.Done()
				g := d.dp*topo.TP + t
				fail := func(err error) {
					mu.Lock()
					errs = append(errs, err)
					abortAll(err)
					mu.Unlock()
				}
				o := spec.Comm
				o.Name = "world"
				world, err := hccl.Init(ri, g, size, o)
				if err != nil {
					fail(fmt.Errorf("DP rank %d TP rank %d: joining the world communicator: %w", d.dp, t, err))
					return
				}
				groups, err := worker.Join(world, topo, worker.JoinOptions{ListenHost: spec.ListenHost, Comm: spec.Comm})
				if err != nil {
					world.Close()
					fail(fmt.Errorf("DP rank %d TP rank %d: %w", d.dp, t, err))
					return
				}
				mu.Lock()
				d.groups[t] = groups
				mu.Unlock()
				r, err := worker.Start(worker.Config{Topology: topo, DPRank: d.dp, TPRank: t, Groups: groups,
					ModelDir: spec.ModelDir, Load: spec.Load, Random: spec.Random, RandomDType: spec.RandomDType, Seed: spec.Seed,
					Threads: threads, Engine: spec.Engine, IdleWait: spec.IdleWait})
				if err != nil {
					fail(fmt.Errorf("DP rank %d TP rank %d: %w", d.dp, t, err))
					return
				}
				mu.Lock()
				d.ranks[t] = r
				mu.Unlock()
			}(out[i], t)
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		for _, d := range out {
			for _, r := range d.ranks {
				if r != nil {
					go r.Close()
				}
			}
		}
		return nil, errors.Join(errs...)
	}
	return out, nil
}
