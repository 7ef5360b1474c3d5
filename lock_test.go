package redlock

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGrantBehindRelease: a node's grant arrives after Unlock's release has
// already run on that node and found nothing; the grant must not stay
// behind until its TTL.
func TestGrantBehindRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		gate := make(chan struct{})
		fakes[2].acqGate = gate // the acquire is held up; the release is not
		c := newTestClient(t, fakes)
		l, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		synctest.Wait()
		require.Equal(t, 1, fakes[2].releases(), "the release reached node 2 first")
		close(gate) // … and then the grant lands
		c.bg.Wait()
		v, held := fakes[2].value("redlock:{k}")
		require.False(t, held, "the late grant %q stayed behind the release", v)
	})
}

func TestExtend(t *testing.T) {
	// Each case runs in virtual time, on a lock with a 1 s TTL held on all
	// three nodes.
	run := func(name string, f func(t *testing.T, fakes []*fakeNode, l *Lock)) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				c := newTestClient(t, fakes)
				f(t, fakes, lockAll(t, c, "k", WithTTL(time.Second)))
			})
		})
	}
	run("majority", func(t *testing.T, fakes []*fakeNode, l *Lock) {
		fakes[2].setErr(errFakeDown)
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, l.Extend(t.Context(), 5*time.Second))
		require.Equal(t, 5*time.Second-52*time.Millisecond, l.Validity(), "the new window starts when Extend is called")
	})
	run("expired keys are not re-created", func(t *testing.T, fakes []*fakeNode, l *Lock) {
		time.Sleep(2 * time.Second)
		require.ErrorIs(t, l.Extend(t.Context(), 5*time.Second), ErrExpired)
		for i, f := range fakes {
			_, held := f.value("redlock:{k}")
			require.False(t, held, "node %d: Extend re-created the key", i)
		}
		require.Zero(t, l.Validity())
	})
	run("taken over", func(t *testing.T, fakes []*fakeNode, l *Lock) {
		time.Sleep(2 * time.Second)
		fakes[0].set("redlock:{k}", "other", time.Minute)
		require.ErrorIs(t, l.Extend(t.Context(), 5*time.Second), ErrTakenOver)
		v, _ := fakes[0].value("redlock:{k}")
		require.Equal(t, "other", v, "the other holder's key")
	})
	run("too few nodes answer", func(t *testing.T, fakes []*fakeNode, l *Lock) {
		before := l.Validity()
		fakes[0].setErr(errFakeDown)
		fakes[1].setErr(errFakeDown)
		err := l.Extend(t.Context(), 5*time.Second)
		require.ErrorIs(t, err, ErrNotObtained)
		require.NotErrorIs(t, err, ErrTakenOver)
		require.NotErrorIs(t, err, ErrExpired)
		require.Equal(t, before, l.Validity(), "a failed Extend keeps the validity it had")
	})
	run("bad ttl", func(t *testing.T, fakes []*fakeNode, l *Lock) {
		before := fakes[0].calls.Load()
		for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 2 * time.Millisecond, maxTTL + 1} {
			require.ErrorIs(t, l.Extend(t.Context(), ttl), ErrInvalidArgument, "Extend(%v)", ttl)
		}
		require.Equal(t, before, fakes[0].calls.Load(), "a rejected Extend contacted a node")
	})
}

func TestUnlock(t *testing.T) {
	run := func(name string, f func(t *testing.T, fakes []*fakeNode, c *Client)) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				f(t, fakes, newTestClient(t, fakes))
			})
		})
	}
	run("twice", func(t *testing.T, _ []*fakeNode, c *Client) {
		l, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		require.ErrorIs(t, l.Unlock(t.Context()), ErrReleased, "second Unlock")
		require.ErrorIs(t, l.Extend(t.Context(), time.Second), ErrReleased, "Extend after Unlock")
		require.Zero(t, l.Validity(), "Validity after Unlock")
	})
	run("expired", func(t *testing.T, _ []*fakeNode, c *Client) {
		l := lockAll(t, c, "k", WithTTL(time.Second))
		time.Sleep(time.Second + time.Millisecond) // a key lives through its expiry's ms, as on Redis
		require.ErrorIs(t, l.Unlock(t.Context()), ErrExpired)
	})
	run("taken over", func(t *testing.T, fakes []*fakeNode, c *Client) {
		l := lockAll(t, c, "k", WithTTL(time.Second))
		time.Sleep(time.Second)
		for _, f := range fakes[:2] {
			f.set("redlock:{k}", "other", time.Minute)
		}
		require.ErrorIs(t, l.Unlock(t.Context()), ErrTakenOver)
		for _, f := range fakes[:2] {
			v, _ := f.value("redlock:{k}")
			require.Equal(t, "other", v, "a non-owner's Unlock changed the holder's key")
		}
	})
	for _, auto := range []bool{false, true} {
		run(fmt.Sprintf("unreachable then retried (auto-extended %v)", auto), func(t *testing.T, fakes []*fakeNode, c *Client) {
			var opts []Option
			if auto {
				opts = append(opts, WithAutoExtend(0))
			}
			l := lockAll(t, c, "k", opts...)
			ended := make(chan struct{})
			go func() { <-l.Done(); close(ended) }() // waiting before the Unlock
			synctest.Wait()
			fakes[0].setErr(errFakeDown)
			fakes[1].setErr(errFakeDown)
			require.ErrorIs(t, l.Unlock(t.Context()), ErrNotObtained)
			// Its validity is given up: the lock has ended, for a goroutine
			// already waiting on Done too, long before the keys' TTL.
			synctest.Wait()
			select {
			case <-ended:
			default:
				t.Fatal("Done still open after an Unlock that gave up the lock's validity")
			}
			require.ErrorIs(t, l.Err(), ErrExpired)
			require.Zero(t, l.Validity())
			fakes[0].setErr(nil)
			fakes[1].setErr(nil)
			require.NoError(t, l.Unlock(t.Context()), "retried Unlock")
			synctest.Wait() // the node it did not wait for
			for _, f := range fakes {
				_, ok := f.value("redlock:{k}")
				require.False(t, ok, "the retried Unlock left the key")
			}
		})
	}
	run("after cooldown", func(t *testing.T, _ []*fakeNode, c *Client) {
		l := lockAll(t, c, "k")
		require.NoError(t, l.UnlockAfter(t.Context(), 30*time.Second))
		time.Sleep(30 * time.Second)
		_, err := c.TryLock(t.Context(), "k")
		require.ErrorIs(t, err, ErrNotObtained, "at the cooldown's last ms (a key expires once now > its expiry, as on Redis)")
		time.Sleep(time.Millisecond)
		_, err = c.TryLock(t.Context(), "k")
		require.NoError(t, err, "once the cooldown has ended")
		for _, d := range []time.Duration{-1, time.Microsecond, maxTTL + 1} {
			require.ErrorIs(t, l.UnlockAfter(t.Context(), d), ErrInvalidArgument, "UnlockAfter(%v)", d)
		}
	})
}

