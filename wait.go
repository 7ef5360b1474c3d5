package redlock

import (
	"context"
	"errors"
	"slices"
	"time"
)

// This file is how a lock call waits: tries, looks at the wait queue,
// and sleeps between them as the retry strategy says.

// tryLock makes one attempt at t: TryLock's, and a multi-key or
// read-write lock's.
func (c *Client) tryLock(ctx context.Context, t target, lc *lockConfig) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	l, qerr := c.attempt(ctx, t, lc, 1, nil)
	if qerr != nil {
		return nil, qerr
	}
	return l, nil
}

// lockQueued is Lock's loop. Each try is an attempt or, for a queued
// Lock that is not known to be first, a look at the queue (which goes on
// to an attempt when it finds the Lock first and the key free); the retry
// strategy sees the number of failed tries and paces the next. Each step
// reports whether the call has ended (with s.l or s.err).
func (c *Client) lockQueued(ctx context.Context, t target, lc *lockConfig) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	s := &waitLoop{c: c, ctx: ctx, t: t, lc: lc, slot: -1}
	defer s.forgetPlace()
	attemptNext := !s.queueAtOnce()
	for ended := false; ; {
		s.delay, s.asked = 0, false
		if !attemptNext {
			if attemptNext, ended = s.lookAtQueue(); ended {
				return s.l, s.err
			}
		}
		if attemptNext {
			again, ended := s.tryOnce()
			if ended {
				return s.l, s.err
			}
			if again {
				continue
			}
		}
		if attemptNext, ended = s.sleepUntilNext(); ended {
			return s.l, s.err
		}
		attemptNext = attemptNext && s.wokenToAttempt()
	}
}

// wokenToAttempt reports whether a wake calls for an attempt rather than
// a look: for a semaphore's waiter only when it knows the slot whose
// release woke it, which it then attempts; and not for a waiter woken to
// look (lookFirst: a set that may still wait for another of its keys, see
// handoff.block, or any waiter woken by lookSoon or lookShort).
func (s *waitLoop) wokenToAttempt() bool {
	if s.t.choosesSlot() {
		woke := s.c.hand.wokenBy(s.w)
		if s.slot = slices.IndexFunc(s.t.slots, func(st target) bool { return st.rkey == woke }); s.slot < 0 {
			return false
		}
	}
	return !s.c.hand.lookFirst(s.w)
}

// waitLoop is one Lock call between its tries.
type waitLoop struct {
	c        *Client
	ctx      context.Context
	t        target
	lc       *lockConfig
	w        *waiter        // our place in the queue, once we have one
	slot     int            // a semaphore's: the slot the last look found w first on, −1 none
	tries    int            // failed tries: attempts and looks at the queue
	attempts int            // attempts made, for observers (Event.Attempt)
	handed   *handedAttempt // an attempt an Unlock of this Client sent for us, to take next
	last     tryFailure     // the last failed try
	delay    time.Duration  // the strategy's delay before the next try, once asked
	asked    bool           // delay is set
	l        *Lock          // how the call ended: with the lock,
	err      error          // or with this error
}

// queueAtOnce queues before the first try when others are known to wait
// for the key (unless the strategy says not to wait at all).
func (s *waitLoop) queueAtOnce() bool {
	if !s.c.hand.busy(s.t) {
		return false
	}
	if _, ok := s.lc.retry(1); !ok {
		return false
	}
	s.w = s.c.hand.join(s.t, s.lc)
	return true
}

// forgetPlace drops our place from the Client's waiters of the key.
func (s *waitLoop) forgetPlace() {
	if s.w != nil {
		s.c.hand.leave(s.w, s.l)
	}
}

// giveUp leaves the queue (in the background) and ends the call with the
// last failure, with cause.
func (s *waitLoop) giveUp(cause error) (ended bool) {
	if s.w != nil {
		s.c.leaveOn(s.ctx, s.c.nodes, s.t, &s.w.Place, s.lc.ttl)
	}
	s.err = s.last.lockError(s.c, s.t.key, s.ctx, cause)
	return true
}

