package redlock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMultiLockBadInput: empty sets, repeated keys, bad keys, too many
// keys and options that do not apply are typed errors before any node is
// asked.
func TestMultiLockBadInput(t *testing.T) {
	fakes := newFakeNodes(3)
	c := newTestClient(t, fakes)
	many := make([]string, maxMultiKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for name, f := range map[string]func() error{
		"nil":        func() error { _, err := c.MultiLock(nil); return err },
		"empty":      func() error { _, err := c.MultiLock([]string{}); return err },
		"repeated":   func() error { _, err := c.MultiLock([]string{"a", "b", "a"}); return err },
		"empty key":  func() error { _, err := c.MultiLock([]string{"a", ""}); return err },
		"long key":   func() error { _, err := c.MultiLock([]string{"a", strings.Repeat("x", maxKeyLen+1)}); return err },
		"65 keys":    func() error { _, err := c.MultiLock(many); return err },
		"client opt": func() error { _, err := c.MultiLock([]string{"a", "b"}, WithNodeTimeout(time.Second)); return err },
		"recampaign": func() error { _, err := c.MultiLock([]string{"a", "b"}, WithRecampaign()); return err },
		"tiny TTL":   func() error { _, err := c.MultiLock([]string{"a", "b"}, WithTTL(time.Millisecond)); return err },
		"nil Do":     func() error { m, _ := c.MultiLock([]string{"a", "b"}); return m.Do(t.Context(), nil) },
		"metadata 5KB": func() error {
			_, err := c.MultiLock([]string{"a", "b"}, WithMetadata(strings.Repeat("m", 5000)))
			return err
		},
	} {
		require.ErrorIs(t, f(), ErrInvalidArgument, name)
	}
	_, err := c.MultiLock(many[:maxMultiKeys])
	require.NoError(t, err, "64 keys")
	for _, f := range fakes {
		require.Zero(t, f.calls.Load(), "a node was asked")
	}
}

// TestHashSlot: the slots Redis Cluster gives keys (CLUSTER KEYSLOT; the
// integration tests ask a real cluster too).
func TestHashSlot(t *testing.T) {
	for key, slot := range map[string]int{
		"123456789":              12739, // CRC16/XMODEM check value 0x31C3
		"foo":                    12182,
		"{user1000}.following":   hashSlot("user1000"),
		"{}x":                    hashSlot("{}x"),
		"redlock:{order:{42}:a}": hashSlot("order:{42"),
	} {
		require.Equal(t, slot, hashSlot(key), key)
	}
	require.Equal(t, hashSlot("redlock:{order:{42}:items}"), hashSlot("redlock:{order:{42}:payment}"))
	require.NotEqual(t, hashSlot("redlock:{a}"), hashSlot("redlock:{b}"))
}

// FuzzMultiLockArgs: whatever the keys (split from a string at '|'),
// MultiLock either returns a lock that takes all of them and excludes
// each alone, or ErrInvalidArgument; never a panic.
func FuzzMultiLockArgs(f *testing.F) {
	f.Add("a|b|c")
	f.Add("")
	f.Add("a|a")
	f.Add("a||b")
	f.Add("x{y}z|x{y}w")
	f.Add(strings.Repeat("k|", 70))
	f.Fuzz(func(t *testing.T, joined string) {
		keys := strings.Split(joined, "|")
		if joined == "" {
			keys = nil
		}
		synctest.Test(t, func(t *testing.T) {
			fakes := newFakeNodes(3)
			c := newTestClient(t, fakes)
			m, err := c.MultiLock(keys)
			if err != nil {
				if !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("got %v, want ErrInvalidArgument or a lock", err)
				}
				return
			}
			ctx := t.Context()
			l, err := m.TryLock(ctx)
			if err != nil {
				t.Fatalf("a free set refused: %v", err)
			}
			for _, k := range keys[:min(len(keys), 4)] {
				if _, err := c.TryLock(ctx, k); !errors.Is(err, ErrNotObtained) {
					t.Fatalf("key %q alone while the set is held: %v", k, err)
				}
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("unlock: %v", err)
			}
			synctest.Wait() // Unlock returns at a majority; the rest follow
			for i, h := range holders(fakes, c, keys...) {
				for j, tok := range h {
					if tok != "" {
						t.Fatalf("node %d still has key %q after Unlock", i, keys[j])
					}
				}
			}
		})
	})
}
