package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestExpiryTakeoverPastHungNode: a holder that never releases leaves its
// keys to run out, a few milliseconds apart on the live nodes (its grants
// landed so), while the fifth node hangs. The first waiter takes the lock
// within a few round trips of the keys running out on a majority: a look
// that finds the key free on some nodes does not wait out the node
// timeout for the node that has not answered any of its earlier looks
// either. Before, each of the looks that saw the keys run out waited the
// node timeout (50 ms here), and the next one came that long after it:
// about two node timeouts past the expiry (the election's takeover after
// a leader died, with a node frozen: docs/performance.md).
func TestExpiryTakeoverPastHungNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, nodeTimeout = time.Second, 50 * time.Millisecond
		fakes := newFakeNodes(5)
		for i, f := range fakes[:4] {
			f.delay = 100 * time.Microsecond // a round trip: looks in a row back off by it (see judgeLook)
			f.hold = func(o *wire.Op) {
				if wire.IsAcquire(o.Kind) && o.Place == nil { // the holder's: its grants land 0, 4, 8 and 12 ms in
					time.Sleep(time.Duration(i) * 4 * time.Millisecond)
				}
			}
		}
		hung := make(chan struct{})
		defer close(hung)
		fakes[4].setGate(hung)
		opts := []Option{WithTTL(ttl), WithNodeTimeout(nodeTimeout)}
		holder, waiter := newTestClient(t, fakes, opts...), newTestClient(t, fakes, opts...)
		start := time.Now()
		_, err := holder.Lock(t.Context(), "k")
		require.NoError(t, err)
		// The key runs out on nodes 0, 1 and 2 (a majority) 1 s after the
		// holder's grants reached them: 0, 4 and 8 ms after its start.
		free := start.Add(ttl + 8*time.Millisecond)
		l, err := waiter.Lock(t.Context(), "k")
		require.NoError(t, err)
		late := time.Since(free)
		require.Less(t, late, nodeTimeout, "the waiter took the lock %v after the key ran out on a majority", late)
		require.NoError(t, l.Unlock(t.Context()))
	})
}

// TestLookDuringHandOff: a Lock queues while the key is being handed to
// another waiter, whose grants have landed on two nodes (its token there)
// while the other three still have the key free with that waiter first.
// The look sees no token on a majority, but the hurry is the other
// waiter's: this one looks again on its usual timer, not within two round
// trips (and again, and again). Before, the Lock that released the key
// and queued at once looked twice at most hand-offs.
func TestLookDuringHandOff(t *testing.T) {
	requireJoinAndLeave(t, "next.1", []string{"next-token", "next-token", "", "", ""}, 100*time.Millisecond, waitHour)
}

// requireJoinAndLeave runs a Lock of a key over 5 fake nodes (each a
// round trip's delay) for d, with opts, the place ahead first in the
// key's queue on every node and node i's key set to values[i] ("": free),
// and requires that the Lock fails, looking at the queue at most twice on
// each node: its join, and its leave when it gives up.
func requireJoinAndLeave(t *testing.T, ahead string, values []string, d time.Duration, opts ...Option) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(len(values))
		c := newTestClient(t, fakes)
		rkey := c.redisKey("k")
		looks := make([]atomic.Int32, len(fakes))
		for i, f := range fakes {
			f.delay = 100 * time.Microsecond
			f.enqueue(rkey, &wire.Place{ID: ahead, Ticket: 1, Lease: time.Minute})
			if values[i] != "" {
				f.set(rkey, values[i], time.Minute)
			}
			f.ran = func(o *wire.Op) {
				if o.Kind == wire.OpQueue && (o.Place == nil || o.Place.ID != ahead) {
					looks[i].Add(1)
				}
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		_, err := c.Lock(ctx, "k", opts...)
		require.ErrorIs(t, err, ErrNotObtained)
		synctest.Wait()
		for i := range looks {
			n := looks[i].Load()
			require.LessOrEqual(t, n, int32(2), "node %d: the waiter looked %d times in %v", i, n, d)
		}
	})
}

// TestSplitLookOnlyByTheFirst: a Lock queues behind another waiter while
// the key is held by no token on a majority (a split vote's grants, or a
// release's grants half landed: two holders on two nodes each, a third on
// the fifth). With default options its look sees the split, but the
// key's queue would let the waiter ahead in, not this one, and nothing
// this one's looks could find would let it in: it looks again on its
// strategy's timer (10 ms at the soonest), not within two round trips and
// again and again. Before 2026-12-04 every waiter looked again, and a
// semaphore's waiters, whose slots change hands often, made 0.5–0.7 such
// looks per permit with 16 processes.
func TestSplitLookOnlyByTheFirst(t *testing.T) {
	requireJoinAndLeave(t, "ahead.wi1", []string{"old", "old", "next.wi7", "next.wi7", "other"}, 9*time.Millisecond)
}
