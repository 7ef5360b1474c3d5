package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// The semaphore against real redis-server: never more than P holders,
// under chaos, with a checker whose canary is the per-node counting scheme
// the semaphore does not use.

// overCommitted returns a violation for every moment more than permits
// holdings overlapped (one per run of such moments).
func overCommitted(hs []holding, permits int) []string {
	type edge struct {
		at    time.Time
		delta int
		who   string
	}
	var es []edge
	for _, h := range hs {
		if h.to.After(h.from) {
			es = append(es, edge{h.from, +1, h.worker}, edge{h.to, -1, h.worker})
		}
	}
	// An end and a start at the same instant do not overlap.
	sort.Slice(es, func(i, j int) bool {
		if es[i].at.Equal(es[j].at) {
			return es[i].delta < es[j].delta
		}
		return es[i].at.Before(es[j].at)
	})
	var v []string
	n, over := 0, false
	var in []string
	for _, e := range es {
		n += e.delta
		if e.delta > 0 {
			in = append(in, e.who)
		} else if i := slices.Index(in, e.who); i >= 0 {
			in = slices.Delete(in, i, i+1)
		}
		if n > permits && !over {
			v = append(v, fmt.Sprintf("%d holders at once (%s) with %d permits, at %s", n, strings.Join(in, ", "), permits, e.at.Format("15:04:05.000000")))
		}
		over = n > permits
	}
	return v
}

// TestSemaphoreCheckerCanary: the scheme the semaphore does not use,
// counting holders per node and admitting on a majority of nodes with room,
// admits three holders with two permits on three nodes, without any fault:
// A is admitted by nodes 0 and 1, B by 1 and 2, C by 0 and 2; each node
// counts two. The checker must catch it.
func TestSemaphoreCheckerCanary(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	const permits = 2
	admit := redis.NewScript(`if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[1]) then redis.call('SADD', KEYS[1], ARGV[2]) return 1 end return 0`)
	var hs []holding
	for _, step := range []struct {
		who   string
		nodes []int
	}{{"A", []int{0, 1}}, {"B", []int{1, 2}}, {"C", []int{0, 2}}} {
		admitted := 0
		for _, i := range step.nodes {
			n, err := admit.Run(t.Context(), Admin(t, nodes[i]), []string{"count:" + key}, permits, step.who).Int()
			if err != nil {
				t.Fatal(err)
			}
			admitted += n
		}
		if admitted < 2 {
			t.Fatalf("%s was admitted by %d nodes of its majority: the schedule did not build", step.who, admitted)
		}
		hs = append(hs, holding{worker: step.who, from: time.Now(), to: time.Now().Add(time.Hour)})
	}
	v := overCommitted(hs, permits)
	if len(v) != 1 || !strings.Contains(v[0], "3 holders at once") {
		t.Fatalf("the checker found %v, want 3 holders at once", v)
	}
	t.Logf("caught: %s", v[0])
}

// TestChaosSemaphore: 6 workers in 3 Clients take permits of a 2-permit
// semaphore, hold them 0–20 ms and release, while one Client (behind
// proxies of its own) is cut off from every node for 0.2–1.2 s at random,
// as a dead or paused process would be, and nodes are paused or killed
// and restarted from their AOF. Never more than 2 holders at once, and on
// each slot the lock's checker: no overlap, fencing tokens in order; and
// waiters are served in turn: the least served of the workers whose
// Client is never cut off gets at least half their mean (fairShare).
// Twice: fenced, and with the default options; in both the release
// grants the slot it frees to the first waiter (fenced, with a token
// above the released permit's: since 2026-12-04), which must then happen:
// some permits are held by a place's ID.
func TestChaosSemaphore(t *testing.T) { fencedAndGranted(t, "permits", true, chaosSemaphore) }

