package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is where the rounds of the everyday path come from and go
// back to. Every Lock and every Unlock is a round, about 700 bytes with
// its results, and in a process that only locks the garbage collector
// follows the bytes allocated: with the two rounds of a cycle and their
// ops taken from pools, a cycle allocates half as much (docs/performance.md,
// "The everyday rounds, pooled"). A pooled round goes back to its Client's
// pool once nothing holds it: its caller, who recycles it when done with
// its results; each node call, once it delivered; the deadline timer,
// once stopped or run. Until then it is nobody else's, whatever the
// nodes do: a call that never answers keeps its round out of the pool
// (the garbage collector takes it), and a second delivery of one node's
// reply is dropped, never counted twice. The op such a round sends, taken
// from a pool of ops (pooledOp), goes back with it: once every call
// delivered, no node reads it (a lane keeps its batch's keys, not its
// ops, for the other lanes' order).

// sendPooled is send with a round from the fleet's pool. The caller
// recycles the round once done with its results, and keeps nothing of it
// (a late handler must not use it either).
func (f *fleet) sendPooled(ctx context.Context, req request) *round {
	req.pool = &f.rounds
	return f.send(ctx, req)
}

// ops holds the ops of pooled rounds between uses. They hold no channel
// and no timer, so one pool serves every Client.
var ops sync.Pool

// pooledOp is op, from the pool of ops: a pooled round that sends it with
// request.pooledOp set puts it back with itself; an op sent otherwise is
// left to the garbage collector.
func (t *target) pooledOp(kind wire.Kind, token, value string, ttl time.Duration) *wire.Op {
	o, _ := ops.Get().(*wire.Op)
	if o == nil {
		o = new(wire.Op)
	}
	*o = wire.Op{Kind: kind, Key: t.rkey, Keys: t.rkeys, Mode: t.mode, Token: token, Value: value, TTL: ttl}
	return o
}

// takeRound returns a round for req's n nodes: from req.pool when there
// is one and the results fit in the round (up to 5 nodes), with n+1
// holders (the calls and the caller), and owning req.op if it is a
// pooled op; otherwise a new round that is not pooled.
func takeRound(req request, n int) *round {
	if req.pool == nil || n > len(round{}.buf) {
		return &round{wake: make(chan struct{}, 1)}
	}
	r, _ := req.pool.Get().(*round)
	if r == nil {
		r = &round{wake: make(chan struct{}, 1), pool: req.pool}
	}
	r.refs.Store(int32(n) + 1)
	if req.pooledOp {
		r.op = req.op
	}
	return r
}

// recycle says the caller is done with r (nil: no round): a pooled round
// goes back to its pool once its calls are done with it too. The caller
// calls it at most once.
func (r *round) recycle() {
	if r != nil {
		r.unref()
	}
}

// unref drops one holder of a pooled round; the last puts it back.
func (r *round) unref() {
	if r.pool == nil {
		return
	}
	switch n := r.refs.Add(-1); {
	case n < 0:
		panic("redlock: a round recycled twice")
	case n > 0:
		return
	}
	pool := r.pool
	r.reset()
	pool.Put(r)
}

// reset empties a round nothing holds, for its next use: its channel and
// timer stay. A wake-up its caller did not take (collect returned when
// its context ended) is drained.
func (r *round) reset() {
	select {
	case <-r.wake:
	default:
	}
	if r.op != nil {
		*r.op = wire.Op{}
		ops.Put(r.op)
	}
	pool, timer, wake := r.pool, r.timer, r.wake
	*r = round{}
	r.pool, r.timer, r.wake = pool, timer, wake
}

// deliverOnce reports whether node i's reply is the first it delivered;
// a pooled round drops a second, which would otherwise take a holder it
// does not have. Callers hold r.mu.
func (r *round) deliverOnce(i int) bool {
	if r.pool == nil {
		return true
	}
	bit := uint8(1) << i
	if r.answered&bit != 0 {
		return false
	}
	r.answered |= bit
	return true
}

// arm starts the timer that wakes the caller at the round's deadline, d
// from now: a pooled round's own, held until stopped or run (disarm,
// outOfTime).
func (r *round) arm(d time.Duration) *time.Timer {
	if r.pool == nil {
		return time.AfterFunc(d, r.outOfTime)
	}
	r.refs.Add(1)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.outOfTime)
	} else {
		r.timer.Reset(d)
	}
	return r.timer
}

// disarm stops t, armed by arm; one that had fired lets go of the round
// when its outOfTime has run.
func (r *round) disarm(t *time.Timer) {
	if t.Stop() {
		r.unref()
	}
}
