package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/wire"
)

// The wait queue against real redis-server: order across Clients (as far as
// the nodes know, separate processes) with every built-in retry strategy,
// one attempt per acquisition once queued, a dead waiter's place lapsing
// after its lease, and queues that disagree between nodes healing.

// queueKeys are the wait queue's keys on a node for a lock key.
func queueKeys(key string) (queue, lease string) {
	return RedisKey(key) + ":queue", RedisKey(key) + ":lease"
}

// queued returns the waiter IDs in key's queue on node n, first first.
func queued(t testing.TB, n *Node, key string) []string {
	q, _ := queueKeys(key)
	ids, err := Admin(t, n).ZRange(context.Background(), q, 0, -1).Result()
	if err != nil {
		t.Fatalf("%s: ZRANGE %s: %v", n.Addr, q, err)
	}
	return ids
}

// waitQueued waits until key's queue holds want waiters on every node.
func waitQueued(t testing.TB, nodes []*Node, key string, want int) {
	t.Helper()
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d waiters queued on every node", want), func() bool {
		for _, n := range nodes {
			if len(queued(t, n, key)) != want {
				return false
			}
		}
		return true
	})
}

// served records the order in which waiters got the lock.
type served struct {
	mu    sync.Mutex
	order []int
}

// servedInTurn is waiter i: it waits for key in c (a minute at most),
// records its turn in s, releases at once and reports on errs.
func servedInTurn(t *testing.T, c *redlock.Client, key string, opts []redlock.Option, i int, s *served, errs chan<- error) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := c.Lock(ctx, key, opts...)
	if err != nil {
		errs <- fmt.Errorf("waiter %d: %w", i, err)
		return
	}
	s.mu.Lock()
	s.order = append(s.order, i)
	s.mu.Unlock()
	errs <- l.Unlock(context.WithoutCancel(ctx))
}

// attemptCounter counts acquire attempts per Client, through an observer.
type attemptCounter struct{ n atomic.Int64 }

func (a *attemptCounter) observe(e redlock.Event) {
	if e.Kind == redlock.EventAcquire {
		a.n.Add(1)
	}
}

// TestQueueOrder: waiters in six Clients, and three more sharing one
// Client, queue one after another behind a holder; each gets the lock in
// arrival order and makes two attempts in all: the refused first one, and
// the one that wins when the release before it names it (one, for a waiter
// whose Client already has one queued: it queues without trying). Every built-in
// strategy, the default first: the strategy paces looks at the queue, it
// never lets a waiter that is not first attempt.
func TestQueueOrder(t *testing.T) {
	nodes := StartNodes(t, 5)
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		strategy redlock.RetryStrategy // nil: the default
	}{
		{"default", nil},
		{"random", redlock.RandomBackoff(time.Millisecond, 5*ms)},
		{"linear", redlock.LinearBackoff(ms, 20*ms)},
		{"exponential", redlock.ExponentialBackoff(ms, 50*ms)},
		{"limited", redlock.LimitRetry(redlock.RandomBackoff(ms, 2*ms), 1_000_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := UniqueKey(t, nodes)
			var opts []redlock.Option
			if tc.strategy != nil {
				opts = append(opts, redlock.WithRetry(tc.strategy))
			}
			holder := newClient(t, Clients(t, nodes, nil))
			l, err := holder.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			shared, sharedCount := (*redlock.Client)(nil), &attemptCounter{}
			const waiters = 9
			var s served
			counts := make([]*attemptCounter, waiters)
			errs := make(chan error, waiters)
			for i := range waiters {
				var c *redlock.Client
				if i < 6 {
					counts[i] = &attemptCounter{}
					c = newClient(t, Clients(t, nodes, nil), redlock.WithObserver(counts[i].observe))
				} else {
					if shared == nil {
						shared = newClient(t, Clients(t, nodes, nil), redlock.WithObserver(sharedCount.observe))
					}
					c, counts[i] = shared, sharedCount
				}
				go servedInTurn(t, c, key, opts, i, &s, errs)
				waitQueued(t, nodes, key, i+1) // arrived: in the queue on every node
			}
			if err := l.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			for range waiters {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(s.order, want) {
				t.Fatalf("served in order %v, want %v", s.order, want)
			}
			for i := range 6 {
				if got := counts[i].n.Load(); got != 2 {
					t.Errorf("waiter %d made %d attempts, want 2: the refused first and the winning one", i, got)
				}
			}
			// The first of them was refused once; the other two queued
			// without trying: their Client knew others waited.
			if got := sharedCount.n.Load(); got != 4 {
				t.Errorf("the three waiters of one Client made %d attempts, want 4", got)
			}
			waitQueued(t, nodes, key, 0)
		})
	}
}

