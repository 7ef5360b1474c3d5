package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// extender is the one goroutine of an auto-extended lock.
type extender struct {
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// startExtending starts auto-extension; it is called once, before the lock
// is returned to the caller.
func (l *Lock) startExtending() {
	l.ext = &extender{stop: make(chan struct{}), done: make(chan struct{})}
	l.mu.Lock()
	if l.lostCh == nil {
		l.lostCh = make(chan struct{})
	}
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

// extendLoop extends the lock every interval from its last extension (or
// acquisition). A failed extension is retried at a quarter of the interval.
// When TTL/10 of validity is left without a successful extension, or the
// last extension allowed by the hold cap runs out, the lock is lost.
func (l *Lock) extendLoop(x *extender) {
	defer close(x.done)
	c := l.c
	ttl := l.cfg.ttl
	every := l.cfg.every
	if every <= 0 {
		every = ttl / DefaultExtendDivisor
	}
	margin := ttl / LostMarginDivisor
	holdEnd := l.acquired.Add(l.cfg.maxHold)
	next := l.acquired.Add(every)
	failures, capped := 0, false
	var lastErr error
	for {
		deadline := l.Until().Add(-margin)
		wake := deadline
		if !capped && next.Before(deadline) {
			wake = next
		}
		t := time.NewTimer(wake.Sub(time.Now()))
		select {
		case <-x.stop:
			t.Stop()
			return
		case <-t.C:
		}
		now := time.Now()
		if !now.Before(deadline) {
			switch {
			case capped:
				l.lose(fmt.Errorf("%w: held for the maximum %v (WithMaxHold)", ErrLockExpired, l.cfg.maxHold))
			case lastErr != nil:
				l.lose(fmt.Errorf("%w: not extended before its validity ran out (%d failed extensions, the last: %w)", ErrLockExpired, failures, lastErr))
			default:
				l.lose(fmt.Errorf("%w: not extended before its validity ran out", ErrLockExpired))
			}
			return
		}
		extTTL := min(ttl, holdEnd.Sub(now))
		if extTTL < MinTTL || !canBeValid(extTTL, c.cfg.drift) {
			capped = true // let it run out, then report it lost
			continue
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := l.extend(ctx, extTTL)
		cancel()
		switch {
		case err == nil:
			next, failures, lastErr = now.Add(every), 0, nil
			capped = extTTL < ttl
		case errors.Is(err, ErrReleased):
			return
		case errors.Is(err, ErrLockLost), errors.Is(err, ErrLockExpired):
			return // extend has ended the lock as lost
		default:
			failures, lastErr = failures+1, err
			next = now.Add(every / 4)
		}
	}
}

// Do acquires the lock on key (waiting as [Client.Lock] does), runs fn, and
// releases the lock, even if fn panics. While fn runs the lock is extended
// every TTL/3 (see [WithAutoExtend]); if extension cannot keep a majority,
// fn's context is cancelled when TTL/10 of validity is left, with
// [context.Cause] an error matching [ErrLockLost] or [ErrLockExpired]. fn
// must stop its work when its context is done.
//
// Do returns fn's error joined with the lock's: the error of the
// acquisition, the cause of the loss, or the error of the release.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) (err error) {
	if fn == nil {
		return invalid("nil function")
	}
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lc.autoExtend = true
	lc.onLost = func(err error) { cancel(err) }
	l, err := c.lock(ctx, key, &lc)
	if err != nil {
		return err
	}
	defer func() {
		lost := l.Err() // before the release: nil unless the lock was lost
		uerr := l.Unlock(context.WithoutCancel(ctx))
		switch {
		case lost != nil:
			err = errors.Join(err, lost)
		case uerr != nil:
			err = errors.Join(err, uerr)
		}
	}()
	return fn(work)
}

// closeReleases bounds the releases Close runs at once: a Client holding
// thousands of locks does not start thousands of rounds together.
const closeReleases = 64

// Close releases every lock this Client still holds (stopping their
// auto-extension, and cancelling the context of work running under Do with
// cause [ErrClosed] first), stops the release-notice subscriptions, ends any Lock
// still waiting with [ErrClosed], and waits for the Client's goroutines,
// as long as ctx allows. Later calls to Lock, TryLock, Do and Inspect return
// [ErrClosed]. Close does not close the go-redis clients, which belong to
// the caller. It returns the errors of releases that a majority did not
// confirm (those keys expire at their TTL); locks that had already expired
// or been taken over are not errors. A second Close returns nil.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.checkOpen() != nil {
		c.mu.Unlock()
		return nil
	}
	close(c.closed)
	locks := make([]*Lock, 0, len(c.held))
	for l := range c.held {
		locks = append(locks, l)
	}
	c.mu.Unlock()

	// Releases are bounded by the node timeout, and run closeReleases at a
	// time; stopping subscriptions and the calls still running on
	// unresponsive nodes are bounded by go-redis's own timeouts, so those
	// are waited for only as long as ctx allows.
	errs := make([]error, len(locks))
	var g errgroup.Group
	g.SetLimit(closeReleases)
	for i, l := range locks {
		g.Go(func() error {
			// Work running under Do is told first: its lock is going away.
			if l.cfg.onLost != nil {
				l.cfg.onLost(ErrClosed)
			}
			// A lock already gone (expired, taken over, released) has
			// nothing left to release; only unconfirmed releases count.
			if err := l.Unlock(context.WithoutCancel(ctx)); errors.Is(err, ErrNotObtained) {
				errs[i] = err
			}
			return nil // every release is tried, and every failure reported
		})
	}
	_ = g.Wait()
	done := make(chan struct{})
	go func() {
		c.hand.close()
		c.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("redlock: close: calls to unresponsive nodes still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}
