package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// acquisition is what one attempt's rounds found.
type acquisition struct {
	target
	token      string
	lc         *lockConfig
	place      *wire.Place // in the wait queue, if queued
	n          int         // the attempt's number within its Lock call
	r          *round      // the acquire round
	wr         *round      // the fence write-back round, with fencing
	fence      int64
	won        bool
	handed     bool // sent by an Unlock of this Client (handover.go)
	start, end time.Time
}

// attempt is one acquisition on every node.
// w is the caller's place in the key's wait queue, nil if it has none.
func (c *Client) attempt(ctx context.Context, t target, lc *lockConfig, n int, w *waiter) (*Lock, *QuorumError) {
	if err := ctx.Err(); err != nil {
		return nil, &QuorumError{Op: "lock", key: t.key, Quorum: c.quorum(), err: ErrNotObtained, cause: err}
	}
	a := &acquisition{target: t, token: lc.token, lc: lc, n: n}
	if a.token == "" {
		a.token = rand.Text()
	}
	if w != nil {
		a.place = &w.Place
	}
	c.acquire(ctx, a)
	l, qerr := c.conclude(ctx, a)
	a.r.recycle()
	return l, qerr
}

// conclude makes the Lock of an acquisition whose rounds are in, or takes
// back what it created and describes its failure.
func (c *Client) conclude(ctx context.Context, a *acquisition) (*Lock, *QuorumError) {
	if v := validity(a.lc.ttl, c.cfg.drift, a.start, a.end); a.won && v > 0 {
		return c.grant(ctx, a, v)
	}
	return nil, c.refuse(ctx, a)
}

// acquire sends the acquire (the script, or uncontended a plain SET NX:
// plain) to every node and, with fencing, writes
// the token back to a majority.
func (c *Client) acquire(ctx context.Context, a *acquisition) {
	req := c.acquireRequest(a)
	a.start = time.Now()
	a.r = c.sendPooled(ctx, req) // recycled by attempt
	c.settle(ctx, a, req.op)
}

// acquireRequest prepares a's acquire round.
func (c *Client) acquireRequest(a *acquisition) request {
	o := a.pooledOp(wire.OpAcquire, a.token, wire.EncodeValue(a.token, a.lc.meta), a.lc.ttl)
	o.Place, o.Wake = a.place, c.hand.wakeArg // Wake: for a node's take-back (nodeio's guard)
	switch {
	case a.lc.fencing && a.takesFence():
		o.Kind, o.Fence = wire.OpAcquireFenced, c.propose()
		if a.uncontended() && o.Fence != 0 { // a ZADD of 0 would add the counter, as if 0 were taken
			o.Kind = wire.OpAcquireFencedPlain
		}
	case a.plain():
		o.Kind = wire.OpAcquirePlain
	}
	// Detached, as Unlock's releases are: a caller that cancels ctx as soon
	// as a majority granted (a wait with a timeout) would otherwise drop the
	// grants still queued for the slower nodes, and the lock would survive
	// one node fewer. Grants that come after a failed attempt are taken
	// back (refuse), as before.
	return request{op: o, pooledOp: true, need: c.quorum(), timeout: c.nodeTimeout(a.lc.ttl), stop: tally.decided, judge: c.judge, detach: true}
}

// settle concludes a's acquire round r, sent as o: whether it won and,
// with fencing, the token, written back to a majority if need be.
func (c *Client) settle(ctx context.Context, a *acquisition, o *wire.Op) {
	if mutated(mutValidityFromReply) {
		a.start = time.Now()
	}
	a.won = a.r.tally.won()
	if a.won && (o.Kind == wire.OpAcquireFenced || o.Kind == wire.OpAcquireFencedPlain) {
		// A majority that took our proposal holds it already: it is the
		// token. Otherwise the token is the largest a majority handed out;
		// written back to a majority, any later majority starts above it.
		// (docs/fencing.md has the argument.)
		acked := 0
		for _, res := range a.r.results {
			if res.OK() {
				a.fence = max(a.fence, res.Fence)
				if res.Fence == o.Fence {
					acked++
				}
			}
		}
		if acked >= c.quorum() {
			a.fence = o.Fence
		} else {
			a.wr = c.send(ctx, request{op: wire.NewFenceWrite(a.rkey, a.rkeys, a.token, a.fence), need: c.quorum(), timeout: c.nodeTimeout(a.lc.ttl), stop: tally.decided})
			a.wr.finish(&c.bg, nil)
			a.won = a.wr.tally.won()
		}
	}
	a.end = time.Now()
}

