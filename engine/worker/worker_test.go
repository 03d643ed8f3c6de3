package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// Multi-process tests: the test binary re-executes itself once per rank
// with childEnv set (TestMain hands such processes to runChild); ranks
// join over TCP on 127.0.0.1. Rank 0 creates the world root info and
// prints it; the parent passes it to the other ranks.

const (
	childEnv = "NPUSERVE_WORKER_TEST_CHILD" // the child's spec, JSON
	fixtures = "../../testdata/glm5next"
	logitTol = 1e-4
	chunk    = 11 // prefill chunk of the scripted runs
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	if spec := os.Getenv(benchEnv); spec != "" {
		os.Exit(runBenchChild(spec))
	}
	os.Exit(m.Run())
}

// childSpec is one rank's part in a deployment test.
type childSpec struct {
	Root     string // world root info (empty on rank 0, which makes it)
	Rank     int
	Topo     worker.Topology
	Idle     bool     // DP rank 1 gets no requests at all
	Fixtures []string // fixture directories, run in turn
	// Spec > 0 serves with MTP speculative decoding, Spec drafts per step
	// (fixtures with an MTP layer; the scripted check is skipped).
	Spec int
	// Victim: DP rank 1 prints "STEPPING" once its engine is running and
	// waits to be killed; rank 0 serves a long request and reports how it
	// ended (TestRankDeathFailsFast).
	Victim bool
}

// deployments are the layouts the deployment tests run: TP2, EP2 (DP2 in
// lockstep, each DP rank with its own requests, or one DP rank with none),
// and DP2×TP2 with EP4.
var deployments = []struct {
	name string
	topo worker.Topology
	idle bool
}{
	{"TP2", worker.Topology{DP: 1, TP: 2}, false},
	{"DP2 EP2", worker.Topology{DP: 2, TP: 1, EP: true}, false},
	{"DP2 EP2 idle DP rank", worker.Topology{DP: 2, TP: 1, EP: true}, true},
	{"DP2 TP2 EP4", worker.Topology{DP: 2, TP: 2, EP: true}, false},
}

// TestDeployments: greedy tokens through TP2, EP2 (DP2 in lockstep, each
// DP rank with its own requests, or one DP rank with none), and DP2×TP2
// with EP4, as separate processes, equal the golden (single-rank) tokens on
// the tiny and shared fixtures, and the logits of a scripted run are
// within 1e-4 relative of the single-rank logits.
func TestDeployments(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process deployments")
	}
	var dirs []string
	for _, f := range []string{"tiny", "shared"} {
		dir := filepath.Join(fixtures, f)
		if _, err := os.Stat(filepath.Join(dir, "golden.json")); err != nil {
			t.Skipf("fixture %s missing: %v", f, err)
		}
		dirs = append(dirs, dir)
	}
	for _, tc := range deployments {
		t.Run(tc.name, func(t *testing.T) {
			deploy(t, childSpec{Topo: tc.topo, Idle: tc.idle, Fixtures: dirs})
		})
	}
}

// TestDeploymentsSpeculative: MTP speculative decoding (k = 3) through
// TP2, EP2 (DP2 in lockstep, one DP rank idle too) and DP2×TP2 with EP4,
// as separate processes, emits the golden single-rank greedy tokens of the
// trained fixture with its trained MTP layer, with drafts accepted.
func TestDeploymentsSpeculative(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process deployments")
	}
	dir := filepath.Join(fixtures, "trained-mtp")
	if _, err := os.Stat(filepath.Join(dir, "golden.json")); err != nil {
		t.Skipf("fixture trained-mtp missing: %v", err)
	}
	for _, tc := range deployments {
		t.Run(tc.name, func(t *testing.T) {
			deploy(t, childSpec{Topo: tc.topo, Idle: tc.idle, Fixtures: []string{dir}, Spec: 3})
		})
	}
}

