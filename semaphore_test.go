package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSemaphorePermits: P permits and no more; each permit is a slot's
// lock, with a fencing token per slot; a released permit can be taken
// again, and UnlockAfter keeps its slot out for the cooldown.
func TestSemaphorePermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		s, err := c.Semaphore("db", 3, WithFencing())
		require.NoError(t, err)
		ctx := t.Context()
		var held []*Lock
		slots := map[string]bool{}
		for range 3 {
			l, err := s.TryAcquire(ctx)
			require.NoError(t, err)
			require.NotZero(t, l.Fence())
			require.False(t, slots[l.Key()], "two permits on one slot")
			slots[l.Key()] = true
			held = append(held, l)
		}
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotObtained)

		require.NoError(t, held[0].UnlockAfter(ctx, time.Second))
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a permit was taken during its slot's cooldown")
		start := time.Now()
		l, err := s.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, held[0].Key(), l.Key())
		require.GreaterOrEqual(t, time.Since(start), time.Second-time.Millisecond)
		require.Greater(t, l.Fence(), held[0].Fence(), "fencing tokens grow per slot")

		states, err := s.Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, states, 3)
		for _, st := range states {
			_, _, ok := st.Holder()
			require.True(t, ok, "a slot shows no holder")
		}
	})
}

// TestSemaphoreAcquireWaits: with every permit held, Acquire waits, by
// default no longer than the earliest held slot's keys run out (the retry
// strategy here would wait an hour), and gets the permit of a holder that
// stopped extending.
func TestSemaphoreAcquireWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		s, err := c.Semaphore("db", 2, WithTTL(2*time.Second), WithRetry(RandomBackoff(time.Hour, time.Hour)))
		require.NoError(t, err)
		ctx := t.Context()
		_, err = s.TryAcquire(ctx)
		require.NoError(t, err)
		time.Sleep(time.Second)
		_, err = s.TryAcquire(ctx) // runs out a second after the first
		require.NoError(t, err)
		start := time.Now()
		_, err = s.Acquire(ctx)
		require.NoError(t, err)
		require.InDelta(t, time.Second, time.Since(start), float64(5*time.Millisecond), "not woken when the first permit ran out")

		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = s.Acquire(wctx)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestSemaphoreDo: Do runs fn under an extended permit and releases it;
// fn's context is cancelled, with the cause, when the permit is lost.
func TestSemaphoreDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		s, err := c.Semaphore("db", 1, WithTTL(time.Second))
		require.NoError(t, err)
		ctx := t.Context()
		require.NoError(t, s.Do(ctx, func(ctx context.Context) error {
			time.Sleep(5 * time.Second) // extended meanwhile
			return ctx.Err()
		}))
		l, err := s.TryAcquire(ctx)
		require.NoError(t, err, "Do did not release its permit")
		require.NoError(t, l.Unlock(ctx))

		err = s.Do(ctx, func(ctx context.Context) error {
			for _, f := range fakes {
				f.set(c.redisKey(slotKey("db", 0)), "intruder", time.Minute)
			}
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), ErrTakenOver)
			return nil
		})
		require.ErrorIs(t, err, ErrTakenOver)
	})
}

// TestSemaphoreBadInput: permits out of range, an empty name, WithToken and
// options that do not apply are typed errors before any node is asked.
func TestSemaphoreBadInput(t *testing.T) {
	fakes := newFakeNodes(3)
	c := newTestClient(t, fakes)
	for name, f := range map[string]func() error{
		"0 permits":    func() error { _, err := c.Semaphore("s", 0); return err },
		"-1 permits":   func() error { _, err := c.Semaphore("s", -1); return err },
		"129 permits":  func() error { _, err := c.Semaphore("s", maxPermits+1); return err },
		"empty name":   func() error { _, err := c.Semaphore("", 1); return err },
		"long name":    func() error { _, err := c.Semaphore(strings.Repeat("x", maxKeyLen), 1); return err },
		"token":        func() error { _, err := c.Semaphore("s", 2, WithToken("t")); return err },
		"client opt":   func() error { _, err := c.Semaphore("s", 2, WithNodeTimeout(time.Second)); return err },
		"recampaign":   func() error { _, err := c.Semaphore("s", 2, WithRecampaign()); return err },
		"nil Do":       func() error { s, _ := c.Semaphore("s", 2); return s.Do(t.Context(), nil) },
		"tiny TTL":     func() error { _, err := c.Semaphore("s", 2, WithTTL(time.Millisecond)); return err },
		"metadata 5KB": func() error { _, err := c.Semaphore("s", 2, WithMetadata(strings.Repeat("m", 5000))); return err },
	} {
		require.ErrorIs(t, f(), ErrInvalidArgument, name)
	}
	for _, f := range fakes {
		require.Zero(t, f.calls.Load(), "a node was asked")
	}
}

// FuzzSemaphoreArgs: whatever the name and permits, Semaphore either
// returns a semaphore whose P permits can all be taken and no more, or
// ErrInvalidArgument; never a panic.
func FuzzSemaphoreArgs(f *testing.F) {
	f.Add("db", 3)
	f.Add("", 1)
	f.Add("x{y}z", 0)
	f.Add("s", maxPermits+1)
	f.Add("s", -7)
	f.Add("s", 1<<40)
	f.Fuzz(func(t *testing.T, name string, permits int) {
		synctest.Test(t, func(t *testing.T) {
			c := newTestClient(t, newFakeNodes(3))
			s, err := c.Semaphore(name, permits)
			if err != nil {
				if !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("got %v, want ErrInvalidArgument or a semaphore", err)
				}
				return
			}
			if permits > 8 {
				return // the bounds are what is fuzzed; taking 128 permits proves no more
			}
			for range permits {
				if _, err := s.TryAcquire(t.Context()); err != nil {
					t.Fatalf("permit refused below P=%d: %v", permits, err)
				}
			}
			if _, err := s.TryAcquire(t.Context()); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("permit %d of %d: got %v, want ErrNotObtained", permits+1, permits, err)
			}
		})
	})
}
