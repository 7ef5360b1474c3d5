package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// holders returns, per node, the token (before any metadata) at each of
// keys, "" where there is none.
func holders(fakes []*fakeNode, c *Client, keys ...string) [][]string {
	out := make([][]string, len(fakes))
	for i, f := range fakes {
		for _, k := range keys {
			v, _ := f.value(c.redisKey(k))
			tok, _, _ := strings.Cut(v, "\x00")
			out[i] = append(out[i], tok)
		}
	}
	return out
}

// TestMultiLockAllOrNothing: a node where another token holds one of the
// keys grants none of them, and a refused set is taken back from the
// nodes that granted it: no node is left with part of a set.
func TestMultiLockAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.MultiLock([]string{"a", "b", "c"})
		require.NoError(t, err)

		fakes[0].set(c.redisKey("b"), "other", time.Minute)
		l, err := m.TryLock(ctx)
		require.NoError(t, err, "two of three nodes had every key free")
		require.Equal(t, [][]string{{"", "other", ""}, {l.Token(), l.Token(), l.Token()}, {l.Token(), l.Token(), l.Token()}},
			holders(fakes, c, "a", "b", "c"))
		require.Equal(t, []string{"a", "b", "c"}, l.Keys())
		require.Equal(t, "a b c", l.Key())
		require.NoError(t, l.Unlock(ctx))
		synctest.Wait() // Unlock returns at a majority; the rest follow
		require.Equal(t, [][]string{{"", "other", ""}, {"", "", ""}, {"", "", ""}}, holders(fakes, c, "a", "b", "c"))

		fakes[1].set(c.redisKey("c"), "other", time.Minute)
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained)
		requireRefusedAs(t, err, ErrHeld)
		synctest.Wait() // the take-back of node 2's grant
		require.Equal(t, [][]string{{"", "other", ""}, {"", "", "other"}, {"", "", ""}}, holders(fakes, c, "a", "b", "c"),
			"a refused set left keys behind")
	})
}

// TestMultiLockExcludesEachKey: a multi-key lock holds each of its keys
// against a lock on that key alone, and the other way round; a multi-key
// Lock refused by a holder waits for it no longer than its keys have left
// (the strategy here would wait an hour), and releases free every key.
func TestMultiLockExcludesEachKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.MultiLock([]string{"b", "a"}, WithRetry(RandomBackoff(time.Hour, time.Hour)))
		require.NoError(t, err)
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		for _, k := range []string{"a", "b"} {
			_, err := c.TryLock(ctx, k)
			require.ErrorIs(t, err, ErrNotObtained, "key %s alone while the set is held", k)
		}
		other, err := c.TryLock(ctx, "c")
		require.NoError(t, err, "a key outside the set")
		require.NoError(t, other.Unlock(ctx))
		require.NoError(t, l.Unlock(ctx))
		for _, k := range []string{"a", "b"} {
			single, err := c.TryLock(ctx, k, WithTTL(2*time.Second))
			require.NoError(t, err, "key %s after the set's release", k)
			time.Sleep(time.Second) // b runs out a second after a
			_ = single
		}
		_, err = m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotObtained)
		start := time.Now()
		l, err = m.Lock(ctx)
		require.NoError(t, err)
		require.InDelta(t, time.Second, time.Since(start), float64(5*time.Millisecond), "not locked when the last single lock ran out")
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestMultiLockLifecycle: Extend, UnlockAfter and Do work on every key
// together; Do's context is cancelled when one key is taken over.
func TestMultiLockLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.MultiLock([]string{"a", "b"}, WithTTL(time.Second))
		require.NoError(t, err)
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		time.Sleep(800 * time.Millisecond)
		require.NoError(t, l.Extend(ctx, time.Second))
		time.Sleep(800 * time.Millisecond)
		_, err = c.TryLock(ctx, "b")
		require.ErrorIs(t, err, ErrNotObtained, "Extend did not extend every key")

		require.NoError(t, l.UnlockAfter(ctx, 500*time.Millisecond))
		_, err = c.TryLock(ctx, "a")
		require.ErrorIs(t, err, ErrNotObtained, "a key came free during the cooldown")
		time.Sleep(500*time.Millisecond + time.Millisecond) // a key lives through its expiry's ms, as on Redis
		_, err = m.TryLock(ctx)
		require.NoError(t, err, "after the cooldown")

		m2, err := c.MultiLock([]string{"x", "y"}, WithTTL(time.Second))
		require.NoError(t, err)
		require.NoError(t, m2.Do(ctx, func(ctx context.Context) error {
			time.Sleep(5 * time.Second) // extended meanwhile
			return ctx.Err()
		}))
		err = m2.Do(ctx, func(ctx context.Context) error {
			for _, f := range fakes {
				f.set(c.redisKey("y"), "intruder", time.Minute)
			}
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), ErrTakenOver)
			return nil
		})
		require.ErrorIs(t, err, ErrTakenOver)
		require.Equal(t, [][]string{{"", "intruder"}, {"", "intruder"}, {"", "intruder"}}, holders(fakes, c, "x", "y"),
			"the release took more than the keys still ours")
	})
}