// plain reports whether the acquisition can be a plain SET NX on each
// node (wire.OpAcquirePlain): uncontended, and no fencing.
func (a *acquisition) plain() bool { return a.uncontended() && !a.lc.fencing }

// uncontended reports whether the acquisition may take a free key
// without reading its queue, as a plain SET NX does (fenced, with a ZADD
// beside it: wire.OpAcquireFencedPlain): a mutex's fresh token with no place in
// the queue, and a caller that needs no holder's PTTL from a refusal and
// never jumps a queue (a semaphore's sweep: semaphores promise that).
func (a *acquisition) uncontended() bool {
	return a.mode == wire.ModeMutex && a.lc.token == "" && a.place == nil && !a.lc.sweeping && a.rkeys == nil
}

// propose returns the fence this Client proposes for its next fenced
// acquisition: the time in 100 µs steps, times 64, plus 63 (a residue no
// node has), and above every proposal the Client made before; 0 (none) if
// that would come near 2^53. A node takes it only if it is above the
// node's counter, so a proposal that is too small costs the write-back
// round it would have saved, never safety; nor does one that is too large,
// which only makes later proposals from slower clocks fall short.
func (c *Client) propose() int64 {
	now := time.Now().UnixMicro()/100*wire.FenceModulus + wire.FenceModulus - 1
	for {
		last := c.proposed.Load()
		p := max(now, last+wire.FenceModulus)
		if p >= wire.MaxFence/2 {
			return 0
		}
		if c.proposed.CompareAndSwap(last, p) {
			return p
		}
	}
}

// proposeAbove is propose, but above fence too: a fenced holder's
// release proposes the token of the fenced waiter it may grant (wire's
// releaseSrc), which the nodes grant only above their counters, and a
// clock behind the token's origin must not cost the waiter its grant.
func (c *Client) proposeAbove(fence int64) int64 {
	above := fence - fence%wire.FenceModulus + wire.FenceModulus - 1
	if above <= fence {
		above += wire.FenceModulus
	}
	p := c.propose()
	if p == 0 || above >= wire.MaxFence/2 {
		return 0
	}
	return max(p, above)
}

// grant makes the Lock of a won acquisition with validity v left.
func (c *Client) grant(ctx context.Context, a *acquisition, v time.Duration) (*Lock, *QuorumError) {
	ttl := a.lc.ttl
	l := &Lock{
		c: c, target: a.target, token: a.token, cfg: *a.lc, fence: a.fence,
		acquired: a.start, ttl: ttl, until: a.start.Add(ttl - drift(ttl, c.cfg.drift)),
	}
	l.initNodes(len(c.nodes))
	l.noteEnd()
	var refused []node // that keep our place in the queue
	for i, res := range a.r.results {
		// Guarded grants too: the key there is ours.
		l.nodes[i].granted = res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed
		if a.place != nil && res.Answered && !l.nodes[i].granted {
			refused = append(refused, c.nodes[i])
		}
	}
	// A grant took our place out of the node's queue; elsewhere it goes now,
	// or when the node's late reply comes.
	c.leavePlace(ctx, refused, a.target, a.place, ttl)
	a.r.finish(&c.bg, func(i int, res wire.Result) func() {
		again := l.lateGrant(ctx, i, res)
		if a.place == nil || res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed {
			return again
		}
		return func() {
			if again != nil {
				again()
			}
			c.leavePlace(ctx, []node{c.nodes[i]}, a.target, a.place, ttl)
		}
	})
	if c.observing() {
		c.emit(Event{Kind: EventAcquire, Context: ctx, Key: a.key, Read: a.reader(), Attempt: a.n, Queued: a.place.Time(), HandedOver: a.handed, Duration: a.end.Sub(a.start), Validity: v, Nodes: nodeResults(c.nodes, a.r)})
	}
	if err := c.track(l); err != nil {
		_ = l.Unlock(context.WithoutCancel(ctx))
		return nil, &QuorumError{Op: "lock", key: a.key, Quorum: c.quorum(), Granted: a.r.tally.ok, err: ErrNotObtained, cause: err}
	}
	return l, nil
}

