package nodeio

import (
	"context"
	"sync"
	"time"
)

// batchContext is the context a stream sends a batch on, when its client
// has ContextTimeoutEnabled: go-redis then bounds the batch's reads and
// writes by the context's deadline, the latest of its calls' deadlines, so
// that a node that stops answering holds the stream no longer than its
// calls would wait. One is kept per stream and set anew for each batch: a
// context.WithDeadline per batch cost 3–4 allocations, 31 of the 81 that a
// Lock+Unlock on 5 nodes made with the README's node options.
//
// It keeps the context contract: Done is closed at the deadline (a timer,
// armed only when Done is asked for, which go-redis does not do on a
// stream's own connection), Err then reports DeadlineExceeded, and a batch
// that ends closes Done, so that nothing still holding the context of a
// finished batch waits on it.
type batchContext struct {
	mu       sync.Mutex
	deadline time.Time
	done     chan struct{} // this batch's, made by the first Done; nil until then
	shut     bool          // done is closed
	timer    *time.Timer   // closes done at the deadline; made once
}

var _ context.Context = (*batchContext)(nil)

// begin starts a batch with deadline d.
func (c *batchContext) begin(d time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline, c.done, c.shut = d, nil, false
}

// end ends the batch: its Done, if made, is closed.
func (c *batchContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.close()
}

// close closes done if it was made and is open; callers hold c.mu.
func (c *batchContext) close() {
	if c.done != nil && !c.shut {
		close(c.done)
		c.shut = true
	}
}

func (c *batchContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

func (c *batchContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if left := time.Until(c.deadline); left <= 0 {
			c.close()
		} else if c.timer == nil {
			c.timer = time.AfterFunc(left, c.expire)
		} else {
			c.timer.Reset(left)
		}
	}
	return c.done
}

// expire closes Done at the deadline of the batch that armed the timer (a
// later batch's Done is made anew, after begin).
func (c *batchContext) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !time.Now().Before(c.deadline) {
		c.close()
	}
}

func (c *batchContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	case c.shut:
		return context.Canceled // the batch ended
	}
	return nil
}

func (c *batchContext) Value(any) any { return nil }
