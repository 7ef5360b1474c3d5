package redlock

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// A set's keys granted by their releases (issue 28): a set's waiter
// holds once a majority of nodes have granted it every key, each key by
// its own release, without an attempt of its own.

// setWaiter has c wait for the set keys (waitHour: only wakes move it),
// and returns the channel its Lock comes on.
func setWaiter(t *testing.T, c *Client, keys ...string) <-chan *Lock {
	t.Helper()
	set, err := c.MultiLock(keys, waitHour)
	require.NoError(t, err)
	got := lockBehind(t, set.Lock)
	synctest.Wait() // refused, it waits in every key's queue
	time.Sleep(time.Millisecond)
	return got
}

// TestSetGrantedByReleases: a set whose two keys are held by two other
// Clients is granted each key by its release; the first release alone
// does not make it hold, the second does, at that instant, by its
// place's ID, and with no attempt of its own. Its Unlock leaves nothing.
func TestSetGrantedByReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		ca, cb, cs := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		ha, err := ca.Lock(ctx, "a", WithTTL(time.Minute))
		require.NoError(t, err)
		hb, err := cb.Lock(ctx, "b", WithTTL(time.Minute))
		require.NoError(t, err)
		var attempts atomic.Int32 // the set's acquires, after its first
		got := setWaiter(t, cs, "a", "b")
		for _, f := range fakes {
			f.ran = func(o *wire.Op) {
				if wire.IsAcquire(o.Kind) && o.Mode == wire.ModeSet {
					attempts.Add(1)
				}
			}
		}

		require.NoError(t, ha.Unlock(ctx))
		synctest.Wait()
		require.Empty(t, got, "the set held with one key of two granted")
		rkeyA := cs.target("a").rkey
		for _, f := range fakes {
			v, _ := f.value(rkeyA)
			require.True(t, strings.HasPrefix(v, cs.hand.id+".wi"), "a granted to the set's place on %s: %q", f.Name(), v)
		}

		at := time.Now()
		require.NoError(t, hb.Unlock(ctx))
		l := <-got
		require.Zero(t, time.Since(at), "the set did not hold at the second release")
		require.Zero(t, attempts.Load(), "the set attempted: it was not held by the grants")
		require.True(t, strings.HasPrefix(l.Token(), cs.hand.id+".wi"), "held by its place's ID: %q", l.Token())
		require.Greater(t, l.Validity(), time.Duration(0))

		require.NoError(t, l.Unlock(ctx))
		synctest.Wait()
		for _, f := range fakes {
			for _, k := range []string{"a", "b"} {
				rk := cs.target(k).rkey
				for _, x := range []string{rk, rk + ":queue", rk + ":lease", rk + ":seq"} {
					_, left := f.value(x)
					require.False(t, left, "%s left on %s", x, f.Name())
				}
			}
		}
	})
}

// TestSetPartialGrantKeepsItsPlace: a set granted one key while another
// is held keeps its place in the granted key's queue, so that when the
// grant lapses (the other key held for longer than a lease) the key is
// kept for the set, not taken by a waiter that queued after it. Before
// the set's look put its place back there, the later waiter took the
// key (simulator seed 319).
func TestSetPartialGrantKeepsItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		ca, cb, cs, cw := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		ha, err := ca.Lock(ctx, "a", WithTTL(time.Minute))
		require.NoError(t, err)
		hb, err := cb.Lock(ctx, "b", WithTTL(time.Minute))
		require.NoError(t, err)
		gotSet := setWaiter(t, cs, "a", "b")
		gotW := lockBehind(t, func(ctx context.Context) (*Lock, error) { return cw.Lock(ctx, "a", waitHour) })
		synctest.Wait()

		require.NoError(t, ha.Unlock(ctx)) // a granted to the set
		time.Sleep(3 * cs.cfg.lease)       // the grant has lapsed
		synctest.Wait()
		require.Empty(t, gotW, "a went to the waiter that queued after the set")
		require.Empty(t, gotSet)

		require.NoError(t, hb.Unlock(ctx))
		l := <-gotSet
		require.Empty(t, gotW)
		require.NoError(t, l.Unlock(ctx))
		w := <-gotW
		require.NoError(t, w.Unlock(ctx))
	})
}

// TestSetReleaseGrantsTheNextSet: a set's release grants each of its
// keys to the set waiting first on it, which holds at that instant by its
// place's ID, with no attempt of its own; and a one-key waiter behind it
// then gets its key from the set's release, granted too.
func TestSetReleaseGrantsTheNextSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		ch, cs, cw := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		holder, err := ch.MultiLock([]string{"a", "b"}, WithTTL(time.Minute))
		require.NoError(t, err)
		h, err := holder.TryLock(ctx)
		require.NoError(t, err)
		var attempts atomic.Int32
		got := setWaiter(t, cs, "b", "a")
		gotW := lockBehind(t, func(ctx context.Context) (*Lock, error) { return cw.Lock(ctx, "b", waitHour) })
		synctest.Wait()
		for _, f := range fakes {
			f.ran = func(o *wire.Op) {
				if wire.IsAcquire(o.Kind) {
					attempts.Add(1)
				}
			}
		}

		at := time.Now()
		require.NoError(t, h.Unlock(ctx))
		l := <-got
		require.Zero(t, time.Since(at), "the set did not hold at the release")
		require.True(t, strings.HasPrefix(l.Token(), cs.hand.id+".wi"), "held by its place's ID: %q", l.Token())
		require.Empty(t, gotW)

		require.NoError(t, l.Unlock(ctx))
		w := <-gotW
		require.True(t, strings.HasPrefix(w.Token(), cw.hand.id+".wi"), "the one-key waiter held by its place's ID: %q", w.Token())
		require.Zero(t, attempts.Load(), "a waiter attempted: it was not held by the grants")
		require.NoError(t, w.Unlock(ctx))
	})
}