// refuse takes back what a failed acquisition created, now and as late
// grants arrive, and describes the failure. Keys that already held our
// token stay as they were when the token was the caller's (re-entry); with
// a fresh token, "held already" can only be this attempt's own write, so
// it goes too. The take-back is a release sent detached from the caller's
// cancellation, bounded by the node timeout. It wakes the key's next
// waiter, as a release does: a waiter is woken by a majority of one
// token's notices, so only where the attempt's grants, late ones
// included, made a majority (its validity ran out, its fence was not
// written back, its context ended, or its last grants came after it had
// failed), and the key, the attempt's then, is free once given back. A
// split vote's take-backs free a minority each, whose notices wake
// nobody. Until 2026-11-27 only an attempt that had won a majority by the
// time it failed woke anyone; one that failed with 2 grants of 5 at its
// context's end, and got 3 more after, left the key free and its next
// waiter asleep until its look (simulator seed 44483;
// TestLateWinnerWakesNext).
func (c *Client) refuse(ctx context.Context, a *acquisition) *QuorumError {
	created := func(res wire.Result) bool {
		return res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed && a.lc.token == "" || res.Kept
	}
	won := a.won || a.r.tally.won()
	takeBack := func() *wire.Op { // an op each: a round encodes its op
		o := a.op(wire.OpRelease, a.token, "", 0)
		if won || !mutated(mutSilentTakeBack) {
			o.Wake, o.WakeOnly = c.hand.wakeArg, true
		}
		return o
	}
	a.r.finish(&c.bg, func(i int, res wire.Result) func() {
		if !created(res) {
			return nil
		}
		return func() { c.sendDetached(ctx, takeBack(), []node{c.nodes[i]}, a.lc.ttl) }
	})
	var mine []node
	for i, res := range a.r.results {
		if created(res) {
			mine = append(mine, c.nodes[i])
		}
	}
	if len(mine) > 0 {
		c.sendDetached(ctx, takeBack(), mine, a.lc.ttl)
	}
	qerr := quorumError("lock", a.key, c.nodes, c.quorum(), a.r, 0, ctx)
	switch {
	case a.wr != nil && !a.wr.tally.won():
		qerr = quorumError("lock", a.key, c.nodes, c.quorum(), a.wr, 0, ctx)
		qerr.detail = fmt.Sprintf("fencing token %d not written back to a majority", a.fence)
	case a.won:
		qerr.detail = "majority reached after the validity ran out"
	}
	if hint := a.r.unusable(); hint != "" && qerr.cause == nil {
		qerr.unusable, qerr.detail = true, hint
	}
	qerr.retryAfter = retryHint(a.r, c.quorum(), a.end.Sub(a.start), a.multiKey())
	if c.observing() {
		c.emit(Event{Kind: EventAcquire, Context: ctx, Key: a.key, Read: a.reader(), Attempt: a.n, Queued: a.place.Time(), HandedOver: a.handed, Duration: a.end.Sub(a.start), Err: qerr, Nodes: nodeResults(c.nodes, a.r)})
	}
	return qerr
}
