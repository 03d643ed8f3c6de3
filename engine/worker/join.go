package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Topology is the DP×TP(×EP) layout of a deployment. Ranks are numbered
// as config.BuildPlan numbers them: global rank = DPRank·TP + TPRank, which
// is also the EP rank when EP is on.
type Topology struct {
	DP, TP int
	// EP turns on expert parallelism (--enable-expert-parallel): the
	// routed experts are split over all DP×TP ranks, and the DP ranks step
	// in lockstep.
	EP bool
}

// Size is the number of device ranks.
func (t Topology) Size() int { return t.DP * t.TP }

// Lockstep reports whether the DP ranks must step in lockstep: expert
// parallelism across more than one DP rank.
func (t Topology) Lockstep() bool { return t.EP && t.DP > 1 }

// Check validates the topology.
func (t Topology) Check() error {
	if t.DP < 1 || t.TP < 1 {
		return fmt.Errorf("worker: data and tensor parallel sizes must be positive, got DP %d TP %d", t.DP, t.TP)
	}
	return nil
}

// Groups are one rank's communicators.
type Groups struct {
	// World spans every rank; Join bootstraps the others over it.
	World hccl.Comm
	// TP spans the TP ranks of this rank's DP rank (nil when TP == 1).
	TP hccl.Comm
	// DP spans the TP leaders (TP rank 0) of every DP rank, for the
	// lockstep sync (nil on followers and without lockstep).
	DP hccl.Comm
	// EP spans every rank, for the MoE dispatch and combine (nil without
	// expert parallelism).
	EP hccl.Comm
}

// Close closes every communicator.
func (g *Groups) Close() error {
	var errs []error
	for _, c := range []hccl.Comm{g.TP, g.DP, g.EP, g.World} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Abort poisons every communicator with reason, so that peers blocked in
// a collective with this rank fail at once instead of at their timeout.
func (g *Groups) Abort(reason error) {
	for _, c := range []hccl.Comm{g.TP, g.DP, g.EP, g.World} {
		if c != nil {
			c.Abort(reason)
		}
	}
}

// JoinOptions configure Join.
type JoinOptions struct {
	// ListenHost is the address this rank's group root listeners bind and
	// advertise (the node's address on the network the ranks share;
	// default 127.0.0.1, enough for one host).
	ListenHost string
	// Comm are the options of the new communicators (Name is set per
	// group: "tp", "dp", "ep"); Comm.Device is the rank's accelerator.
	Comm hccl.Options
	// Transport is the hccl transport of the groups: the one that moves
	// the rank's device tensors (npu.TransportOf of its backend; "" is
	// tcp). The world communicator, which only bootstraps the groups,
	// may be another (the TCP transport over the DP RPC network).
	Transport string
}

// maxRootInfo bounds a root info's serialised length (HCCL's are about
// 5.5 KB).
const maxRootInfo = 8 << 10

// Join creates the rank's TP, DP and EP communicators from the world
// communicator (every rank calls it with the same topology): the root of
// each group (its lowest global rank) creates a root info, every rank
// learns them through one AllGather over world, and then joins its groups
// in a fixed order (TP, DP, EP), so that no two ranks wait on each other
// in a cycle. Root infos come from opt.Transport (hccl.NewRootInfoFor),
// and the exchange's buffers from the memory world says its tensors live
// in (hccl.MemoryOf). The returned Groups own world.
func Join(world hccl.Comm, topo Topology, opt JoinOptions) (*Groups, error) {
	if err := topo.Check(); err != nil {
		return nil, err
	}
	n := topo.Size()
	if world.Size() != n {
		return nil, fmt.Errorf("worker: world communicator of %d ranks for a DP %d × TP %d topology", world.Size(), topo.DP, topo.TP)
	}
	g := world.Rank()
	d, t := g/topo.TP, g%topo.TP
	host := opt.ListenHost
	if host == "" {
		host = "127.0.0.1"
	}

	// The groups this rank belongs to: root (global rank), members, and
	// this rank's index among them.
	type group struct {
		name    string
		root    int
		members []int
		in      bool
	}
	seq := func(lo, step, count int) []int {
		s := make([]int, count)
		for i := range s {
			s[i] = lo + i*step
		}
		return s
	}
	groups := []group{
		{name: "tp", root: d * topo.TP, members: seq(d*topo.TP, 1, topo.TP), in: topo.TP > 1},
		{name: "dp", root: 0, members: seq(0, topo.TP, topo.DP), in: topo.Lockstep() && t == 0},
		{name: "ep", root: 0, members: seq(0, 1, n), in: topo.EP && n > 1},
	}

	// Roots make root infos; one AllGather shares them. Slot k of a rank's
	// block holds the root info of group k when the rank is its root.
	slot := 2 + maxRootInfo
	mine := make([]byte, len(groups)*slot)
	var made []hccl.RootInfo
	defer func() {
		for _, ri := range made {
			ri.Release() // harmless once Init took the listener
		}
	}()
	for k, gr := range groups {
		if !gr.in || gr.root != g {
			continue
		}
		ri, err := hccl.NewRootInfoFor(opt.Transport, hccl.RootOptions{ListenHost: host, Device: opt.Comm.Device, Comm: opt.Comm})
		if err != nil {
			// The peers wait for this rank's root infos: tell them.
			err = fmt.Errorf("worker: rank %d: %s group root info: %w", g, gr.name, err)
			world.Abort(err)
			return nil, err
		}
		made = append(made, ri)
		s := ri.String()
		if len(s) > maxRootInfo {
			return nil, fmt.Errorf("worker: %s root info of %d bytes exceeds %d", gr.name, len(s), maxRootInfo)
		}
		binary.LittleEndian.PutUint16(mine[k*slot:], uint16(len(s)))
		copy(mine[k*slot+2:], s)
	}
	be, err := hccl.MemoryOf(world)
	if err != nil {
		return nil, fmt.Errorf("worker: sharing root infos over the world communicator: %w", err)
	}
	in, err := be.FromHost(npu.U8, mine, len(mine))
	if err != nil {
		return nil, err
	}
	all, err := be.Alloc(npu.U8, n*len(mine))
	if err != nil {
		return nil, err
	}
	if err := world.AllGather(all, in); err != nil {
		return nil, fmt.Errorf("worker: sharing root infos: %w", err)
	}
	buf := make([]byte, all.Bytes())
	if err := be.Download(buf, all); err != nil {
		return nil, err
	}

	out := &Groups{World: world}
	fail := func(err error) (*Groups, error) {
		out.Abort(err)
		out.Close()
		return nil, err
	}
	for k, gr := range groups {
		if !gr.in {
			continue
		}
		b := buf[gr.root*len(mine)+k*slot:]
		ri, err := hccl.ParseRootInfo(string(b[2 : 2+int(binary.LittleEndian.Uint16(b))]))
		if err != nil {
			return fail(fmt.Errorf("worker: %s root info from rank %d: %w", gr.name, gr.root, err))
		}
		idx := -1
		for i, m := range gr.members {
			if m == g {
				idx = i
			}
		}
		o := opt.Comm
		o.Name = gr.name
		c, err := hccl.Init(ri, idx, len(gr.members), o)
		if err != nil {
			return fail(fmt.Errorf("worker: joining the %s group: %w", gr.name, err))
		}
		switch gr.name {
		case "tp":
			out.TP = c
		case "dp":
			out.DP = c
		case "ep":
			out.EP = c
		}
	}
	return out, nil
}

// DefaultIdleWait is how long idle lockstep ranks wait between syncs.
const DefaultIdleWait = 2 * time.Millisecond