// chaosSemaphore is TestChaosSemaphore's run, the workers' semaphores
// with opts; it returns how many permits were held by a place's ID
// (granted by a release).
func chaosSemaphore(t *testing.T, opts ...redlock.Option) (granted int64) {
	nodes := StartNodesPersistent(t, 5)
	needsOwnServers(t, nodes[0])
	name := UniqueKey(t, nodes)
	const permits = 2
	clientOpts := []redlock.Option{redlock.WithTTL(500 * time.Millisecond), redlock.WithNodeTimeout(25 * time.Millisecond)}
	proxies := ProxyNodes(t, nodes)
	var sems []*redlock.Semaphore
	for i := range 3 {
		via := nodes
		if i == 2 {
			via = Reach(proxies)
		}
		c := newClient(t, Clients(t, via, func(o *redis.Options) { o.DialerRetries = 1 }), clientOpts...)
		s, err := c.Semaphore(name, permits, opts...)
		if err != nil {
			t.Fatal(err)
		}
		sems = append(sems, s)
	}
	target := chaosTarget()
	var mu sync.Mutex
	var hs []holding
	slots := map[string]*checker{}
	var done, byPlace atomic.Int64
	perWorker := make([]atomic.Int64, 6)
	deadline := chaosDeadline(3 * time.Minute)
	stopFaults := faultsEvery(300*time.Millisecond, func() { anyFault(t, nodes, proxies) })
	backed := newBacking(t, nodes)
	var wg sync.WaitGroup
	for w := range 6 {
		s := sems[w%len(sems)]
		who := fmt.Sprintf("client%d/worker%d", w%len(sems), w)
		wg.Go(func() {
			holdRepeatedly(&done, target, deadline, who, 0, backed.wrap(who, false, s.Acquire), func(l *redlock.Lock, h holding) {
				perWorker[w].Add(1)
				if strings.Contains(l.Token(), ".wi") {
					byPlace.Add(1)
				}
				h.worker += " on " + l.Key()
				mu.Lock()
				defer mu.Unlock()
				hs = append(hs, h)
				if slots[l.Key()] == nil {
					slots[l.Key()] = &checker{}
				}
				slots[l.Key()].record(h)
			})
		})
	}
	wg.Wait()
	faults := stopFaults()
	v := overCommitted(hs, permits)
	for _, chk := range slots {
		v = append(v, chk.violations()...)
	}
	v = append(v, backed.violations()...)
	t.Logf("%d permits taken over %d slots (%d granted by a release), %d faults, %d permits checked backed (%d node reads unanswered), %d violations",
		done.Load(), len(slots), byPlace.Load(), faults, backed.checked.Load(), backed.unknown.Load(), len(v))
	if len(v) > 0 {
		t.Fatalf("%d violations, the first: %s", len(v), strings.Join(v[:min(5, len(v))], "\n"))
	}
	if len(slots) != permits {
		t.Fatalf("permits were taken on %d slots, want all %d", len(slots), permits)
	}
	if done.Load() < int64(target)/2 {
		t.Fatalf("only %d permits taken: too little progress to prove anything", done.Load())
	}
	fairShare(t, loads(perWorker), 0.5, 2, 5) // client 2's workers: it is cut off at random
	return byPlace.Load()
}

// TestInspectManyKeysFrozenNodes: with 2 of 5 nodes frozen (SIGSTOP),
// Semaphore.Inspect of 64 slots and MultiLock.Inspect of 16 keys return
// within about one node timeout, the frozen nodes reported as not
// answering and every key as the others see it: each node is asked about
// every key at once. The bound asserted is 20 node timeouts, far above
// the one expected (so a loaded machine cannot fail it) and far below the
// 64 and 16 that asking one key at a time costs.
func TestInspectManyKeysFrozenNodes(t *testing.T) {
	nodes := StartNodes(t, 5)
	const timeout = 100 * time.Millisecond
	c, err := redlock.New(Clients(t, nodes, func(o *redis.Options) { o.DialerRetries, o.ContextTimeoutEnabled = 1, true }), redlock.WithNodeTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	name := UniqueKey(t, nodes)
	s, err := c.Semaphore(name, 64)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := s.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", name, i)
	}
	m, err := c.MultiLock(keys)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "every node's grants", func() bool {
		for _, n := range nodes {
			if Admin(t, n).Exists(t.Context(), RedisKey(keys[15])).Val() == 0 {
				return false
			}
		}
		return true
	})
	nodes[1].Pause(t)
	nodes[3].Pause(t)
	defer nodes[3].Resume(t)
	defer nodes[1].Resume(t)

	check := func(what string, states []*redlock.KeyState, holder string, want int) {
		t.Helper()
		held := 0
		for _, st := range states {
			for _, i := range []int{1, 3} {
				if st.Nodes[i].Err == nil { // the round's deadline, or go-redis's read deadline
					t.Errorf("%s: frozen node %d reported %+v", what, i, st.Nodes[i])
				}
			}
			if h, _, ok := st.Holder(); ok {
				held++
				if want := redlockHolder(holder); h != want {
					t.Errorf("%s: holder %s, want %s", what, h, want)
				}
			}
		}
		if held != want {
			t.Errorf("%s: %d held, want %d", what, held, want)
		}
	}
	start := time.Now()
	slots, err := s.Inspect(t.Context())
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	check("semaphore", slots, permit.Token(), 1)
	if took > 20*timeout {
		t.Errorf("Semaphore.Inspect of 64 slots took %v with 2 of 5 nodes frozen (node timeout %v)", took, timeout)
	}
	start = time.Now()
	sets, err := m.Inspect(t.Context())
	took = time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	check("multi-key lock", sets, l.Token(), 16)
	if took > 20*timeout {
		t.Errorf("MultiLock.Inspect of 16 keys took %v with 2 of 5 nodes frozen (node timeout %v)", took, timeout)
	}
}

// redlockHolder is how Inspect names a token's holder: the first 12 hex
// digits of its SHA-256.
func redlockHolder(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}
