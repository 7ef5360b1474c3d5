package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAutoExtendKeepsTheLock: an auto-extended lock is extended every TTL/3
// and stays valid while the nodes are healthy; Unlock stops the extender
// and nothing is extended after it.
func TestAutoExtendKeepsTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		rec := &recorder{}
		c := newTestClient(t, fakes, WithObserver(rec.Observe))
		const ttl = 100 * time.Millisecond // extensions every 33.33 ms never coincide with the checks
		l, err := c.TryLock(t.Context(), "k", WithTTL(ttl), WithAutoExtend(0))
		require.NoError(t, err)
		for range 50 { // 5×TTL
			time.Sleep(ttl / 10)
			require.Positive(t, l.Validity(), "lost while healthy: %v", l.Err())
			require.NoError(t, l.Err())
		}
		require.Equal(t, 15, rec.count(EventExtend), "extensions in 5×TTL, one every TTL/3")
		require.NoError(t, l.Unlock(t.Context()))
		select {
		case <-l.ext.done:
		default:
			t.Fatal("the extender goroutine is still running after Unlock returned")
		}
		before := fakes[0].extends.Load()
		time.Sleep(ttl)
		require.Equal(t, before, fakes[0].extends.Load(), "extensions after Unlock")
		select {
		case <-l.Done():
		default:
			t.Fatal("Lost not closed after Unlock")
		}
		require.ErrorIs(t, l.Err(), ErrReleased)
	})
}

// TestAutoExtendLosesBeforeValidityEnds: when extensions fail, the lock is
// declared lost with exactly TTL/10 of validity left, not after.
func TestAutoExtendLosesBeforeValidityEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		rec := &recorder{}
		c := newTestClient(t, fakes, WithObserver(rec.Observe))
		const ttl = 300 * time.Millisecond
		l, err := c.TryLock(t.Context(), "k", WithTTL(ttl), WithAutoExtend(0))
		require.NoError(t, err)
		c.bg.Wait()
		fakes[1].setErr(errFakeDown)
		fakes[2].setErr(errFakeDown)
		until := l.validUntil() // no extension succeeds from now on
		<-l.Done()
		require.Equal(t, ttl/endMarginDivisor, time.Until(until), "validity left when the loss was announced")
		require.ErrorIs(t, l.Err(), ErrExpired)
		require.ErrorContains(t, l.Err(), "failed extensions")
		require.Positive(t, rec.countFailed(EventExtend), "extension failures reported")
		require.Equal(t, 1, rec.count(EventEnd), "events %v", rec.kinds())
	})
}

func TestAutoExtendTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		l, err := c.TryLock(t.Context(), "k", WithTTL(300*time.Millisecond), WithAutoExtend(20*time.Millisecond))
		require.NoError(t, err)
		c.bg.Wait()
		for _, f := range fakes[:2] {
			f.set("redlock:{k}", "other", time.Minute)
		}
		start := time.Now()
		<-l.Done()
		require.Equal(t, 20*time.Millisecond, time.Since(start), "lost at the next extension")
		require.ErrorIs(t, l.Err(), ErrTakenOver)
		require.Zero(t, l.Validity())
	})
}

// TestMaxHold: auto-extension stops at the hold cap: the last extension is
// cut to end the lock at the cap, and the work is cancelled TTL/10 before
// that extension's validity ends.
func TestMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		const ttl, hold = 100 * time.Millisecond, 250 * time.Millisecond
		start := time.Now()
		err := c.Do(t.Context(), "k", func(ctx context.Context) error {
			<-ctx.Done()
			return context.Cause(ctx)
		}, WithTTL(ttl), WithMaxHold(hold))
		took := time.Since(start)
		require.ErrorIs(t, err, ErrExpired)
		require.ErrorContains(t, err, "WithMaxHold")
		// Extensions every TTL/3; the fifth, at 5×TTL/3, is cut to the
		// hold's remaining 83.3 ms, so the lock ends at the cap minus that
		// extension's drift, and the work is told TTL/10 before.
		last := 5 * (ttl / 3)
		want := hold - drift(hold-last, defaultDriftFactor) - ttl/endMarginDivisor
		require.Equal(t, want, took)
	})
}

