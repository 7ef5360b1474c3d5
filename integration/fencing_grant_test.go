package integration

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// A fenced waiter granted the key by a fenced holder's release, with the
// fencing token the release proposed (docs/fencing.md, "A fenced waiter
// granted the key by the release"), against real redis-server.

// observedWaiters starts n Clients with opts whose successful
// acquisitions' events go to the returned function's list, in order.
func observedWaiters(t *testing.T, nodes []*Node, n int, opts ...redlock.Option) ([]*redlock.Client, func() []redlock.Event) {
	var mu sync.Mutex
	var acquires []redlock.Event
	cs := make([]*redlock.Client, n)
	for i := range cs {
		cs[i] = newClient(t, Clients(t, nodes, nil), append(slices.Clip(opts), redlock.WithObserver(func(e redlock.Event) {
			if e.Kind == redlock.EventAcquire && e.Err == nil {
				mu.Lock()
				acquires = append(acquires, e)
				mu.Unlock()
			}
		}))...)
	}
	return cs, func() []redlock.Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]redlock.Event(nil), acquires...)
	}
}

// lockInBackground starts lock and returns the wait for its Lock, which
// fails t at once if it failed.
func lockInBackground(t *testing.T, lock func(context.Context) (*redlock.Lock, error)) func() *redlock.Lock {
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := lock(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return func() *redlock.Lock {
		l := <-got
		if l == nil {
			t.FailNow()
		}
		return l
	}
}

// locking is c.Lock of key, for lockInBackground.
func locking(c *redlock.Client, key string) func(context.Context) (*redlock.Lock, error) {
	return func(ctx context.Context) (*redlock.Lock, error) { return c.Lock(ctx, key) }
}

// counterOnMajority fails t unless a majority of nodes show fence as key's
// fence counter: the token of a grant taken from a proposal.
func counterOnMajority(t *testing.T, nodes []*Node, key string, fence uint64) {
	t.Helper()
	showing := 0
	for _, n := range nodes {
		c, err := Counter(t.Context(), Admin(t, n), RedisKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if c == fence {
			showing++
		}
	}
	if showing < len(nodes)/2+1 {
		t.Errorf("token %d is the fence counter on %d of %d nodes, fewer than a majority", fence, showing, len(nodes))
	}
}

// noLockKeysLeft is noKeysLeft but for the fence counter, which stays.
func noLockKeysLeft(t *testing.T, nodes []*Node, key string) {
	t.Helper()
	for _, nd := range nodes {
		for _, k := range Admin(t, nd).Keys(context.Background(), "*"+key+"*").Val() {
			if !strings.HasSuffix(k, ":fence") {
				t.Errorf("%s: %s left after every Unlock", nd.Addr, k)
			}
		}
	}
}

// TestFencedWaiterGrantedByRelease: with WithFencing and otherwise default
// options, Lock calls waiting behind another Client's fenced holder are
// granted the key by its release, and the second by the first's, without
// attempts of their own (each holds by its place's ID, ".wif"), each with
// a fencing token above the one before, which a majority of the nodes
// show as their counter (no write-back needed).
func TestFencedWaiterGrantedByRelease(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	holder := newClient(t, Clients(t, nodes, nil), redlock.WithFencing())
	waiters, acquires := observedWaiters(t, nodes, 2, redlock.WithFencing())
	ctx := t.Context()
	h, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	first := lockInBackground(t, locking(waiters[0], key))
	waitQueued(t, nodes, key, 1)
	second := lockInBackground(t, locking(waiters[1], key))
	waitQueued(t, nodes, key, 2)
	heardBy(t, nodes, key)
	last := h.Fence()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []func() *redlock.Lock{first, second} {
		l := wait()
		if !strings.Contains(l.Token(), ".wif") {
			t.Errorf("token %q: not a fenced granted place's ID", l.Token())
		}
		if l.Fence() <= last {
			t.Errorf("fencing token %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		counterOnMajority(t, nodes, key, l.Fence())
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	es := acquires()
	if len(es) != 2 {
		t.Fatalf("%d acquisitions, want 2", len(es))
	}
	for _, e := range es {
		if !e.LetIn {
			t.Errorf("an acquisition not granted by a release: %+v", e)
		}
		checkLetInNodes(t, e, len(nodes))
	}
	noLockKeysLeft(t, nodes, key)
}

// TestFencedWaiterAttempts: where the release has no token to hand out
// (the fence counters are ahead of its proposal, as after another
// Client's clock ran far ahead, or an unfenced holder's release proposes
// none) it grants a fenced waiter the key without one, and the waiter's
// attempt takes the key and gets a token above the counters.
func TestFencedWaiterAttempts(t *testing.T) {
	const ahead = 1 << 51 // above any proposal for a century
	for _, tc := range []struct {
		name    string
		holder  []redlock.Option
		counter uint64 // set on every node once the holder holds (0: none)
	}{
		{name: "counters ahead of the proposal", holder: []redlock.Option{redlock.WithFencing()}, counter: ahead},
		{name: "an unfenced holder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := StartNodes(t, 3)
			key := UniqueKey(t, nodes)
			holder := newClient(t, Clients(t, nodes, nil), tc.holder...)
			waiters, acquires := observedWaiters(t, nodes, 1, redlock.WithFencing())
			ctx := t.Context()
			h, err := holder.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes {
				if tc.counter == 0 {
					break
				}
				if err := Admin(t, n).ZAdd(ctx, RedisKey(key)+":fence", redis.Z{Score: float64(tc.counter), Member: "c"}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			wait := lockInBackground(t, locking(waiters[0], key))
			waitQueued(t, nodes, key, 1)
			heardBy(t, nodes, key)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l := wait()
			if l.Fence() <= tc.counter || strings.Contains(l.Token(), ".wif") {
				t.Errorf("token %q, fence %d: want an attempt's, with a fencing token above %d", l.Token(), l.Fence(), tc.counter)
			}
			if es := acquires(); len(es) != 1 || es[0].LetIn {
				t.Errorf("acquisitions %+v: want one, by an attempt", es)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			noLockKeysLeft(t, nodes, key)
		})
	}
}

// TestFencedWriterGrantedByRelease: a read-write lock's fenced writer
// waiting behind another Client's fenced writer is granted the key by its
// release, with a token above the holder's; one waiting behind a reader is
// granted it by the reader's release without a token (a reader has none
// to propose), and its attempt takes the key and gets one.
func TestFencedWriterGrantedByRelease(t *testing.T) {
	for _, behindReader := range []bool{false, true} {
		t.Run(map[bool]string{false: "behind a writer", true: "behind a reader"}[behindReader], func(t *testing.T) {
			nodes := StartNodes(t, 3)
			key := UniqueKey(t, nodes)
			rwKey := "rw:" + key // the read-write lock's key in the nodes
			ctx := t.Context()
			holder, err := newClient(t, Clients(t, nodes, nil)).RWMutex(key, redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			waiters, acquires := observedWaiters(t, nodes, 1, redlock.WithFencing())
			wm, err := waiters[0].RWMutex(key, redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			lock := holder.Lock
			if behindReader {
				lock = holder.RLock
			}
			h, err := lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wait := lockInBackground(t, wm.Lock)
			waitQueued(t, nodes, rwKey, 1)
			heardBy(t, nodes, rwKey)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			w := wait()
			granted := strings.Contains(w.Token(), ".wif")
			if granted == behindReader || w.Fence() <= h.Fence() {
				t.Errorf("token %q, fence %d after %d: want a grant by a writer's release (an attempt behind a reader), above", w.Token(), w.Fence(), h.Fence())
			}
			if granted {
				counterOnMajority(t, nodes, rwKey, w.Fence())
			}
			if es := acquires(); len(es) != 1 || es[0].LetIn != granted {
				t.Errorf("acquisitions %+v: want one, LetIn %v", es, granted)
			}
			if err := w.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			noLockKeysLeft(t, nodes, rwKey)
		})
	}
}
