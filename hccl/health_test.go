package hccl

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	boom, late := errors.New("boom"), errors.New("late")
	var h Health
	if err := h.Failure(); err != nil {
		t.Fatalf("zero Health: %v", err)
	}
	h.Poison(boom)
	h.Poison(late) // the first failure stays
	if err := h.Failure(); !errors.Is(err, ErrPoisoned) || !errors.Is(err, boom) || errors.Is(err, late) {
		t.Errorf("poisoned: %v", err)
	}
	if already, failed := h.MarkClosed(); already || !failed {
		t.Errorf("MarkClosed = %v, %v; want false, true", already, failed)
	}
	if already, _ := h.MarkClosed(); !already {
		t.Error("second MarkClosed: not already closed")
	}
	if err := h.Failure(); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}

	var a Health
	a.MarkClosed()
	a.Abort(boom) // no effect on a closed communicator
	if _, failed := a.MarkClosed(); failed {
		t.Error("Abort after Close recorded a failure")
	}
	var b Health
	b.Abort(boom)
	if err := b.Failure(); !errors.Is(err, boom) {
		t.Errorf("aborted: %v", err)
	}

	o := &Op{Name: "AllReduce", Seq: 7, Describe: func() string { return "F32[4]" }, Start: time.Now()}
	e := o.Error("tp", 1, 2, time.Second, ErrTimeout, 3, 0)
	if e.Op != "AllReduce" || e.Seq != 7 || e.Detail != "F32[4]" || e.Peers[0] != 0 || e.Peers[1] != 3 || !errors.Is(e, ErrTimeout) {
		t.Errorf("Op.Error: %+v", e)
	}
	if !strings.Contains(e.Error(), "AllReduce") {
		t.Errorf("Op.Error message %q", e.Error())
	}
}
