package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is how a lock ends, and how its holder learns it: Done, Err,
// the work context of Do and Election.Lead, the look at the clock that
// each of them makes first, and what a failed round says of the end
// (endedBy).

// The reasons a lock ends when its validity runs out: a lock without
// auto-extension, and an auto-extended one whose extensions did not fail;
// and when its holder gives it up.
var (
	errValidityRanOut = fmt.Errorf("%w: validity ran out", ErrExpired)
	errNotExtended    = fmt.Errorf("%w: not extended before its validity ran out", ErrExpired)
	// An Unlock that a majority did not confirm gives the validity up.
	errReleaseUnconfirmed = fmt.Errorf("%w: validity given up by an unconfirmed release", ErrExpired)
)

// lockContext is the context of work run under a lock (Do, Election.Lead):
// a look at it (Done or Err, and so context.Cause) first looks at the lock
// (see look), so that work resumed after a pause past the lock's end sees
// its context cancelled at once. Contexts derived from it are cancelled
// when the lock's own goroutine ends it, a moment later.
type lockContext struct {
	context.Context // cancelled, with the cause, when the lock ends
	l               *Lock
}

func (c lockContext) Done() <-chan struct{} {
	c.l.look()
	return c.Context.Done()
}

func (c lockContext) Err() error {
	c.l.look()
	return c.Context.Err()
}

// Done returns a channel that is closed when the lock ends: when it is
// released, when it expired (its validity ran out, or auto-extension could
// not keep a majority), or when it was taken over. [Lock.Err] then says
// which. Like a context's Done channel, it is never closed while the lock
// is valid and held.
//
// Each call looks at the clock: once the lock's validity has run out
// (with auto-extension, once TTL/10 of it is left), Done returns a closed
// channel, even in a process that was paused past that point and whose
// timers have not fired yet. So a select on Done with a default case is an
// exact test of whether the lock has ended.
func (l *Lock) Done() <-chan struct{} {
	l.look()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		switch {
		case l.doneShut:
			close(l.done)
		case l.ext == nil:
			// No goroutine: a timer ends the lock when its validity runs
			// out (Extend moves it).
			l.timer = time.AfterFunc(time.Until(l.until), func() { l.endEarly(errValidityRanOut) })
		}
	}
	return l.done
}

// Err returns nil while the lock is held and valid as far as this process
// knows; once [Lock.Done] is closed, it returns why: an error matching
// [ErrExpired] (also after an Unlock that a majority did not confirm) or
// [ErrTakenOver], or [ErrReleased] after Unlock. Like
// Done, it looks at the clock: it returns ErrExpired as soon as the
// validity has run out (with auto-extension, TTL/10 before), whether or
// not Done was ever called.
func (l *Lock) Err() error {
	if l.live() {
		return nil
	}
	l.look()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endErr
}

// look ends the lock at once if the clock has passed its end point (see
// endState) and nothing has ended it yet, as its timer or auto-extension
// would: a process resumed after a pause then sees the end at its first
// look, before those goroutines have run. A look that finds the lock being
// ended by another goroutine waits until that is done, so that when it
// returns Done is closed and the work's context cancelled.
func (l *Lock) look() {
	if l.live() {
		return
	}
	l.mu.Lock()
	due := l.endErr == nil && !l.released && !time.Now().Before(l.endPoint())
	ending := l.endErr != nil && !l.doneShut
	why := l.runOut
	l.mu.Unlock()
	if why == nil {
		why = errValidityRanOut
	}
	if due || ending {
		l.endEarly(why) // ending: waits for the end under way, and adds nothing
	}
}

// endPoint is when the lock ends unless extended: when its validity runs
// out, or for an auto-extended lock TTL/10 before (a lock a release
// granted, until its first extension: a tenth of the validity it was
// granted with, see takeLetIn), so that the work has that long to stop
// before another client can take the lock. Callers hold l.mu.
func (l *Lock) endPoint() time.Time {
	if l.ext != nil {
		if l.margin > 0 {
			return l.until.Add(-l.margin)
		}
		return l.until.Add(-l.cfg.ttl / endMarginDivisor)
	}
	return l.until
}

// live is a look's fast path, without the mutex: the lock has not ended,
// and the clock is before its end point.
func (l *Lock) live() bool {
	return !l.over.Load() && time.Since(l.acquired) < time.Duration(l.endAfter.Load())
}

// noteEnd keeps the fast path's copy of the end point in step with until;
// callers hold l.mu.
func (l *Lock) noteEnd() { l.endAfter.Store(int64(l.endPoint().Sub(l.acquired))) }

// endState returns the lock's end point, and whether it has ended.
func (l *Lock) endState() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endPoint(), l.endErr != nil
}

// end records why the lock ended, once, and closes Done. It reports whether
// this call was the one that ended it.
func (l *Lock) end(err error) bool {
	l.ending.Lock()
	defer l.ending.Unlock()
	if !l.claimEnd(err) {
		return false
	}
	l.closeDone()
	return true
}

// claimEnd records err as the reason the lock ended, unless it has one.
func (l *Lock) claimEnd(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endErr != nil {
		return false
	}
	l.endErr = err
	l.over.Store(true)
	return true
}

// closeDone closes Done (made later, it is made closed) and stops the timer.
func (l *Lock) closeDone() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil && !l.doneShut {
		close(l.done)
	}
	l.doneShut = true
	if l.timer != nil {
		l.timer.Stop()
	}
}

// endEarly ends the lock before its release: it expired or was taken over,
// and can no longer be trusted. Observers are told and, under Do, the
// work's context is cancelled with err as its cause, before Done is closed.
// Observers must not look at the lock (they are called while it ends).
func (l *Lock) endEarly(err error) {
	l.ending.Lock()
	defer l.ending.Unlock()
	if !l.claimEnd(err) {
		return
	}
	c := l.c
	if c.observing() {
		c.emit(Event{Kind: EventEnd, Context: context.Background(), Key: l.key, Read: l.reader(), Held: time.Since(l.acquired), Err: err})
	}
	if l.cfg.onEnd != nil {
		l.cfg.onEnd(err)
	}
	l.closeDone()
}

// invalidate marks the lock as no longer valid.
func (l *Lock) invalidate(released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.until.After(now) {
		l.until = now
		l.noteEnd()
	}
	l.released = l.released || released
}

// endedBy tells, from a failed extend or release round over the lock's
// nodes idx (nil: all of them), whether the lock has ended: ErrTakenOver if
// a node that granted it now shows another token, ErrExpired if such a
// node has no key, nil if the answers cannot tell (too few nodes
// answered). A node that never granted the lock says nothing about it: a
// contender's passing key there, or no key, is what it had all along.
func (l *Lock) endedBy(r *round, idx []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ended error
	for j, res := range r.results {
		i := j
		if idx != nil {
			i = idx[j]
		}
		switch {
		case !l.nodes[i].granted:
		case res.Status == wire.StatusHeld:
			return ErrTakenOver
		case res.Status == wire.StatusAbsent:
			ended = ErrExpired
		}
	}
	return ended
}