// TestMultiLockFencing: a multi-key lock's fencing token is larger than any
// handed out before for any of its keys, and later tokens of each key are
// larger than it.
func TestMultiLockFencing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		ctx := t.Context()
		var last uint64
		for range 3 {
			l, err := c.TryLock(ctx, "b", WithFencing())
			require.NoError(t, err)
			last = max(last, l.Fence())
			require.NoError(t, l.Unlock(ctx))
		}
		m, err := c.MultiLock([]string{"a", "b"}, WithFencing())
		require.NoError(t, err)
		l, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last, "below b's earlier tokens")
		require.NoError(t, l.Unlock(ctx))
		for _, k := range []string{"a", "b"} {
			single, err := c.TryLock(ctx, k, WithFencing())
			require.NoError(t, err)
			require.Greater(t, single.Fence(), l.Fence(), "key %s: a later token below the set's", k)
			require.NoError(t, single.Unlock(ctx))
		}
	})
}

// TestMultiLockFenceWriteBack: when a majority did not take the proposal,
// the token written back is the largest handed out, and it lands on every
// key's counter.
func TestMultiLockFenceWriteBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		big := int64(1) << 50
		fakes[0].set(wire.FenceKey(c.redisKey("a")), fmt.Sprint(big), -1)
		fakes[1].set(wire.FenceKey(c.redisKey("b")), fmt.Sprint(big+1), -1)
		m, err := c.MultiLock([]string{"a", "b"}, WithFencing())
		require.NoError(t, err)
		l, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.Greater(t, l.Fence(), uint64(big+1))
		synctest.Wait()
		agree := 0
		for i, f := range fakes {
			n := 0
			for _, k := range []string{"a", "b"} {
				if f.counter(wire.FenceKey(c.redisKey(k))) == fmt.Sprint(l.Fence()) {
					n++
				}
			}
			require.True(t, n == 0 || n == 2, "node %d: the token on one key's counter only", i)
			if n == 2 {
				agree++
			}
		}
		require.GreaterOrEqual(t, agree, 2, "the token on every key's counter of a majority")
	})
}

// TestMultiLockReentry: the holder re-enters with its token; a failed
// re-entry leaves the set as it was.
func TestMultiLockReentry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.MultiLock([]string{"a", "b"})
		require.NoError(t, err)
		l, err := m.TryLock(ctx)
		require.NoError(t, err)
		again, err := c.MultiLock([]string{"b", "a"}, WithToken(l.Token()))
		require.NoError(t, err)
		l2, err := again.TryLock(ctx)
		require.NoError(t, err, "re-entry")
		require.Equal(t, l.Token(), l2.Token())
		// A node stream sends one Client's calls in order; the fakes do
		// not, so the re-entry's last reply lands before the release.
		synctest.Wait()
		require.NoError(t, l2.Unlock(ctx))
		synctest.Wait()
		_, err = c.TryLock(ctx, "a")
		require.NoError(t, err, "the re-entered lock's Unlock released the set")
	})
}

// TestMultiLockOverlapNoDeadlock: callers whose sets overlap in both
// orders, and a caller of one key, all finish their rounds: nobody holds a
// key while waiting for another.
func TestMultiLockOverlapNoDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		var mu sync.Mutex
		holding := map[string]string{}
		take := func(who string, keys []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				require.Empty(t, holding[k], "%s and %s both hold %s", who, holding[k], k)
				holding[k] = who
			}
		}
		give := func(keys []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				delete(holding, k)
			}
		}
		sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a"}, {"a"}}
		var wg sync.WaitGroup
		for i, keys := range sets {
			m, err := c.MultiLock(keys, WithTTL(time.Second))
			require.NoError(t, err)
			wg.Go(func() {
				for range 20 {
					require.NoError(t, m.Do(ctx, func(context.Context) error {
						take(fmt.Sprint(i), keys)
						time.Sleep(10 * time.Millisecond)
						give(keys)
						return nil
					}))
				}
			})
		}
		wg.Wait()
	})
}

// TestMultiLockReleaseWakesWaiters: a Lock queued on one key of a held set
// gets it at the instant the set is released (its strategy waits an hour,
// the set's TTL a minute): the release wakes the first waiter of each key,
// in this Client or another.
func TestMultiLockReleaseWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c, other := newTestClient(t, fakes), newTestClient(t, fakes)
		ctx := t.Context()
		m, err := c.MultiLock([]string{"a", "b"}, WithTTL(time.Minute))
		require.NoError(t, err)
		l, err := m.TryLock(ctx)
		require.NoError(t, err)
		got := make(chan error, 2)
		for _, w := range []struct {
			c   *Client
			key string
		}{{c, "a"}, {other, "b"}} {
			go func() {
				l, err := w.c.Lock(ctx, w.key, waitHour)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
		}
		synctest.Wait() // both waiters have failed once and wait
		time.Sleep(time.Millisecond)
		start := time.Now()
		require.NoError(t, l.Unlock(ctx))
		for range 2 {
			require.NoError(t, <-got)
		}
		require.Zero(t, time.Since(start), "a waiter was not woken by the set's release")
	})
}
