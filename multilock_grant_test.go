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
	"github.com/stretchr/testify/require"
)

// A set's keys granted by their releases (issue 28): a set's waiter
// holds once a majority of nodes have granted it every key, each key by
// its own release, without an attempt of its own.

// setWaiter has c wait for the set keys (waitHour: only wakes move it),
// once the calls made before have reached every node (a Lock returns at a
// majority: the set's first attempt could otherwise take a key on a node
// before its holder's acquire got there), and returns the channel its
// Lock comes on.
func setWaiter(t *testing.T, c *Client, keys ...string) <-chan *Lock {
	t.Helper()
	synctest.Wait() // the locks before it are on every node: its attempt overtakes none
	set, err := c.MultiLock(keys, waitHour)
	require.NoError(t, err)
	got := lockBehind(t, set.Lock)
	synctest.Wait() // refused, it waits in every key's queue
	time.Sleep(time.Millisecond)
	return got
}

// setAttempts counts, once armed, the acquires of sets that fakes run
// for c's waiters (a set's attempt once it has a place). Call it before
// the nodes are used.
func setAttempts(fakes []*fakeNode, c *Client) (armed *atomic.Bool, n *atomic.Int32) {
	armed, n = new(atomic.Bool), new(atomic.Int32)
	for _, f := range fakes {
		f.ran = func(o *wire.Op) {
			if armed.Load() && wire.IsAcquire(o.Kind) && o.Mode == wire.ModeSet && o.Place != nil && strings.HasPrefix(o.Place.ID, c.hand.id) {
				n.Add(1)
			}
		}
	}
	return armed, n
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
		armed, attempts := setAttempts(fakes, cs) // the set's acquires, after its first
		ha, err := ca.Lock(ctx, "a", WithTTL(time.Minute))
		require.NoError(t, err)
		hb, err := cb.Lock(ctx, "b", WithTTL(time.Minute))
		require.NoError(t, err)
		got := setWaiter(t, cs, "a", "b")
		armed.Store(true)

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

// TestSetGrantedItsFreeKeysByARelease: a set {a, b, c} waits for a alone,
// held by another Client; b and c are free, the set first in their
// queues. a's release grants the set a, b and c on every node (each node
// publishes b's and c's notices before a's), so the set holds at that
// instant by its place's ID, with no attempt: one round, where before
// the release granted a alone and the set attempted for b and c. On
// nodes 3 and 4 c is held by another token: there the release grants a
// alone (the set's other keys go only where each is free), and the set
// holds by the majority of nodes 0-2. Its Unlock leaves nothing behind,
// the keys its looks kept for the releases included.
func TestSetGrantedItsFreeKeysByARelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		ca, cs := newTestClient(t, fakes), newTestClient(t, fakes)
		armed, attempts := setAttempts(fakes, cs)
		rc := cs.target("c").rkey
		for _, f := range fakes[3:] {
			f.set(rc, "Z", time.Minute)
		}
		ha, err := ca.Lock(ctx, "a", WithTTL(time.Minute))
		require.NoError(t, err)
		got := setWaiter(t, cs, "a", "b", "c")
		armed.Store(true)

		at := time.Now()
		require.NoError(t, ha.Unlock(ctx))
		l := <-got
		require.Zero(t, time.Since(at), "the set did not hold at the release")
		require.Zero(t, attempts.Load(), "the set attempted: it was not held by the grants")
		require.True(t, strings.HasPrefix(l.Token(), cs.hand.id+".wis"), "held by its place's ID: %q", l.Token())
		require.Greater(t, l.Validity(), time.Duration(0))
		synctest.Wait()
		for i, f := range fakes {
			for _, k := range []string{"a", "b", "c"} {
				v, _ := f.value(cs.target(k).rkey)
				want := strings.HasPrefix(v, l.Token())
				if k != "a" && i >= 3 {
					want = k == "c" && strings.HasPrefix(v, "Z") || k == "b" && !strings.HasPrefix(v, l.Token())
				}
				require.True(t, want, "%s on %s: %q", k, f.Name(), v)
			}
		}

		require.NoError(t, l.Unlock(ctx))
		synctest.Wait()
		for _, f := range fakes {
			for _, k := range []string{"a", "b", "c"} {
				rk := cs.target(k).rkey
				for _, x := range []string{rk + ":queue", rk + ":lease", rk + ":seq", rk + ":set:" + l.Token()} {
					_, left := f.value(x)
					require.False(t, left, "%s left on %s", x, f.Name())
				}
			}
		}
	})
}