// deploy runs every rank of spec.Topo as a child process and fails the
// test with the children's reports unless all succeed.
func deploy(t *testing.T, spec childSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := spec.Topo.Size()
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
		mu  sync.Mutex
	}
	children := make([]*child, n)
	start := func(rank int, root string) (*child, io.ReadCloser) {
		s := spec
		s.Rank, s.Root = rank, root
		js, _ := json.Marshal(s)
		c := &child{cmd: exec.CommandContext(ctx, os.Args[0])}
		c.cmd.Env = append(os.Environ(), childEnv+"="+string(js))
		c.cmd.Stderr = &lockedWriter{&c.mu, &c.out}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[rank] = c
		return c, stdout
	}
	c0, out0 := start(0, "")
	br := bufio.NewReader(out0)
	line, err := br.ReadString('\n')
	root, ok := strings.CutPrefix(strings.TrimSpace(line), "ROOT ")
	if err != nil || !ok {
		c0.cmd.Process.Kill()
		c0.cmd.Wait()
		t.Fatalf("rank 0 did not print its root info (%q, %v): %s", line, err, c0.out.String())
	}
	go io.Copy(&lockedWriter{&c0.mu, &c0.out}, br)
	for r := 1; r < n; r++ {
		c, out := start(r, root)
		go io.Copy(&lockedWriter{&c.mu, &c.out}, out)
	}
	var failed bool
	for r, c := range children {
		err := c.cmd.Wait()
		c.mu.Lock()
		log := c.out.String()
		c.mu.Unlock()
		if err != nil {
			failed = true
			t.Errorf("rank %d: %v\n%s", r, err, log)
		} else if testing.Verbose() && log != "" {
			t.Logf("rank %d:\n%s", r, log)
		}
	}
	if failed && ctx.Err() != nil {
		t.Errorf("deployment killed after its 90 s limit")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// golden is what the tests use of a fixture's golden.json.
type golden struct {
	Prompts [][]int32 `json:"prompts"`
	Greedy  [][]int32 `json:"greedy"`
}

func readGolden(dir string) (*golden, error) {
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		return nil, err
	}
	var g golden
	return &g, json.Unmarshal(b, &g)
}

