package redlock

import "context"

// This file is the mutex: one key, one holder, waiters served in order.

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
