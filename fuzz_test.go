package redlock

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// FuzzLockArgs: whatever the key, metadata, token and TTL, TryLock either
// succeeds, and then the holder reads back exactly as given, or fails with
// a typed error; it never panics.
func FuzzLockArgs(f *testing.F) {
	f.Add("job", "host=a pid=1", "", int64(time.Second))
	f.Add("", "", "tok", int64(0))
	f.Add("k{x}y", "meta\x00with\x00nuls", "tok\x00en", int64(time.Millisecond))
	f.Add("k", "", "T", int64(3*time.Millisecond))
	f.Add("k", "m", "T", int64(-1))
	f.Fuzz(func(t *testing.T, key, meta, token string, ttl int64) {
		// In virtual time: a 3 ms TTL must not run out between TryLock
		// and Inspect on a loaded machine.
		synctest.Test(t, func(t *testing.T) { fuzzLockArgs(t, key, meta, token, ttl) })
	})
}

func fuzzLockArgs(t *testing.T, key, meta, token string, ttl int64) {
	c := newTestClient(t, newFakeNodes(3))
	opts := []Option{WithTTL(time.Duration(ttl)), WithMetadata(meta)}
	if token != "" {
		opts = append(opts, WithToken(token))
	}
	l, err := c.TryLock(t.Context(), key, opts...)
	if err != nil {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("got %v, want ErrInvalidArgument or success", err)
		}
		return
	}
	c.bg.Wait()
	s, err := c.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if h, m, ok := s.Holder(); !ok || h != holderID(l.Token()) || m != meta {
		t.Fatalf("holder reads back as %q %q %v, want %q %q", h, m, ok, holderID(l.Token()), meta)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// FuzzOptions: any client option values give a Client or an
// ErrInvalidArgument, never a panic.
func FuzzOptions(f *testing.F) {
	f.Add(0.01, int64(time.Second), int64(time.Minute), int64(time.Hour), int64(0), "redlock:", 3, int64(time.Second))
	f.Add(-1.0, int64(-1), int64(-1), int64(0), int64(-5), "a{b}", 0, int64(0))
	f.Add(0.999, int64(1), int64(maxTTL+1), int64(1), int64(1), "", 65, int64(time.Hour+1))
	f.Fuzz(func(t *testing.T, drift float64, nodeTimeout, guard, maxHold, every int64, prefix string, n int, lease int64) {
		if n < 0 || n > 100 {
			n = 3
		}
		fakes := newFakeNodes(n)
		nodes := make([]node, n)
		for i, f := range fakes {
			nodes[i] = f
		}
		c, err := newClient(nodes, []Option{WithDriftFactor(drift), WithNodeTimeout(time.Duration(nodeTimeout)),
			WithRestartGuard(time.Duration(guard)), WithMaxHold(time.Duration(maxHold)),
			WithAutoExtend(time.Duration(every)), WithKeyPrefix(prefix), WithAnyNodeCount(), WithWaiterLease(time.Duration(lease))})
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
			return
		}
		_ = c.Close(t.Context())
	})
}
