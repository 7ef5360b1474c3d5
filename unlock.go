package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is how a lock ends by its holder's hand: Unlock and
// UnlockAfter, what their rounds tell of the lock, and the hand-over to
// the next waiter.

// Unlock releases the lock on every node. It first stops auto-extension, if
// any, and waits for it, so that no extension can follow the release. It
// returns nil as soon as a majority released the lock, which also proves
// the lock was still held by us until then; the other nodes' releases are
// handled as they come. Otherwise, having waited for each node at most the
// node timeout, it returns a [*QuorumError] matching [ErrTakenOver],
// [ErrExpired], or [ErrNotObtained] (too few nodes confirmed: the lock
// has ended all the same, Done is closed and Err matches ErrExpired, since
// some keys may be gone; Unlock may be called again, and the keys not
// confirmed expire at their TTL). A node that
// never granted the lock is no evidence either way. A second Unlock returns
// [ErrReleased].
//
// ctx must not be done: a cancelled context sends nothing. To release in a
// defer after the work's context may have been cancelled, pass
// context.WithoutCancel(ctx). Once sent, the releases do not depend on
// ctx: when ctx ends during Unlock, or right after it returns, Unlock
// stops waiting, but each node still gets its release (within the node
// timeout).
func (l *Lock) Unlock(ctx context.Context) error { return l.release(ctx, 0) }

// UnlockAfter releases the lock but keeps other tokens out for cooldown
// more: on every node that still holds it, the key is set to expire
// cooldown from now instead of being deleted. It is for "at most once per
// period" work. A cooldown of 0 is Unlock; otherwise it must be within
// [1 ms, 24 h]. Errors are those of [Lock.Unlock].
func (l *Lock) UnlockAfter(ctx context.Context, cooldown time.Duration) error {
	if cooldown != 0 {
		if err := checkDuration("cooldown", cooldown); err != nil {
			return err
		}
	}
	return l.release(ctx, cooldown)
}

func (l *Lock) release(ctx context.Context, cooldown time.Duration) error {
	c := l.c
	l.stopExtending()
	if err := ctx.Err(); err != nil {
		return &QuorumError{Op: "unlock", key: l.key, Quorum: c.quorum(), err: ErrNotObtained, cause: err}
	}
	l.turn.enter()
	defer l.turn.leave()
	if l.isReleased() {
		return fmt.Errorf("%w: %q", ErrReleased, l.key)
	}
	ttl, idx, already := l.toRelease(cooldown)
	nodes := c.nodes
	if idx != nil {
		nodes = make([]node, len(idx))
		for j, i := range idx {
			nodes[j] = c.nodes[i]
		}
	}
	// Return once a majority released (on failure, hear every node:
	// taken over and expired differ). The rest are handled as they come:
	// each node's stream sends this Client's later calls after the release,
	// so a re-Lock of the key by this Client cannot find it still there.
	// The calls are detached from ctx: a caller that cancels ctx as soon as
	// Unlock returns (defer cancel()) would otherwise drop the releases
	// still queued for the slower nodes, whose keys stayed until their TTL.
	start := time.Now()
	o := l.pooledOp(wire.OpRelease, l.token, "", cooldown)
	o.Wake = c.hand.wakeArg
	if l.fence != 0 && cooldown == 0 && fencedGrant(l.target) {
		o.Fence = c.proposeAbove(l.fence) // a fenced waiter's token, where the release grants it the key
	}
	req := request{op: o, pooledOp: true, nodes: nodes, need: max(c.quorum()-already, 0), timeout: c.nodeTimeout(ttl), stop: tally.won, detach: true}
	var r *round
	if ha := c.hand.claim(l, cooldown, idx != nil); ha != nil {
		r = c.sendHandOver(ctx, req, ha) // our next waiter's attempt goes with it (handover.go)
	} else {
		r = c.sendPooled(ctx, req)
		defer r.recycle()
	}
	r.finish(&c.bg, func(j int, res wire.Result) func() { return l.onRelease(ctx, nodeIndex(idx, j), res) })
	for j, res := range r.results {
		if !res.Answered {
			continue
		}
		if again := l.onRelease(ctx, nodeIndex(idx, j), res); again != nil {
			again()
		}
	}
	return l.concludeRelease(ctx, start, nodes, r, already, idx)
}

