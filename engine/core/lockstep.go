package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/npuserve/npuserve/engine/model"
)

// CollectiveModel is a Model whose forward passes run collectives with
// other ranks (tensor or expert parallelism): the TP group leader of
// engine/worker, or a glm5next model placed with glm5next.Parallel. A step
// that fails on such a model stops the engine (every request fails, Err
// reports why) instead of failing only its requests: the ranks'
// collective sequences can no longer be trusted to match.
type CollectiveModel = model.Collective

// Lockstep keeps the engine loops of the DP ranks of an expert-parallel
// deployment in step (serving-compat.md §3.5). With Options.Lockstep set,
// every loop iteration of every DP rank is:
//
//  1. Sync: one collective over the DP ranks, with this rank's "has work"
//     and "closing" flags; every rank gets the same answer.
//  2. If any rank is closing: every rank stops (the whole DP group shuts
//     down together; requests in flight end with FinishReason "abort").
//  3. Else if any rank has work: every rank runs exactly one forward, a
//     real step or, when it has nothing scheduled, the model's DummyStep
//     (with speculative decoding: one speculative step, or SpecDummyStep,
//     each running the draft layer K times).
//  4. Else every rank waits up to IdleWait for a request, then syncs again.
//
// The decision to run a forward is taken from the Sync result, which is
// identical on every rank, and a forward's collectives do not depend on its
// batch, so ranks reach the same collectives in the same order by
// construction. The model must be a CollectiveModel.
type Lockstep interface {
	// Sync is the per-iteration collective over the DP ranks.
	Sync(hasWork, closing bool) (anyWork, anyClosing bool, err error)
	// IdleWait is how long ranks wait between syncs while no rank has
	// work: it bounds how late a request arriving at another DP rank
	// starts, and the cost of idling (one small collective per wait).
	IdleWait() time.Duration
}

// ErrLockstepStopped ends the requests of a DP rank whose peers shut the
// lockstep group down (FinishReason "abort").
var ErrLockstepStopped = errors.New("engine: another DP rank shut down the lockstep group")

// collective reports whether m runs collectives.
func collective(m Model) bool {
	cm, ok := m.(CollectiveModel)
	return ok && cm.Collective()
}

// lockstepIteration runs one iteration of the lockstep loop (after the
// queued operations were applied) and reports whether the loop must end.
func (e *Engine) lockstepIteration(closing bool) (done bool) {
	hasWork := !closing && e.sched.HasWork()
	anyWork, stop, err := e.opt.Lockstep.Sync(hasWork, closing)
	switch {
	case err != nil:
		e.die(fmt.Errorf("engine: DP lockstep sync: %w", err))
		return true
	case stop && closing:
		e.failAll("abort", ErrClosed)
		e.publish()
		return true
	case stop:
		e.mu.Lock()
		e.dead = ErrLockstepStopped
		e.mu.Unlock()
		e.failAll("abort", ErrLockstepStopped)
		e.publish()
		return true
	case !anyWork:
		e.publish()
		t := time.NewTimer(e.opt.Lockstep.IdleWait())
		select {
		case <-e.wake:
		case <-t.C:
		}
		t.Stop()
		return false
	}
	if err := e.safeLockstepStep(hasWork); err != nil {
		e.die(err)
		return true
	}
	e.publish()
	return false
}

// safeLockstepStep runs a real step when this rank has work and a dummy
// step when it has none or scheduled nothing (only preemptions), so that
// it runs exactly one forward. Any failure is fatal.
func (e *Engine) safeLockstepStep(hasWork bool) (fatal error) {
	defer func() {
		if p := recover(); p != nil {
			fatal = fmt.Errorf("engine: lockstep step failed: %v", p)
			if err, ok := p.(error); ok {
				fatal = fmt.Errorf("engine: lockstep step failed: %w", err)
			}
		}
	}()
	if hasWork {
		ran, err := e.step()
		if err != nil {
			return fmt.Errorf("engine: lockstep step failed: %w", err)
		}
		if ran {
			return nil
		}
	}
	var err error
	if sc, ok := e.spec.(model.SpecCollective); ok {
		// Speculative steps run the draft layer K times: so does the dummy.
		err = sc.SpecDummyStep(e.cache, e.opt.NumSpeculativeTokens)
	} else {
		err = e.model.(CollectiveModel).DummyStep(e.cache)
	}
	if err != nil {
		return fmt.Errorf("engine: lockstep dummy step failed: %w", err)
	}
	e.counters.dummy++
	return nil
}

// die stops the loop after a fatal failure: every request fails with err.
func (e *Engine) die(err error) {
	if e.opt.Logf != nil {
		e.opt.Logf("%v; stopping the engine", err)
	}
	e.mu.Lock()
	e.dead = err
	e.mu.Unlock()
	e.failAll("error", err)
	e.publish()
}