// placeGhost puts a waiter that will never come back at the head of key's
// queue on every node, with a place that lapses lease from now on each
// node's clock, and returns when the places lapse at the earliest and at
// the latest. The place is the queue script's own (a look at the queue,
// the waiter's last before it died), so the free key is reserved for it.
func placeGhost(t *testing.T, nodes []*Node, key string, lease time.Duration) (earliest, latest time.Time) {
	o := &wire.Op{Kind: wire.OpQueue, Key: RedisKey(key), Place: &wire.Place{ID: "ghost.1", Ticket: 1, Lease: lease}, Wake: "redlock:wake:"}
	o.Encode()
	start := time.Now()
	for _, n := range nodes {
		if err := Admin(t, n).Do(t.Context(), o.EvalArgs(0)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return start.Add(lease), time.Now().Add(lease)
}

// TestDeadWaiterLapses: a waiter that died at the head of the queue (its
// place, lease 300 ms, is never refreshed) keeps the free key from anyone
// else until its place lapses, and not a moment past it: a TryLock while
// the place lives is refused by the queue on every node, one made after it
// lapsed wins at once, and so does a Lock already waiting, with one attempt
// after its refusal.
func TestDeadWaiterLapses(t *testing.T) {
	nodes := StartNodes(t, 5)
	c := newClient(t, Clients(t, nodes, nil))
	t.Run("TryLock", func(t *testing.T) {
		key := UniqueKey(t, nodes)
		lapse, lapsed := placeGhost(t, nodes, key, 300*time.Millisecond)
		_, err := c.TryLock(t.Context(), key)
		if time.Now().Before(lapse) {
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) || qe.Granted != 0 {
				t.Fatalf("TryLock while the dead waiter's place lives: got %v, want refused on every node", err)
			}
			// The uncontended TryLock is a plain SET NX, which the
			// reservation refuses without saying why (ErrHeld); but a
			// connection's first acquire is the script, which the queue
			// refuses (ErrQueued).
			refused := 0
			for _, nr := range qe.Nodes {
				if errors.Is(nr.Err, redlock.ErrHeld) || errors.Is(nr.Err, redlock.ErrQueued) {
					refused++
				}
			}
			if refused < 3 {
				t.Fatalf("TryLock while the dead waiter's place lives: %v; want a majority refusing with ErrHeld or ErrQueued", err)
			}
		}
		time.Sleep(time.Until(lapsed) + 20*time.Millisecond) // node clocks are this host's
		l, err := c.TryLock(t.Context(), key)
		if err != nil {
			t.Fatalf("TryLock after the dead waiter's lease: %v; its place still blocks the queue", err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Lock", func(t *testing.T) {
		key := UniqueKey(t, nodes)
		count := &attemptCounter{}
		w := newClient(t, Clients(t, nodes, nil), redlock.WithObserver(count.observe))
		lapse, _ := placeGhost(t, nodes, key, 300*time.Millisecond)
		// An hour between looks at the queue: only the hint of the dead
		// waiter's lease (or the lease/3 refresh) can end the wait in time.
		l, err := w.Lock(t.Context(), key, redlock.WithRetry(redlock.RandomBackoff(time.Hour, time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().Before(lapse.Add(-50 * time.Millisecond)) {
			t.Fatalf("acquired %v before the dead waiter's place lapsed", time.Until(lapse))
		}
		if got := count.n.Load(); got > 2 {
			t.Errorf("%d attempts, want at most 2: the first, and one once the dead waiter's place lapsed", got)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDeadQueueExpires: the keys of a queue whose waiters all died
// expire within two leases of the last place set, on every node, with the
// key its places reserved: a place set where less than a lease is left
// sets two (internal/wire's enqueue), so that most looks leave the TTL
// alone. Without a TTL the keys would stay for ever; with one of a lease
// only, every look would pay two PEXPIREs.
func TestDeadQueueExpires(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	const lease = 300 * time.Millisecond
	start := time.Now()
	_, latest := placeGhost(t, nodes, key, lease)
	q, l := queueKeys(key)
	for _, n := range nodes {
		for _, k := range []string{q, l} {
			// The TTL set, give or take the time since: more than a lease
			// and a half (one lease fails this, unless placing the ghost
			// took half a lease), at most two.
			pttl := Admin(t, n).PTTL(t.Context(), k).Val()
			if set := pttl + time.Since(start); set <= lease*3/2 || pttl > 2*lease {
				t.Fatalf("%s: PTTL of %s %v, %v after the place was set; want a TTL of two leases (%v)", n.Addr, k, pttl, time.Since(start), 2*lease)
			}
		}
	}
	time.Sleep(time.Until(latest.Add(lease)) + 20*time.Millisecond) // node clocks are this host's
	for _, n := range nodes {
		if left := Admin(t, n).Exists(t.Context(), q, l, RedisKey(key)).Val(); left != 0 {
			t.Errorf("%s: %d of the dead queue's keys left two leases after its last place", n.Addr, left)
		}
	}
}

// TestDisagreeingQueuesHeal: three waiters queue on three nodes, then each
// node loses two of the three places, so that each node has a different
// waiter first and no release can name one waiter on a majority. Every
// waiter still gets the lock: a waiter's attempt or look at the queue puts
// its place back where its ticket says on every node, so the nodes come to
// agree again. Without that (places only added by the joins) each node
// would grant only its own first waiter, one vote each, for ever. The order
// is not checked: until the places are back, a later waiter may win.
func TestDisagreeingQueuesHeal(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	holder := newClient(t, Clients(t, nodes, nil))
	l, err := holder.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var s served
	errs := make(chan error, 3)
	for i := range 3 {
		c := newClient(t, Clients(t, nodes, nil))
		go servedInTurn(t, c, key, nil, i, &s, errs)
		waitQueued(t, nodes, key, i+1)
	}
	ids := queued(t, nodes[0], key) // in ticket order: waiter 0 first
	q, lq := queueKeys(key)
	for i, n := range nodes {
		for j, id := range ids {
			if i != j {
				if err := Admin(t, n).ZRem(t.Context(), q, id).Err(); err != nil {
					t.Fatal(err)
				}
				if err := Admin(t, n).ZRem(t.Context(), lq, id).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("served in order %v", s.order)
	waitQueued(t, nodes, key, 0)
}
