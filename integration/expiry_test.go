package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestExpiryHonoured: every key the library writes carries a TTL that
// matches what was asked: after Lock, Extend, re-entry and UnlockAfter.
func TestExpiryHonoured(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil))
	// Each call returns once a majority answered; the last node's call may
	// still be on its way (CI run 23, beside a CPU hog, read a node's PTTL
	// before its UnlockAfter's release landed), so each node gets up to
	// 2 s, well inside the shortest TTL checked.
	checkPTTL := func(what string, ttl time.Duration) {
		t.Helper()
		var last string
		if !poll(2*time.Second, func() bool {
			for _, n := range nodes {
				pttl, err := Admin(t, n).PTTL(t.Context(), RedisKey(key)).Result()
				if err != nil || pttl <= 0 || pttl > ttl {
					last = fmt.Sprintf("%s PTTL %v (%v)", n.Addr, pttl, err)
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s: %s, want in (0, %v]", what, last, ttl)
		}
	}
	l, err := c.TryLock(t.Context(), key, redlock.WithTTL(5*time.Second), redlock.WithMetadata("host=a"))
	if err != nil {
		t.Fatal(err)
	}
	admins := Admins(t, nodes)
	waitUntil(t, 30*time.Second, "every node to hold the key (a straggling grant)", func() bool {
		for _, a := range admins {
			if k, _ := a.Exists(t.Context(), RedisKey(key)).Result(); k != 1 {
				return false
			}
		}
		return true
	})
	checkPTTL("after Lock", 5*time.Second)
	if err := l.Extend(t.Context(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	checkPTTL("after Extend", 30*time.Second)
	again, err := c.TryLock(t.Context(), key, redlock.WithToken(l.Token()), redlock.WithTTL(8*time.Second))
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	checkPTTL("after re-entry", 8*time.Second)
	s, err := c.Inspect(t.Context(), key, redlock.WithToken(l.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Holder(); !ok || !holdsMajority(s, l.Token()) || s.Remaining() <= 0 || s.Remaining() > 8*time.Second {
		t.Fatalf("Inspect: %+v, remaining %v", s.Nodes, s.Remaining())
	}
	if err := again.UnlockAfter(t.Context(), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	checkPTTL("after UnlockAfter", 3*time.Second)
	if _, err := c.TryLock(t.Context(), key); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("during the cooldown: got %v, want ErrNotObtained", err)
	}
}

// holdsMajority reports whether a majority of nodes show token, from an
// Inspect given that token.
func holdsMajority(s *redlock.KeyState, token string) bool {
	n := 0
	for _, ns := range s.Nodes {
		if ns.Token == token {
			n++
		}
	}
	return n >= len(s.Nodes)/2+1
}

// TestUnlockOutcomes: a lock that expired, or was taken over, reports it.
func TestUnlockOutcomes(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil))
	const ttl = time.Second
	// Lock, not TryLock: a 1 s TTL has a 50 ms node timeout, which a loaded
	// machine can miss once.
	l, err := c.Lock(t.Context(), key, redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 10*ttl) // it expires
	if err := l.Extend(t.Context(), time.Minute); !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Extend after expiry: got %v, want ErrExpired", err)
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Unlock after expiry: got %v, want ErrExpired", err)
	}
	for _, n := range nodes {
		if k, _ := Admin(t, n).Exists(t.Context(), RedisKey(key)).Result(); k != 0 {
			t.Fatalf("%s: Extend re-created the key", n.Addr)
		}
	}

	l, err = c.Lock(t.Context(), key, redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 10*ttl)
	other, err := c.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, redlock.ErrTakenOver) {
		t.Fatalf("Unlock after takeover: got %v, want ErrTakenOver", err)
	}
	if s, _ := c.Inspect(t.Context(), key, redlock.WithToken(other.Token())); s == nil {
		t.Fatal("Inspect failed")
	} else if !holdsMajority(s, other.Token()) {
		t.Fatalf("the new holder's lock was disturbed: %+v", s.Nodes)
	}
	if err := other.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(t.Context()); !errors.Is(err, redlock.ErrReleased) {
		t.Fatalf("double Unlock: got %v, want ErrReleased", err)
	}
}
