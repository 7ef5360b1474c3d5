package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRWMutexSides: readers share; a writer is refused while any reader
// holds, and readers while the writer holds; the read side has no fencing
// token, the write side has.
func TestRWMutexSides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.RWMutex("doc", WithFencing())
		require.NoError(t, err)
		var readers []*Lock
		for range 3 {
			r, err := m.TryRLock(ctx)
			require.NoError(t, err, "readers share")
			require.Zero(t, r.Fence(), "a reader got a fencing token")
			readers = append(readers, r)
		}
		synctest.Wait() // TryRLock returns at a majority; the rest follow
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		for _, n := range st.Nodes {
			require.Equal(t, 3, n.Readers)
		}
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a writer while readers hold")
		requireRefusedAs(t, err, ErrHeld)
		for _, r := range readers[:2] {
			require.NoError(t, r.Unlock(ctx))
		}
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a writer while one reader holds")
		require.NoError(t, readers[2].Unlock(ctx))
		synctest.Wait()

		w, err := m.TryLock(ctx)
		require.NoError(t, err, "a writer once the readers left")
		require.NotZero(t, w.Fence())
		_, err = m.TryRLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a reader while the writer holds")
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "two writers")
		require.NoError(t, w.Unlock(ctx))
		synctest.Wait()
		r, err := m.TryRLock(ctx)
		require.NoError(t, err, "a reader after the writer")
		require.NoError(t, r.Unlock(ctx))
		w2, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.Greater(t, w2.Fence(), w.Fence())
	})
}

// TestRWMutexWriterNotStarved: with readers coming and going so that one
// always holds, a waiting writer keeps new readers out and gets the lock
// at the instant the last reader in leaves (its strategy waits an hour:
// the last reader's release wakes it).
func TestRWMutexWriterNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.RWMutex("doc", WithTTL(time.Minute))
		require.NoError(t, err)
		r1, err := m.TryRLock(ctx)
		require.NoError(t, err)
		writer, err := c.RWMutex("doc", waitHour)
		require.NoError(t, err)
		got := make(chan *Lock)
		go func() {
			w, err := writer.Lock(ctx)
			require.NoError(t, err)
			got <- w
		}()
		synctest.Wait() // the writer was refused once and waits in the queue
		_, err = m.TryRLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a new reader while a writer waits")
		requireRefusedAs(t, err, ErrQueued)
		readerIn := make(chan time.Time, 1)
		go func() {
			r, err := m.RLock(ctx) // waits for the writer that waits
			readerIn <- time.Now()
			if err == nil {
				err = r.Unlock(ctx)
			}
			require.NoError(t, err)
		}()
		time.Sleep(time.Second)
		start := time.Now()
		require.NoError(t, r1.Unlock(ctx))
		w := <-got
		require.Zero(t, time.Since(start), "the writer was not woken by the last reader's release")
		time.Sleep(time.Second)
		released := time.Now()
		require.NoError(t, w.Unlock(ctx))
		require.False(t, (<-readerIn).Before(released), "a reader got in while the writer held")
		synctest.Wait() // the reader's Unlock
	})
}

// TestRWMutexDeadReader: a reader that never releases keeps a writer out
// until its lease runs out, no longer (the writer's strategy waits an
// hour; the lapse of the reader's lease bounds its wait).
func TestRWMutexDeadReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		ctx := t.Context()
		m, err := c.RWMutex("doc", WithTTL(2*time.Second), waitHour)
		require.NoError(t, err)
		r, err := m.TryRLock(ctx) // and dies: no Unlock, no Extend
		require.NoError(t, err)
		validEnd := time.Now().Add(r.Validity())
		w, err := m.Lock(ctx)
		require.NoError(t, err)
		require.False(t, time.Now().Before(validEnd), "the writer got in while the reader was valid")
		require.Less(t, time.Since(validEnd), 200*time.Millisecond, "the writer waited long past the reader's lease")
		require.NoError(t, w.Unlock(ctx))
	})
}

// TestRWMutexReaderLifecycle: a reader's Extend, UnlockAfter (writers stay
// out for the cooldown) and RDo, whose context is cancelled when the
// reader's lease is gone from the nodes.
func TestRWMutexReaderLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.RWMutex("doc", WithTTL(time.Second))
		require.NoError(t, err)
		r, err := m.TryRLock(ctx)
		require.NoError(t, err)
		time.Sleep(800 * time.Millisecond)
		require.NoError(t, r.Extend(ctx, time.Second))
		time.Sleep(800 * time.Millisecond)
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "Extend did not extend the reader")
		require.NoError(t, r.UnlockAfter(ctx, 500*time.Millisecond))
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained, "a writer during the reader's cooldown")
		time.Sleep(500 * time.Millisecond)
		w, err := m.TryLock(ctx)
		require.NoError(t, err, "after the cooldown")
		require.NoError(t, w.Unlock(ctx))
		synctest.Wait()

		require.NoError(t, m.RDo(ctx, func(ctx context.Context) error {
			time.Sleep(5 * time.Second) // extended meanwhile
			return ctx.Err()
		}))
		err = m.RDo(ctx, func(ctx context.Context) error {
			for _, f := range fakes {
				f.del(c.redisKey("rw:doc") + ":readers")
			}
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), ErrExpired)
			return nil
		})
		require.ErrorIs(t, err, ErrExpired)
		require.NoError(t, m.Do(ctx, func(ctx context.Context) error { return nil }))
	})
}

