package redlock

import (
	"errors"
	"testing"
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
		clk := newFakeClock()
		c := newTestClient(t, newFakeNodes(3, clk), clk)
		opts := []LockOption{WithTTL(time.Duration(ttl)), WithMetadata(meta)}
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
		if tok, m, ok := s.Holder(); !ok || tok != l.Token() || m != meta {
			t.Fatalf("holder reads back as %q %q %v, want %q %q", tok, m, ok, l.Token(), meta)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	})
}

// FuzzReplies: any reply a node might send decodes to a status or an error,
// never a panic, and only the documented replies mean success.
func FuzzReplies(f *testing.F) {
	for _, r := range []int64{-1 << 63, -101, -1, 0, 1, 2, 3, 1 << 62} {
		f.Add(r, true, "tok\x00meta", r)
	}
	f.Fuzz(func(t *testing.T, r int64, held bool, value string, pttl int64) {
		if res := acquireReply(r, nil); res.ok() != (r == 1 || r == 2) || (res.err != nil) != (r != 1 && r != 2) {
			t.Fatalf("acquire reply %d: got %+v", r, res)
		}
		refusal := acquireReply([]any{r, value}, nil)
		if refusal.ok() || (refusal.err == nil) != (r <= 0) || (refusal.err == nil && refusal.value != value) {
			t.Fatalf("acquire refusal {%d, %q}: got %+v", r, value, refusal)
		}
		for _, odd := range []any{nil, "x", []any{r}, []any{value, r}, []any{r, value, r}} {
			if res := acquireReply(odd, nil); res.err == nil {
				t.Fatalf("acquire reply %v: got %+v, want an error", odd, res)
			}
		}
		if res := ownerReply(r); res.ok() != (r == 1) || (res.err != nil) != (r > 1 || r < -1) {
			t.Fatalf("owner reply %d: got %+v", r, res)
		}
		var v any
		if held {
			v = value
		}
		for _, reply := range [][]any{{v, pttl}, {v}, {v, value}, nil, {v, pttl, pttl}} {
			res := inspectReply(reply, nil)
			if res.err == nil && res.status == statusHeld && res.value != value {
				t.Fatalf("inspect %v: got %+v", reply, res)
			}
		}
	})
}
