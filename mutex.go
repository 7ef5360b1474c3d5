package redlock

import (
	"context"
	"errors"
)

// This file is the mutex: one key, one holder, waiters served in order;
// and Do, which runs work under any primitive's lock while it is extended.

// Lock acquires the lock on key, waiting as long as ctx allows.
//
// Waiters are served in order, across processes: after its first refused
// attempt, a Lock takes a place in the key's wait queue on every node
// (ordered by when it first tried), and while others wait a node grants a
// free key only to the first of them (or to the holder re-entering). A
// queued Lock tries again only when it is first: when a release of the key
// names it (a notice from a majority of nodes, or an Unlock in this
// Client), or when its look at the queue, which also refreshes its place
// (see [WithWaiterLease]), finds it first and the key free. The retry
// strategy paces those looks and the first waiter's retries; neither
// waits longer than the holder's remaining TTL, or than the first waiter's
// remaining lease when that waiter seems gone. A Lock that gives up leaves
// the queue, in the background: until that reaches the nodes, a TryLock
// elsewhere is still refused. A Lock of this Client that starts while the key is known to
// be contended queues before trying.
//
// A Lock that waited is usually granted the key by the holder's release,
// in one round: it then returns a lock valid for at most a waiter lease
// (1 s by default, [WithWaiterLease]) and no more than its TTL, which
// extends itself to its TTL in the background once a tenth of that
// validity has passed, unless it was released or extended by then
// ([Lock.Validity] says how long it holds at each moment). Before a step
// that needs more than the validity left, call [Lock.Extend].
//
// It stops waiting at once when so many nodes fail for good that no
// majority is possible ([ErrUnusable]). On failure the error is a
// [*QuorumError] matching [ErrNotObtained], and ctx's error if ctx ended
// the wait, or [ErrClosed]. Options: WithTTL, WithRetry, WithMetadata,
// WithToken, WithAutoExtend, WithMaxHold, WithFencing.
//
// The first Lock that has to wait starts one subscription per node to the
// release notices, kept until [Client.Close].
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	lc, err := c.callConfig(key, toLock, opts)
	if err != nil {
		return nil, err
	}
	return c.lockQueued(ctx, c.target(key), &lc)
}

// TryLock makes exactly one attempt to acquire the lock on key. It does
// not take a place in the key's wait queue, and is refused ([ErrQueued] on
// the nodes) while others wait. On failure the error is a [*QuorumError]
// matching [ErrNotObtained]. It takes the options of Lock.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	lc, err := c.callConfig(key, toLock, opts)
	if err != nil {
		return nil, err
	}
	return c.tryLock(ctx, c.target(key), &lc)
}

// Do acquires the lock on key (waiting as [Client.Lock] does), runs fn, and
// releases the lock, even if fn panics. While fn runs the lock is extended
// every TTL/3; if extension cannot keep a majority, fn's context is
// cancelled when TTL/10 of validity is left (a lock the holder's release
// granted, until its first extension, which comes at once: a tenth of the
// validity it was granted with), with [context.Cause] an error
// matching [ErrExpired] or [ErrTakenOver]. Extension stops at the hold cap,
// 1 hour by default ([WithMaxHold] sets it): a longer fn has its context
// cancelled, with an expiry that names the cap, TTL/10 before the last
// extension runs out. [Client.Close] cancels fn's context with cause
// [ErrClosed]. fn must stop its work when its context is done. The
// context's Err and Done look at the clock (as [Lock.Err] does): work
// resumed after a pause past that point finds it cancelled at its first
// look. Do takes the options of Lock.
//
// Do returns fn's error joined with the lock's: the error of the
// acquisition, why the lock ended early (ErrExpired, ErrTakenOver or
// ErrClosed), or the error of the release.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return invalid("nil function")
	}
	lc, err := c.callConfig(key, toLock, opts)
	if err != nil {
		return err
	}
	return c.do(ctx, &lc, fn, func(ctx context.Context, lc *lockConfig) (*Lock, error) { return c.lockQueued(ctx, c.target(key), lc) })
}

// do is Do with the acquisition given: a lock's, or a semaphore's permit.
func (c *Client) do(ctx context.Context, lc *lockConfig, fn func(ctx context.Context) error, acquire func(context.Context, *lockConfig) (*Lock, error)) (err error) {
	if fn == nil {
		return invalid("nil function")
	}
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lc.autoExtend = true
	lc.onEnd = func(err error) { cancel(err) }
	l, err := acquire(ctx, lc)
	if err != nil {
		return err
	}
	defer func() {
		ended := l.Err() // before the release: nil unless the lock ended early
		uerr := l.Unlock(context.WithoutCancel(ctx))
		switch cause := context.Cause(work); {
		case errors.Is(cause, ErrClosed): // Close released the lock under fn
			err = errors.Join(err, cause)
		case ended != nil:
			err = errors.Join(err, ended)
		case uerr != nil:
			err = errors.Join(err, uerr)
		}
	}()
	return fn(lockContext{work, l})
}