// lookAtQueue looks at the queue, and reports whether the Lock is first
// there with the key free.
func (s *waitLoop) lookAtQueue() (first, ended bool) {
	slot, f := s.c.pollQueue(s.ctx, s.lc, s.w)
	s.slot = slot
	if f.fatal() {
		if f.cause != nil && s.last.valid() {
			return false, s.giveUp(f.cause) // the last attempt says more
		}
		s.last = f
		return false, s.giveUp(nil)
	}
	if f.r == nil {
		return true, false
	}
	s.tries++
	if cutShort(s.ctx, s.last, f) {
		return false, s.giveUp(s.ctx.Err())
	}
	s.last = f
	return false, false
}

// tryOnce makes an attempt. Refused the first time, the Lock takes a place
// in the queue (unless the strategy gives up) and looks at it: again
// reports that the look found it first and the key free, to attempt at
// once.
func (s *waitLoop) tryOnce() (again, ended bool) {
	s.attempts++
	l, e := s.attemptNow()
	if e == nil {
		s.l = l
		return false, true
	}
	f := tryFailure{qerr: e, hint: e.retryAfter}
	if cutShort(s.ctx, s.last, f) {
		return false, s.giveUp(s.ctx.Err())
	}
	s.last = f
	if e.cause != nil || e.unusable {
		return false, s.giveUp(nil)
	}
	s.tries++
	if s.w != nil {
		if s.t.multiKey() {
			// A set learns which of its keys are held, so that a release of
			// one wakes it only when none is (notice.go).
			_, f = s.c.pollQueue(s.ctx, s.lc, s.w)
			s.last.hint = sooner(s.last.hint, f.hint)
			return f.r == nil && f.cause == nil, false
		}
		return false, false
	}
	var ok bool
	if s.delay, ok = s.lc.retry(s.tries); !ok {
		s.err = e
		return false, true
	}
	s.asked = true
	s.w = s.c.hand.join(s.t, s.lc)
	s.slot, f = s.c.pollQueue(s.ctx, s.lc, s.w)
	if f.r == nil && f.cause == nil {
		return true, false
	}
	if f.fatal() {
		if f.cause == nil {
			s.last = f
		}
		return false, s.giveUp(f.cause)
	}
	s.last.hint = sooner(s.last.hint, f.hint)
	return false, false
}

// attemptNow makes the Lock's next attempt: at its target; for a
// semaphore's waiter, at the slot its last look found it first on, or,
// before it has a place, at each slot in turn until one is granted (a
// sweep); a waiter that holds one leaves the other slots' queues.
func (s *waitLoop) attemptNow() (*Lock, *QuorumError) {
	if s.w != nil {
		s.c.hand.attempting(s.w)
	}
	if ha := s.handed; ha != nil {
		s.handed = nil
		return s.c.attemptHanded(s.ctx, ha, s.attempts)
	}
	if l := s.takeLetIn(); l != nil {
		return l, nil
	}
	if !s.t.choosesSlot() {
		return s.c.attempt(s.ctx, s.t, s.lc, s.attempts, s.w)
	}
	if s.slot < 0 {
		return s.c.sweep(s.ctx, s.t.slots, s.lc, s.attempts)
	}
	slot := s.slot
	s.slot = -1
	l, e := s.c.attempt(s.ctx, s.t.slots[slot], s.lc, s.attempts, s.w)
	if e == nil && s.w.sends == nil {
		// The Lock is the caller's now; the other slots' queues are left
		// in the background. Leaving them with the attempt instead made
		// the attempt's batch longer on every node, and the hand-off gap
		// p99 longer with it (docs/performance.md, 2026-11-26). (A
		// waiter a release may grant a slot has its place's ID released
		// there instead, when the call returns: see handoff.abandon.)
		others, place := s.t, s.w.Place
		others.slots = slices.Delete(slices.Clone(s.t.slots), slot, slot+1)
		s.c.leaveOn(s.ctx, s.c.nodes, others, &place, s.lc.ttl)
	}
	return l, e
}

// sleepUntilNext waits for the next try as the strategy says, no longer
// than the last failure's hint, nor than a third of our place's lease
// (which the next look refreshes), and reports whether a notice woke it
// (the Lock is first and the key free).
func (s *waitLoop) sleepUntilNext() (woken, ended bool) {
	if !s.asked {
		var ok bool
		if s.delay, ok = s.lc.retry(s.tries); !ok {
			return false, s.giveUp(nil)
		}
	}
	d := s.delay
	if s.last.hint > 0 {
		d = min(d, s.last.hint)
	}
	d = min(d, s.w.Lease/3)
	s.c.hand.asleep(s.w, s.lc)
	woken, err := s.c.sleepOrWake(s.ctx, s.w, d)
	if s.handed = s.c.hand.awake(s.w); s.handed != nil {
		return true, false // taken even if err: its grants must come back
	}
	if err != nil {
		return false, s.giveUp(err)
	}
	return woken, false
}

