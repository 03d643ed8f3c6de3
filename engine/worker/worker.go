// Package worker runs one device rank of a data-, tensor- and
// expert-parallel deployment: one process (or goroutine) per rank, joined
// by hccl communicators.
//
// Roles. Each DP rank is a TP group; its TP rank 0 is the leader, which
// owns the DP rank's scheduler (an engine/core Engine) and drives the
// model through a Leader: before every NewCache, Forward and DummyStep the
// leader broadcasts the call and the batch (tokens and cache layout) to
// its TP followers, which run the same call (Follow). Only the leader
// samples. With expert parallelism (Topology.EP) the routed experts are
// split over every rank of every DP rank, and the DP leaders step in
// lockstep (Lockstep): each loop iteration all-reduces [has work,
// closing]; when any rank has work every rank runs exactly one forward, a
// dummy one (no rows, the same EP collectives) when it has nothing
// scheduled. So every rank reaches every collective on every step by
// construction: a forward's collective sequence does not depend on its
// batch, and the decision to run one is the same on every rank.
//
// Starting a deployment (what a launcher does on every rank):
//
//	world, _ := hccl.Init(rootInfo, globalRank, dp*tp, opts) // rootInfo from global rank 0's hccl.NewRootInfo
//	groups, _ := worker.Join(world, topo, worker.JoinOptions{ListenHost: nodeIP})
//	r, _ := worker.Start(worker.Config{Topology: topo, DPRank: d, TPRank: t, Groups: groups, ModelDir: dir, Engine: opts})
//	if r.Leader() { use r.Engine() (Add, Abort, Stats) }
//	... r.Close() (leader: stops its engine, with lockstep the whole DP group) or r.Wait() (follower)
//	groups.Close()
package worker

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/npu"
)

// Config describes one rank.
type Config struct {
	Topology
	// DPRank and TPRank place the rank; its world rank (Groups.World) must
	// be DPRank·TP + TPRank.
	DPRank, TPRank int
	// Groups are the rank's communicators (Join). The caller keeps them
	// and closes them after the rank stopped; a failing rank aborts them
	// so that its peers fail fast.
	Groups *Groups

	// The model: a checkpoint directory (ModelDir, read with Load; its
	// Parallel is set by Start), or random weights for Random's config
	// (RandomDType, Seed; the rank's slices of NewRandom's weights).
	// Load.MTP loads the MTP layer (a random one, seeded Seed+1, with
	// Random), for Engine.NumSpeculativeTokens.
	ModelDir    string
	Load        glm5next.LoadOptions
	Random      *config.ModelConfig
	RandomDType string
	Seed        int64

	// Backend is the rank's device (nil: npu.Open(Device) with Threads
	// threads, 0 = GOMAXPROCS; Device "" is the cpu backend).
	Backend npu.Backend
	Device  string
	Threads int
	// CacheDType is the per-token cache's element type (0: the model's
	// default for the backend; see config.CacheDType).
	CacheDType npu.DType

	// Engine configures the leader's engine. Start sets its Lockstep when
	// the topology needs one; IdleWait is the lockstep's idle wait (0:
	// DefaultIdleWait).
	Engine   core.Options
	IdleWait time.Duration
}

// Rank is a running rank.
type Rank struct {
	cfg      Config
	model    *glm5next.Model
	leader   *Leader
	engine   *core.Engine
	lockstep *Lockstep

	done      chan struct{}
	err       error // set before done closes
	closeOnce sync.Once
	closeErr  error
}

