package integration

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// watchKey subscribes to the keyspace events of key on node n ("set",
// "del", "expire", …), so a test can see a grant land and be released even
// when both happen between two looks at the key.
func watchKey(t *testing.T, n *Node, key string) <-chan *redis.Message {
	t.Helper()
	admin := Admin(t, n)
	if err := admin.ConfigSet(t.Context(), "notify-keyspace-events", "Kg$").Err(); err != nil {
		t.Fatal(err)
	}
	sub := admin.Subscribe(t.Context(), "__keyspace@0__:"+RedisKey(key))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	return sub.Channel()
}

// expectSetThenDel waits for the key to be created and then deleted on the
// watched node, well before its one-minute TTL could remove it.
func expectSetThenDel(t *testing.T, n *Node, events <-chan *redis.Message, limit time.Duration) {
	t.Helper()
	var seen []string
	timeout := time.After(limit)
	for {
		select {
		case m := <-events:
			seen = append(seen, m.Payload)
			if m.Payload == "del" && slices.Contains(seen, "set") {
				return
			}
		case <-timeout:
			t.Fatalf("%s: want a grant (set) and its release (del) within %v, saw %v", n.Addr, limit, seen)
		}
	}
}

// warm runs one lock cycle on another key, so that every client has a
// connection to its node and every node has the scripts cached: a later
// acquire sent to a frozen node is then really in its socket (a cold pool
// would block in the connection handshake), and runs as soon as the node
// wakes (an uncached script would need an EVAL, which a caller whose
// context has ended never sends).
func warm(t testing.TB, c *redlock.Client) {
	t.Helper()
	l, err := c.Lock(t.Context(), "warm-up:"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestLateGrantsReleased: an attempt fails (3 of 5 nodes held by another
// token) while one node is frozen with the acquire in flight; when that node
// wakes and grants, the grant is released, long before its TTL.
func TestLateGrantsReleased(t *testing.T) {
	nodes := StartNodes(t, 5)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	for _, n := range nodes[:3] {
		if err := Admin(t, n).Set(t.Context(), RedisKey(key), "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(3*time.Second))
	warm(t, c)
	events := watchKey(t, nodes[3], key)
	nodes[3].Pause(t)
	_, err := c.TryLock(t.Context(), key)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained", err)
	}
	nodes[3].Resume(t)
	expectSetThenDel(t, nodes[3], events, 30*time.Second)
	waitEmpty(t, nodes[3:], key, 30*time.Second)
	for _, n := range nodes[:3] {
		if v, _ := Admin(t, n).Get(t.Context(), RedisKey(key)).Result(); v != "someone-else" {
			t.Fatalf("%s: the other holder's key became %q", n.Addr, v)
		}
	}
}

// TestCancelledAttemptReleases: a caller that gives up mid-attempt leaves no
// key behind, though its context is cancelled: not on the node that granted
// in time, nor on the frozen nodes whose grants come after.
func TestCancelledAttemptReleases(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(3*time.Second))
	warm(t, c)
	events := []<-chan *redis.Message{watchKey(t, nodes[0], key), watchKey(t, nodes[1], key), watchKey(t, nodes[2], key)}
	nodes[0].Pause(t)
	nodes[1].Pause(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(ctx, key)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and the caller's deadline", err)
	}
	nodes[0].Resume(t)
	nodes[1].Resume(t)
	for i, n := range nodes {
		expectSetThenDel(t, n, events[i], 30*time.Second)
	}
	waitEmpty(t, nodes, key, 30*time.Second)
}

// TestCancelAfterMajorityReachesEveryNode: Lock, Extend and Unlock return
// at a majority, and a caller that cancels its context at once (a wait
// with a timeout, or defer cancel()) must not stop the calls still queued
// for slower nodes. Node 2 answers through a proxy that delays its replies
// by a second, so each of its calls waits in the node's stream behind the
// reply to the one before (the test waits until node 2 has run that one).
// Before these calls were detached from the caller's context, the queued
// ones were dropped: node 2 never got the second lock, kept the old expiry
// after the Extend, and kept the key after Unlock until its TTL (the
// command's exec tests caught the last as "1 nodes still hold the key"
// under load).
func TestCancelAfterMajorityReachesEveryNode(t *testing.T) {
	nodes := StartNodes(t, 3)
	key, other := UniqueKey(t, nodes), UniqueKey(t, nodes)
	proxies := ProxyNodes(t, nodes)
	c := newClient(t, Clients(t, Reach(proxies), nil), redlock.WithTTL(time.Minute))
	l, err := c.TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	node2 := Admin(t, nodes[2])
	pttlAbove := func(key string, d time.Duration) func() bool {
		return func() bool { return node2.PTTL(t.Context(), RedisKey(key)).Val() > d }
	}
	waitUntil(t, 10*time.Second, "node 2 to hold the key", pttlAbove(key, 0))
	proxies[2].Latency(t, 1000, 0)
	if err := l.Extend(t.Context(), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 2 to run the first Extend", pttlAbove(key, time.Minute))

	ctx, cancel := context.WithCancel(t.Context())
	l2, err := c.Lock(ctx, other)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 2 to run the Lock cancelled after it returned", pttlAbove(other, 0))

	ctx, cancel = context.WithCancel(t.Context())
	err = l.Extend(ctx, 3*time.Minute)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 2 to run the Extend cancelled after it returned", pttlAbove(key, 2*time.Minute))

	ctx, cancel = context.WithCancel(t.Context())
	err = l.Unlock(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 20*time.Second)
	if err := l2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
