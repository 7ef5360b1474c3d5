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

// FuzzReplies: any reply a node might send decodes to a status or an error,
// never a panic, and only the documented replies mean success.
func FuzzReplies(f *testing.F) {
	for _, r := range []int64{-1 << 63, -101, -1, 0, 1, 2, 3, 1 << 62} {
		f.Add(r, true, "tok\x00meta", r)
	}
	f.Fuzz(func(t *testing.T, r int64, held bool, value string, pttl int64) {
		if res := acquireReply(r, nil); res.OK() != (r == 1 || r == 2) || (res.Err != nil) != (r != 1 && r != 2) {
			t.Fatalf("acquire reply %d: got %+v", r, res)
		}
		refusal := acquireReply([]any{r, value}, nil)
		if refusal.OK() || (refusal.Err == nil) != (r <= 0) || (refusal.Err == nil && refusal.Value != value) {
			t.Fatalf("acquire refusal {%d, %q}: got %+v", r, value, refusal)
		}
		for _, odd := range []any{nil, "x", []any{r}, []any{value, r}, []any{r, value, r}} {
			if res := acquireReply(odd, nil); res.Err == nil {
				t.Fatalf("acquire reply %v: got %+v, want an error", odd, res)
			}
		}
		if res := ownerReply(r); res.OK() != (r == 1) || (res.Err != nil) != (r > 1 || r < -1) {
			t.Fatalf("owner reply %d: got %+v", r, res)
		}
		// Fenced grants {1|2, fence}: only a fence in (0, 2^53) is a grant.
		fenced := acquireReply([]any{int64(1), pttl}, nil)
		if fenced.OK() != (pttl > 0 && pttl < MaxFence) || (fenced.OK() && fenced.Fence != pttl) {
			t.Fatalf("fenced grant {1, %d}: got %+v", pttl, fenced)
		}
		// The old restart guard's wrapper {'runid', id, reply} is no reply
		// any more: a node running old scripts is told apart.
		if res := acquireReply([]any{"runid", value, r}, nil); res.Err == nil {
			t.Fatalf("wrapped reply %d: got %+v, want an error", r, res)
		}
		if res := fenceWriteReply(r); res.OK() != (r == 1) || (res.Err == nil) != (r == 1 || r == -1) {
			t.Fatalf("fence write-back reply %d: got %+v", r, res)
		}
		var v any
		if held {
			v = value
		}
		if res := inspectReply([]any{v, pttl, value}, nil); res.Err == nil && res.Fence < 0 {
			t.Fatalf("inspect counter %q: got fence %d", value, res.Fence)
		}
		for _, reply := range [][]any{{v, pttl}, {v}, {v, value}, nil, {v, pttl, pttl}, {v, pttl, nil, r, value}, {v, pttl, value, value, r}} {
			res := inspectReply(reply, nil)
			if res.Err == nil && res.Status == StatusHeld && res.Value != value {
				t.Fatalf("inspect %v: got %+v", reply, res)
			}
		}
	})
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
