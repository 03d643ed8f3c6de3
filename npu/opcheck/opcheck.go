// Package opcheck is the op conformance table: every op of npu.Ops (and
// npu.SampleReducer where a backend has it) run on random inputs of odd
// sizes on a device under test and on the reference CPU backend, with the
// outputs compared under a tolerance stated per case. It is what
// `npuserve selftest` runs on a new accelerator, and what a backend's own
// tests can run to check themselves against the reference.
//
// Inputs are drawn from a seed (the same on both backends, and the same
// for a case whatever other cases run), and are valid for each op's
// contract; selection ops (TopK, Router, DSAIndex, SampleReduce) get inputs
// whose candidates are well separated, so that their integer outputs can be
// compared exactly. Outputs are downloaded (the only synchronisation
// points); a panic inside an op ("not implemented"), and an error from
// Sync or Download, are that case failing with the message.
package opcheck

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"time"

	"github.com/npuserve/npuserve/npu"
)

// Metric is an error measure; non-finite values (a NaN where the reference
// has a number) are written to JSON as null.
type Metric float64

// MarshalJSON writes m as a number, or null when it is not finite.
func (m Metric) MarshalJSON() ([]byte, error) {
	f := float64(m)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(f, 'g', 4, 64)), nil
}

// Result is the outcome of one case on the device under test.
type Result struct {
	Op   string `json:"op"`
	Case string `json:"case"`
	// MaxRelErr is the largest |dev - ref| / max(|ref|, rms(ref)) over
	// the float outputs (the rms floor keeps elements that cancel to
	// about zero from dominating), and for integer outputs the fraction
	// of differing entries.
	MaxRelErr Metric `json:"max_rel_err"`
	// MaxAbsErr is the largest |dev - ref| over all outputs.
	MaxAbsErr Metric `json:"max_abs_err"`
	// Tol is the largest MaxRelErr that passes (0: exact).
	Tol float64 `json:"tol"`
	// Ms is the device time of one call in milliseconds: the mean of
	// Options.Reps calls between two Syncs (0 when the case failed).
	Ms   float64 `json:"ms"`
	Pass bool    `json:"pass"`
	// Err says why a case failed other than by tolerance: an op's panic,
	// a Sync or Download error, differing integer outputs, a NaN.
	Err string `json:"error,omitempty"`
}

// Options configure Run.
type Options struct {
	// Seed draws the inputs (the same seed gives the same inputs).
	Seed uint64
	// Filter selects the cases whose "op/case" it matches (nil: all).
	Filter *regexp.Regexp
	// Reps is the number of timed calls per case (0: 3).
	Reps int
}

// Case is one entry of the table: an op, inputs of one shape, the
// tolerance and why it is what it is.
type Case struct {
	Op   string
	Name string
	// Tol is the largest max relative error that passes; integer
	// outputs are always compared exactly.
	Tol float64
	// Why explains the tolerance (accumulation order, exact copy, ...).
	Why string
	// needs reports whether the device under test has the op (nil: all
	// backends); a case it lacks is left out of the run.
	needs func(npu.Backend) bool
	// setup draws the inputs on s and returns the op call and the
	// tensors it writes.
	setup func(s *Side) (run func(), outs []*npu.Tensor)
}

// Key is the case's "op/case" name that Options.Filter matches.
func (c *Case) Key() string { return c.Op + "/" + c.Name }

// Applies reports whether the case runs on be (SampleReduce needs an
// npu.SampleReducer).
func (c *Case) Applies(be npu.Backend) bool { return c.needs == nil || c.needs(be) }

// Run runs every case that applies to dev and matches opt.Filter on dev and
// on ref (the reference, normally npu/cpu), in table order.
func Run(dev, ref npu.Backend, opt Options) []Result {
	var out []Result
	for _, c := range Cases() {
		if !c.Applies(dev) || (opt.Filter != nil && !opt.Filter.MatchString(c.Key())) {
			continue
		}
		out = append(out, RunCase(c, dev, ref, opt))
	}
	return out
}

// Summary counts the distinct ops, the cases and the failed cases of rs.
func Summary(rs []Result) (ops, cases, failed int) {
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.Op] {
			seen[r.Op] = true
			ops++
		}
		if !r.Pass {
			failed++
		}
	}
	return ops, len(rs), failed
}

