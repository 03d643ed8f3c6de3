package dp

import (
	"cmp"
	"fmt"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// RankSpec says how a node starts its device ranks (one OS process per
// device rank, see RunRank; every DP rank's TP group lives on one node).
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
	// Device is the ranks' backend (npu.Open's name; "": cpu) and
	// CacheDType the per-token cache's element type (0: the model's
	// default for the backend).
	Device     string
	CacheDType npu.DType
	// Engine configures every DP rank's engine.
	Engine   core.Options
	IdleWait time.Duration
	// ListenHost is this node's address on the network the nodes share:
	// the communicators' listeners bind and advertise it.
	ListenHost string
	// Comm are the communicators' options (operation and init timeouts).
	Comm hccl.Options
}

// dpRank is a DP rank as its TP leader's process sees it: the leader's
// worker rank (ranks[0]) and communicators.
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

// startRank starts device rank (dp, tp) of spec's topology in this
// process: it joins the world communicator of ri, builds its groups and
// loads its share of the model. Every device rank of the deployment must
// start for any Init to return.
func startRank(spec RankSpec, ri hccl.RootInfo, dp, tp, local int) (*worker.Rank, *worker.Groups, error) {
	topo := spec.Topology
	threads := spec.Threads
	if threads <= 0 {
		threads = 1
	}
	// The device first: its transport makes the groups' root infos, and
	// the rank's local index on this node is its accelerator.
	dev := cmp.Or(spec.Device, "cpu")
	be, err := npu.Open(dev, npu.OpenOptions{Device: local, Threads: threads})
	if err != nil {
		return nil, nil, fmt.Errorf("DP rank %d TP rank %d: --device %s: %w", dp, tp, dev, err)
	}
	o := spec.Comm
	o.Name, o.Device = "world", local
	world, err := hccl.Init(ri, dp*topo.TP+tp, topo.Size(), o)
	if err != nil {
		return nil, nil, fmt.Errorf("DP rank %d TP rank %d: joining the world communicator: %w", dp, tp, err)
	}
	jo := worker.JoinOptions{ListenHost: spec.ListenHost, Comm: spec.Comm, Transport: npu.TransportOf(be.Name())}
	jo.Comm.Device = local
	groups, err := worker.Join(world, topo, jo)
	if err != nil {
		world.Close()
		return nil, nil, fmt.Errorf("DP rank %d TP rank %d: %w", dp, tp, err)
	}
	r, err := worker.Start(worker.Config{Topology: topo, DPRank: dp, TPRank: tp, Groups: groups,
		ModelDir: spec.ModelDir, Load: spec.Load, Random: spec.Random, RandomDType: spec.RandomDType, Seed: spec.Seed,
		Backend: be, CacheDType: spec.CacheDType, Threads: threads, Engine: spec.Engine, IdleWait: spec.IdleWait})
	if err != nil {
		err = fmt.Errorf("DP rank %d TP rank %d: %w", dp, tp, err)
		groups.Abort(err)
		groups.Close()
		return nil, nil, err
	}
	return r, groups, nil
}
