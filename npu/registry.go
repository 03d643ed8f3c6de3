package npu

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// OpenOptions configure a backend being opened.
type OpenOptions struct {
	// Device is the device index on the host (accelerators).
	Device int
	// Threads bounds the host threads a CPU backend uses inside ops
	// (0: GOMAXPROCS).
	Threads int
}

// OpenFunc opens one device of a backend. A runtime that is not installed
// is an error wrapping ErrUnavailable that names the library looked for
// (and where), returned within seconds.
type OpenFunc func(OpenOptions) (Backend, error)

// Registration describes a registered backend.
type Registration struct {
	Name string
	// Accelerator backends are tried by "auto", in priority order (lower
	// first); the host backends are not.
	Accelerator bool
	Priority    int
	Open        OpenFunc
	// Probe, when set, reports whether the runtime loads (nil) without
	// opening a device: what a launcher asks before choosing a backend it
	// was not told to use. Its error wraps ErrUnavailable like Open's.
	Probe func() error
	// Transport names the hccl transport that moves this backend's
	// tensors between ranks ("": "tcp", host memory; "hccl" for Ascend
	// device memory). Launchers make their groups' root infos with it.
	Transport string
}

var (
	regMu    sync.Mutex
	registry = map[string]Registration{}
)

// Register makes a backend available to Open under r.Name (as hccl.Register
// does for transports). Backends register from their package's init; a
// binary links the backends it offers by importing them.
func Register(r Registration) {
	regMu.Lock()
	defer regMu.Unlock()
	if r.Name == "" || r.Name == "auto" || r.Open == nil {
		panic(fmt.Sprintf("npu: invalid backend registration %q", r.Name))
	}
	if _, dup := registry[r.Name]; dup {
		panic(fmt.Sprintf("npu: backend %q registered twice", r.Name))
	}
	registry[r.Name] = r
}

// Names lists the registered backends, sorted.
func Names() []string {
	regMu.Lock()
	defer regMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the registration of name.
func Lookup(name string) (Registration, bool) {
	regMu.Lock()
	defer regMu.Unlock()
	r, ok := registry[name]
	return r, ok
}

// Available reports whether the backend called name could open here: nil,
// or why not (an unknown name, or its Probe's error). A backend without a
// Probe (the host backends) is always available.
func Available(name string) error {
	r, ok := Lookup(name)
	if !ok {
		return fmt.Errorf("unknown device %q (this binary has: auto, %s): %w", name, strings.Join(Names(), ", "), ErrUnavailable)
	}
	if r.Probe == nil {
		return nil
	}
	return r.Probe()
}

// TransportOf is the collective transport of the backend called name
// (Registration.Transport; "tcp" for host-memory backends and unknown
// names).
func TransportOf(name string) string {
	if r, ok := Lookup(name); ok && r.Transport != "" {
		return r.Transport
	}
	return "tcp"
}

// Open opens the backend called name. "auto" opens the first accelerator
// (by priority) whose runtime loads, else "cpu"; Resolved reports which
// one and why the others were passed over.
func Open(name string, opt OpenOptions) (Backend, error) {
	be, _, err := OpenAuto(name, opt)
	return be, err
}

// OpenAuto is Open that also returns, for "auto", one line per accelerator
// that was tried and did not open (for the log).
func OpenAuto(name string, opt OpenOptions) (Backend, []string, error) {
	if name != "auto" {
		r, ok := Lookup(name)
		if !ok {
			return nil, nil, fmt.Errorf("unknown device %q (this binary has: auto, %s)", name, strings.Join(Names(), ", "))
		}
		be, err := r.Open(opt)
		return be, nil, err
	}
	regMu.Lock()
	var accel []Registration
	for _, r := range registry {
		if r.Accelerator {
			accel = append(accel, r)
		}
	}
	regMu.Unlock()
	slices.SortFunc(accel, func(a, b Registration) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		return strings.Compare(a.Name, b.Name)
	})
	var skipped []string
	for _, r := range accel {
		be, err := r.Open(opt)
		if err == nil {
			return be, skipped, nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return nil, skipped, err
		}
		skipped = append(skipped, err.Error())
	}
	r, ok := Lookup("cpu")
	if !ok {
		return nil, skipped, errors.New("device auto: no accelerator runtime loads and this binary has no cpu backend")
	}
	be, err := r.Open(opt)
	return be, skipped, err
}