// TestSetPartialGrantKeepsItsPlace: a set granted one key while another
// is held for longer than a lease keeps the key: its looks put its place
// back in that key's queue and, first there, renew the grant, so neither
// a waiter that queued after the set nor an unqueued attempt takes it.
// Before the set's look put its place back, the later waiter took the
// key once the grant lapsed (simulator seed 319); before it renewed the
// grant, an unqueued attempt could, between the lapse and the set's next
// look (seed 10899).
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
		time.Sleep(3 * cs.cfg.lease)       // its first lease has run out
		synctest.Wait()
		require.Empty(t, gotW, "a went to the waiter that queued after the set")
		require.Empty(t, gotSet)
		rkeyA := cs.target("a").rkey
		for _, f := range fakes {
			v, _ := f.value(rkeyA)
			require.True(t, strings.HasPrefix(v, cs.hand.id+".wi"), "a's grant to the set not kept on %s: %q", f.Name(), v)
		}
		_, err = newTestClient(t, fakes).TryLock(ctx, "a")
		require.ErrorIs(t, err, ErrNotObtained, "an unqueued attempt took the key granted to the set")

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
		var armed atomic.Bool
		var attempts atomic.Int32
		for _, f := range fakes {
			f.ran = func(o *wire.Op) {
				if armed.Load() && wire.IsAcquire(o.Kind) {
					attempts.Add(1)
				}
			}
		}
		holder, err := ch.MultiLock([]string{"a", "b"}, WithTTL(time.Minute))
		require.NoError(t, err)
		h, err := holder.TryLock(ctx)
		require.NoError(t, err)
		got := setWaiter(t, cs, "b", "a")
		gotW := lockBehind(t, func(ctx context.Context) (*Lock, error) { return cw.Lock(ctx, "b", waitHour) })
		synctest.Wait()
		armed.Store(true)

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

// TestSetsGrantedEachOthersKeys: two sets of the same keys, each granted
// one key of the other's on every node, wait no longer than a lease. T
// queues first (the lower ticket), but its place reaches the nodes only
// after a's release has granted a to S, the set behind it; then b's
// release grants b to T, first in b's line. S's looks no longer renew
// its grant of a (T is first in a's line now), so it lapses, a is kept
// for T, and T holds, then S. Renewed whoever is first, the two grants
// stood as long as the two sets waited.
func TestSetsGrantedEachOthersKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ca, cb, cs, ct := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		ctx, cancel := context.WithTimeout(t.Context(), 20*cs.cfg.lease)
		defer cancel()
		gate := make(chan struct{})
		var opened sync.Once
		open := func() { opened.Do(func() { close(gate) }) }
		defer open()
		for _, f := range fakes {
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpQueue && strings.HasPrefix(o.Place.ID, ct.hand.id) {
					<-gate
				}
			}
		}
		ha, err := ca.Lock(ctx, "a", WithTTL(time.Minute))
		require.NoError(t, err)
		hb, err := cb.Lock(ctx, "b", WithTTL(time.Minute))
		require.NoError(t, err)
		synctest.Wait() // the holders' keys on every node
		setT, err := ct.MultiLock([]string{"a", "b"}, waitHour)
		require.NoError(t, err)
		gotT := lockBehind(t, func(context.Context) (*Lock, error) { return setT.Lock(ctx) })
		synctest.Wait() // refused, its place on its way
		time.Sleep(time.Millisecond)
		gotS := setWaiter(t, cs, "a", "b")

		require.NoError(t, ha.Unlock(ctx)) // a granted to S, first in a's line
		synctest.Wait()
		open() // T's place reaches the nodes: first in both lines
		synctest.Wait()
		require.NoError(t, hb.Unlock(ctx)) // b granted to T
		start := time.Now()
		synctest.Wait()
		for _, f := range fakes {
			va, _ := f.value(cs.target("a").rkey)
			vb, _ := f.value(cs.target("b").rkey)
			require.True(t, strings.HasPrefix(va, cs.hand.id+".wi") && strings.HasPrefix(vb, ct.hand.id+".wi"), "not the crossed grants on %s: a %q, b %q", f.Name(), va, vb)
		}
		lt := <-gotT
		require.NotNil(t, lt, "T never held")
		require.LessOrEqual(t, time.Since(start), 2*cs.cfg.lease, "T waited for longer than S's grant lasts")
		require.Empty(t, gotS)
		require.NoError(t, lt.Unlock(ctx))
		ls := <-gotS
		require.NotNil(t, ls, "S never held")
		require.NoError(t, ls.Unlock(ctx))
	})
}

