package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// The read-write lock against real redis-server: never a reader with a
// writer, never two writers, under chaos, with a checker whose canary is a
// reader admitted without a majority.

// readerWithWriter returns a violation for every reader holding that
// overlaps a writer holding.
func readerWithWriter(readers, writers []holding) []string {
	rs := slices.Clone(readers)
	sort.Slice(rs, func(i, j int) bool { return rs[i].from.Before(rs[j].from) })
	var v []string
	for _, w := range writers {
		// Readers that started before the writer ended...
		n := sort.Search(len(rs), func(i int) bool { return !rs[i].from.Before(w.to) })
		for _, r := range rs[:n] {
			if r.to.After(w.from) { // ...and ended after it started
				v = append(v, fmt.Sprintf("reader with writer: %s read %v–%v, %s wrote %v–%v", r.worker,
					r.from.Format("15:04:05.000000"), r.to.Format("15:04:05.000000"), w.worker, w.from.Format("15:04:05.000000"), w.to.Format("15:04:05.000000")))
			}
		}
	}
	return v
}

// refusedAs reports whether err is a refusal in which a majority of the
// nodes gave one of reasons (the others may not have answered before the outcome
// was decided).
func refusedAs(err error, reasons ...error) bool {
	var qerr *redlock.QuorumError
	if !errors.As(err, &qerr) {
		return false
	}
	n := 0
	for _, nr := range qerr.Nodes {
		if slices.ContainsFunc(reasons, func(r error) bool { return errors.Is(nr.Err, r) }) {
			n++
		}
	}
	return n >= qerr.Quorum
}

// rwKey is the Redis key of read-write lock name.
func rwKey(name string) string { return RedisKey("rw:" + name) }

