package redlock

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