// TestRWMutexBadInput: bad names and options are typed errors before any
// node is asked.
func TestRWMutexBadInput(t *testing.T) {
	fakes := newFakeNodes(3)
	c := newTestClient(t, fakes)
	for name, f := range map[string]func() error{
		"empty name": func() error { _, err := c.RWMutex(""); return err },
		"long name":  func() error { _, err := c.RWMutex(strings.Repeat("x", maxKeyLen)); return err },
		"client opt": func() error { _, err := c.RWMutex("d", WithNodeTimeout(time.Second)); return err },
		"recampaign": func() error { _, err := c.RWMutex("d", WithRecampaign()); return err },
		"tiny TTL":   func() error { _, err := c.RWMutex("d", WithTTL(time.Millisecond)); return err },
		"nil Do":     func() error { m, _ := c.RWMutex("d"); return m.Do(t.Context(), nil) },
		"nil RDo":    func() error { m, _ := c.RWMutex("d"); return m.RDo(t.Context(), nil) },
		"bad token":  func() error { _, err := c.RWMutex("d", WithToken("a\x00b")); return err },
	} {
		require.ErrorIs(t, f(), ErrInvalidArgument, name)
	}
	for _, f := range fakes {
		require.Zero(t, f.calls.Load(), "a node was asked")
	}
}

// FuzzRWMutexArgs: whatever the name, RWMutex either returns a lock whose
// readers share and exclude a writer, or ErrInvalidArgument; never a
// panic.
func FuzzRWMutexArgs(f *testing.F) {
	f.Add("doc")
	f.Add("")
	f.Add("x{y}z")
	f.Add(strings.Repeat("n", maxKeyLen))
	f.Add("a\x00b")
	f.Fuzz(func(t *testing.T, name string) {
		synctest.Test(t, func(t *testing.T) {
			c := newTestClient(t, newFakeNodes(3))
			m, err := c.RWMutex(name)
			if err != nil {
				if !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("got %v, want ErrInvalidArgument or a lock", err)
				}
				return
			}
			ctx := t.Context()
			for range 2 {
				if _, err := m.TryRLock(ctx); err != nil {
					t.Fatalf("readers do not share: %v", err)
				}
			}
			if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("a writer while readers hold: %v", err)
			}
		})
	})
}

// requireRefusedAs fails unless err is a refusal in which a majority of
// the nodes gave reason (the others may not have answered before the
// outcome was decided).
func requireRefusedAs(t *testing.T, err error, reason error) {
	t.Helper()
	var qerr *QuorumError
	require.ErrorAs(t, err, &qerr)
	n := 0
	for _, nr := range qerr.Nodes {
		if errors.Is(nr.Err, reason) {
			n++
		}
	}
	require.GreaterOrEqual(t, n, qerr.Quorum, "nodes refusing with %v: %v", reason, err)
}

// TestCloseReleasesEveryKind: Close releases a multi-key lock's keys, a
// reader's lease and a writer's key, ends a waiting RLock and a waiting
// multi-key Lock with ErrClosed, and observers see each with its key.
func TestCloseReleasesEveryKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		var mu sync.Mutex
		keys := map[string]bool{}
		c, err := newClient([]node{fakes[0], fakes[1], fakes[2]}, []Option{WithObserver(func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			keys[e.Key] = true
		})})
		require.NoError(t, err)
		ctx := t.Context()
		m, err := c.MultiLock([]string{"a", "b"})
		require.NoError(t, err)
		_, err = m.TryLock(ctx)
		require.NoError(t, err)
		rw, err := c.RWMutex("doc")
		require.NoError(t, err)
		_, err = rw.TryRLock(ctx)
		require.NoError(t, err)
		rw2, err := c.RWMutex("other")
		require.NoError(t, err)
		_, err = rw2.TryLock(ctx)
		require.NoError(t, err)
		waiting := make(chan error, 2)
		go func() { _, err := m.Lock(context.Background()); waiting <- err }()
		go func() { _, err := rw2.RLock(context.Background()); waiting <- err }()
		synctest.Wait()
		require.NoError(t, c.Close(ctx))
		for range 2 {
			require.ErrorIs(t, <-waiting, ErrClosed)
		}
		for i, f := range fakes {
			for _, k := range []string{"a", "b", "rw:other"} {
				_, held := f.value(c.redisKey(k))
				require.False(t, held, "node %d still holds %s after Close", i, k)
			}
			require.Zero(t, f.readers(c.redisKey("rw:doc")), "node %d still has the reader", i)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{"a b", "rw:doc", "rw:other"} {
			require.True(t, keys[k], "no event for %q", k)
		}
	})
}
