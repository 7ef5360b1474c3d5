package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/wire"
)

// The multi-key lock against real redis-server: every key of a set or
// none, on each node and for the holder, under chaos, with a checker whose
// canary is the sequential scheme the multi-key lock does not use.

// keyNames returns n lock keys for a test, deleted from every node when it
// ends.
func keyNames(t *testing.T, nodes []*Node, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = UniqueKey(t, nodes)
	}
	return keys
}

// nodeValues returns what node n holds at each of keys, in one atomic
// read ("" where there is no key); ok is false when the node did not
// answer.
func nodeValues(ctx context.Context, admin *redis.Client, keys []string) ([]string, bool) {
	rkeys := make([]string, len(keys))
	for i, k := range keys {
		rkeys[i] = RedisKey(k)
	}
	vals, err := admin.MGet(ctx, rkeys...).Result()
	if err != nil {
		return nil, false
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		s, _ := v.(string)
		out[i] = wire.Unmark(s) // a key with waiters is marked on its own
	}
	return out, true
}

// partialSets reports, for one node's atomic read of keys (values as
// nodeValues returns them), every holder that holds part of its set: each
// value's metadata names its worker, and sets[worker] is the worker's set.
func partialSets(node string, keys, values []string, sets map[string][]string) []string {
	byValue := map[string][]string{}
	for i, v := range values {
		if v != "" {
			byValue[v] = append(byValue[v], keys[i])
		}
	}
	var v []string
	for value, held := range byValue {
		_, worker, _ := strings.Cut(value, "\x00")
		want, known := sets[worker]
		if !known {
			continue // not a worker of this test
		}
		slices.Sort(held)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(held, want) {
			v = append(v, fmt.Sprintf("%s: %s holds %v of its set %v", node, worker, held, want))
		}
	}
	return v
}

// TestMultiLockScript: on real redis-server, a node where another token
// holds one key grants none of the set, a node where a key is of another
// type writes nothing (and its error is permanent), and a refused set is
// taken back from the nodes that granted it. Extend, UnlockAfter and
// fencing act on every key.
func TestMultiLockScript(t *testing.T) {
	nodes := StartNodes(t, 3)
	keys := keyNames(t, nodes, 3)
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(10*time.Second))
	ctx := t.Context()
	admins := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		admins[i] = Admin(t, n)
	}
	values := func(i int) []string {
		v, ok := nodeValues(ctx, admins[i], keys)
		if !ok {
			t.Fatalf("node %d did not answer", i)
		}
		return v
	}
	m, err := c.MultiLock(keys, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}

	admins[0].Set(ctx, RedisKey(keys[1]), "other", time.Minute)
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("two of three nodes had every key free: %v", err)
	}
	if got := values(0); !slices.Equal(got, []string{"", "other", ""}) {
		t.Fatalf("node 0 had one key held by another and now holds %q: a partial grant", got)
	}
	for i := 1; i < 3; i++ {
		if got := values(i); !slices.Equal(got, []string{l.Token(), l.Token(), l.Token()}) {
			t.Fatalf("node %d holds %q, want the token at every key", i, got)
		}
		for _, k := range keys {
			f, err := Counter(ctx, admins[i], RedisKey(k))
			if err != nil || f != l.Fence() {
				t.Fatalf("node %d: %s's fence counter is %d (%v), want the lock's token %d", i, k, f, err, l.Fence())
			}
		}
	}
	// Extend and Unlock return at a majority: each node is waited for.
	ttls := func(i int, lo, hi time.Duration) func() bool {
		return func() bool {
			for _, k := range keys {
				if pttl := admins[i].PTTL(ctx, RedisKey(k)).Val(); pttl < lo || pttl > hi {
					return false
				}
			}
			return true
		}
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		waitUntil(t, 30*time.Second, "every key extended to a minute", ttls(i, 40*time.Second, time.Minute))
	}
	if err := l.UnlockAfter(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		waitUntil(t, 30*time.Second, "every key left for the 30 s cooldown", ttls(i, 0, 30*time.Second))
	}
	for i := 1; i < 3; i++ {
		admins[i].Del(ctx, RedisKey(keys[0]), RedisKey(keys[1]), RedisKey(keys[2]))
	}

	// Fence counters far above any proposal on nodes 0 and 1: the token
	// is the largest the nodes handed out, written back to every key's
	// counter on a majority.
	big := int64(1) << 50
	admins[0].Set(ctx, RedisKey(keys[0])+":fence", big, 0)
	admins[1].Set(ctx, RedisKey(keys[2])+":fence", big+5, 0)
	wb, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wb.Fence() <= uint64(big+5) {
		t.Fatalf("fence %d, want above every key's counter (%d)", wb.Fence(), big+5)
	}
	agree := 0
	for i := range nodes {
		n := 0
		for _, k := range keys {
			if f, _ := Counter(ctx, admins[i], RedisKey(k)); f == wb.Fence() {
				n++
			}
		}
		if n == len(keys) {
			agree++
		}
	}
	if agree < 2 {
		t.Fatalf("the token %d is every key's counter on %d nodes, want a majority", wb.Fence(), agree)
	}
	if err := wb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ { // node 0 still has keys[1] held by another
		waitUntil(t, 30*time.Second, "the release on every node", func() bool {
			v, _ := nodeValues(ctx, admins[i], keys)
			return slices.Equal(v, []string{"", "", ""})
		})
	}

	// Node 1: a key of another type; node 0: a key held. Only node 2 can
	// grant, and it takes its grant back.
	admins[1].HSet(ctx, RedisKey(keys[2]), "f", "v")
	_, err = m.TryLock(ctx)
	var qerr *redlock.QuorumError
	if !errors.As(err, &qerr) || !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("got %v, want a QuorumError", err)
	}
	if !strings.Contains(qerr.Nodes[1].Err.Error(), "WRONGTYPE") {
		t.Fatalf("node 1 answered %v, want WRONGTYPE", qerr.Nodes[1].Err)
	}
	if got := values(1)[:2]; !slices.Equal(got, []string{"", ""}) {
		t.Fatalf("node 1 failed on a key of another type and holds %q: the script wrote before it read", got)
	}
	waitUntil(t, 30*time.Second, "node 2's grant taken back", func() bool {
		v, _ := nodeValues(ctx, admins[2], keys)
		return slices.Equal(v, []string{"", "", ""})
	})
}

