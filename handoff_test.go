package redlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
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
	require.True(t, waiter.hand.busy(waiter.target("k")), "the waiter is not queued")
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

// TestHandoffNoticeAfterOwnLockExpired: a Client whose earlier lock on
// the key expired unreleased (its holder still at work, or paused) does
// not take a release notice for old news: its waiter is woken. Before,
// the Client counted itself the key's holder until that lock's Unlock and
// ignored every notice for the key, so its waiters slept until their
// timers (found by the simulator, seed 51: 77 ms with the key free).
func TestHandoffNoticeAfterOwnLockExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		a, b := newTestClient(t, fakes), newTestClient(t, fakes)
		// a's first lock comes to it from the queue, as the simulator's did.
		first, err := b.TryLock(t.Context(), "k")
		require.NoError(t, err)
		got := make(chan *Lock)
		go func() {
			l, err := a.Lock(t.Context(), "k", WithTTL(100*time.Millisecond))
			assert.NoError(t, err)
			got <- l
		}()
		synctest.Wait()
		require.NoError(t, first.Unlock(t.Context()))
		old := <-got
		time.Sleep(time.Second) // expired, not released
		expectHandoff(t, b, a, "the release notice")
		synctest.Wait() // the waiter's releases to the slower nodes too
		require.ErrorIs(t, old.Unlock(t.Context()), ErrExpired)
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

// TestHandoffOrder: waiters get the lock in arrival order, whether they
// share a Client or not (one queue, on the nodes), with the default retry
// strategy and each built-in one: a waiter that is not first never
// attempts, whatever its strategy says. Each makes at most two attempts:
// the refused first one, and the one the release before it wakes.
func TestHandoffOrder(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		strategy RetryStrategy // nil: the default
	}{
		{"default", nil},
		{"random", RandomBackoff(ms, 3*ms)},
		{"linear", LinearBackoff(ms, 5*ms)},
		{"exponential", ExponentialBackoff(ms, 8*ms)},
		{"limited", LimitRetry(RandomBackoff(ms, 2*ms), 1_000_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				var attempts atomic.Int32
				count := WithObserver(func(e Event) {
					if e.Kind == EventAcquire {
						attempts.Add(1)
					}
				})
				clients := []*Client{newTestClient(t, fakes, count), newTestClient(t, fakes, count)}
				holder, err := clients[0].TryLock(t.Context(), "k")
				require.NoError(t, err)
				attempts.Store(0)
				var opts []Option
				if tc.strategy != nil {
					opts = append(opts, WithRetry(tc.strategy))
				}
				var mu sync.Mutex
				var order []int
				var wg sync.WaitGroup
				for i := range 6 {
					c := clients[i%2]
					wg.Go(func() {
						l, err := c.Lock(t.Context(), "k", opts...)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						order = append(order, i)
						mu.Unlock()
						time.Sleep(50 * time.Millisecond) // longer than any strategy's delay
						if err := l.Unlock(t.Context()); err != nil {
							t.Error(err)
						}
					})
					synctest.Wait() // waiter i is queued
					time.Sleep(time.Microsecond)
				}
				require.NoError(t, holder.Unlock(t.Context()))
				wg.Wait()
				require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order)
				// The first waiter of each Client was refused once; the
				// others queued without trying (their Client knew others
				// waited); each won with one attempt.
				require.EqualValues(t, 6+2, attempts.Load(), "attempts")
			})
		})
	}
}

// TestDeadWaiterBlocksOnlyItsLease: a waiter that died first in the queue
// (its place, with a 300 ms lease, never refreshed) keeps the free key from
// a live waiter exactly until its place lapses, in virtual time: the live
// waiter gets it within 2 ms after, with its default strategy, in two
// attempts.
func TestDeadWaiterBlocksOnlyItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for _, f := range fakes {
			f.enqueue("redlock:{k}", &wire.Place{ID: "dead.1", Ticket: 1, Lease: 300 * time.Millisecond})
		}
		var attempts atomic.Int32
		c := newTestClient(t, fakes, WithObserver(func(e Event) {
			if e.Kind == EventAcquire {
				attempts.Add(1)
			}
		}))
		start := time.Now()
		_, err := c.TryLock(t.Context(), "k")
		require.ErrorIs(t, err, ErrNotObtained, "the queue's first waiter goes first, dead or not, until its lease ends")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // virtual: a place that never lapses fails here
		defer cancel()
		l, err := c.Lock(ctx, "k")
		require.NoError(t, err)
		waited := time.Since(start)
		require.GreaterOrEqual(t, waited, 300*time.Millisecond, "acquired while the dead waiter's place lived")
		require.LessOrEqual(t, waited, 302*time.Millisecond, "the dead waiter's place held the queue past its lease")
		require.EqualValues(t, 3, attempts.Load(), "TryLock, Lock's refused first attempt, and its winning one")
		require.NoError(t, l.Unlock(t.Context()))
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

// TestWokenAcrossLeaveAndRelease: the first waiter (with a token of its
// own: woken, not granted) gives up, and its leave is on its way when the
// holder releases. Two nodes had the leave first, and their release wakes
// the next waiter; two others wake the first waiter, whose leave reaches
// them after; the fifth has not had the leave yet. No one notice's token
// has a majority (the release's two, the leave's two), yet the key is
// free for the next waiter on four nodes: a leave of a key reserved since
// a release also announces that release, and the next waiter is woken at
// once, not at its next look. (Until 2026-12-04 a fenced semaphore's
// waiter, which left the other slots' queues, made this schedule; every
// semaphore's waiter is granted now, and releases its place's ID there.)
func TestWokenAcrossLeaveAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		holderC, firstC, nextC := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		rkey := holderC.target("k").rkey
		gates := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
		for i, f := range fakes[:3] { // the first waiter's leave waits on nodes 0, 1 and 2
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpQueue && o.Quiet && o.Key == rkey && strings.HasPrefix(o.Place.ID, firstC.hand.id+".") {
					<-gates[i]
				}
			}
		}
		held, err := holderC.TryLock(ctx, "k")
		require.NoError(t, err)
		synctest.Wait()
		firstCtx, giveUp := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() {
			_, err := firstC.Lock(firstCtx, "k", waitHour, WithToken("first"))
			gaveUp <- err
		}()
		synctest.Wait()
		time.Sleep(time.Millisecond)
		got := make(chan *Lock, 1)
		go func() {
			l, err := nextC.Lock(ctx, "k", waitHour, WithToken("next"))
			assert.NoError(t, err)
			got <- l
		}()
		synctest.Wait()
		giveUp()
		require.ErrorIs(t, <-gaveUp, context.Canceled)
		synctest.Wait() // its leave ran on nodes 3 and 4
		require.NoError(t, held.Unlock(ctx))
		synctest.Wait()
		require.Empty(t, got, "woken before the key was free for it on a majority")

		at := time.Now()
		close(gates[0])
		close(gates[1])
		synctest.Wait()
		select {
		case next := <-got:
			require.Zero(t, time.Since(at))
			require.Equal(t, "next", next.Token())
			require.NoError(t, next.Unlock(ctx))
		default:
			t.Fatal("the next waiter was not woken: the key is free for it on 4 nodes of 5")
		}
		close(gates[2])
	})
}