func TestDo(t *testing.T) {
	run := func(name string, f func(t *testing.T, fakes []*fakeNode, c *Client)) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				f(t, fakes, newTestClient(t, fakes))
			})
		})
	}
	run("runs, extends and releases", func(t *testing.T, fakes []*fakeNode, c *Client) {
		wantErr := errors.New("work failed")
		err := c.Do(t.Context(), "k", func(ctx context.Context) error {
			time.Sleep(200 * time.Millisecond) // 4×TTL
			if ctx.Err() != nil {
				t.Errorf("work cancelled while the lock was healthy: %v", context.Cause(ctx))
			}
			return wantErr
		}, WithTTL(50*time.Millisecond))
		require.ErrorIs(t, err, wantErr)
		require.NotErrorIs(t, err, ErrExpired)
		c.bg.Wait()
		for i, f := range fakes {
			_, held := f.value("redlock:{k}")
			require.False(t, held, "node %d still holds the key after Do", i)
		}
	})
	run("lost", func(t *testing.T, fakes []*fakeNode, c *Client) {
		err := c.Do(t.Context(), "k", func(ctx context.Context) error {
			for _, f := range fakes[:2] {
				f.set("redlock:{k}", "other", time.Minute)
			}
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrTakenOver) {
				t.Errorf("cause: got %v, want ErrTakenOver", context.Cause(ctx))
			}
			return nil
		}, WithTTL(100*time.Millisecond), WithAutoExtend(10*time.Millisecond))
		require.ErrorIs(t, err, ErrTakenOver)
	})
	run("panic releases", func(t *testing.T, fakes []*fakeNode, c *Client) {
		func() {
			defer func() { _ = recover() }()
			_ = c.Do(t.Context(), "k", func(context.Context) error { panic("boom") })
		}()
		c.bg.Wait()
		_, held := fakes[0].value("redlock:{k}")
		require.False(t, held, "a panicking Do left the lock held")
	})
	run("not obtained", func(t *testing.T, fakes []*fakeNode, c *Client) {
		for _, f := range fakes {
			f.set("redlock:{k}", "other", -1)
		}
		ran := false
		err := c.Do(t.Context(), "k", func(context.Context) error { ran = true; return nil }, WithRetry(NoRetry()))
		require.False(t, ran)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, c.Do(t.Context(), "k", nil), ErrInvalidArgument, "nil fn")
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c, err := newClient([]node{fakes[0], fakes[1], fakes[2]}, nil)
		require.NoError(t, err)
		plain, err := c.TryLock(t.Context(), "a")
		require.NoError(t, err)
		auto, err := c.TryLock(t.Context(), "b", WithAutoExtend(0))
		require.NoError(t, err)
		waiting := make(chan error)
		go func() {
			_, err := c.Lock(context.Background(), "a", waitHour)
			waiting <- err
		}()
		synctest.Wait()
		require.True(t, c.hand.busy(c.target("a")), "the Lock is not waiting")
		require.NoError(t, c.Close(t.Context()))
		err = <-waiting
		require.ErrorIs(t, err, ErrClosed, "waiting Lock")
		require.ErrorIs(t, err, ErrNotObtained, "waiting Lock")
		for i, f := range fakes {
			for _, k := range []string{"redlock:{a}", "redlock:{b}"} {
				_, held := f.value(k)
				require.False(t, held, "node %d still holds %s after Close", i, k)
			}
		}
		for _, l := range []*Lock{plain, auto} {
			require.ErrorIs(t, l.Err(), ErrReleased, "lock %s after Close", l.Key())
		}
		for name, f := range map[string]func() error{
			"Lock":    func() error { _, err := c.Lock(t.Context(), "x"); return err },
			"TryLock": func() error { _, err := c.TryLock(t.Context(), "x"); return err },
			"Do":      func() error { return c.Do(t.Context(), "x", func(context.Context) error { return nil }) },
			"Inspect": func() error { _, err := c.Inspect(t.Context(), "x"); return err },
		} {
			require.ErrorIs(t, f(), ErrClosed, "%s after Close", name)
		}
		require.NoError(t, c.Close(t.Context()), "second Close")
	})
}

// TestEndRace: Lost, Err, Unlock and a loss racing never double-close or
// deadlock (run with -race).
func TestEndRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		for range 100 {
			l, err := c.TryLock(t.Context(), "k", WithTTL(20*time.Millisecond), WithAutoExtend(time.Millisecond))
			require.NoError(t, err)
			var wg sync.WaitGroup
			wg.Go(func() { <-l.Done() })
			wg.Go(func() { l.endEarly(errors.New("test loss")) })
			wg.Go(func() { _ = l.Err() })
			wg.Go(func() { _ = l.Unlock(t.Context()) })
			wg.Wait()
			require.Error(t, l.Err(), "Err is nil after the lock ended")
			c.bg.Wait()
			for _, f := range fakes {
				f.del("redlock:{k}")
			}
		}
	})
}

// TestEndBetweenClaimAndClose: Lost called after a loss is claimed but
// before it is announced gets a closed channel, and the announcement does
// not close it a second time.
func TestEndBetweenClaimAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		l, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		l.claimEnd(errors.New("lost"))
		ch := l.Done()
		l.closeDone() // would panic on a double close
		select {
		case <-ch:
		default:
			t.Fatal("Lost is open after the lock ended")
		}
	})
}

// TestNoExtensionAfterUnlock: Unlock racing the extender many times; once
// Unlock has returned, no extension reaches a node.
func TestNoExtensionAfterUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		var late atomic.Int32
		for range 50 {
			l, err := c.TryLock(t.Context(), "k", WithTTL(30*time.Millisecond), WithAutoExtend(time.Millisecond))
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond)
			require.NoError(t, l.Unlock(t.Context()))
			c.bg.Wait()
			before := fakes[0].extends.Load()
			time.Sleep(3 * time.Millisecond)
			late.Add(fakes[0].extends.Load() - before)
		}
		require.Zero(t, late.Load(), "extensions after Unlock returned")
	})
}

// TestCloseInterruptsDo: Close under Do cancels the work's context with
// ErrClosed, releases the lock, and Do's error says the Client was closed.
func TestCloseInterruptsDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c, err := newClient([]node{fakes[0], fakes[1], fakes[2]}, nil)
		require.NoError(t, err)
		started := make(chan struct{})
		done := make(chan error)
		go func() {
			done <- c.Do(t.Context(), "k", func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				assert.ErrorIs(t, context.Cause(ctx), ErrClosed) // not require: another goroutine
				return nil
			})
		}()
		<-started
		require.NoError(t, c.Close(t.Context()))
		err = <-done
		require.ErrorIs(t, err, ErrClosed)
		for i, f := range fakes {
			_, held := f.value("redlock:{k}")
			require.False(t, held, "node %d still holds the key", i)
		}
	})
}