// cutShort reports whether try f, which failed after last, was ended by
// ctx before any node answered it (every node's error is a context's end:
// the caller's, or the node timeout's). A Lock that ends on such a try
// reports last instead, which says why the lock was not had (held
// elsewhere, say), with ctx's error.
func cutShort(ctx context.Context, last, f tryFailure) bool {
	if ctx.Err() == nil || !last.valid() || mutated(mutCutShortReported) {
		return false
	}
	if f.qerr != nil { // an attempt: its agreeing nodes are counted, the others listed
		if f.qerr.Granted > 0 {
			return false
		}
		for _, n := range f.qerr.Nodes {
			if !ctxEnd(n.Err) {
				return false
			}
		}
		return true
	}
	for _, res := range f.r.results { // a look at the queue
		if !ctxEnd(res.Err) {
			return false
		}
	}
	return true
}

func ctxEnd(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// retrying runs try (given the attempt's number) until it succeeds, fails
// for good (ctx ended, or no majority possible) or the retry strategy
// gives up, sleeping between tries as the strategy says, never longer than
// the failure's retryAfter. It is the unqueued wait that sets, readers and
// semaphores had before they queued (issue 28); only the mutant that
// gives the semaphore its old wait back uses it now.
func (c *Client) retrying(ctx context.Context, lc *lockConfig, try func(n int) (*Lock, *QuorumError)) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	for n := 1; ; n++ {
		l, qerr := try(n)
		if qerr == nil {
			return l, nil
		}
		if qerr.cause != nil || qerr.unusable {
			return nil, qerr
		}
		d, ok := lc.retry(n)
		if !ok {
			return nil, qerr
		}
		if qerr.retryAfter > 0 {
			d = min(d, qerr.retryAfter)
		}
		if _, err := c.sleepOrWake(ctx, nil, d); err != nil {
			qerr.cause = err // ctx's error, or ErrClosed
			return nil, qerr
		}
	}
}

// sleepOrWake sleeps until w is woken (true), d has passed, ctx is done or the
// Client is closed, and returns ctx's error or ErrClosed in the last two
// cases. w may be nil: nothing wakes the sleep early.
func (c *Client) sleepOrWake(ctx context.Context, w *waiter, d time.Duration) (bool, error) {
	var wake <-chan struct{}
	if w != nil {
		wake = w.wake
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-wake:
		return true, nil
	case <-t.C:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-c.closed:
		return false, ErrClosed
	}
	return false, nil
}

// tryFailure is a failed try of a Lock: a refused attempt's error, or the
// round of a poll that did not find the Lock first with the key free (its
// error is built only if the Lock ends with it); and when to look again at
// the latest (hint, 0 if no bound).
type tryFailure struct {
	qerr     *QuorumError
	r        *round // a poll's
	hint     time.Duration
	cause    error // a poll's context ended
	unusable string
}

func (f tryFailure) valid() bool { return f.qerr != nil || f.r != nil }

// fatal reports whether a poll ends the Lock: its context ended, or no
// majority is possible.
func (f tryFailure) fatal() bool { return f.cause != nil || f.unusable != "" }

// lockError is the error a Lock that ends after f returns, with cause if not nil.
func (f tryFailure) lockError(c *Client, key string, ctx context.Context, cause error) *QuorumError {
	qerr := f.qerr
	switch {
	case qerr != nil:
	case f.r != nil:
		qerr = quorumError("lock", key, c.nodes, c.quorum(), f.r, 0, ctx)
		if f.unusable != "" && qerr.cause == nil {
			qerr.unusable, qerr.detail = true, f.unusable
		}
	default:
		qerr = &QuorumError{Op: "lock", key: key, Quorum: c.quorum(), err: ErrNotObtained}
	}
	if cause == nil {
		cause = f.cause
	}
	if cause != nil {
		qerr.cause = cause
	}
	return qerr
}

// sooner returns the sooner of two bounds on a wait (0: none). After a
// refused attempt, the attempt's bound stands unless its look at the queue
// gives a sooner one: after a split vote the key is on its way out
// (retryHint), whatever PTTL the look found on grants being taken back.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}