// runChild is one rank: it joins the deployment, then for every fixture
// runs the scripted numerics check and the engine check, reporting
// mismatches on stderr (exit 1) and failures with exit 2.
func runChild(js string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := hccl.Options{Timeout: 15 * time.Second, InitTimeout: 20 * time.Second, Name: "world"}
	var ri hccl.RootInfo
	var err error
	if s.Rank == 0 {
		ri, err = hccl.NewRootInfo("127.0.0.1:0")
		fmt.Println("ROOT " + ri.String())
	} else {
		ri, err = hccl.ParseRootInfo(s.Root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	world, err := hccl.Init(ri, s.Rank, s.Topo.Size(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	groups, err := worker.Join(world, s.Topo, worker.JoinOptions{Comm: opts})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer groups.Close()
	if s.Victim {
		return victim(s, groups)
	}
	var mismatches []string
	for _, dir := range s.Fixtures {
		g, err := readGolden(dir)
		if err == nil && s.Spec == 0 {
			var ms []string
			ms, err = scripted(s, groups, dir, g)
			mismatches = append(mismatches, ms...)
		}
		if err == nil && s.Spec == 0 {
			err = world.Barrier()
		}
		if err == nil {
			var ms []string
			ms, err = served(s, groups, dir, g)
			mismatches = append(mismatches, ms...)
		}
		if err == nil {
			err = world.Barrier()
		}
		if err != nil {
			groups.Abort(err)
			fmt.Fprintf(os.Stderr, "%s: %v\n", dir, err)
			return 2
		}
	}
	for _, m := range mismatches {
		fmt.Fprintln(os.Stderr, m)
	}
	if len(mismatches) > 0 {
		return 1
	}
	return 0
}

// ownerOf is the DP rank that serves prompt i.
func ownerOf(s childSpec, i int) int {
	if s.Idle {
		return 0
	}
	return i % s.Topo.DP
}

// sequences are every prompt continued by its golden greedy tokens.
func sequences(g *golden) [][]int32 {
	var out [][]int32
	for i, p := range g.Prompts {
		out = append(out, append(slices.Clone(p), g.Greedy[i]...))
	}
	return out
}

// stepper is the model side of a scripted run: the rank's Leader, or a
// single-rank model for the reference.
type stepper = model.Collective

// scripted feeds this DP rank's sequences, chunk tokens per step, through
// the TP group's Leader and followers for a fixed number of steps that
// every DP rank computes alike (dummy steps once done), and compares the
// logits of every position with a single-rank model's.
func scripted(s childSpec, groups *worker.Groups, dir string, g *golden) ([]string, error) {
	d, tr := s.Rank/s.Topo.TP, s.Rank%s.Topo.TP
	par := &glm5next.Parallel{TPSize: s.Topo.TP, TPRank: tr, TP: groups.TP, EPSize: 1}
	if s.Topo.EP && s.Topo.Size() > 1 {
		par.EPSize, par.EPRank, par.EP = s.Topo.Size(), s.Rank, groups.EP
	}
	m, err := glm5next.Load(nputest.Open(1), dir, glm5next.LoadOptions{DType: "float32", Parallel: par})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if tr != 0 {
		return nil, worker.Follow(m, groups.TP)
	}
	leader := worker.NewLeader(m, groups.TP)
	defer leader.Shutdown()

	all := sequences(g)
	steps := 0
	var mine []int
	for i, q := range all {
		steps = max(steps, (len(q)+chunk-1)/chunk)
		if ownerOf(s, i) == d {
			mine = append(mine, i)
		}
	}
	var seqs [][]int32
	for _, i := range mine {
		seqs = append(seqs, all[i])
	}
	got, err := run(leader, m.Config().IndexKPool, seqs, steps)
	if err != nil {
		return nil, err
	}
	ref, err := glm5next.Load(nputest.Open(1), dir, glm5next.LoadOptions{DType: "float32"})
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	var bad []string
	for k, i := range mine {
		want, err := run(ref.Engine().(model.Collective), ref.Config().IndexKPool, [][]int32{all[i]}, steps)
		if err != nil {
			return nil, err
		}
		if r := rel(got[k], want[0]); r > logitTol {
			bad = append(bad, fmt.Sprintf("%s rank %d sequence %d: max relative logit difference %g > %g", filepath.Base(dir), s.Rank, i, r, logitTol))
		}
		p := len(g.Prompts[i])
		for j, tok := range g.Greedy[i] {
			if a := argmax(got[k][p-1+j]); a != tok {
				bad = append(bad, fmt.Sprintf("%s rank %d sequence %d greedy step %d: %d, want %d", filepath.Base(dir), s.Rank, i, j, a, tok))
			}
		}
	}
	return bad, nil
}

// run feeds seqs through st for steps steps (DummyStep when none has
// tokens left) and returns every position's logits per sequence.
func run(st stepper, kp int, seqs [][]int32, steps int) ([][][]float32, error) {
	bs := 8 * kp
	slots := max(len(seqs), 1)
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: 64, NumStateSlots: slots, KPool: kp})
	if err != nil {
		return nil, err
	}
	c, err := st.NewCache(64, bs, slots)
	if err != nil {
		return nil, err
	}
	be := st.Backend()
	defer c.Release()
	ks := make([]*kvcache.Seq, len(seqs))
	fed := make([]int, len(seqs))
	out := make([][][]float32, len(seqs))
	for i := range seqs {
		if ks[i], err = mgr.Allocate(); err != nil {
			return nil, err
		}
	}
	for range steps {
		var lseqs []*kvcache.Seq
		var rows []int
		var toks []int32
		var active []int
		for i, q := range seqs {
			if fed[i] == len(q) {
				continue
			}
			n := min(chunk, len(q)-fed[i])
			if err := mgr.Append(ks[i], n); err != nil {
				return nil, err
			}
			lseqs, rows = append(lseqs, ks[i]), append(rows, n)
			toks = append(toks, q[fed[i]:fed[i]+n]...)
			active = append(active, i)
			fed[i] += n
		}
		if len(active) == 0 {
			if err := st.DummyStep(c); err != nil {
				return nil, err
			}
			continue
		}
		lr := make([]int, len(toks))
		for i := range lr {
			lr[i] = i
		}
		lg, err := st.Forward(c, &glm5next.Batch{Tokens: toks, Layout: mgr.Layout(lseqs, rows), LogitRows: lr})
		if err != nil {
			return nil, err
		}
		if sh, ok := st.(model.ShardedLogits); ok {
			if lg, err = checkSharded(be, sh, lg); err != nil {
				return nil, err
			}
		}
		rowsOut, err := glm5next.DownloadRows(be, lg)
		if err != nil {
			return nil, err
		}
		be.Free(lg)
		r := 0
		for k, i := range active {
			out[i] = append(out[i], rowsOut[r:r+rows[k]]...)
			r += rows[k]
		}
	}
	return out, nil
}

// served runs the DP rank's prompts through worker.Start's engine (greedy,
// chunked prefill) and checks the tokens against the golden ones; with
// Idle, DP rank 1 has no requests and must have run dummy steps.
func served(s childSpec, groups *worker.Groups, dir string, g *golden) ([]string, error) {
	d, tr := s.Rank/s.Topo.TP, s.Rank%s.Topo.TP
	r, err := worker.Start(worker.Config{
		Topology: s.Topo, DPRank: d, TPRank: tr, Groups: groups,
		ModelDir: dir, Load: glm5next.LoadOptions{DType: "float32", MTP: s.Spec > 0}, Threads: 1,
		Engine: core.Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 24, NumBlocks: 64, NumSpeculativeTokens: s.Spec},
	})
	if err != nil {
		return nil, err
	}
	if !r.Leader() {
		// Followers mirror the leader until it stops them.
		if err := groups.World.Barrier(); err != nil {
			r.Close()
			return nil, err
		}
		return nil, errors.Join(r.Wait(), r.Close())
	}
	e := r.Engine()
	type result struct {
		i    int
		toks []int32
		err  error
	}
	results := make(chan result)
	n := 0
	for i, p := range g.Prompts {
		if ownerOf(s, i) != d {
			continue
		}
		params := sampling.DefaultParams()
		params.Temperature = sampling.Ptr(0.0)
		params.MaxTokens = sampling.Ptr(len(g.Greedy[i]))
		params.IgnoreEOS = true
		ch, err := e.Add(&core.Request{ID: fmt.Sprint(i), PromptTokens: p, Params: params})
		if err != nil {
			r.Close()
			return nil, err
		}
		n++
		go func() {
			var toks []int32
			var err error
			for o := range ch {
				toks = append(toks, o.Tokens...)
				if o.Finished && o.FinishReason != "length" {
					err = fmt.Errorf("request %d finished with %q: %v", i, o.FinishReason, o.Err)
				}
			}
			results <- result{i, toks, err}
		}()
	}
	var bad []string
	var errs []error
	for range n {
		res := <-results
		if res.err != nil {
			errs = append(errs, res.err)
			continue
		}
		if !slices.Equal(res.toks, g.Greedy[res.i]) {
			bad = append(bad, fmt.Sprintf("%s DP rank %d request %d: served %v, single rank %v", filepath.Base(dir), d, res.i, res.toks, g.Greedy[res.i]))
		}
	}
	// Close only once every DP rank is done: under lockstep one rank's
	// Close stops them all.
	if err := groups.World.Barrier(); err != nil {
		errs = append(errs, err)
	}
	st := e.Stats()
	if s.Idle && d == 1 && (st.DummySteps == 0 || st.Steps != 0) {
		bad = append(bad, fmt.Sprintf("%s idle DP rank: %d dummy steps, %d steps; want dummy steps only", filepath.Base(dir), st.DummySteps, st.Steps))
	}
	if s.Spec > 0 && (!s.Idle || d == 0) && (st.SpecDrafts == 0 || st.SpecAcceptedTokens == 0) {
		bad = append(bad, fmt.Sprintf("%s DP rank %d: %d drafts, %d accepted tokens; want drafts accepted", filepath.Base(dir), d, st.SpecDrafts, st.SpecAcceptedTokens))
	}
	if s.Idle && d == 0 && (st.DummySteps != 0 || st.Steps == 0) {
		bad = append(bad, fmt.Sprintf("%s busy DP rank: %d steps, %d dummy steps; want real steps only", filepath.Base(dir), st.Steps, st.DummySteps))
	}
	errs = append(errs, r.Close())
	return bad, errors.Join(errs...)
}

// rel is max|a-b| / max|b|.
func rel(a, b [][]float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range b {
		if len(a[i]) != len(b[i]) {
			return math.Inf(1)
		}
		for j := range b[i] {
			num = math.Max(num, math.Abs(float64(a[i][j])-float64(b[i][j])))
			den = math.Max(den, math.Abs(float64(b[i][j])))
		}
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	return num / den
}

func argmax(row []float32) int32 {
	b := 0
	for i, v := range row {
		if v > row[b] {
			b = i
		}
	}
	return int32(b)
}

// TestRankDeathFailsFast: kill -9 of one DP rank of an EP deployment in
// lockstep while the other serves a request: the survivor's request fails
// with an error naming the lost peer within seconds (the TCP transport
// sees the connection drop; no collective timeout is waited for), its
// engine stops, and nothing hangs.
func TestRankDeathFailsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process deployment")
	}
	dir := filepath.Join(fixtures, "tiny")
	if _, err := os.Stat(dir); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := childSpec{Topo: worker.Topology{DP: 2, TP: 1, EP: true}, Fixtures: []string{dir}, Victim: true}
	start := func(rank int, root string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
		s := spec
		s.Rank, s.Root = rank, root
		js, _ := json.Marshal(s)
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+string(js))
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewReader(out), &errb
	}
	c0, out0, err0 := start(0, "")
	line, _ := out0.ReadString('\n')
	root, ok := strings.CutPrefix(strings.TrimSpace(line), "ROOT ")
	if !ok {
		c0.Process.Kill()
		c0.Wait()
		t.Fatalf("rank 0: %q", line)
	}
	c1, out1, _ := start(1, root)
	if l, _ := out1.ReadString('\n'); strings.TrimSpace(l) != "STEPPING" {
		c0.Process.Kill()
		c1.Process.Kill()
		c0.Wait()
		c1.Wait()
		t.Fatalf("rank 1 did not start stepping: %q\n%s", l, err0.String())
	}
	killed := time.Now()
	c1.Process.Kill() // SIGKILL
	c1.Wait()
	rest, _ := io.ReadAll(out0)
	if err := c0.Wait(); err != nil {
		t.Fatalf("rank 0: %v\n%s", err, err0.String())
	}
	report := strings.TrimSpace(string(rest))
	t.Logf("rank 0 after %v: %s", time.Since(killed).Round(time.Millisecond), report)
	if !strings.Contains(report, "error") || !strings.Contains(report, "rank 1") {
		t.Errorf("rank 0's request ended with %q, want an error naming rank 1", report)
	}
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("rank 0 took %v to notice the dead rank", d)
	}
}

