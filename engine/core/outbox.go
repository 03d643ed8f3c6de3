package core

import "sync"

// outbox delivers one request's outputs without ever blocking the engine
// loop: push appends to an unbounded queue, and a goroutine per request
// moves the queue to the request's channel at the consumer's pace. The
// goroutine closes the channel after the final output and exits, so a
// consumer that reads until the channel is closed leaves nothing behind.
type outbox struct {
	mu     sync.Mutex
	q      []Output
	final  bool          // the final output is queued
	signal chan struct{} // buffered 1: q has something new
	ch     chan Output
}

func newOutbox() *outbox {
	o := &outbox{signal: make(chan struct{}, 1), ch: make(chan Output, 4)}
	go o.pump()
	return o
}

// push queues out (the last push must be the final output).
func (o *outbox) push(out Output) {
	o.mu.Lock()
	o.q = append(o.q, out)
	if out.Finished {
		o.final = true
	}
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// pump forwards queued outputs to ch in order and closes it after the
// final one.
func (o *outbox) pump() {
	var batch []Output
	for range o.signal {
		o.mu.Lock()
		batch, o.q = o.q, batch[:0]
		final := o.final
		o.mu.Unlock()
		for i := range batch {
			o.ch <- batch[i]
			batch[i] = Output{}
		}
		if final {
			close(o.ch)
			return
		}
	}
}
