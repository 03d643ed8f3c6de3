package worker_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	_ "github.com/npuserve/npuserve/npu/ascend" // the ascend backend and its "hccl" transport, as the binary links them
	"github.com/npuserve/npuserve/npu/cpu"
)

// recordingTransport is the TCP transport under another name that counts
// the root infos Join asks it for: it shows that Join makes its groups'
// root infos with the transport it is given.
type recordingTransport struct{ roots atomic.Int32 }

func (*recordingTransport) Available() error { return nil }

func (*recordingTransport) Init(ri hccl.RootInfo, rank, size int, o hccl.Options) (hccl.Comm, error) {
	return hccl.Init(ri, rank, size, o)
}

func (r *recordingTransport) NewRootInfo(o hccl.RootOptions) (hccl.RootInfo, error) {
	r.roots.Add(1)
	return hccl.NewRootInfoFor(hccl.TransportTCP, o)
}

var recording = &recordingTransport{}

func init() { hccl.Register("test-recording", recording) }

// joinAll starts a world of topo.Size() ranks in this process and runs
// Join on each with opt; it returns each rank's groups and error.
func joinAll(t *testing.T, topo worker.Topology, opt worker.JoinOptions) ([]*worker.Groups, []error) {
	t.Helper()
	n := topo.Size()
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := hccl.Options{InitTimeout: 20 * time.Second, Timeout: 20 * time.Second}
	opt.Comm = o
	groups, errs := make([]*worker.Groups, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			world, err := hccl.Init(ri, r, n, o)
			if err != nil {
				errs[r] = err
				return
			}
			if groups[r], errs[r] = worker.Join(world, topo, opt); errs[r] != nil {
				world.Close()
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range groups {
			if g != nil {
				g.Close()
			}
		}
	})
	return groups, errs
}

func TestJoinAsksTheTransport(t *testing.T) {
	cases := []struct {
		name  string
		topo  worker.Topology
		roots int32 // root infos the transport makes: one per group
	}{
		{"tp2", worker.Topology{DP: 1, TP: 2}, 1},
		{"dp2-ep", worker.Topology{DP: 2, TP: 1, EP: true}, 2},
		{"dp2-tp2-ep", worker.Topology{DP: 2, TP: 2, EP: true}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := recording.roots.Load()
			groups, errs := joinAll(t, c.topo, worker.JoinOptions{Transport: "test-recording"})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if got := recording.roots.Load() - before; got != c.roots {
				t.Errorf("the transport made %d root infos, want %d (one per group)", got, c.roots)
			}
			// The groups work: a TP all-reduce of each rank's number.
			if c.topo.TP > 1 {
				be := cpu.New(1)
				var wg sync.WaitGroup
				sums := make([]float32, len(groups))
				for r, g := range groups {
					wg.Add(1)
					go func() {
						defer wg.Done()
						x := npu.Must(be.FromHost(npu.F32, npu.EncodeFloats([]float32{float32(r + 1)}, npu.F32), 1))
						if err := g.TP.AllReduce(x, hccl.Sum); err != nil {
							t.Errorf("rank %d: %v", r, err)
							return
						}
						sums[r] = npu.MustF32(be, x)[0]
					}()
				}
				wg.Wait()
				for r, s := range sums {
					d := r / c.topo.TP * c.topo.TP
					want := float32(0)
					for k := range c.topo.TP {
						want += float32(d + k + 1)
					}
					if s != want {
						t.Errorf("rank %d: TP all-reduce = %v, want %v", r, s, want)
					}
				}
			}
		})
	}
}

// A transport that cannot make root infos here (HCCL without CANN)
// fails every rank fast, naming the cause, instead of leaving the peers
// waiting for the root infos until the timeout.
func TestJoinTransportUnavailable(t *testing.T) {
	if npu.TransportOf("ascend") != hccl.TransportHCCL {
		t.Fatalf("npu.TransportOf(ascend) = %q, want hccl", npu.TransportOf("ascend"))
	}
	if _, err := hccl.NewRootInfoFor(hccl.TransportHCCL, hccl.RootOptions{}); err == nil {
		t.Skip("HCCL is available on this machine")
	}
	start := time.Now()
	_, errs := joinAll(t, worker.Topology{DP: 1, TP: 2}, worker.JoinOptions{Transport: hccl.TransportHCCL})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Join took %v to fail", d)
	}
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d joined without HCCL", r)
		}
	}
	if !strings.Contains(errs[0].Error(), "tp group root info") || !errors.Is(errs[0], hccl.ErrUnavailable) {
		t.Errorf("rank 0: %v; want the tp root info failing as unavailable", errs[0])
	}
	if !strings.Contains(errs[1].Error(), "tp group root info") {
		t.Errorf("rank 1: %v; want rank 0's reason", errs[1])
	}
	// The cuda backend links the NCCL transport: without libnccl it says
	// why, naming the library.
	if _, err := hccl.NewRootInfoFor(hccl.TransportNCCL, hccl.RootOptions{}); err != nil && (!errors.Is(err, hccl.ErrUnavailable) || !strings.Contains(err.Error(), "libnccl")) {
		t.Errorf("NewRootInfoFor(nccl) = %v", err)
	}
}