// RunCase runs one case on dev and ref and compares the outputs.
func RunCase(c *Case, dev, ref npu.Backend, opt Options) Result {
	res := Result{Op: c.Op, Case: c.Name, Tol: c.Tol}
	seed := caseSeed(opt.Seed, c.Key())
	want, _, err := execute(c, ref, seed, 0)
	if err != nil {
		res.Err = "reference cpu backend: " + err.Error()
		return res
	}
	reps := opt.Reps
	if reps <= 0 {
		reps = 3
	}
	got, ms, err := execute(c, dev, seed, reps)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	res.Ms = math.Round(ms*1e4) / 1e4 // 0.1 µs
	res.Pass = true
	if len(got) != len(want) {
		res.Pass, res.Err = false, fmt.Sprintf("%d outputs, reference has %d", len(got), len(want))
		return res
	}
	for i := range got {
		rel, abs, msg := compare(got[i], want[i])
		res.MaxRelErr = Metric(math.Max(float64(res.MaxRelErr), rel))
		res.MaxAbsErr = Metric(math.Max(float64(res.MaxAbsErr), abs))
		if msg != "" && res.Err == "" {
			res.Err = fmt.Sprintf("output %d: %s", i, msg)
		}
	}
	if res.Err != "" || !(float64(res.MaxRelErr) <= c.Tol) {
		res.Pass = false
	}
	return res
}

// caseSeed mixes the run's seed with the case's name, so a case draws the
// same inputs whichever other cases run.
func caseSeed(seed uint64, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64() ^ (seed * 0x9e3779b97f4a7c15)
}

// hostOut is one downloaded output: floats or integers.
type hostOut struct {
	f   []float64
	i   []int64
	int bool
}

// execute draws the case's inputs on be, runs the op once, downloads its
// outputs, then (reps > 0) times reps more calls between two Syncs. Panics
// in setup or in the op, and Sync/Download errors, come back as errors.
func execute(c *Case, be npu.Backend, seed uint64, reps int) (outs []hostOut, ms float64, err error) {
	// A case that failed before its last Sync may leave a stream failure
	// behind: it was that case's, reported already, not this one's.
	_ = be.Sync()
	s := &Side{be: be, rng: rand.New(rand.NewPCG(seed, 0x6f70636865636b))}
	defer s.free()
	var run func()
	var tensors []*npu.Tensor
	if err := guard("setup", func() { run, tensors = c.setup(s) }); err != nil {
		return nil, 0, err
	}
	if err := be.Sync(); err != nil {
		return nil, 0, fmt.Errorf("Sync after the uploads: %v", err)
	}
	if err := guard(c.Op, run); err != nil {
		return nil, 0, err
	}
	for i, t := range tensors {
		o, err := download(be, t)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: Download of output %d %v: %v", c.Op, i, t, err)
		}
		outs = append(outs, o)
	}
	if reps == 0 {
		return outs, 0, nil
	}
	if err := be.Sync(); err != nil {
		return nil, 0, fmt.Errorf("Sync: %v", err)
	}
	start := time.Now()
	for range reps {
		if err := guard(c.Op, run); err != nil {
			return nil, 0, err
		}
	}
	if err := be.Sync(); err != nil {
		return nil, 0, fmt.Errorf("%s: Sync after the timed calls: %v", c.Op, err)
	}
	return outs, float64(time.Since(start).Nanoseconds()) / 1e6 / float64(reps), nil
}

// guard runs fn, turning a panic into an error naming what.
func guard(what string, fn func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s panicked: %v", what, p)
		}
	}()
	fn()
	return nil
}

