package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is auto-extension: one goroutine per auto-extended lock,
// extending it every TTL/3 until its hold cap, and ending it early (TTL/10
// before its validity runs out) when it cannot.

// startExtending starts auto-extension; it is called once, before the lock
// is returned to the caller.
func (l *Lock) startExtending() {
	l.ext = &extender{stop: make(chan struct{}), done: make(chan struct{})}
	l.mu.Lock()
	if l.done == nil {
		l.done = make(chan struct{})
	}
	l.runOut = errNotExtended
	l.noteEnd() // TTL/10 earlier now
	l.mu.Unlock()
	go l.extendLoop(l.ext)
}

// stopExtending stops auto-extension and waits for its goroutine, so that no
// extension is under way or can start once it returns.
func (l *Lock) stopExtending() {
	if x := l.ext; x != nil {
		x.stopOnce.Do(func() { close(x.stop) })
		<-x.done
	}
}

// extension is the state of an auto-extension schedule.
type extension struct {
	ttl, every time.Duration
	holdEnd    time.Time // WithMaxHold: no validity past this
	next       time.Time // the next extension is due
	capped     bool      // the last extension the cap allows is done
	failures   int       // in a row
	lastErr    error
}

// extendLoop extends the lock every interval from its last extension (or
// acquisition). A failed extension is retried at a quarter of the interval.
// When TTL/10 of validity is left without a successful extension, or the
// last extension allowed by the hold cap runs out, the lock ends as
// expired. It stops once the lock has ended, whoever ended it.
func (l *Lock) extendLoop(x *extender) {
	defer close(x.done)
	s := extension{ttl: l.cfg.ttl, every: l.cfg.every, holdEnd: l.acquired.Add(l.cfg.maxHold)}
	if s.every <= 0 {
		s.every = s.ttl / extendDivisor
	}
	s.next = l.acquired.Add(s.every)
	l.mu.Lock()
	if l.margin > 0 { // a let-in: extended once a tenth of its validity has passed (takeLetIn, extendLetIn)
		s.next = time.Now().Add(time.Until(l.until) / letInExtendAfter)
	}
	l.mu.Unlock()
	for {
		deadline, ended := l.endState()
		if ended {
			return // a look ended it (see look)
		}
		wake := deadline
		if !s.capped && s.next.Before(deadline) {
			wake = s.next
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-x.stop:
			t.Stop()
			return
		case <-t.C:
		}
		now := time.Now()
		if !now.Before(deadline) {
			l.endEarly(s.expiry(l.cfg.maxHold))
			return
		}
		if !l.extendOnce(&s, now, deadline) {
			return
		}
		l.mu.Lock()
		l.runOut = s.expiry(l.cfg.maxHold)
		l.mu.Unlock()
	}
}

// expiry is why an auto-extended lock ran out.
func (s *extension) expiry(maxHold time.Duration) error {
	switch {
	case s.capped:
		return fmt.Errorf("%w: held for the maximum %v (WithMaxHold)", ErrExpired, maxHold)
	case s.lastErr != nil:
		return fmt.Errorf("%w: not extended before its validity ran out (%d failed extensions, the last: %w)", ErrExpired, s.failures, s.lastErr)
	}
	return errNotExtended
}

// extendOnce makes one scheduled extension at now, bounded by deadline, and
// reports whether the loop goes on.
func (l *Lock) extendOnce(s *extension, now, deadline time.Time) bool {
	ttl := min(s.ttl, s.holdEnd.Sub(now))
	if ttl < minTTL || !canBeValid(ttl, l.c.cfg.drift) {
		s.capped = true // let it run out, then end it as expired
		return true
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := l.extend(ctx, ttl)
	cancel()
	switch {
	case err == nil:
		s.next, s.failures, s.lastErr = now.Add(s.every), 0, nil
		s.capped = ttl < s.ttl
	case errors.Is(err, ErrReleased), errors.Is(err, ErrTakenOver), errors.Is(err, ErrExpired):
		return false // released, or extend has ended the lock
	default:
		s.failures, s.lastErr = s.failures+1, err
		s.next = now.Add(s.every / 4)
	}
	return true
}
