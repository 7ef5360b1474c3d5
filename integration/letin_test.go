package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestReaderLetInByRelease: with default options, RLock calls waiting
// behind another Client's writer hold once the writer's release let them
// in, without attempts of their own (docs/design.md, "Readers let in by
// the writer's release"): each by its place's ID, with a validity below
// the waiter lease (1 s) at first and its TTL once the extension that
// follows is in; an RDo's work goes on. Their Unlocks leave nothing on the
// nodes.
func TestReaderLetInByRelease(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	writers := newClient(t, Clients(t, nodes, nil))
	var mu sync.Mutex
	var acquires []redlock.Event
	readers := newClient(t, Clients(t, nodes, nil), redlock.WithObserver(func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err == nil {
			mu.Lock()
			acquires = append(acquires, e)
			mu.Unlock()
		}
	}))
	ctx := t.Context()
	wm, err := writers.RWMutex(key)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wm.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := readers.RWMutex(key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	got := make(chan *redlock.Lock, n)
	for range n {
		go func() {
			r, err := rm.RLock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
	}
	// And an RDo, auto-extended: its lock, let in with less than a lease
	// of validity, must not end at once (an auto-extended lock ends TTL/10
	// before its validity: 1 s by default).
	worked := make(chan error, 1)
	go func() {
		worked <- rm.RDo(ctx, func(ctx context.Context) error {
			time.Sleep(200 * time.Millisecond)
			return context.Cause(ctx)
		})
	}()
	waitUntil(t, 10*time.Second, "the readers queued on every node", func() bool {
		s, err := wm.Inspect(ctx)
		if err != nil {
			return false
		}
		for _, ns := range s.Nodes {
			if ns.Waiting != n+1 {
				return false
			}
		}
		return true
	})
	heardBy(t, nodes, "rw:"+key) // (the read-write lock's key)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var held []*redlock.Lock
	for range n {
		if r := <-got; r != nil {
			held = append(held, r)
		}
	}
	if len(held) != n {
		t.Fatalf("%d of %d readers hold", len(held), n)
	}
	if err := <-worked; err != nil {
		t.Errorf("RDo, let in: %v", err)
	}
	mu.Lock()
	for _, e := range acquires {
		if !e.LetIn || e.Validity > time.Second {
			t.Errorf("an acquisition not let in, or valid for more than a lease at first: %+v", e)
		}
		checkLetInNodes(t, e, len(nodes))
	}
	mu.Unlock()
	for _, r := range held {
		if !strings.Contains(r.Token(), ".ri") {
			t.Errorf("token %q: not a let-in place's ID", r.Token())
		}
		waitUntil(t, 10*time.Second, "the extension to the TTL", func() bool { return r.Validity() > time.Second })
		if err := r.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	noKeysLeft(t, nodes, key)
}

// TestWriterGrantedByRelease: with default options, Lock calls waiting
// behind another Client's holder are granted the key by its release, and
// each by the release of the one before, without attempts of their own
// (docs/design.md, "A writer granted the key by the release"): each holds
// by its place's ID, with a validity below the waiter lease (1 s) at
// first and its TTL once the extension that follows is in; a Do's work
// goes on. Their Unlocks leave nothing on the nodes.
func TestWriterGrantedByRelease(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	holder := newClient(t, Clients(t, nodes, nil))
	waiters, acquires := observedWaiters(t, nodes, 2)
	ctx := t.Context()
	h, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := waiters[0].Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// And a Do, auto-extended: its lock, granted with less than a lease of
	// validity, must not end at once (an auto-extended lock ends TTL/10
	// before its validity: 1 s by default).
	worked := make(chan error, 1)
	waitUntil(t, 10*time.Second, "the first waiter queued on every node", queuedOnEvery(t, holder, key, 1))
	go func() {
		worked <- waiters[1].Do(ctx, key, func(ctx context.Context) error {
			time.Sleep(200 * time.Millisecond)
			return context.Cause(ctx)
		})
	}()
	waitUntil(t, 10*time.Second, "the second waiter queued on every node", queuedOnEvery(t, holder, key, 2))
	l := grantedAfter(t, nodes, key, got, h)
	waitUntil(t, 10*time.Second, "the extension to the TTL", func() bool { return l.Validity() > time.Second })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-worked; err != nil {
		t.Errorf("Do, granted: %v", err)
	}
	if got := acquires(); len(got) != 2 {
		t.Errorf("%d acquisitions, want 2", len(got))
	}
	for _, e := range acquires() {
		if !e.LetIn || e.Validity > time.Second {
			t.Errorf("an acquisition not granted by a release, or valid for more than a lease at first: %+v", e)
		}
		checkLetInNodes(t, e, len(nodes))
	}
	noKeysLeft(t, nodes, key)
}

// TestGrantedLockExtendsForAStep is the README's loop on a Lock that
// waited: with the README's node options and default options but its
// 30 s TTL, the holder's release grants the waiting Lock the key, which
// returns valid for less than a waiter lease (1 s), as Client.Lock's doc
// says; a step that needs a second extends it at once (racing the
// extension the lock sends itself in the background), and then holds
// more than a second.
func TestGrantedLockExtendsForAStep(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	holder := newClient(t, Clients(t, nodes, readmeNodes))
	waiter := newClient(t, Clients(t, nodes, readmeNodes))
	ctx := t.Context()
	ttl := redlock.WithTTL(30 * time.Second)
	h, err := holder.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, ttl)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitUntil(t, 10*time.Second, "the waiter queued on every node", queuedOnEvery(t, holder, key, 1))
	l := grantedAfter(t, nodes, key, got, h)
	v := l.Validity()
	if v <= 0 || v > time.Second {
		t.Errorf("granted by the release with %v of validity, want (0, 1s]: a waiter lease at most", v)
	}
	if l.Validity() < time.Second { // the README's step check
		if err := l.Extend(ctx, 30*time.Second); err != nil {
			t.Fatalf("Extend right after a granted Lock: %v", err)
		}
	}
	if v := l.Validity(); v <= time.Second {
		t.Errorf("%v of validity after Extend, want more than the step's second", v)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, nodes, key)
}

// grantedAfter releases the holders hs, once every node has heard the
// waiters queued at key (heardBy), and returns the Lock got delivers,
// which a release must have granted: its token is its place's ID.
func grantedAfter(t *testing.T, nodes []*Node, key string, got <-chan *redlock.Lock, hs ...*redlock.Lock) *redlock.Lock {
	t.Helper()
	heardBy(t, nodes, key)
	for _, h := range hs {
		if err := h.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if !strings.Contains(l.Token(), ".wi") {
		t.Fatalf("token %q: not a granted place's ID", l.Token())
	}
	return l
}

// TestWriterGrantedByLastReader: with default options, a read-write
// lock's writer waiting behind another Client's readers is granted the
// key by the last reader's release, without an attempt of its own: it
// holds by its place's ID.
func TestWriterGrantedByLastReader(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	readers := newClient(t, Clients(t, nodes, nil))
	writers := newClient(t, Clients(t, nodes, nil))
	ctx := t.Context()
	rm, err := readers.RWMutex(key)
	if err != nil {
		t.Fatal(err)
	}
	wm, err := writers.RWMutex(key)
	if err != nil {
		t.Fatal(err)
	}
	var held []*redlock.Lock
	for range 2 {
		r, err := rm.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	got := make(chan *redlock.Lock, 1)
	go func() {
		w, err := wm.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitUntil(t, 10*time.Second, "the writer queued on every node", func() bool {
		s, err := wm.Inspect(ctx)
		if err != nil {
			return false
		}
		for _, ns := range s.Nodes {
			if ns.Waiting != 1 {
				return false
			}
		}
		return true
	})
	w := grantedAfter(t, nodes, "rw:"+key, got, held...)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, nodes, key)
}

// noKeysLeft fails t if any node still has a key of the lock key's, once
// the Clients newClient made for t have closed: their last releases may
// still be on their way when Unlock returns (a majority answered).
func noKeysLeft(t *testing.T, nodes []*Node, key string) {
	t.Helper()
	closeClients(t)
	for _, nd := range nodes {
		a := Admin(t, nd)
		for _, k := range a.Keys(context.Background(), "*"+key+"*").Val() {
			v := a.Type(context.Background(), k).Val()
			if v == "string" {
				v = fmt.Sprintf("%q", a.Get(context.Background(), k).Val())
			}
			t.Errorf("%s: left after every Unlock: %s = %s, PTTL %v", nd.Addr, k, v, a.PTTL(context.Background(), k).Val())
		}
	}
}

// heardBy waits until each place in key's queue (on the first node) has
// been refreshed by three more looks on every node since every node had
// its Client's release-notice subscription. A grant or a let-in counts for
// a waiter only from a node that a look sent after its subscription's
// confirmation has heard from (the restart guard's rule, letin.go); a
// Client whose subscription came late (a loaded machine: once under CI)
// has its waiter woken by the grants instead, and it attempts: correct,
// but not what a test of the grant is about. A waiter sends a look once
// the last one's answer is in, and the node sent the confirmation before
// the answer to any look it ran later: of three such looks, the last two
// leave after the Client has had the confirmation unless its reader was
// held up for a whole look's interval. Under a second in all.
func heardBy(t *testing.T, nodes []*Node, key string) {
	t.Helper()
	ids := queued(t, nodes[0], key)
	if len(ids) == 0 {
		t.Fatalf("no place in %s's queue", key)
	}
	for _, id := range ids {
		channel := "redlock:wake:" + strings.SplitN(id, ".", 2)[0]
		waitUntil(t, 30*time.Second, "the subscription of "+id+"'s Client on every node", func() bool {
			for _, n := range nodes {
				if Admin(t, n).PubSubNumSub(t.Context(), channel).Val()[channel] == 0 {
					return false
				}
			}
			return true
		})
	}
	seq := func(n *Node, id string) float64 {
		return Admin(t, n).ZScore(t.Context(), RedisKey(key)+":seq", id).Val()
	}
	first := map[string]float64{}
	for _, id := range ids {
		for _, n := range nodes {
			first[id+" at "+n.Addr] = seq(n, id)
		}
	}
	waitUntil(t, 30*time.Second, "three more looks of every place on every node", func() bool {
		for _, id := range ids {
			for _, n := range nodes {
				if seq(n, id) < first[id+" at "+n.Addr]+3 {
					return false
				}
			}
		}
		return true
	})
}

// checkLetInNodes checks a let-in's acquire event's node list: every
// node, and a majority of them counted (no error); the others have not
// granted it yet, or their grants do not count (docs: NodeResult).
func checkLetInNodes(t *testing.T, e redlock.Event, n int) {
	t.Helper()
	if len(e.Nodes) != n {
		t.Errorf("a let-in's event lists %d nodes, want %d: %+v", len(e.Nodes), n, e.Nodes)
		return
	}
	counted := 0
	for _, r := range e.Nodes {
		if r.Err == nil {
			counted++
		}
	}
	if counted < n/2+1 {
		t.Errorf("a let-in's event counts %d nodes of %d, fewer than a majority: %+v", counted, n, e.Nodes)
	}
}