// download copies an output to the host as floats (F32, BF16, F16) or
// integers (I32, I64).
func download(be npu.Backend, t *npu.Tensor) (hostOut, error) {
	b := make([]byte, t.Bytes())
	if len(b) > 0 {
		if err := be.Download(b, t); err != nil {
			return hostOut{}, err
		}
	}
	switch t.DType() {
	case npu.F32, npu.BF16, npu.F16:
		f, err := npu.DecodeFloats(b, t.DType())
		if err != nil {
			return hostOut{}, err
		}
		o := hostOut{f: make([]float64, len(f))}
		for i, v := range f {
			o.f[i] = float64(v)
		}
		return o, nil
	case npu.I32:
		o := hostOut{int: true, i: make([]int64, t.Numel())}
		for i := range o.i {
			o.i[i] = int64(int32(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
		}
		return o, nil
	case npu.I64:
		o := hostOut{int: true, i: make([]int64, t.Numel())}
		for i := range o.i {
			o.i[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return o, nil
	}
	return hostOut{}, fmt.Errorf("opcheck cannot compare %v outputs", t.DType())
}

// compare measures got against want: the max relative error (relative to
// max(|want|, rms(want))) and max abs error for floats, NaN matching NaN
// and infinities matching exactly; for integers the fraction of entries
// that differ. msg describes a mismatch tolerance cannot excuse.
func compare(got, want hostOut) (rel, abs float64, msg string) {
	if got.int != want.int {
		return math.Inf(1), math.Inf(1), "dtype differs from the reference"
	}
	if got.int {
		if len(got.i) != len(want.i) {
			return math.Inf(1), math.Inf(1), fmt.Sprintf("%d elements, reference has %d", len(got.i), len(want.i))
		}
		bad, first := 0, -1
		for i := range got.i {
			if got.i[i] != want.i[i] {
				if first < 0 {
					first = i
				}
				bad++
				abs = math.Max(abs, math.Abs(float64(got.i[i]-want.i[i])))
			}
		}
		if bad == 0 {
			return 0, 0, ""
		}
		return float64(bad) / float64(len(got.i)), abs,
			fmt.Sprintf("%d of %d integers differ (first [%d] = %d, want %d)", bad, len(got.i), first, got.i[first], want.i[first])
	}
	if len(got.f) != len(want.f) {
		return math.Inf(1), math.Inf(1), fmt.Sprintf("%d elements, reference has %d", len(got.f), len(want.f))
	}
	var ss float64
	n := 0
	for _, w := range want.f {
		if !math.IsNaN(w) && !math.IsInf(w, 0) {
			ss += w * w
			n++
		}
	}
	rms := 0.0
	if n > 0 {
		rms = math.Sqrt(ss / float64(n))
	}
	for i := range got.f {
		g, w := got.f[i], want.f[i]
		switch {
		case math.IsNaN(g) || math.IsNaN(w) || math.IsInf(g, 0) || math.IsInf(w, 0):
			if g == w || (math.IsNaN(g) && math.IsNaN(w)) {
				continue
			}
			if msg == "" {
				msg = fmt.Sprintf("[%d] = %v, want %v", i, g, w)
			}
			rel, abs = math.Inf(1), math.Inf(1)
		default:
			d := math.Abs(g - w)
			abs = math.Max(abs, d)
			if d == 0 {
				continue
			}
			den := math.Max(math.Abs(w), rms)
			if den == 0 {
				rel = math.Inf(1)
				continue
			}
			rel = math.Max(rel, d/den)
		}
	}
	return rel, abs, msg
}

// Side is one backend's half of a case: it draws the inputs from the
// case's random stream, uploads them and frees them after the case.
type Side struct {
	be    npu.Backend
	rng   *rand.Rand
	owned []*npu.Tensor
}

// Backend is the backend the case runs on.
func (s *Side) Backend() npu.Backend { return s.be }

func (s *Side) free() {
	for _, t := range s.owned {
		s.be.Free(t)
	}
	s.owned = nil
}

// must panics with err (recovered as the case's setup failure).
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// alloc returns a zero-filled device tensor.
func (s *Side) alloc(dt npu.DType, shape ...int) *npu.Tensor {
	t, err := s.be.Alloc(dt, shape...)
	must(err)
	s.owned = append(s.owned, t)
	return t
}

// bytes uploads raw little-endian elements of dt.
func (s *Side) bytes(dt npu.DType, data []byte, shape ...int) *npu.Tensor {
	t := s.alloc(dt, shape...)
	if len(data) != t.Bytes() {
		panic(fmt.Sprintf("opcheck: %d bytes for %v", len(data), t))
	}
	if len(data) > 0 {
		must(s.be.Upload(t, data))
	}
	return t
}

// floats uploads vals as dt (F32, BF16 or F16, rounded to nearest even).
func (s *Side) floats(dt npu.DType, vals []float32, shape ...int) *npu.Tensor {
	return s.bytes(dt, npu.EncodeFloats(vals, dt), shape...)
}

// f32 uploads vals as F32.
func (s *Side) f32(vals []float32, shape ...int) *npu.Tensor {
	return s.floats(npu.F32, vals, shape...)
}

// i32 uploads vals as I32.
func (s *Side) i32(vals []int32, shape ...int) *npu.Tensor {
	return s.bytes(npu.I32, npu.EncodeInt32s(vals), shape...)
}

// normal draws n values from N(0, std²).
func (s *Side) normal(n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(s.rng.NormFloat64() * std)
	}
	return v
}

// uniform draws n values uniform in [lo, hi).
func (s *Side) uniform(n int, lo, hi float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + (hi-lo)*s.rng.Float64())
	}
	return v
}

// randn uploads N(0, std²) values as dt.
func (s *Side) randn(dt npu.DType, std float64, shape ...int) *npu.Tensor {
	return s.floats(dt, s.normal(numel(shape), std), shape...)
}

// layout uploads a batch layout (checked) and returns its SeqLayout.
func (s *Side) layout(l *npu.BatchLayout) *npu.SeqLayout {
	seqs, buf, err := l.Upload(s.be)
	must(err)
	s.owned = append(s.owned, buf)
	return seqs
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// String is the result as one line (for logs and test failures).
func (r Result) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}
