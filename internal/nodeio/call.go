// Package nodeio is the library's I/O with its nodes over go-redis: each
// node's ordered, batched command stream, Cluster routing, the restart
// guard's run_id, and the release notices' subscriptions. It sends the ops
// of internal/wire and hands each node's decoded result to whoever asked
// (a Sink: the root package's quorum round); it never imports the root.
package nodeio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Sink is where a call's result goes: Deliver is called exactly once per
// call, with the call's Index, from whatever goroutine the node answered
// on, and must not block.
type Sink interface {
	Deliver(i int, r wire.Result)
}

// ErrNotSent: a call's context ended while it waited for its node's stream.
var ErrNotSent = errors.New("not sent")

// Call is one node call: Op, for the round To, in which the node has
// index Index, to be sent before Deadline and while Ctx lasts; a Detached
// call is sent whenever it is before Deadline, whatever becomes of Ctx
// (the root package's request.detach says which are).
type Call struct {
	Ctx      context.Context
	Deadline time.Time
	Op       *wire.Op
	Index    int
	To       Sink // hands over the result
	Detached bool
}

// Ended reports whether the call may no longer be sent.
func (c *Call) Ended() bool { return c.EndedAt(time.Now()) }

// EndedAt reports whether the call may no longer be sent at now: a batch
// reads the clock once for all its calls.
func (c *Call) EndedAt(now time.Time) bool {
	return (!c.Detached && c.Ctx.Err() != nil) || !now.Before(c.Deadline)
}

// NotSent is the error of a call that ended before it was sent.
func (c *Call) NotSent() error {
	err := c.Ctx.Err()
	if err == nil || c.Detached {
		err = context.DeadlineExceeded
	}
	return fmt.Errorf("%w: %w", ErrNotSent, err)
}