// TestMultiLockCheckerCanary: the scheme the multi-key lock does not use,
// each key an ordinary lock taken one after the other, leaves a holder
// that dies between two keys holding part of its set on every node that
// granted the first (a majority at least). The node checker must catch it
// on each.
func TestMultiLockCheckerCanary(t *testing.T) {
	nodes := StartNodes(t, 3)
	keys := keyNames(t, nodes, 2)
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute))
	sets := map[string][]string{"A": keys}
	if _, err := c.TryLock(t.Context(), keys[0], redlock.WithMetadata("A")); err != nil {
		t.Fatal(err)
	}
	// A dies here, before it locks keys[1].
	var v []string
	granted := 0 // TryLock returns at a majority: the last node may not have it
	for i, n := range nodes {
		values, ok := nodeValues(t.Context(), Admin(t, n), keys)
		if !ok {
			t.Fatalf("node %d did not answer", i)
		}
		if values[0] != "" {
			granted++
		}
		v = append(v, partialSets(n.Addr, keys, values, sets)...)
	}
	if granted < 2 || len(v) != granted {
		t.Fatalf("the checker found %v, want A's partial set on each of the %d nodes that hold its first key", v, granted)
	}
	t.Logf("caught: %s", v[0])
}

// TestChaosMultiLock: 6 workers in 3 Clients lock overlapping sets of 4
// keys (in both orders, and one key alone), hold them 0–20 ms and release,
// while one Client (behind proxies of its own) is cut off from every node
// for 0.2–1.2 s at random, and nodes are paused or killed and restarted
// from their AOF. On each key the lock's checker (no overlap, fencing
// tokens in order), every holding holds its whole set, and a reader of
// every node never sees a holder with part of its set. Every worker makes
// progress (no deadlock), and its fair share of it: the least served of
// the workers whose Client is never cut off gets at least half their mean.
// It runs fenced, with each worker's name as metadata (so the node reader
// knows each holder's set), and with the default options, when a set's
// keys are granted by their releases and a holder holds by its place's ID
// (the node reader then knows no holder: a key granted alone, while the
// set waits for another, is no holding).
func TestChaosMultiLock(t *testing.T) { fencedAndGranted(t, "sets", false, chaosMultiLock) }

