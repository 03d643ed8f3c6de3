//go:build cgo

package ascend

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/npuserve/npuserve/hccl"
)

// HCCL's own timeouts follow ours. HCCL_CONNECT_TIMEOUT (link setup at
// init) and HCCL_EXEC_TIMEOUT (how long a rank's device waits for the
// others in a collective; default 1836 s) are process-wide environment
// variables that HCCL reads when it initialises a communicator
// (ascend-api.md §1, §6): left at their defaults, a lost rank would hold
// the other ranks' streams for half an hour after npuserve's own timeout
// has already failed the operation. So before the process's first
// HcclCommInitRootInfo the transport sets them from the first
// communicator's Options (InitTimeout and Timeout, in seconds rounded up,
// within HCCL's documented ranges) unless the user set them, and logs
// once what it did; a root info made through the transport with
// RootOptions.Comm does the same first, before HcclGetRootInfo. Later communicators keep the process's values (HCCL
// may have read them already); their execution timeout also goes in
// HcclCommConfig.hcclExecTimeOut where HCCL supports it (comm.go).
//
// Whether HCCL reads them at each init or once per process, and whether
// HcclGetRootInfo (called before, on rank 0) reads HCCL_CONNECT_TIMEOUT,
// is not documented; setting them before the first init covers the
// former only.

// Documented ranges (HCCL user guide, hccl_env): HCCL_CONNECT_TIMEOUT is
// [120, 7200] s (the real wait is the value + 20 s); HCCL_EXEC_TIMEOUT is
// [0, 1091] s in AIV expansion mode, 0 meaning never, and wider in the
// others: [1, 1091] is valid in every mode.
const (
	connectTimeoutMin = 120
	connectTimeoutMax = 7200
	execTimeoutMin    = 1
	execTimeoutMax    = 1091
)

// envTimeout is the decision for one variable.
type envTimeout struct {
	name  string
	ours  int    // what npuserve's setting gives, in HCCL's range
	from  string // the setting, for the log
	user  string // the environment's value ("" when unset)
	clamp string // why ours differs from the setting, if it does
}

// timeoutEnv decides HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT for o
// (with defaults), lookup reading the environment.
func timeoutEnv(o hccl.Options, lookup func(string) (string, bool)) []envTimeout {
	o = o.WithDefaults()
	mk := func(name, from string, d time.Duration, lo, hi int) envTimeout {
		s := int(math.Ceil(d.Seconds()))
		e := envTimeout{name: name, ours: min(max(s, lo), hi), from: fmt.Sprintf("%s %v", from, d)}
		switch {
		case s < lo:
			e.clamp = fmt.Sprintf("HCCL's minimum %d s", lo)
		case s > hi:
			e.clamp = fmt.Sprintf("HCCL's maximum %d s", hi)
		}
		if v, ok := lookup(name); ok {
			e.user = v
		}
		return e
	}
	return []envTimeout{
		mk("HCCL_CONNECT_TIMEOUT", "init timeout", o.InitTimeout, connectTimeoutMin, connectTimeoutMax),
		mk("HCCL_EXEC_TIMEOUT", "operation timeout", o.Timeout, execTimeoutMin, execTimeoutMax),
	}
}

var envOnce sync.Once

// applyTimeoutEnv sets the HCCL timeouts from o, once per process, before
// the first communicator's init; log receives the one line saying what
// was set and the warnings (nil: logrus's standard logger).
func applyTimeoutEnv(o hccl.Options, log logrus.FieldLogger) {
	envOnce.Do(func() {
		if log == nil {
			log = logrus.StandardLogger()
		}
		var set, kept []string
		for _, e := range timeoutEnv(o, os.LookupEnv) {
			if e.user == "" {
				note := e.from
				if e.clamp != "" {
					note += ", " + e.clamp
				}
				if err := os.Setenv(e.name, strconv.Itoa(e.ours)); err != nil {
					log.Warnf("hccl: cannot set %s: %v", e.name, err)
					continue
				}
				set = append(set, fmt.Sprintf("%s=%d (%s)", e.name, e.ours, note))
				continue
			}
			kept = append(kept, fmt.Sprintf("%s=%s", e.name, e.user))
			v, err := strconv.Atoi(strings.TrimSpace(e.user))
			switch {
			case err != nil:
				log.Warnf("hccl: %s=%q from the environment is not a number of seconds; HCCL decides what it means", e.name, e.user)
			case e.name == "HCCL_EXEC_TIMEOUT" && v == 0:
				log.Warnf("hccl: HCCL_EXEC_TIMEOUT=0 from the environment: HCCL never gives up on a lost rank, npuserve's %s still fails the operation", e.from)
			case v > e.ours:
				log.Warnf("hccl: %s=%d s from the environment exceeds npuserve's %s (%d s): npuserve gives up on a lost rank first, and HCCL keeps waiting until its own limit", e.name, v, e.from, e.ours)
			}
		}
		var parts []string
		if len(set) > 0 {
			parts = append(parts, "set "+strings.Join(set, ", "))
		}
		if len(kept) > 0 {
			parts = append(parts, "kept from the environment "+strings.Join(kept, ", "))
		}
		log.Info("hccl: HCCL timeouts follow npuserve's (HCCL's default HCCL_EXEC_TIMEOUT is 1836 s): " + strings.Join(parts, "; "))
	})
}