func TestReentry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		l := lockAll(t, c, "k", WithTTL(time.Second), WithMetadata("first"))
		_, err := c.TryLock(t.Context(), "k")
		require.ErrorIs(t, err, ErrNotObtained, "another token")
		time.Sleep(900 * time.Millisecond)
		again := lockAll(t, c, "k", WithToken(l.Token()), WithTTL(time.Second), WithMetadata("second"))
		require.Equal(t, l.Token(), again.Token())
		require.Greater(t, again.Validity(), l.Validity())
		time.Sleep(500 * time.Millisecond) // past the first TTL: the refresh kept the keys
		s, err := c.Inspect(t.Context(), "k")
		require.NoError(t, err)
		holder, meta, ok := s.Holder()
		require.True(t, ok)
		require.Equal(t, holderID(l.Token()), holder)
		require.Equal(t, "second", meta)
		// A failed re-entry leaves the holder's keys in place.
		fakes[1].setErr(errFakeDown)
		fakes[2].setErr(errFakeDown)
		_, err = c.TryLock(t.Context(), "k", WithToken(l.Token()))
		require.ErrorIs(t, err, ErrNotObtained)
		c.bg.Wait()
		v, _ := fakes[0].value("redlock:{k}")
		require.True(t, owns(v, l.Token()), "failed re-entry removed the holder's key (now %q)", v)
	})
}

// TestDoneWithoutAutoExtend: without auto-extension, Lost is closed exactly
// when the validity runs out, and Extend moves that moment.
func TestDoneWithoutAutoExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		l, err := c.TryLock(t.Context(), "k", WithTTL(60*time.Millisecond))
		require.NoError(t, err)
		lost := l.Done()
		require.NoError(t, l.Extend(t.Context(), 200*time.Millisecond))
		until := l.validUntil()
		<-lost
		require.Equal(t, until, time.Now(), "Lost closed at another time than the end of the validity")
		require.ErrorIs(t, l.Err(), ErrExpired)
		require.Zero(t, l.Validity())
	})
}

// TestNeverGrantedNodesSayNothing: a node that refused the acquisition is
// no evidence about the lock when Extend or Unlock cannot win a majority:
// a contender's passing key there does not mean the lock was taken over,
// and no key there does not mean it expired. The lock is held on nodes
// {0, 1, 2} of 5; then nodes 0 and 1 die. (Found by
// integration.TestMutualExclusionUnderFaults, whose Unlock reported a
// takeover that never happened.)
func TestNeverGrantedNodesSayNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other func(f *fakeNode) // what nodes 3 and 4 hold at the end
	}{
		{"a contender's key", func(f *fakeNode) { f.set("redlock:{k}", "contender", time.Minute) }},
		{"no key", func(f *fakeNode) {
			f.del("redlock:{k}")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(5)
				for _, f := range fakes[3:] {
					f.set("redlock:{k}", "previous", time.Minute)
				}
				c := newTestClient(t, fakes)
				l := lockAll(t, c, "k")
				for _, f := range fakes[3:] {
					tc.other(f)
				}
				fakes[0].setErr(errFakeDown)
				fakes[1].setErr(errFakeDown)
				validity := l.Validity()
				err := l.Extend(t.Context(), testTTL)
				require.ErrorIs(t, err, ErrNotObtained)
				require.NotErrorIs(t, err, ErrTakenOver)
				require.NotErrorIs(t, err, ErrExpired)
				require.NoError(t, l.Err(), "the failed Extend ended the lock")
				require.Equal(t, validity, l.Validity())
				err = l.Unlock(t.Context())
				require.ErrorIs(t, err, ErrNotObtained)
				require.NotErrorIs(t, err, ErrTakenOver)
				require.NotErrorIs(t, err, ErrExpired)
				// A node that did grant and now shows another token is
				// evidence: the lock was taken over.
				fakes[2].set("redlock:{k}", "thief", time.Minute)
				require.ErrorIs(t, l.Extend(t.Context(), testTTL), ErrTakenOver)
			})
		})
	}
}
