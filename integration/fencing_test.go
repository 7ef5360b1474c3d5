package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// TestFencingMonotonic: tokens handed out by two Clients taking turns grow
// strictly, and stay below 2^53.
func TestFencingMonotonic(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	clients := []*redlock.Client{
		newClient(t, Clients(t, nodes, nil), redlock.WithFencing()),
		newClient(t, Clients(t, nodes, nil), redlock.WithFencing()),
	}
	var last uint64
	for i := range 200 {
		l, err := clients[i%2].Lock(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if f := l.Fence(); f <= last || f >= 1<<53 {
			t.Fatalf("acquisition %d: token %d after %d", i, f, last)
		}
		last = l.Fence()
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	s, err := clients[0].Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, n := range s.Nodes {
		if n.Fence >= last {
			written++
		}
	}
	if written < 3 {
		t.Fatalf("the last token %d is on %d nodes' counters, want a majority", last, written)
	}
}

// TestFencingCounterexample on real nodes, with frozen nodes in place of
// partitions: {A,B} locks, a client that reaches only A bumps it three
// times, {A,B} locks again, then {B,C}: the tokens must grow.
func TestFencingCounterexample(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil), redlock.WithFencing())
	minority := newClient(t, Clients(t, nodes[:1], nil), redlock.WithFencing(), redlock.WithAnyNodeCount())
	lockWithout := func(down *Node) uint64 {
		t.Helper()
		down.Pause(t)
		defer down.Resume(t)
		l, err := c.TryLock(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(t.Context()) // the frozen node's part times out
		return l.Fence()
	}
	t1 := lockWithout(nodes[2])
	waitEmpty(t, nodes, key, 30*time.Second)
	for range 3 {
		l, err := minority.TryLock(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t2 := lockWithout(nodes[2])
	waitEmpty(t, nodes, key, 30*time.Second)
	t3 := lockWithout(nodes[0])
	if !(t1 < t2 && t2 < t3) {
		t.Fatalf("tokens %d, %d, %d: want strictly increasing", t1, t2, t3)
	}
}

// TestFencingBadCounter: a counter of the wrong type, or one that would
// pass 2^53, fails its node with a clear error; no token is handed out. One
// below 0 (a hand-made write) is below every token: the uncontended
// acquire's ZADD GT raises it to the proposal, which is the token. Inspect
// reports each counter that is no fence as the node's error, not as its
// fence.
func TestFencingBadCounter(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	fence := RedisKey(key) + ":fence"
	t.Cleanup(func() {
		for _, n := range nodes {
			Admin(t, n).Del(t.Context(), fence)
		}
	})
	c := newClient(t, Clients(t, nodes, nil), redlock.WithFencing())
	const near = 9007199254740990 // 2^53 − 2: a fence, but none can follow it
	for _, tc := range []struct {
		name       string
		set        func(n *Node) error
		want       string
		inspectErr bool // Inspect reports the node's error
	}{
		{"wrong type", func(n *Node) error { return Admin(t, n).HSet(t.Context(), fence, "f", "v").Err() }, "not a whole number", true},
		{"near 2^53", func(n *Node) error { return Admin(t, n).Set(t.Context(), fence, near, 0).Err() }, "2^53", false},
		{"not a number", func(n *Node) error { return Admin(t, n).Set(t.Context(), fence, "x", 0).Err() }, "not a whole number", true},
		{"negative", func(n *Node) error {
			return Admin(t, n).ZAdd(t.Context(), fence, redis.Z{Score: -1, Member: "c"}).Err()
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range nodes {
				Admin(t, n).Del(t.Context(), fence)
				if err := tc.set(n); err != nil {
					t.Fatal(err)
				}
			}
			s, err := c.Inspect(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range s.Nodes {
				if (n.Err != nil) != tc.inspectErr || n.Err == nil && n.Fence != near { // (the one counter here that is a fence)
					t.Errorf("Inspect, node %d: fence %d, error %v; want an error: %v", i, n.Fence, n.Err, tc.inspectErr)
				}
			}
			l, err := c.TryLock(t.Context(), key)
			if tc.want == "" {
				if err != nil || l.Fence() == 0 {
					t.Fatalf("got %v, want a lock with a token", err)
				}
				if err := l.Unlock(t.Context()); err != nil {
					t.Fatal(err)
				}
				return
			}
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrNotObtained naming %q", err, tc.want)
			}
			waitEmpty(t, nodes, key, 30*time.Second)
		})
	}
}