// TestRWMutexScript: on real redis-server, readers share and keep a writer
// out (each node's reason: held); a waiting writer keeps new readers out
// (queued) and is woken by the last reader's release (its strategy and
// place lease are an hour, the readers' TTL a minute); a reader that dies
// keeps the writer out only until its lease runs out; Inspect counts the
// readers.
func TestRWMutexScript(t *testing.T) {
	nodes := StartNodes(t, 3)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	readerClient := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute))
	writerClient := newClient(t, Clients(t, nodes, nil), redlock.WithWaiterLease(time.Hour))
	rm, err := readerClient.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	wm, err := writerClient.RWMutex(name, redlock.WithRetry(redlock.RandomBackoff(time.Hour, time.Hour)), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	r1, err := rm.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rm.TryRLock(ctx)
	if err != nil {
		t.Fatalf("readers do not share: %v", err)
	}
	// TryRLock returns at a majority; the last node follows.
	waitUntil(t, 30*time.Second, "Inspect showing both readers on every node, and no writer", func() bool {
		st, err := rm.Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range st.Nodes {
			if n.Readers != 2 || n.Held {
				return false
			}
		}
		return true
	})
	for _, m := range []*redlock.RWMutex{wm, rm} { // fenced and not
		_, err = m.TryLock(ctx)
		if !refusedAs(err, redlock.ErrHeld) {
			t.Fatalf("a writer while readers hold: got %v, want refused as held", err)
		}
	}
	got := make(chan error, 1)
	var w *redlock.Lock
	go func() {
		var err error
		w, err = wm.Lock(ctx)
		got <- err
	}()
	for _, n := range nodes {
		admin := Admin(t, n)
		waitUntil(t, 30*time.Second, "the writer's place on "+n.Addr, func() bool {
			return admin.ZCard(ctx, rwKey(name)+":queue").Val() == 1
		})
	}
	waitSubscribed(t, nodes...) // (its look may leave before the subscription is in, on a loaded machine)
	_, err = rm.TryRLock(ctx)
	if !refusedAs(err, redlock.ErrQueued) {
		t.Fatalf("a reader while a writer waits: got %v, want refused as queued", err)
	}
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	awaitNil(t, got, "the writer was not woken by the last reader's release")
	if w.Fence() == 0 {
		t.Fatal("the writer has no fencing token")
	}
	// Lock returns at a majority: where the writer's grant has not landed
	// yet, its place in the queue refuses the reader instead.
	_, err = rm.TryRLock(ctx)
	if !refusedAs(err, redlock.ErrHeld, redlock.ErrQueued) {
		t.Fatalf("a reader while the writer holds: got %v, want refused as held (or queued)", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A reader that dies: the writer waits for its lease, and no longer.
	short, err := readerClient.RWMutex(name, redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r, err := short.RLock(ctx) // once the writer's release reached a majority
	if err != nil {
		t.Fatal(err)
	}
	validEnd := time.Now().Add(r.Validity())
	go func() {
		var err error
		w, err = wm.Lock(ctx)
		got <- err
	}()
	awaitNil(t, got, "the writer waited past the dead reader's lease")
	if time.Now().Before(validEnd) {
		t.Fatal("the writer got in while the reader was valid")
	}
	_ = w.Unlock(ctx)
}

// awaitNil fails the test unless got delivers nil within 30 s (a limit
// that only turns a hang into a failure); failure says what went wrong.
func awaitNil(t *testing.T, got <-chan error, failure string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal(failure)
	}
}

// TestRWMutexCheckerCanary: two schemes the read-write lock does not use.
// A reader admitted by one node without a writer, instead of a majority,
// gets in beside a writer that holds nodes 0 and 1 (node 2 lost the
// writer's key, as a node that restarted without persistence would): the
// holding checker must catch it. A reader that does not look for a
// writer's key lands beside it on a node: the node reader must catch it.
func TestRWMutexCheckerCanary(t *testing.T) {
	nodes := StartNodes(t, 3)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute))
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wFrom := time.Now()
	admins := []*redis.Client{Admin(t, nodes[0]), Admin(t, nodes[1]), Admin(t, nodes[2])}
	// Lock returns at a majority: wait for the last node's grant, so
	// that the writer still holds nodes 0 and 1 once node 2 loses it.
	for i, a := range admins {
		waitUntil(t, 30*time.Second, fmt.Sprintf("the writer's key on node %d", i), func() bool {
			return a.Exists(ctx, rwKey(name)).Val() == 1
		})
	}
	admins[2].Del(ctx, rwKey(name)) // node 2 lost the writer's key
	// The unsound reader asks node 2 only: no writer there, so it is in.
	if admins[2].Exists(ctx, rwKey(name)).Val() != 0 {
		t.Fatal("the schedule did not build: node 2 has the writer's key")
	}
	lease := float64(time.Now().Add(time.Minute).UnixMilli())
	admins[2].ZAdd(ctx, rwKey(name)+":readers", redis.Z{Score: lease, Member: "R"})
	rFrom := time.Now()
	v := readerWithWriter([]holding{{worker: "R", from: rFrom, to: rFrom.Add(time.Minute)}},
		[]holding{{worker: "W", from: wFrom, to: validUntil(w)}})
	if len(v) != 1 {
		t.Fatalf("the holding checker found %v, want the reader with the writer", v)
	}
	t.Logf("caught: %s", v[0])
	// The blind reader adds itself on node 0, where the writer's key is.
	admins[0].ZAdd(ctx, rwKey(name)+":readers", redis.Z{Score: lease, Member: "B"})
	// The chaos run's node reader must see it.
	if v, ok := (&journal{}).readRWNode(ctx, admins[0], nodes[0], rwKey(name)); !ok || len(v) != 1 {
		t.Fatalf("the node reader found %v (answered: %v), want a writer's key beside a live reader", v, ok)
	}
}

// TestChaosRWMutex: 4 readers and 2 writers in 3 Clients take the lock,
// hold it 0–20 ms and release (writers then rest up to 40 ms), while one Client (behind proxies of its
// own) is cut off from every node for 0.2–1.2 s at random and nodes are
// paused or killed and restarted from their AOF. Never a reader with a
// writer, never two writers (the lock's checker, fencing tokens in order,
// on the writers), and a reader of every node never sees a writer's key
// beside a live reader. Both sides make progress, and each worker its
// share of its side's (fairShare). Twice: with fenced writers, which a
// fenced writer's release grants the key with a fencing token, and which
// attempt behind readers (both must happen: some writes are held by a
// place's ID), and with the default options, where a writer's or the
// last reader's release grants the key to the waiting writer (which must
// then happen).
func TestChaosRWMutex(t *testing.T) { fencedAndGranted(t, "writes", true, chaosRWMutex) }

