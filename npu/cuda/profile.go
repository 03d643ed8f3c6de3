package cuda

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// Kernel profile: with NPUSERVE_CUDA_PROFILE=1 the backend brackets every
// kernel launch and cuBLASLt GEMM with CUDA events and adds their GPU
// time up by kernel name at each Sync; Profile reports the table (the
// "which kernel, how far from its limit" of a benchmark's misses). The
// events cost a few microseconds per launch, so profiled runs are slower:
// use the table's shares, not its total, next to unprofiled figures.

// ProfileEnv turns the kernel profile on.
const ProfileEnv = "NPUSERVE_CUDA_PROFILE"

type profiler struct {
	spans []profSpan
	free  []uintptr // recycled events
	stats map[string]*profStat
}

type profSpan struct {
	name     string
	ev0, ev1 uintptr
}

type profStat struct {
	calls int
	ms    float64
}

func newProfiler() *profiler {
	if os.Getenv(ProfileEnv) != "1" {
		return nil
	}
	return &profiler{stats: map[string]*profStat{}}
}

func (p *profiler) event(b *Backend) uintptr {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e
	}
	e, err := drvEventCreate(b.ctx)
	if err != nil {
		b.fail(fmt.Errorf("cuda: profile event: %w", err))
	}
	return e
}

// span enqueues the start event of a span named name and returns the
// function that enqueues its end.
func (b *Backend) span(name string) func() {
	p := b.prof
	e0 := p.event(b)
	_ = drvEventRecord(b.ctx, e0, b.stream)
	return func() {
		e1 := p.event(b)
		_ = drvEventRecord(b.ctx, e1, b.stream)
		p.spans = append(p.spans, profSpan{name, e0, e1})
	}
}

// collect adds the finished spans up (the stream is idle: after Sync).
func (p *profiler) collect(b *Backend) {
	for _, s := range p.spans {
		ms, err := drvEventElapsed(b.ctx, s.ev0, s.ev1)
		st := p.stats[s.name]
		if st == nil {
			st = &profStat{}
			p.stats[s.name] = st
		}
		st.calls++
		if err == nil {
			st.ms += float64(ms)
		}
		p.free = append(p.free, s.ev0, s.ev1)
	}
	p.spans = p.spans[:0]
}

// Profile returns the kernel profile since the last call (GPU time by
// kernel, largest first) and resets it; "" unless NPUSERVE_CUDA_PROFILE=1.
func (b *Backend) Profile() string {
	p := b.prof
	if p == nil {
		return ""
	}
	if err := b.Sync(); err != nil {
		return fmt.Sprintf("cuda profile: %v\n", err)
	}
	type row struct {
		name string
		profStat
	}
	var rows []row
	total := 0.0
	for n, s := range p.stats {
		rows = append(rows, row{n, *s})
		total += s.ms
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ms > rows[j].ms })
	var sb strings.Builder
	fmt.Fprintf(&sb, "cuda profile: %.3f ms of GPU time in %d kernels\n", total, len(rows))
	for _, r := range rows {
		fmt.Fprintf(&sb, "  %-24s %7d calls %10.3f ms %5.1f%%\n", r.name, r.calls, r.ms, 100*r.ms/max(total, 1e-9))
	}
	p.stats = map[string]*profStat{}
	return sb.String()
}