// Start loads the rank's share of the model and starts its role: the
// leader's engine (returned by Engine) or the follower loop.
func Start(cfg Config) (*Rank, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	g := cfg.Groups
	switch {
	case g == nil || g.World == nil:
		return nil, errors.New("worker: Start without communicators (Groups)")
	case cfg.DPRank < 0 || cfg.DPRank >= cfg.DP || cfg.TPRank < 0 || cfg.TPRank >= cfg.TP:
		return nil, fmt.Errorf("worker: rank (DP %d, TP %d) outside DP %d × TP %d", cfg.DPRank, cfg.TPRank, cfg.DP, cfg.TP)
	case g.World.Rank() != cfg.DPRank*cfg.TP+cfg.TPRank:
		return nil, fmt.Errorf("worker: world rank %d is not DP rank %d × TP %d + TP rank %d", g.World.Rank(), cfg.DPRank, cfg.TP, cfg.TPRank)
	case cfg.TP > 1 && g.TP == nil, cfg.EP && cfg.Size() > 1 && g.EP == nil, cfg.Lockstep() && cfg.TPRank == 0 && g.DP == nil:
		return nil, errors.New("worker: Groups lack a communicator the topology needs (use Join)")
	case (cfg.ModelDir == "") == (cfg.Random == nil):
		return nil, errors.New("worker: set exactly one of ModelDir and Random")
	}
	be := cfg.Backend
	if be == nil {
		dev := cmp.Or(cfg.Device, "cpu")
		var err error
		if be, err = npu.Open(dev, npu.OpenOptions{Threads: cfg.Threads}); err != nil {
			return nil, fmt.Errorf("worker: rank %d: --device %s: %w", g.World.Rank(), dev, err)
		}
	}
	par := &glm5next.Parallel{TPSize: cfg.TP, TPRank: cfg.TPRank, TP: g.TP, EPSize: 1}
	if cfg.EP && cfg.Size() > 1 {
		par.EPSize, par.EPRank, par.EP = cfg.Size(), g.World.Rank(), g.EP
	}
	var m *glm5next.Model
	var err error
	if cfg.Random != nil {
		m, err = glm5next.NewRandomParallel(be, cfg.Random, cfg.RandomDType, cfg.Seed, par)
	} else {
		lo := cfg.Load
		lo.Parallel = par
		m, err = glm5next.Load(be, cfg.ModelDir, lo)
	}
	if err == nil && cfg.Random != nil && cfg.Load.MTP {
		// As --load-format dummy does on one rank (glm5next's opener).
		if err = m.AddRandomMTP(cfg.Seed + 1); err != nil {
			m.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker: rank %d: %w", g.World.Rank(), err)
	}
	if cfg.CacheDType != 0 {
		if err := m.SetCacheDType(cfg.CacheDType); err != nil {
			m.Close()
			return nil, fmt.Errorf("worker: rank %d: %w", g.World.Rank(), err)
		}
	}
	r := &Rank{cfg: cfg, model: m, done: make(chan struct{})}
	if cfg.TPRank != 0 {
		go func() {
			r.err = Follow(m, g.TP)
			if r.err != nil {
				g.Abort(r.err)
			}
			close(r.done)
		}()
		return r, nil
	}
	r.leader = NewLeader(m, g.TP)
	opts := cfg.Engine
	if cfg.Lockstep() {
		r.lockstep = NewLockstep(g.DP, be, cfg.IdleWait)
		opts.Lockstep = r.lockstep
	}
	e, err := core.New(r.leader, opts)
	if err != nil {
		// Let the followers go (they may wait for the cache command).
		r.leader.Shutdown()
		m.Close()
		return nil, fmt.Errorf("worker: rank %d: %w", g.World.Rank(), err)
	}
	r.engine = e
	go func() {
		<-e.Done()
		r.err = e.Err()
		if errors.Is(r.err, core.ErrLockstepStopped) {
			r.err = nil // another DP rank closed the group: a normal end
		}
		if err := r.leader.Shutdown(); err != nil && r.err == nil {
			r.err = fmt.Errorf("worker: stopping the TP followers: %w", err)
		}
		if r.err != nil {
			g.Abort(r.err)
		}
		close(r.done)
	}()
	return r, nil
}

// Leader reports whether this rank is its DP rank's TP leader (it owns
// the engine).
func (r *Rank) Leader() bool { return r.engine != nil }

// Engine is the DP rank's engine (nil on followers). Requests for this DP
// rank go to its Add; Close it through Rank.Close.
func (r *Rank) Engine() *core.Engine { return r.engine }

// Model is the rank's model.
func (r *Rank) Model() *glm5next.Model { return r.model }

// Done is closed when the rank has stopped: the leader's engine exited
// (Close, a lockstep peer closing, or a failure) and its followers were
// told; a follower's loop ended.
func (r *Rank) Done() <-chan struct{} { return r.done }

// Wait waits until the rank has stopped and returns why, nil for a normal
// shutdown.
func (r *Rank) Wait() error {
	<-r.done
	return r.err
}

// Close stops the rank and releases its model. On a leader it closes the
// engine (requests in flight end with "abort"; under lockstep every DP
// rank's engine stops too) and stops the followers; on a follower that is
// still running it aborts the communicators, so call it after Done on
// followers for a clean stop. It returns the rank's failure, if any.
func (r *Rank) Close() error {
	r.closeOnce.Do(func() {
		if r.engine != nil {
			r.engine.Close()
		} else {
			select {
			case <-r.done:
			default:
				r.cfg.Groups.Abort(errors.New("worker: follower closed"))
			}
		}
		<-r.done
		if r.lockstep != nil {
			r.lockstep.Free()
		}
		r.closeErr = errors.Join(r.err, r.model.Close())
	})
	return r.closeErr
}
