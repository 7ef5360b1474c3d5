package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestUnusableNodesEndTheWait: a node error that waiting cannot cure (here
// the restart guard's INFO refused, as on miniredis, and an ACL denial)
// ends Lock's wait at once, with default options and a context that never
// ends, when it leaves no majority possible; the error names the cure.
// While a majority is still possible, Lock keeps waiting.
func TestUnusableNodesEndTheWait(t *testing.T) {
	noGuard := errors.New("NOGUARD redlock: the restart guard needs INFO server inside scripts, and this node refused it: section (server) is not supported")
	noPerm := errors.New("NOPERM this user has no permissions to run the 'evalsha' command")
	for _, tc := range []struct {
		name string
		errs []error // per node
		hint string
	}{
		{"guard refused everywhere", []error{noGuard, noGuard, noGuard}, "WithRestartGuard(0)"},
		{"two of three", []error{noPerm, noGuard, nil}, "ACL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				for i, err := range tc.errs {
					fakes[i].setErr(err)
				}
				c := newTestClient(t, fakes)
				start := time.Now()
				_, err := c.Lock(context.Background(), "k")
				require.Zero(t, time.Since(start), "Lock waited for errors that waiting cannot cure")
				require.ErrorIs(t, err, ErrNotObtained)
				require.ErrorIs(t, err, ErrUnusable)
				require.ErrorContains(t, err, tc.hint)
				// The failed attempt's grant on the healthy node may come
				// after its outcome, and is then taken back in the
				// background: let it go before trying again.
				c.bg.Wait()
				_, err = c.TryLock(context.Background(), "k")
				require.ErrorIs(t, err, ErrUnusable, "TryLock says so too")
			})
		})
	}
	t.Run("a majority is still possible", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fakes := newFakeNodes(3)
			fakes[0].setErr(noPerm)
			fakes[1].set("redlock:{k}", "other", -1) // held for good, but it may be released
			c := newTestClient(t, fakes)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := c.Lock(ctx, "k")
			require.ErrorIs(t, err, context.DeadlineExceeded, "Lock gave up while a majority was possible")
			require.NotErrorIs(t, err, ErrUnusable)
		})
	})
}

func TestCallerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		gate := make(chan struct{})
		defer close(gate)
		fakes[2].setGate(gate)
		fakes[1].setErr(errFakeDown)
		c := newTestClient(t, fakes, WithNodeTimeout(time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Lock(ctx, "k")
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline")
		require.Equal(t, 20*time.Millisecond, time.Since(start), "Lock ended at the caller's deadline")
	})
}

// TestCancelledAttemptReleases: cancelling the caller's context mid-attempt
// releases what was granted, with a context that is not cancelled, and late
// grants too.
func TestCancelledAttemptReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		gate := make(chan struct{})
		fakes[1].setGate(gate)
		fakes[2].setGate(gate)
		c := newTestClient(t, fakes, WithNodeTimeout(time.Hour))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { _, err := c.TryLock(ctx, "k"); done <- err }()
		synctest.Wait()
		for i, f := range fakes {
			require.EqualValues(t, 1, f.calls.Load(), "node %d was not asked", i)
		}
		cancel()
		err := <-done
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, ErrNotObtained)
		close(gate)
		c.bg.Wait()
		for i, f := range fakes {
			v, held := f.value("redlock:{k}")
			require.False(t, held, "node %d still holds %q", i, v)
			f.mu.Lock()
			errs := f.releaseErrs
			f.mu.Unlock()
			require.Equal(t, []error{nil}, errs, "node %d: want one release, with a context that is not done", i)
		}
	})
}

// TestSetHeldByTwoRetriesAtStrategyPace: a multi-key set whose keys are
// held by two holders, each on fewer than a majority of the nodes that
// answer, is refused by two tokens. That is no split vote (nobody is on
// the way out), so the set retries at its strategy's pace, not every two
// rounds: the simulator found such a set attempting about 2,000 times a
// second for half a second.
func TestSetHeldByTwoRetriesAtStrategyPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		fakes[0].set("redlock:{a}", "X", time.Minute)
		fakes[1].set("redlock:{c}", "Y", time.Minute)
		for _, f := range fakes {
			f.delay = time.Millisecond
		}
		var attempts atomic.Int64
		c := newTestClient(t, fakes, WithObserver(func(e Event) {
			if e.Kind == EventAcquire {
				attempts.Add(1)
			}
		}))
		m, err := c.MultiLock([]string{"a", "c"})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = m.Lock(ctx)
		require.ErrorIs(t, err, ErrNotObtained)
		// The default strategy waits 10–200 ms between attempts: about 10
		// in a second, fewer than 101 at the very least.
		require.LessOrEqual(t, attempts.Load(), int64(100), "attempts in a second")
	})
}

// TestFailedWinnerWakesNext: a woken waiter whose attempt won a majority
// and then failed (here its fence write-back, cut short by its own
// deadline) gives the key back with a release notice, which wakes the
// next waiter at that instant (every strategy waits an hour). Without the
// notice, the next waiter slept until its next look with the key free.
func TestFailedWinnerWakesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		block := make(chan struct{})
		for _, f := range fakes {
			// Counters above any proposal: the grant needs a write-back,
			// which the nodes hold until the waiter's deadline has passed.
			f.set("redlock:{k}:fence", "4503599627370496", -1)
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpFenceWrite {
					<-block
				}
			}
		}
		holder, first, next := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		ctx := t.Context()
		h, err := holder.TryLock(ctx, "k")
		require.NoError(t, err)
		failed := make(chan time.Time, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := first.Lock(wctx, "k", waitHour, WithFencing())
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("first waiter: got %v, want its deadline", err)
			}
			failed <- time.Now()
			close(block)
		}()
		synctest.Wait()
		time.Sleep(time.Millisecond)
		got := make(chan time.Time, 1)
		go func() {
			l, err := next.Lock(ctx, "k", waitHour)
			if err != nil {
				t.Errorf("next waiter: %v", err)
				return
			}
			got <- time.Now()
			_ = l.Unlock(ctx)
		}()
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, h.Unlock(ctx)) // the first waiter wins, and waits for its write-back
		gaveUp := <-failed
		require.Equal(t, gaveUp, <-got, "the next waiter was not woken when the first gave the key back")
	})
}
