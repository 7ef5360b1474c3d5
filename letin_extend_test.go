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
// it to the TTL at once, after which its end margin is TTL/10 again.
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
		synctest.Wait()
		close(returned)
		synctest.Wait()
		require.Equal(t, int32(5), extensions.Load(), "no extension after Lock returned")
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
		synctest.Wait()
		select {
		case <-l.Done():
		default:
			t.Fatal("still held after its first extension found no key")
		}
		require.ErrorIs(t, l.Err(), ErrExpired)
	})
}
