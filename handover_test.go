package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// The hand-over inside one Client (handover.go).

// TestHandOverInOneRound: when the next waiter for a key is the releasing
// Client's own, Unlock sends that waiter's attempt in the same batch as
// the release, right behind it on every node, and the waiter holds the
// lock from that round: no node runs another acquire for it. Without
// the hand-over, the waiter's attempt leaves once the release's notices
// or replies have woken it, in a round of its own.
func TestHandOverInOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		var batches, acquires syncList[string]
		var armed atomic.Bool
		for _, f := range fakes {
			f.batched = func(ops []*wire.Op) {
				batch := f.id
				for _, o := range ops {
					batch += " " + opName(o)
				}
				batches.add(batch)
			}
			f.ran = func(o *wire.Op) {
				if armed.Load() && wire.IsAcquire(o.Kind) {
					acquires.add(f.id)
				}
			}
		}
		holder, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		got := make(chan *Lock, 1)
		go func() {
			l, err := c.Lock(t.Context(), "k", waitHour)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		synctest.Wait() // refused once, queued, asleep
		armed.Store(true)
		require.NoError(t, holder.Unlock(t.Context()))
		l := <-got
		synctest.Wait()
		var want []string
		for _, f := range fakes {
			want = append(want, f.id+" release acquire")
		}
		require.ElementsMatch(t, want, batches.get(), "one batch per node: the release, then the waiter's attempt")
		require.ElementsMatch(t, []string{"fake0", "fake1", "fake2"}, acquires.get(), "one acquire per node, the batch's")
		require.NoError(t, l.Unlock(t.Context()))
	})
}

// TestHandOverTakenBackWhenTheWaiterGivesUp: a waiter whose Lock call ends
// while the attempt an Unlock sent for it is still out takes that attempt
// (it was asleep when handed it) and gives back what it grants, as a
// failed attempt does: the key is left to no token.
func TestHandOverTakenBackWhenTheWaiterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		holder, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := c.Lock(ctx, "k", waitHour)
			done <- err
		}()
		synctest.Wait()
		gate := make(chan struct{})
		for _, f := range fakes {
			f.acqGate = gate // the waiter's attempt waits; the release goes through
		}
		require.NoError(t, holder.Unlock(t.Context()))
		synctest.Wait() // the waiter collects its attempt's round
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		close(gate) // the grants come in after the waiter gave up
		synctest.Wait()
		rkey := c.redisKey("k")
		for _, f := range fakes {
			v, ok := f.value(rkey)
			require.True(t, !ok || wire.IsReserved(v), "%s: the key holds %q", f.id, v)
		}
		l, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err, "the key is free for the next")
		require.NoError(t, l.Unlock(t.Context()))
	})
}