// toRelease notes the cooldown of this release and returns the lock's TTL
// and the nodes to ask: all of them (nil) but when an earlier Unlock failed
// part-way, then those not confirmed yet, with how many were.
func (l *Lock) toRelease(cooldown time.Duration) (ttl time.Duration, idx []int, already int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cooldown = cooldown
	for i := range l.nodes {
		if l.nodes[i].release == releaseDone {
			already++
		}
	}
	if already > 0 {
		for i := range l.nodes {
			if l.nodes[i].release != releaseDone {
				idx = append(idx, i)
			}
		}
	}
	return l.ttl, idx, already
}

// nodeIndex is the Client's index of the j-th node of a round over the
// nodes idx (nil: all of them).
func nodeIndex(idx []int, j int) int {
	if idx == nil {
		return j
	}
	return idx[j]
}

// concludeRelease concludes a release round r over nodes (the lock's nodes idx,
// nil: all), with already confirmations from earlier rounds.
func (l *Lock) concludeRelease(ctx context.Context, start time.Time, nodes []node, r *round, already int, idx []int) error {
	c := l.c
	if r.tally.won() {
		l.invalidate(true)
		l.end(ErrReleased)
		c.untrack(l)
		l.handOver(namedHeads(r))
		if c.observing() {
			now := time.Now()
			c.emit(Event{Kind: EventRelease, Context: ctx, Key: l.key, Read: l.reader(), Duration: now.Sub(start), Held: now.Sub(l.acquired), Nodes: nodeResults(nodes, r)})
		}
		return nil
	}
	qerr := quorumError("unlock", l.key, nodes, c.quorum(), r, already, ctx)
	if ended := l.endedBy(r, idx); ended != nil {
		qerr.err = ended
	}
	if c.observing() {
		c.emit(Event{Kind: EventRelease, Context: ctx, Key: l.key, Read: l.reader(), Duration: time.Since(start), Err: qerr, Nodes: nodeResults(nodes, r)})
	}
	if qerr.err == ErrNotObtained {
		// Its validity is given up (some keys may be gone): the lock ends
		// now, for whoever waits on Done, and Unlock may be called again.
		l.invalidate(false)
		l.endEarly(errReleaseUnconfirmed)
		return qerr
	}
	// Nothing left to release: the lock had ended.
	l.invalidate(true)
	l.end(qerr)
	c.untrack(l)
	l.handOver(namedHeads(r))
	return qerr
}

// namedHeads returns the first waiters of the key's queue that the nodes
// of a release round r named, nil if none did.
func namedHeads(r *round) []string {
	var named []string
	for _, res := range r.results {
		if res.Head != "" {
			named = append(named, res.Head)
		}
	}
	return named
}

// lateGrant records an acquire reply that arrived after Lock returned (a
// lateFunc: it returns the release to send again, if any).
func (l *Lock) lateGrant(ctx context.Context, i int, res wire.Result) (then func()) {
	l.mu.Lock()
	if res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed {
		l.nodes[i].granted, l.nodes[i].late = true, true
	}
	l.mu.Unlock()
	return l.releaseIfBehind(ctx, i)
}

// onRelease records one node's answer to an Unlock, on time or late, and
// returns the release to send again, if any (see releaseIfBehind).
func (l *Lock) onRelease(ctx context.Context, i int, res wire.Result) (then func()) {
	l.mu.Lock()
	st := &l.nodes[i]
	if res.Status == wire.StatusOK {
		st.release = releaseDone
	} else if st.release != releaseDone {
		st.release = releaseMissed
	}
	l.mu.Unlock()
	return l.releaseIfBehind(ctx, i)
}

// releaseIfBehind returns the release of node i to send again if its grant
// came in behind a release that found nothing, nil if none is due.
func (l *Lock) releaseIfBehind(ctx context.Context, i int) (then func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.nodes[i]
	if !st.late || st.release != releaseMissed {
		return nil
	}
	st.late = false // once
	o, ttl := l.op(wire.OpRelease, l.token, "", l.cooldown), l.ttl
	return func() { l.c.sendDetached(ctx, o, []node{l.c.nodes[i]}, ttl) }
}

// handOver tells the Client's hand-off that the lock has been released
// (or has ended), with the first waiters its release round named: of a
// set's first key that had a queue (its release wakes each key's through
// the notices; a queue named marks its every key contended).
func (l *Lock) handOver(heads []string) {
	if l.reader() && len(heads) == 0 {
		return // a reader's release names a waiter only when it was the last: it tells nothing of the queue
	}
	l.eachQueueKey(func(k string) { l.c.hand.released(k, l.token, heads) })
}
