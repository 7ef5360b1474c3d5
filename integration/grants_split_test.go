package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// TestGrantsSplitBetweenWaiters: three Lock calls of three Clients queue
// behind a fourth's holder (tickets a < b < c), default options and the
// README's node options. Just before the release, nodes 0 and 1 lose
// a's and b's places and node 2 a's (as if their joins had not landed
// yet, which is how Lock calls that queue together meet it), so each
// release grants the key to another waiter: c on nodes 0 and 1, b on 2,
// a on 3 and 4. No one has a majority. The waiter whose grants can never
// make one gives them back, and the next holder is granted the key by
// those releases (Event.LetIn), a few round trips after the release
// (docs/design.md, "Grants split between waiters"). Before, every grant
// stayed until its place's lapse (a lease, 1 s), and the next holder took
// the key by an attempt once they had lapsed. All three Locks hold in
// turn, and nothing is left on the nodes.
func TestGrantsSplitBetweenWaiters(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	rk := RedisKey(key)
	readme := func(o *redis.Options) { o.DialerRetries, o.ContextTimeoutEnabled = 1, true }
	ctx := t.Context()
	holder := newClient(t, Clients(t, nodes, readme))
	h, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []redlock.Event
	var firstAt time.Time
	observe := redlock.WithObserver(func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err == nil {
			mu.Lock()
			if held = append(held, e); len(held) == 1 {
				firstAt = time.Now()
			}
			mu.Unlock()
		}
	})
	admins := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		admins[i] = Admin(t, n)
	}
	queued := func(n int) bool { // every node has n places
		for _, a := range admins {
			if a.ZCard(ctx, rk+":queue").Val() != int64(n) {
				return false
			}
		}
		return true
	}
	var wg sync.WaitGroup
	for i := range 3 {
		c := newClient(t, Clients(t, nodes, readme), observe)
		wg.Go(func() {
			l, err := c.Lock(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
				t.Error(err)
			}
		})
		waitUntil(t, 5*time.Second, "the Lock queued on every node", func() bool { return queued(i + 1) })
	}
	ids := admins[3].ZRange(ctx, rk+":queue", 0, -1).Val() // a, b, c: by ticket
	if len(ids) != 3 {
		t.Fatalf("queue %v", ids)
	}
	for i, lost := range [][]string{{ids[0], ids[1]}, {ids[0], ids[1]}, {ids[0]}} {
		for _, zset := range []string{":queue", ":lease"} {
			if err := admins[i].ZRem(ctx, rk+zset, lost).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	released := time.Now()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(held) != 3 {
		t.Fatalf("%d of 3 Locks held", len(held))
	}
	first := held[0]
	t.Logf("the first holder held %v after the release (let in: %v, attempt %d)", firstAt.Sub(released), first.LetIn, first.Attempt)
	if !first.LetIn {
		t.Fatalf("the first holder took the key by attempt %d, not by the grants given back: they lapsed", first.Attempt)
	}
	noKeysLeft(t, nodes, key)
}