// chaosRWMutex is TestChaosRWMutex's run, the workers' locks with opts;
// it returns how many writes were held by a place's ID (granted by a
// release).
func chaosRWMutex(t *testing.T, opts ...redlock.Option) (granted int64) {
	nodes := StartNodesPersistent(t, 5)
	needsOwnServers(t, nodes[0])
	name := UniqueKey(t, nodes)
	clientOpts := []redlock.Option{redlock.WithTTL(500 * time.Millisecond), redlock.WithNodeTimeout(25 * time.Millisecond)}
	proxies := ProxyNodes(t, nodes)
	j := &journal{}
	var locks []*redlock.RWMutex
	for i := range 3 {
		via := nodes
		if i == 2 {
			via = Reach(proxies)
		}
		c := newClient(t, Clients(t, via, func(o *redis.Options) { o.DialerRetries = 1 }), append(clientOpts, redlock.WithObserver(j.observer(fmt.Sprintf("client%d", i))))...)
		m, err := c.RWMutex(name, opts...)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, m)
	}
	// Half the other chaos tests' holdings: a writer excludes everyone, so
	// this run is the slowest of them (about 40 holdings a second here).
	target := chaosTarget() / 2
	var mu sync.Mutex
	var readers []holding
	writers := &checker{}
	var reads, writes, byPlace atomic.Int64
	var done atomic.Int64
	perWorker := make([]atomic.Int64, 6)
	deadline := chaosDeadline(3 * time.Minute)
	stopFaults := faultsEvery(300*time.Millisecond, func() {
		from := time.Now()
		j.add("fault from %s to now: %s", from.Format("15:04:05.000000"), anyFault(t, nodes, proxies))
	})
	// The node reader: every node, every 5 ms, one atomic read of the
	// writer's key and the live readers (journaled).
	stopReads := readNodesEvery(nodes, 5*time.Millisecond, func(ctx context.Context, admin *redis.Client, n *Node) ([]string, bool) {
		return j.readRWNode(ctx, admin, n, rwKey(name))
	})
	backed := newBacking(t, nodes)
	var wg sync.WaitGroup
	for w := range 6 {
		m := locks[w%len(locks)]
		write := w >= 4
		who := fmt.Sprintf("client%d/reader%d", w%len(locks), w)
		acquire, rest := m.RLock, time.Duration(0)
		if write {
			// Writers rest between writes: a writer always waiting would
			// keep every reader out (a waiting writer blocks new readers).
			who, acquire, rest = fmt.Sprintf("client%d/writer%d", w%len(locks), w), m.Lock, 40*time.Millisecond
		}
		wg.Go(func() {
			holdRepeatedly(&done, target, deadline, who, rest, backed.wrap(who, !write, acquire), func(l *redlock.Lock, h holding) {
				j.add("%s held %s–%s (token %q, fence %d)", who, h.from.Format("15:04:05.000000"), h.to.Format("15:04:05.000000"), l.Token(), h.fence)
				perWorker[w].Add(1)
				if write {
					writers.record(h)
					writes.Add(1)
					if strings.Contains(l.Token(), ".wi") {
						byPlace.Add(1)
					}
					return
				}
				mu.Lock()
				readers = append(readers, h)
				mu.Unlock()
				reads.Add(1)
			})
		})
	}
	wg.Wait()
	faults := stopFaults()
	nodeReads, v := stopReads()
	v = append(v, writers.violations()...)
	v = append(v, readerWithWriter(readers, writers.holdings)...)
	v = append(v, backed.violations()...)
	t.Logf("%d reads and %d writes (%d granted by a release), %d node reads, %d faults, %d locks checked backed (%d node reads unanswered), %d violations",
		reads.Load(), writes.Load(), byPlace.Load(), nodeReads, faults, backed.checked.Load(), backed.unknown.Load(), len(v))
	if len(v) > 0 {
		from, to := violationSpan(readers, writers.holdings)
		j.report(t, from.Add(-time.Second), to.Add(50*time.Millisecond))
		t.Fatalf("%d violations, the first: %s", len(v), strings.Join(v[:min(5, len(v))], "\n"))
	}
	if done.Load() < int64(target)/2 {
		t.Fatalf("only %d holdings: too little progress to prove anything", done.Load())
	}
	if reads.Load() == 0 || writes.Load() == 0 {
		t.Fatalf("%d reads and %d writes: one side never got in", reads.Load(), writes.Load())
	}
	// Readers (workers 0-3) and writers (4, 5: they rest between writes)
	// apart; client 2's workers (2, 5) are cut off at random.
	counts := loads(perWorker)
	fairShare(t, counts[:4], 0.5, 2)
	fairShare(t, counts[4:], 0.5, 1)
	return byPlace.Load()
}
