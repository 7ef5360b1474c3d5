package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestAutoExtendedLetInExtendsAfterReturn: an auto-extended Lock granted
// the key by the holder's release returns without an extension round of
// its own (until 2026-12-03 it extended before returning: a hand-off to
// Do or to an election's candidate was two rounds); its extender extends
// it to the TTL once a tenth of its validity has passed (at once until
// 2026-12-04), after which its end margin is TTL/10 again.
func TestAutoExtendedLetInExtendsAfterReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		var released atomic.Bool
		var extensions atomic.Int32 // sent after the release, each held until the Lock returned
		returned := make(chan struct{})
		for _, f := range fakes {
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpExtend && released.Load() {
					extensions.Add(1)
					<-returned
				}
			}
		}
		const ttl = 10 * time.Second
		a, b := newTestClient(t, fakes, WithNodeTimeout(50*time.Millisecond)), newTestClient(t, fakes, WithNodeTimeout(50*time.Millisecond))
		held, err := a.Lock(t.Context(), "k", WithTTL(ttl))
		require.NoError(t, err)
		got := make(chan *Lock)
		go func() {
			l, err := b.Lock(t.Context(), "k", WithTTL(ttl), WithAutoExtend(0))
			require.NoError(t, err)
			got <- l
		}()
		time.Sleep(time.Second) // virtual: the waiter queued and looked
		synctest.Wait()
		released.Store(true)
		require.NoError(t, held.Unlock(t.Context()))
		l := <-got
		defer func() { _ = l.Unlock(context.Background()) }()
		require.True(t, isGrantee(l.Token()), "not granted by the release: held with %q", l.Token())
		require.Less(t, l.Validity(), time.Second, "returned after an extension: a let-in's validity is under a lease")
		select {
		case <-l.Done():
			t.Fatal("ended at once: its end margin is TTL/10, more than its validity")
		default:
		}
		v := l.Validity()
		time.Sleep(v/letInExtendAfter - time.Millisecond)
		synctest.Wait()
		require.Zero(t, extensions.Load(), "extended before a tenth of its validity passed")
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		close(returned)
		synctest.Wait()
		require.Equal(t, int32(5), extensions.Load(), "no extension once a tenth of its validity passed")
		require.Greater(t, l.Validity(), ttl/2, "not extended to its TTL")
		l.mu.Lock()
		margin := l.until.Sub(l.endPoint())
		l.mu.Unlock()
		require.Equal(t, ttl/endMarginDivisor, margin)
	})
}

// TestAutoExtendedLetInFirstExtensionFails: a let-in whose keys are gone
// by its first extension (its admissions were delivered by hand; no node
// holds it) ends at once, expired, as a lock whose extension finds its
// keys gone does.
func TestAutoExtendedLetInFirstExtensionFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w, n := waiterWith(t, &lockConfig{ttl: 10 * time.Second, autoExtend: true, maxHold: defaultMaxHold}, WithNodeTimeout(50*time.Millisecond))
		for i := range 3 {
			c.hand.letInNotice(i, tg.rkey, w.ID, n)
		}
		l := c.takeLetIn(t.Context(), tg, lc, w, 1)
		require.NotNil(t, l, "granted on a majority")
		time.Sleep(l.Validity()/letInExtendAfter + time.Millisecond) // its first extension is due
		synctest.Wait()
		select {
		case <-l.Done():
		default:
			t.Fatal("still held after its first extension found no key")
		}
		require.ErrorIs(t, l.Err(), ErrExpired)
	})
}

// grantedLetIn is, in a bubble over 5 fake nodes with default options, a
// Lock granted the key by the holder's release, and a count of the
// extensions the nodes received since that release.
func grantedLetIn(t *testing.T, ttl time.Duration) (*Lock, *atomic.Int32) {
	fakes := newFakeNodes(5)
	var released atomic.Bool
	extensions := new(atomic.Int32)
	for _, f := range fakes {
		f.hold = func(o *wire.Op) {
			if o.Kind == wire.OpExtend && released.Load() {
				extensions.Add(1)
			}
		}
	}
	a, b := newTestClient(t, fakes), newTestClient(t, fakes)
	held, err := a.Lock(t.Context(), "k", WithTTL(ttl))
	require.NoError(t, err)
	l := handedTo(t, held, &released, func(ctx context.Context) (*Lock, error) { return b.Lock(ctx, "k", WithTTL(ttl)) })
	require.True(t, isGrantee(l.Token()), "not granted by the release: held with %q", l.Token())
	require.Less(t, l.Validity(), time.Second, "a let-in's validity is under a lease")
	return l, extensions
}

// TestLetInExtendsAfterATenth: a Lock granted the key by a release
// extends itself to its TTL once a tenth of its first validity has passed
// (extendLetIn); one released before then sends no extension at all.
func TestLetInExtendsAfterATenth(t *testing.T) {
	const ttl = 10 * time.Second
	t.Run("held", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, extensions := grantedLetIn(t, ttl)
			defer func() { _ = l.Unlock(context.Background()) }()
			v := l.Validity()
			time.Sleep(v/letInExtendAfter - time.Millisecond)
			synctest.Wait()
			require.Zero(t, extensions.Load(), "extended before a tenth of its validity passed")
			time.Sleep(2 * time.Millisecond)
			synctest.Wait()
			require.Equal(t, int32(5), extensions.Load(), "not extended once a tenth of its validity passed")
			require.Greater(t, l.Validity(), ttl/2, "not extended to its TTL")
		})
	})
	t.Run("released before", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, extensions := grantedLetIn(t, ttl)
			time.Sleep(l.Validity() / letInExtendAfter / 2)
			require.NoError(t, l.Unlock(t.Context()))
			time.Sleep(time.Second)
			synctest.Wait()
			require.Zero(t, extensions.Load(), "a lock released before its extension was due sent one")
		})
	})
}