// victim is a rank of TestRankDeathFailsFast.
func victim(s childSpec, groups *worker.Groups) int {
	d := s.Rank
	r, err := worker.Start(worker.Config{
		Topology: s.Topo, DPRank: d, Groups: groups, ModelDir: s.Fixtures[0],
		Load: glm5next.LoadOptions{DType: "float32"}, Threads: 1,
		Engine: core.Options{MaxNumSeqs: 2, NumBlocks: 512},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e := r.Engine()
	if d == 1 {
		for e.Stats().DummySteps == 0 {
			time.Sleep(time.Millisecond)
		}
		fmt.Println("STEPPING")
		select {} // until killed
	}
	params := sampling.DefaultParams()
	params.Temperature = sampling.Ptr(0.0)
	params.MaxTokens = sampling.Ptr(4000)
	params.IgnoreEOS = true
	ch, err := e.Add(&core.Request{ID: "long", PromptTokens: []int32{1, 2, 3}, Params: params})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var last core.Output
	for o := range ch {
		last = o
	}
	fmt.Printf("%s: %v\n", last.FinishReason, last.Err)
	r.Close()
	return 0
}

// checkSharded takes a vocabulary-parallel leader's sharded logits: it
// reduces them across the ranks (k best, a few touched ids per row),
// gathers the whole rows, and checks the reduction against the rows. It
// returns the whole rows (lg freed).
func checkSharded(be npu.Backend, sh model.ShardedLogits, lg *npu.Tensor) (*npu.Tensor, error) {
	V, sharded := sh.VocabSharded()
	if !sharded {
		return lg, nil
	}
	R := lg.Dim(0)
	const k = 5
	touched := make([][]int32, R)
	for r := range touched {
		a, b := int32(r*37%V), int32((r*101+V-1)%V)
		touched[r] = []int32{min(a, b), max(a, b)}
		if a == b {
			touched[r] = touched[r][:1]
		}
	}
	reds, err := sh.ReduceLogits(lg, k, touched)
	if err != nil {
		return nil, err
	}
	// Sampling queries on every row: histograms at two temperatures, the
	// bins of the 3rd best candidate and of the maximum.
	var qrows []int
	var qs []sampling.Query
	for r, red := range reds {
		m := red.Vals[0]
		for _, q := range []sampling.Query{
			{Kind: sampling.QueryHist, M: m, InvT: 1},
			{Kind: sampling.QueryHist, M: m, InvT: 1 / 0.7},
			{Kind: sampling.QueryBin, M: m, InvT: 1, Bin: int(float64(m-red.Vals[2]) * npu.SampleBinsPerUnit)},
			{Kind: sampling.QueryBin, M: m, InvT: 1 / 0.7, Bin: 0},
		} {
			qrows, qs = append(qrows, r), append(qs, q)
		}
	}
	answers, err := sh.QueryLogits(lg, qrows, qs)
	if err != nil {
		return nil, err
	}
	full, err := sh.GatherLogits(lg)
	be.Free(lg)
	if err != nil {
		return nil, err
	}
	rows, err := glm5next.DownloadRows(be, full)
	if err != nil {
		return nil, err
	}
	for r, row := range rows {
		ids := make([]int32, V)
		for i := range ids {
			ids[i] = int32(i)
		}
		slices.SortStableFunc(ids, func(a, b int32) int {
			switch {
			case row[a] > row[b]:
				return -1
			case row[a] < row[b]:
				return 1
			}
			return 0
		})
		red := reds[r]
		if len(red.IDs) != k || red.NaN != 0 || red.PosInf != 0 {
			return nil, fmt.Errorf("row %d: reduction %+v", r, red)
		}
		for j := range k {
			if red.IDs[j] != ids[j] || red.Vals[j] != row[ids[j]] {
				return nil, fmt.Errorf("row %d: reduced candidate %d is %d (%v), the whole row's is %d (%v)", r, j, red.IDs[j], red.Vals[j], ids[j], row[ids[j]])
			}
		}
		for j, id := range touched[r] {
			if red.TouchedVals[j] != row[id] {
				return nil, fmt.Errorf("row %d: touched id %d reduced to %v, the whole row holds %v", r, id, red.TouchedVals[j], row[id])
			}
		}
	}
	for i, q := range qs {
		if want := sampling.AnswerRow(rows[qrows[i]], q, sampling.MaxBinMembers); !reflect.DeepEqual(answers[i], want) {
			return nil, fmt.Errorf("row %d: query %+v answered %+v across the ranks, %+v on the whole row", qrows[i], q, answers[i], want)
		}
	}
	return full, nil
}
