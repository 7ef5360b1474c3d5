package redlock

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestSemaphoreQueued: with every permit held, waiters take their places
// in line, in three Clients, and are served in the order they came, each
// at the instant a permit is released (every strategy waits an hour: the
// release wakes the first waiter); a newcomer's TryAcquire is refused
// while they wait, even on a slot just freed.
func TestSemaphoreQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		holder, err := newTestClient(t, fakes).Semaphore("pool", 2)
		require.NoError(t, err)
		var held []*Lock
		for range 2 {
			l, err := holder.TryAcquire(ctx)
			require.NoError(t, err)
			held = append(held, l)
		}
		var order syncList[string]
		got := map[string]chan *Lock{}
		var wg sync.WaitGroup
		for _, who := range []string{"A", "B", "C"} {
			s, err := newTestClient(t, fakes).Semaphore("pool", 2, waitHour)
			require.NoError(t, err)
			ch := make(chan *Lock, 1)
			got[who] = ch
			wg.Go(func() {
				l, err := s.Acquire(ctx)
				if err != nil {
					t.Errorf("%s: %v", who, err)
					return
				}
				order.add(who)
				ch <- l
			})
			synctest.Wait() // its sweep refused, it waits in line
			time.Sleep(time.Millisecond)
		}
		require.Empty(t, order.get())

		at := time.Now()
		require.NoError(t, held[0].Unlock(ctx))
		a := <-got["A"]
		require.Zero(t, time.Since(at), "the first waiter was not woken by the release")
		synctest.Wait()
		newcomer, err := newTestClient(t, fakes).Semaphore("pool", 2)
		require.NoError(t, err)
		require.NoError(t, held[1].Unlock(ctx))
		_, err = newcomer.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a newcomer took a permit while others waited")
		b := <-got["B"]
		require.Zero(t, time.Since(at), "the second waiter was not woken by the release")
		require.Equal(t, []string{"A", "B"}, order.get())

		time.Sleep(time.Second)
		at = time.Now()
		require.NoError(t, a.Unlock(ctx))
		c := <-got["C"]
		require.Zero(t, time.Since(at), "the third waiter was not woken by the release")
		require.Equal(t, []string{"A", "B", "C"}, order.get())
		require.NoError(t, b.Unlock(ctx))
		require.NoError(t, c.Unlock(ctx))
		wg.Wait()
	})
}

// TestSemaphoreGrantedTwoSlots: a waiter first in both slots' queues is
// granted slot 0 by its release and holds it by its place's ID; its
// release of that ID in slot 1 waits on every node (held back) while slot
// 1 is released too and granted to it as well. Once its release runs, the
// grant goes on to the next waiter, at once: a waiter that holds one slot
// releases its place's ID in the others, on every node.
func TestSemaphoreGrantedTwoSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		holderC, firstC, nextC := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		slot1 := holderC.target(slotKey("pool", 1)).rkey
		gate := make(chan struct{})
		var opened sync.Once
		open := func() { opened.Do(func() { close(gate) }) }
		defer open() // on a failure too: nothing stays blocked
		for _, f := range fakes {
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpRelease && o.Key == slot1 && strings.HasPrefix(o.Token, firstC.hand.id+".wi") {
					<-gate
				}
			}
		}
		held, got := poolWaiters(t, holderC, nil, waitHour, firstC, nextC)
		require.NoError(t, held[slotKey("pool", 0)].Unlock(ctx))
		first := <-got[0]
		require.Equal(t, slotKey("pool", 0), first.Key())
		require.Contains(t, first.Token(), ".wi", "held by its place's ID")
		require.NoError(t, held[slotKey("pool", 1)].Unlock(ctx))
		synctest.Wait()
		for _, f := range fakes {
			v, _ := f.value(slot1)
			require.True(t, strings.HasPrefix(v, first.Token()+"\x00"), "slot 1 granted to the first waiter too (marked: the next waits), on %s: %q", f.Name(), v)
		}
		require.Empty(t, got[1])

		at := time.Now()
		open()
		next := <-got[1]
		require.Zero(t, time.Since(at), "slot 1 did not go on to the next waiter at once")
		require.Equal(t, slotKey("pool", 1), next.Key())
		require.Contains(t, next.Token(), ".wi")
		require.NoError(t, first.Unlock(ctx))
		require.NoError(t, next.Unlock(ctx))
	})
}

// TestFencedSemaphoreWaiterGranted: a fenced semaphore's waiter is
// granted the freed slot by a fenced holder's release, with a fencing
// token above the holder's, without an attempt of its own (until
// 2026-12-04 it was woken to attempt: two rounds).
func TestFencedSemaphoreWaiterGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		released, attempts := attemptsAfter(fakes)
		holderC, waiterC := newTestClient(t, fakes), newTestClient(t, fakes)
		held, got := poolWaiters(t, holderC, []Option{WithFencing()}, WithFencing(), waiterC)
		released.Store(true)
		freed := held[slotKey("pool", 0)]
		require.NoError(t, freed.Unlock(t.Context()))
		l := <-got[0]
		require.NotNil(t, l)
		synctest.Wait() // every node's grant is in
		require.Zero(t, attempts.Load(), "the waiter attempted: the release did not grant it")
		require.Contains(t, l.Token(), ".wif")
		require.Equal(t, freed.Key(), l.Key())
		require.Greater(t, l.Fence(), freed.Fence(), "the granted token is not above the releaser's")
		require.NoError(t, l.Unlock(t.Context()))
		require.NoError(t, held[slotKey("pool", 1)].Unlock(t.Context()))
	})
}

// poolWaiters fills the semaphore "pool" (2 permits) with holderC's
// permits (its Semaphore with holderOpts), returned by slot key, then has
// each of waiters' Clients, in turn, wait in line for a permit (Acquire,
// with opt); got[i] returns waiter i's.
func poolWaiters(t *testing.T, holderC *Client, holderOpts []Option, opt Option, waiters ...*Client) (held map[string]*Lock, got []chan *Lock) {
	ctx := t.Context()
	holder, err := holderC.Semaphore("pool", 2, holderOpts...)
	require.NoError(t, err)
	held = map[string]*Lock{}
	for range 2 {
		l, err := holder.TryAcquire(ctx)
		require.NoError(t, err)
		held[l.Key()] = l
		synctest.Wait() // on every node before the next sweep
	}
	for i, c := range waiters {
		s, err := c.Semaphore("pool", 2, opt)
		require.NoError(t, err)
		ch := make(chan *Lock, 1)
		got = append(got, ch)
		go func() {
			l, err := s.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			ch <- l
		}()
		synctest.Wait() // its sweep refused, it waits in line
		time.Sleep(time.Millisecond)
	}
	return held, got
}
