package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// TestChaosFarNodes runs the chaos suite's check on nodes far away, where a
// node's calls leave on more than one connection at once (lanes,
// internal/nodeio/stream.go) and Redis keeps no order between them: only
// each key's order is kept. The simulator checks the protocol under that
// order (-sim.perkey); this checks the lanes themselves, on real
// redis-servers under faults.
//
// Every node is 3 ms away (proxies, so every node is far); one Client's 8
// workers and another's 4 contend for 4 keys, 3 workers on each, with
// fencing and the README's node options; every 150 ms a minority of
// nodes is paused for up to 150 ms, or one link is cut for 150 ms. Each
// key's holdings are checked as TestChaos checks its one key's (no
// overlap, tokens in order, no stale write), each lock is checked backed
// by a majority of the nodes when its Lock returns (backing, read on the
// nodes themselves, not through the proxies), every worker must have had
// its share, and the nodes must have seen a lane: more connections than
// each Client's first lane and subscription, or the run tested nothing.
func TestChaosFarNodes(t *testing.T) {
	const keys, perKey = 4, 3
	nodes := StartNodes(t, 5)
	needsOwnServers(t, nodes[0])
	proxies := ProxyNodes(t, nodes)
	for _, p := range proxies {
		p.Latency(t, 3, 1)
	}
	opts := []redlock.Option{redlock.WithTTL(500 * time.Millisecond), redlock.WithNodeTimeout(25 * time.Millisecond), redlock.WithFencing()}
	shared := newClient(t, Clients(t, Reach(proxies), readmeNodes), opts...)
	other := newClient(t, Clients(t, Reach(proxies), readmeNodes), opts...)
	lockKeys := make([]string, keys)
	checkers, stores := make([]*checker, keys), make([]*store, keys)
	for k := range keys {
		lockKeys[k] = UniqueKey(t, nodes)
		checkers[k] = &checker{}
		stores[k] = &store{fenced: true, c: checkers[k]}
	}
	backed := newBacking(t, nodes)
	stopConns := sampleConnections(nodes[0])
	stopFaults := faultsEvery(150*time.Millisecond, func() { farFault(t, nodes, proxies) })
	target := chaosTarget()
	var done atomic.Int64
	perWorker := make([]atomic.Int64, keys*perKey)
	deadline := chaosDeadline(5 * time.Minute)
	var wg sync.WaitGroup
	for w := range keys * perKey {
		c, k := shared, w%keys
		if w >= 2*keys { // workers 8–11: the other Client's, one per key
			c = other
		}
		who := fmt.Sprintf("worker%d/key%d", w, k)
		wg.Go(func() {
			holdRepeatedly(&done, target, deadline, who, 0,
				backed.wrap(who, false, func(ctx context.Context) (*redlock.Lock, error) { return c.Lock(ctx, lockKeys[k]) }),
				func(l *redlock.Lock, h holding) {
					stores[k].write(who, l.Fence())
					checkers[k].record(h)
					perWorker[w].Add(1)
				})
		})
	}
	wg.Wait()
	faults := stopFaults()
	conns := stopConns()
	for _, p := range proxies {
		p.Heal(t)
	}
	var violations []string
	for k := range keys {
		violations = append(violations, checkers[k].violations()...)
	}
	violations = append(violations, backed.violations()...)
	t.Logf("%d acquisitions on %d keys, %d faults, at most %d client connections on a node, %d violations",
		done.Load(), keys, faults, conns, len(violations))
	t.Logf("%d locks checked backed on the nodes (%d node reads unanswered)", backed.checked.Load(), backed.unknown.Load())
	if len(violations) > 0 {
		t.Fatalf("%d violations, the first: %s", len(violations), strings.Join(violations[:min(5, len(violations))], "\n"))
	}
	if done.Load() < int64(target) {
		t.Fatalf("only %d acquisitions of %d: the run made too little progress to prove anything", done.Load(), target)
	}
	// Each Client's first lane and subscription, and the sampler's own.
	if base := int64(2*2 + 1); conns <= base {
		t.Fatalf("at most %d connections on a node (%d without lanes): no lane opened, the run tested nothing", conns, base)
	}
	fairShare(t, loads(perWorker), 0.5)
}

// farFault pauses two of the nodes but the first for up to 150 ms, or
// cuts the link to one of them for 150 ms. The first node is spared so
// that its connections count lanes, not connections that faults broke
// and go-redis dialled again.
func farFault(t *testing.T, nodes []*Node, proxies []*Proxy) {
	if rand.IntN(2) == 0 {
		pauseMinority(t, nodes[1:])
		return
	}
	p := proxies[1+rand.IntN(len(proxies)-1)]
	p.Partition(t)
	time.Sleep(150 * time.Millisecond)
	p.Latency(t, 3, 1)
}

// sampleConnections counts node's client connections every 10 ms (CLIENT
// LIST), through readNodesEvery's client of its own, until the returned
// stop is called, which returns the largest count it read (that client's
// connection included, the backing check's left out: see backingName).
func sampleConnections(node *Node) (stop func() int64) {
	var most int64
	stopReads := readNodesEvery([]*Node{node}, 10*time.Millisecond, func(ctx context.Context, admin *redis.Client, _ *Node) ([]string, bool) {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			return nil, false
		}
		var n int64
		for line := range strings.Lines(list) {
			if !strings.Contains(line, " name="+backingName+" ") {
				n++
			}
		}
		most = max(most, n)
		return nil, true
	})
	return func() int64 {
		stopReads()
		return most
	}
}
