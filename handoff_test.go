package redlock

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// waitHour is a retry strategy that never fires within a test: a waiter
// that gets the lock was woken by a hand-off, or by the holder's TTL.
var waitHour = WithRetry(RandomBackoff(time.Hour, time.Hour))

// expectHandoff takes the lock with holder, starts a Lock in waiter whose
// retry timer is an hour, unlocks, and fails unless the waiter gets the
// lock at that very instant of virtual time: only a hand-off can wake it
// then (its timer, bounded by the holder's TTL, would wake it 10 s later).
func expectHandoff(t *testing.T, holder, waiter *Client, how string) {
	t.Helper()
	l, err := holder.TryLock(t.Context(), "k")
	require.NoError(t, err)
	got := make(chan error)
	go func() {
		l, err := waiter.Lock(t.Context(), "k", waitHour)
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	synctest.Wait() // the waiter has failed once and waits
	require.True(t, waiter.hand.busy(waiter.redisKey("k")), "the waiter is not queued")
	start := time.Now()
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, <-got)
	require.Zero(t, time.Since(start), "the waiter was not woken by %s", how)
}

// TestHandoffLocal: a waiter of the same Client gets the lock at the
// holder's Unlock, even with no release notices from the nodes.
func TestHandoffLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for _, f := range fakes {
			f.noNotices = true
		}
		c := newTestClient(t, fakes)
		expectHandoff(t, c, c, "the Unlock")
	})
}

// TestHandoffNotice: a waiter in another Client is woken by the release
// notice the nodes publish.
func TestHandoffNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		expectHandoff(t, newTestClient(t, fakes), newTestClient(t, fakes), "the release notice")
	})
}

// TestHandoffOrder: waiters of one Client get the lock in arrival order, and
// a newcomer queues behind them.
func TestHandoffOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		holder, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				l, err := c.Lock(t.Context(), "k", waitHour)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				if err := l.Unlock(t.Context()); err != nil {
					t.Error(err)
				}
			})
			synctest.Wait() // waiter i is queued
		}
		require.NoError(t, holder.Unlock(t.Context()))
		wg.Wait()
		require.Equal(t, []int{0, 1, 2, 3}, order)
	})
}

// TestNoBarging: a holder that unlocks and at once locks again queues behind
// the goroutine already waiting, instead of taking the lock back.
func TestNoBarging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		a, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		lockIn := func() <-chan *Lock {
			ch := make(chan *Lock, 1)
			go func() {
				l, err := c.Lock(t.Context(), "k", waitHour)
				if err != nil {
					t.Error(err)
				}
				ch <- l
			}()
			return ch
		}
		for i := range 20 {
			bGot := lockIn()
			synctest.Wait() // b waits
			require.NoError(t, a.Unlock(t.Context()))
			aGot := lockIn() // straight back in
			synctest.Wait()
			var b *Lock
			select {
			case b = <-bGot:
			case <-aGot:
				t.Fatalf("round %d: the unlocking goroutine took the lock back ahead of the waiter", i)
			}
			time.Sleep(time.Millisecond)
			require.NoError(t, b.Unlock(t.Context()))
			a = <-aGot
		}
		require.NoError(t, a.Unlock(t.Context()))
	})
}

// TestWaitBoundedByHolderTTL: a holder that never releases is outlived by
// its TTL, and the waiter tries again then (1 ms after its keys expire), not
// at its hour-long timer.
func TestWaitBoundedByHolderTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for _, f := range fakes {
			f.set("redlock:{k}", "crashed-holder", 50*time.Millisecond)
		}
		c := newTestClient(t, fakes)
		start := time.Now()
		_, err := c.Lock(t.Context(), "k", waitHour)
		require.NoError(t, err)
		require.Equal(t, 51*time.Millisecond, time.Since(start))
	})
}
