package redlock

import (
	"context"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is a waiter's look at the wait queues of its keys: taking,
// refreshing and leaving its place, and what a look tells the wait loop
// (wait.go): attempt now, or look again when.

// leaveOn takes the place p out of the queues of t's keys on nodes, in
// the background.
func (c *Client) leaveOn(ctx context.Context, nodes []node, t target, p *wire.Place, ttl time.Duration) {
	if len(nodes) > 0 {
		c.sendDetached(ctx, c.queueOp(t, p, true), nodes, ttl)
	}
}

// queueOp prepares a look at the queues of t's keys for the place p, or
// with quiet, p's leaving them.
func (c *Client) queueOp(t target, p *wire.Place, quiet bool) *wire.Op {
	o := t.op(wire.OpQueue, "", "", 0)
	o.Place, o.Quiet, o.Wake = p, quiet, c.hand.wakeArg
	return o
}

// pollQueue joins w to the key's queue on every node, or refreshes its place,
// and tells whether w may attempt now: a zero failure when w is first on a
// majority of nodes that have the key free. A node that has w first and
// the key free counts for; any other answer against.
func (c *Client) pollQueue(ctx context.Context, lc *lockConfig, w *waiter) tryFailure {
	if err := ctx.Err(); err != nil {
		return tryFailure{cause: err}
	}
	c.hand.awaitSubscribed(ctx, c.nodeTimeout(lc.ttl))
	o := c.queueOp(w.t, &w.Place, false)
	sent := time.Now()
	r := c.send(ctx, request{op: o, need: c.quorum(), timeout: c.nodeTimeout(lc.ttl), stop: lookEnded, judge: w.judge})
	r.finish(&c.bg, nil)
	if r.tally.won() {
		return tryFailure{}
	}
	f := tryFailure{r: r, unusable: r.unusable()}
	// More nodes than last time have w first with the key free: a release
	// is under way, and the rest of it is about a round trip behind. Look
	// again then: its notices may never make a majority (nodes that named
	// another first waiter), and the strategy's delay would be a stall.
	// Once per change: a key left free on a minority (a holder's acquire
	// that never reached them) must not have w look every round trip.
	underWay := r.tally.ok > w.free
	w.free = r.tally.ok
	if underWay {
		f.hint = max(time.Since(sent), time.Millisecond)
		return f
	}
	// The key held, but by no token on a majority: a split vote's grants
	// on their way out, whose take-back wakes nobody; look again within
	// two rounds, as a refused attempt does after a split vote (a plain
	// attempt's refusal names no holder: this look is the first to see).
	// A holder on a bare majority with a node silent looks the same: each
	// such look in a row doubles the bound, so that a long holding costs a
	// few looks, not one every two rounds.
	if splitSeen(r, c.quorum()) {
		f.hint = jitter(time.Microsecond, 2*time.Since(sent)<<min(w.splits, 20)+time.Microsecond)
		w.splits++
		return f
	}
	w.splits = 0
	// First where the key is held: look again when the holder's keys are
	// gone at the latest. Free where another is first: when that waiter's
	// place lapses, should it be gone.
	for _, res := range r.results {
		var d time.Duration
		switch {
		case res.Status == wire.StatusHeld && res.Head == w.ID && res.PTTL >= 0:
			d = res.PTTL
		case res.Status == wire.StatusQueued:
			d = res.PTTL
		default:
			continue
		}
		d += time.Millisecond
		if f.hint == 0 || d < f.hint {
			f.hint = d
		}
	}
	return f
}

// splitSeen reports whether a look found the key held on some node while
// a majority of nodes answered and no token held it on a majority of them.
func splitSeen(r *round, quorum int) bool {
	answered, held := 0, 0
	most := 0
	for _, res := range r.results {
		if !res.Answered || res.Status == wire.StatusFailed {
			continue
		}
		answered++
		if res.Status == wire.StatusHeld && res.Value != "" {
			held++
			most = max(most, countHolder(r.results, res.Value))
		}
	}
	return held > 0 && answered >= quorum && most < quorum
}

// countHolder returns how many results name token as the key's holder.
func countHolder(results []wire.Result, token string) int {
	n := 0
	for _, res := range results {
		if res.Status == wire.StatusHeld && res.Value == token {
			n++
		}
	}
	return n
}

// lookEnded ends a look at the queue once w is first on a majority with the
// key free, or once it cannot be and no node has it first with the key
// free; a look that some node has it first on waits for every answer (or
// the node timeout), to count them. Ending every look at a decision would
// miss a release under way half the time; waiting for every node on every
// look would hold each up by a hung node's timeout.
func lookEnded(t tally) bool { return t.won() || t.lost() && t.ok == 0 }