func chaosMultiLock(t *testing.T, extra ...redlock.Option) (granted int64) {
	fenced := len(extra) > 0
	nodes := StartNodesPersistent(t, 5)
	needsOwnServers(t, nodes[0])
	keys := keyNames(t, nodes, 4)
	opts := []redlock.Option{redlock.WithTTL(500 * time.Millisecond), redlock.WithNodeTimeout(25 * time.Millisecond)}
	proxies := ProxyNodes(t, nodes)
	var clients []*redlock.Client
	for i := range 3 {
		via := nodes
		if i == 2 {
			via = Reach(proxies)
		}
		clients = append(clients, newClient(t, Clients(t, via, func(o *redis.Options) { o.DialerRetries = 1 }), opts...))
	}
	k := func(i ...int) []string {
		var s []string
		for _, j := range i {
			s = append(s, keys[j])
		}
		return s
	}
	workerSets := [][]string{k(0, 1), k(1, 0), k(1, 2), k(2, 3), k(3, 0, 2), k(1)}
	sets := map[string][]string{}
	// Before sets queued (issue 28) a set worker could lose every race
	// to the one-key worker for a while (CI run 18: 111/78/0/379/167/269
	// locks), and this run needed 2,500 locks for each to lock at all;
	// now each is served in turn, and fairShare asserts it.
	target := chaosTarget()
	var mu sync.Mutex
	perKey := map[string]*checker{}
	for _, key := range keys {
		perKey[key] = &checker{}
	}
	var done atomic.Int64
	progress := make([]atomic.Int64, len(workerSets))
	deadline := chaosDeadline(3 * time.Minute)
	stopFaults := faultsEvery(300*time.Millisecond, func() { anyFault(t, nodes, proxies) })
	var nodeViolations []string // and holdings of the wrong set
	backed := newBacking(t, nodes)
	var wg sync.WaitGroup
	for w, set := range workerSets {
		who := fmt.Sprintf("client%d/worker%d", w%len(clients), w)
		sets[who] = set
		opts := extra
		if fenced {
			opts = append(slices.Clone(extra), redlock.WithMetadata(who))
		}
		m, err := clients[w%len(clients)].MultiLock(set, opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			holdRepeatedly(&done, target, deadline, who, 0, backed.wrap(who, false, m.Lock), func(l *redlock.Lock, h holding) {
				mu.Lock()
				defer mu.Unlock()
				for _, key := range l.Keys() {
					perKey[key].record(h)
				}
				if !slices.Equal(l.Keys(), set) {
					nodeViolations = append(nodeViolations, fmt.Sprintf("%s got a lock on %v, asked for %v", who, l.Keys(), set))
				}
				if strings.Contains(l.Token(), ".wi") {
					granted++
				}
				progress[w].Add(1)
			})
		})
	}
	// The node reader: every node, every 5 ms, one atomic read of all keys.
	stopReads := readNodesEvery(nodes, 5*time.Millisecond, func(ctx context.Context, admin *redis.Client, n *Node) ([]string, bool) {
		values, ok := nodeValues(ctx, admin, keys)
		if !ok {
			return nil, false
		}
		return partialSets(n.Addr, keys, values, sets), true
	})
	wg.Wait()
	faults := stopFaults()
	reads, partial := stopReads()
	v := append(slices.Clone(nodeViolations), partial...)
	for _, chk := range perKey {
		v = append(v, chk.violations()...)
	}
	v = append(v, backed.violations()...)
	var per []string
	for w := range workerSets {
		per = append(per, fmt.Sprint(progress[w].Load()))
	}
	t.Logf("%d locks taken (per worker %s; %d granted by releases), %d node reads, %d faults, %d locks checked backed (%d node reads unanswered), %d violations",
		done.Load(), strings.Join(per, "/"), granted, reads, faults, backed.checked.Load(), backed.unknown.Load(), len(v))
	fairShare(t, loads(progress), 0.5, 2, 5) // client 2's workers: it is cut off at random
	if len(v) > 0 {
		t.Fatalf("%d violations, the first: %s", len(v), strings.Join(v[:min(5, len(v))], "\n"))
	}
	if done.Load() < int64(target)/2 {
		t.Fatalf("only %d locks taken: too little progress to prove anything", done.Load())
	}
	for w := range workerSets {
		if progress[w].Load() == 0 {
			t.Fatalf("worker %d (%v) never locked its set", w, workerSets[w])
		}
	}
	return granted
}

// TestMultiLockReleaseWakes: on real redis-server, releasing a set wakes
// the first waiter of each key, in another Client. The waiter's strategy
// and lease (an hour) and the set's TTL (a minute) leave only the notice
// to wake it within the test's 30 s.
func TestMultiLockReleaseWakes(t *testing.T) {
	nodes := StartNodes(t, 3)
	keys := keyNames(t, nodes, 2)
	a := newClient(t, Clients(t, nodes, nil))
	b := newClient(t, Clients(t, nodes, nil), redlock.WithWaiterLease(time.Hour))
	m, err := a.MultiLock(keys, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, b, keys[1])
	for _, n := range nodes {
		admin := Admin(t, n)
		waitUntil(t, 30*time.Second, "the waiter's place on "+n.Addr, func() bool {
			return admin.ZCard(t.Context(), RedisKey(keys[1])+":queue").Val() == 1
		})
	}
	waitSubscribed(t, nodes...) // (its look may leave before the subscription is in, on a loaded machine)
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	awaitNil(t, got, "the waiter was not woken by the set's release")
}