// TestSetGrantedBySplitReleases: a set's keys are granted to it, each on
// a majority, but on a common majority of none: b by its holder's
// release on nodes 0–2, c by its holder's on nodes 2–4 only (on nodes 0
// and 1 c's holder is still there: a release that reached part of the
// nodes, or a split vote's holder). No more grants come; the set
// attempts setLookDelay after the second release (the time it gives the
// rest of the notices), and its attempt takes the keys granted to its
// place on nodes 2–4. Before, it slept until its next look (simulator
// seed 10130: a third of a lease). The releases grant the key they
// release alone (oneKeyGrants), as a Client's before 2026-11-29 did:
// today's release of c on nodes 3 and 4 grants b too, free there with the
// set first, and the set holds by its grants.
func TestSetGrantedBySplitReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		for _, f := range fakes {
			f.variant = oneKeyGrants // (see the comment above)
		}
		ctx := t.Context()
		cs := newTestClient(t, fakes)
		rb, rc := cs.target("b").rkey, cs.target("c").rkey
		for i, f := range fakes {
			if i <= 2 {
				f.set(rb, "X", time.Minute)
			}
			f.set(rc, "Y", time.Minute)
		}
		got := setWaiter(t, cs, "b", "c")
		release := func(rkey, token string, nodes []node) {
			o := wire.NewOp(wire.OpRelease, rkey, token, "", 0)
			o.Wake = cs.hand.wakeArg
			cs.post(ctx, o, nodes, time.Minute)
		}
		release(rb, "X", cs.nodes[:3])
		synctest.Wait()
		require.Empty(t, got)
		start := time.Now()
		release(rc, "Y", cs.nodes[2:])
		l := <-got
		require.LessOrEqual(t, time.Since(start), setLookDelay, "the set slept after its split grants")
		require.NotContains(t, l.Token(), ".wi", "held by its attempt")
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestSetWonByAttemptReleasesItsPlace: a set that wins by its attempt
// takes its place out of the nodes that refused it by a release of the
// place's ID over every key, not by a leave, so that a key a release
// granted to the place just before (its notice lost: the Client closing)
// goes too. Here node 4 refuses the attempt (b held there by another
// token), and that holder's release grants b to the set's place on node
// 4 right before the set's place goes; a leave left b granted to the
// place until its lapse. The releases grant the key they release alone
// (oneKeyGrants), as a Client's before 2026-11-29 did: today's release of
// a grants b too where it is free, and the set holds without an attempt.
func TestSetWonByAttemptReleasesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		for _, f := range fakes {
			f.variant = oneKeyGrants // (see the comment above)
		}
		ctx := t.Context()
		ca, cs := newTestClient(t, fakes), newTestClient(t, fakes)
		rb := cs.target("b").rkey
		var armed atomic.Bool
		var planted atomic.Value
		fakes[4].hold = func(o *wire.Op) {
			id := o.Token
			if o.Kind == wire.OpQueue && o.Quiet {
				id = o.Place.ID
			}
			// (the place's op over the set's keys: not the release of its
			// ID at a alone, which its admission there sends too)
			if armed.Load() && len(o.Keys) == 2 && (o.Kind == wire.OpRelease || o.Kind == wire.OpQueue && o.Quiet) && strings.HasPrefix(id, cs.hand.id+".wi") && planted.CompareAndSwap(nil, id) {
				fakes[4].set(rb, id, cs.cfg.lease) // granted by b's release, its notice lost
			}
		}
		fakes[4].set(rb, "X", time.Minute)
		ha, err := ca.Lock(ctx, "a", WithTTL(time.Minute))
		require.NoError(t, err)
		got := setWaiter(t, cs, "a", "b")
		armed.Store(true)
		require.NoError(t, ha.Unlock(ctx)) // a granted to the set; b free on nodes 0–3: it attempts
		l := <-got
		require.NotNil(t, l)
		require.NotContains(t, l.Token(), ".wi", "held by its attempt")
		synctest.Wait()
		id, _ := planted.Load().(string)
		require.NotEmpty(t, id, "the set's place never left node 4")
		v, _ := fakes[4].value(rb)
		require.False(t, strings.HasPrefix(v, id), "b left granted to the set's place on node 4: %q", v)
		require.NoError(t, l.Unlock(ctx))
	})
}
