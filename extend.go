package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is how a holder keeps its lock: Extend, and Proclaim (an
// election's new value on the lock), each one quorum round.

// Extend resets the lock's TTL to ttl on every node that still holds it. It
// succeeds only if a majority extended it within the new validity window,
// which then starts from the moment Extend was called, and returns as soon
// as that majority answered; a failing Extend waits for every node (at most
// the node timeout) to tell why. Extend never re-creates a key that has
// expired. As with Unlock, a done ctx sends nothing, and once sent the
// calls do not depend on ctx: each node gets its extension.
//
// On failure the error is a [*QuorumError] matching [ErrTakenOver] or
// [ErrExpired], after which the lock has ended (see [Lock.Done]), or
// [ErrNotObtained] (too few nodes extended it), after which the lock keeps
// the validity it had. After Unlock, Extend returns [ErrReleased].
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := checkDuration("TTL", ttl); err != nil {
		return err
	}
	if !canBeValid(ttl, c.cfg.drift) {
		return invalid("TTL %v leaves no validity after drift %v", ttl, drift(ttl, c.cfg.drift))
	}
	return l.extend(ctx, ttl)
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := l.begin(ctx, "extend"); err != nil {
		return err
	}
	defer l.turn.leave()
	start := time.Now()
	// On failure, hear every node: taken over and expired differ. Detached,
	// as Unlock's releases are: a node whose extension was dropped because
	// the caller cancelled ctx right after a majority answered would keep
	// the old expiry, and the lock would survive one node fewer.
	r := c.send(ctx, request{op: l.op(wire.OpExtend, l.token, "", ttl), need: c.quorum(), timeout: c.nodeTimeout(ttl), stop: tally.won, detach: true})
	end := time.Now()
	r.finish(&c.bg, nil)
	if v := validity(ttl, c.cfg.drift, start, end); r.tally.won() && v > 0 {
		l.mu.Lock()
		l.ttl, l.until, l.margin = ttl, start.Add(ttl-drift(ttl, c.cfg.drift)), 0
		l.noteEnd()
		if l.timer != nil {
			l.timer.Reset(time.Until(l.until))
		}
		l.mu.Unlock()
		if c.observing() {
			c.emit(Event{Kind: EventExtend, Context: ctx, Key: l.key, Read: l.reader(), Duration: end.Sub(start), Validity: v, Nodes: nodeResults(c.nodes, r)})
		}
		return nil
	}
	qerr := l.updateFailed(ctx, "extend", r)
	if c.observing() {
		c.emit(Event{Kind: EventExtend, Context: ctx, Key: l.key, Read: l.reader(), Duration: end.Sub(start), Err: qerr, Nodes: nodeResults(c.nodes, r)})
	}
	if qerr.err != ErrNotObtained {
		l.invalidate(false)
		l.endEarly(qerr)
	}
	return qerr
}

// begin starts an extend or proclaim (op): it fails if ctx is done or the
// lock released, and otherwise returns holding the lock's serial turn
// (serial.go), which the caller ends with l.turn.leave.
func (l *Lock) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return &QuorumError{Op: op, key: l.key, Quorum: l.c.quorum(), err: ErrNotObtained, cause: err}
	}
	l.turn.enter()
	if l.isReleased() {
		l.turn.leave()
		return fmt.Errorf("%w: %q", ErrReleased, l.key)
	}
	return nil
}

// updateFailed describes a failed extend or proclaim round r over every
// node, as ErrTakenOver or ErrExpired when the answers show the lock has
// ended (the caller then ends it), else ErrNotObtained.
func (l *Lock) updateFailed(ctx context.Context, op string, r *round) *QuorumError {
	qerr := quorumError(op, l.key, l.c.nodes, l.c.quorum(), r, 0, ctx)
	if ended := l.endedBy(r, nil); ended != nil {
		qerr.err = ended
	}
	return qerr
}

// proclaim replaces the metadata stored with the lock on every node that
// holds it, keeping the keys' TTLs, and announces the change on the key's
// leader channel with term as the payload (see Election). Like Extend, it
// succeeds when a majority replaced it, and ends the lock when the answers
// show it has been taken over or has expired.
func (l *Lock) proclaim(ctx context.Context, meta string, term int64) error {
	c := l.c
	if err := l.begin(ctx, "proclaim"); err != nil {
		return err
	}
	defer l.turn.leave()
	if l.Validity() <= 0 {
		return &QuorumError{Op: "proclaim", key: l.key, Quorum: c.quorum(), err: ErrExpired, detail: "validity ran out"}
	}
	o, ttl := l.proclaimOp(meta, term)
	r := c.send(ctx, request{op: o, need: c.quorum(), timeout: c.nodeTimeout(ttl), stop: tally.won})
	r.finish(&c.bg, nil)
	if r.tally.won() && l.Validity() > 0 {
		return nil
	}
	qerr := l.updateFailed(ctx, "proclaim", r)
	switch hint := r.unusable(); {
	case r.tally.won():
		qerr.err, qerr.detail = ErrExpired, "validity ran out"
	case hint != "" && qerr.cause == nil:
		qerr.unusable, qerr.detail = true, hint
	}
	if qerr.err != ErrNotObtained {
		l.invalidate(false)
		l.endEarly(qerr)
	}
	return qerr
}

// proclaimOp prepares the proclamation of meta with term as the notice's
// payload, and returns it with the lock's TTL, which bounds its calls.
func (l *Lock) proclaimOp(meta string, term int64) (*wire.Op, time.Duration) {
	o := wire.NewOp(wire.OpProclaim, l.rkey, l.token, wire.EncodeValue(l.token, meta), 0)
	o.Fence = term
	l.mu.Lock()
	defer l.mu.Unlock()
	return o, l.ttl
}

// letInExtendAfter divides a let-in's validity: the part of it that passes
// before its extension to its TTL is sent (extendLetIn).
const letInExtendAfter = 10

// extendLetIn extends l, a let-in that is not auto-extended, to ttl once a
// tenth of its validity (about 60–100 ms by default) has passed, in the
// background, unless the Client closes first: a lock released or extended
// by then needs none, and most holdings of a contended lock, which is how
// a lock comes to be granted by a release, are over by then. An extension
// sent at once cost every node a script on every such acquisition
// (docs/performance.md, "A let-in extends after a tenth of its
// validity"). Nine tenths of the validity are left for its round, as an
// auto-extended lock has TTL/10 for its last. An auto-extended let-in's
// extender waits as long before its first (extendLoop).
func (c *Client) extendLetIn(ctx context.Context, l *Lock, ttl time.Duration) {
	until := l.validUntil()
	wait := time.Until(until) / letInExtendAfter
	c.bg.Go(func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.closed:
			return // Close releases it
		}
		if l.validUntil().Equal(until) { // (released: extend refuses; extended: it holds longer)
			_ = l.extend(context.WithoutCancel(ctx), ttl)
		}
	})
}

// letInExtendWithin is the least time an auto-extended let-in's first
// extension, due once a tenth of its validity has passed, must have before
// the lock's end point for the extension to be made after Lock returns
// (see takeLetIn): a majority that answers slower would have made the
// hand-off that slow anyway.
const letInExtendWithin = 100 * time.Millisecond
