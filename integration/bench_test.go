package integration

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"golang.org/x/sync/errgroup"
)

// Benchmarks against real redis-server. Besides ns/op they report p50 and
// p99 of each measured step, for comparison within one run:
//
//	go test ./integration -run '^$' -bench . -count 5
//
// BenchmarkFloor is the single-node baseline (SET NX PX, then an EVALSHA
// compare-and-delete, with plain go-redis); BenchmarkLockUnlock/nodes=5 is
// meant to stay within 1.8× of it.

// latencies collects one duration per iteration and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B, name string) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	b.ReportMetric(float64(s[len(s)/2].Nanoseconds()), name+"-p50-ns")
	b.ReportMetric(float64(s[len(s)*99/100].Nanoseconds()), name+"-p99-ns")
}

// readmeNodes are the go-redis options the README recommends for a node
// (DialerRetries 1, ContextTimeoutEnabled): the library's benchmarks
// measure that configuration. The floor and the other baselines keep
// go-redis's defaults.
func readmeNodes(o *redis.Options) { o.DialerRetries, o.ContextTimeoutEnabled = 1, true }

// BenchmarkLockUnlock: an uncontended Lock+Unlock with the README's node
// options, and (go-redis-defaults) with go-redis's.
func BenchmarkLockUnlock(b *testing.B) {
	for _, tc := range []struct {
		name string
		n    int
		edit func(*redis.Options)
		opts []redlock.Option
	}{
		{"nodes=1", 1, readmeNodes, nil},
		{"nodes=3", 3, readmeNodes, nil},
		{"nodes=5", 5, readmeNodes, nil},
		{"nodes=5/go-redis-defaults", 5, nil, nil},
		{"nodes=5/guard=off", 5, readmeNodes, []redlock.Option{redlock.WithRestartGuard(0)}},
		{"nodes=5/fencing", 5, readmeNodes, []redlock.Option{redlock.WithFencing()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			nodes := StartNodes(b, tc.n)
			lockCycles(b, newClient(b, Clients(b, nodes, tc.edit), append(tc.opts, redlock.WithAnyNodeCount())...))
		})
	}
}

// releaseIfOwner is the floor's compare-and-delete.
var releaseIfOwner = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func BenchmarkFloor(b *testing.B) {
	nodes := StartNodes(b, 1)
	rc := Clients(b, nodes, nil)[0]
	cycles(b, func(key string) time.Duration { return floorCycle(b, rc, key) })
}

// BenchmarkVsFloor interleaves a redlock cycle on N nodes with a floor cycle
// on one more node, iteration by iteration, so that both see the same
// machine state (on a shared 2-core machine a lone loopback round trip swings
// between about 40 and 130 µs from run to run). It reports both p50s and
// their ratio, the figure the project's target is stated in.
func BenchmarkVsFloor(b *testing.B) {
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := StartNodes(b, n+1)
			c := newClient(b, Clients(b, nodes[:n], readmeNodes))
			floor := Clients(b, nodes[n:], nil)[0]
			lockT, floorT := make(latencies, 0, 1<<16), make(latencies, 0, 1<<16)
			keys := benchKeys(b.N)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := keys[i%len(keys)]
				floorT = append(floorT, floorCycle(b, floor, key))
				lockT = append(lockT, lockCycle(b, c, key))
				i++
			}
			floorT.report(b, "floor")
			lockT.report(b, "lock")
			slices.Sort(floorT)
			slices.Sort(lockT)
			b.ReportMetric(float64(lockT[len(lockT)/2])/float64(floorT[len(floorT)/2]), "p50-ratio")
		})
	}
}

// BenchmarkHungNode measures Lock and Unlock with one of 5 nodes frozen
// (SIGSTOP), with the README's node options and with go-redis's defaults.
// Lock should not notice the frozen node; Unlock waits for it up to the
// node timeout (50 ms here). Run it with a bounded count: go test -bench
// HungNode -benchtime 200x
func BenchmarkHungNode(b *testing.B) {
	for _, tc := range []struct {
		name string
		edit func(*redis.Options)
	}{{"readme", readmeNodes}, {"go-redis-defaults", nil}} {
		b.Run("options="+tc.name, func(b *testing.B) { benchHungNode(b, tc.edit) })
	}
}

func benchHungNode(b *testing.B, edit func(*redis.Options)) {
	nodes := StartNodes(b, 5)
	const nodeTimeout = 50 * time.Millisecond
	c := newClient(b, Clients(b, nodes, edit), redlock.WithNodeTimeout(nodeTimeout))
	ctx := context.Background()
	nodes[4].Pause(b)
	b.Cleanup(func() { nodes[4].Resume(b) })
	lock, unlock := make(latencies, 0, 1024), make(latencies, 0, 1024)
	keys := benchKeys(b.N)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		start := time.Now()
		l, err := c.Lock(ctx, keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		lock = append(lock, time.Since(start))
		start = time.Now()
		_ = l.Unlock(ctx) // the frozen node's part fails, after the node timeout
		unlock = append(unlock, time.Since(start))
		i++
	}
	lock.report(b, "lock")
	unlock.report(b, "unlock")
}

// cycles runs b's cycles of one, each on a fresh key, and reports their
// latencies and allocations.
func cycles(b *testing.B, one func(key string) time.Duration) {
	cycle := make(latencies, 0, 1<<16)
	keys := benchKeys(b.N)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		cycle = append(cycle, one(keys[i%len(keys)]))
		i++
	}
	cycle.report(b, "cycle")
}

// lockCycles runs b's Lock+Unlock cycles on c (see cycles).
func lockCycles(b *testing.B, c *redlock.Client) {
	cycles(b, func(key string) time.Duration { return lockCycle(b, c, key) })
}

// takeCycles runs b's cycles of take and Unlock, with the context
// Background (see cycles).
func takeCycles(b *testing.B, take func(context.Context) (*redlock.Lock, error)) {
	ctx := context.Background()
	cycles(b, func(string) time.Duration {
		start := time.Now()
		l, err := take(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	})
}

// lockCycle locks and unlocks key, and returns how long that took.
func lockCycle(b *testing.B, c *redlock.Client, key string) time.Duration {
	ctx, start := context.Background(), time.Now()
	l, err := c.Lock(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// floorCycle is the single-node floor: SET NX PX, then compare-and-delete.
func floorCycle(b *testing.B, rc redis.UniversalClient, key string) time.Duration {
	ctx, start := context.Background(), time.Now()
	ok, err := rc.SetNX(ctx, key, "token", 10*time.Second).Result()
	if err != nil || !ok {
		b.Fatalf("SET NX: %v %v", ok, err)
	}
	if n, err := releaseIfOwner.Run(ctx, rc, []string{key}, "token").Int(); err != nil || n != 1 {
		b.Fatalf("release: %v %v", n, err)
	}
	return time.Since(start)
}

// benchKeys returns distinct keys, so that every cycle starts on a fresh key.
func benchKeys(n int) []string {
	keys := make([]string, min(max(n, 1), 1<<16))
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:%d", i)
	}
	return keys
}

// BenchmarkHungNodeFanOut: Lock's latency with one node of 5 frozen, for
// the library's fan-out (decided at a majority) and for a plain errgroup
// fan-out that waits for every node (each call bounded by the same 50 ms
// node timeout, through go-redis's ContextTimeoutEnabled). The figures are
// in docs/design.md ("Fan-out").
func BenchmarkHungNodeFanOut(b *testing.B) {
	nodes := StartNodes(b, 5)
	const nodeTimeout = 50 * time.Millisecond
	// With ContextTimeoutEnabled go-redis drops a connection whose call
	// timed out and dials anew in the background; to a frozen node those
	// dials hang until DialTimeout, kept short so they end with the test.
	ctxTimeouts := func(o *redis.Options) { o.ContextTimeoutEnabled, o.DialTimeout = true, 200*time.Millisecond }
	clients := Clients(b, nodes, ctxTimeouts)
	c := newClient(b, clients, redlock.WithNodeTimeout(nodeTimeout))
	warm(b, c)
	nodes[4].Pause(b)
	b.Cleanup(func() { nodes[4].Resume(b) })
	ctx := context.Background()
	b.Run("design=workers", func(b *testing.B) {
		lock := make(latencies, 0, 1024)
		for i := 0; b.Loop(); i++ {
			start := time.Now()
			l, err := c.Lock(ctx, fmt.Sprintf("fanout-workers:%d", i))
			if err != nil {
				b.Fatal(err)
			}
			lock = append(lock, time.Since(start))
			_ = l.Unlock(ctx)
		}
		lock.report(b, "lock")
	})
	b.Run("design=errgroup", func(b *testing.B) {
		// SET NX PX on every node, counted once all have answered.
		lock := make(latencies, 0, 1024)
		for i := 0; b.Loop(); i++ {
			key := fmt.Sprintf("fanout-errgroup:%d", i)
			start := time.Now()
			granted := make([]bool, len(clients))
			var g errgroup.Group
			for j, rc := range clients {
				g.Go(func() error {
					cctx, cancel := context.WithTimeout(ctx, nodeTimeout)
					defer cancel()
					ok, err := rc.SetNX(cctx, key, "token", 10*time.Second).Result()
					granted[j] = err == nil && ok
					return nil
				})
			}
			_ = g.Wait()
			lock = append(lock, time.Since(start))
			if n := len(slices.DeleteFunc(granted, func(ok bool) bool { return !ok })); n < 3 {
				b.Fatalf("%d grants", n)
			}
			for _, rc := range clients[:4] {
				rc.Del(ctx, key)
			}
		}
		lock.report(b, "lock")
	})
}

// BenchmarkClusterNodes compares a Lock+Unlock cycle on 5 nodes that are
// each a 3-shard Redis Cluster with the same cycle on 5 standalone nodes,
// interleaved iteration by iteration: the client's cost (its CPU time and
// allocations per cycle), and the cycle's p50, which also carries the
// servers' (15 cluster processes beside 5 standalone ones, on this
// machine's cores). Each cycle uses a fresh key, so the cycles spread over
// every shard. The restart guard is off on both: Cluster nodes are not
// guarded.
//
//	go test ./integration -run '^$' -bench ClusterNodes -benchtime 2000x -count 3
func BenchmarkClusterNodes(b *testing.B) {
	clusters := make([]redis.UniversalClient, 5)
	for i := range clusters {
		clusters[i], _ = StartCluster(b, 3)
	}
	cluster := newClient(b, clusters, redlock.WithRestartGuard(0))
	standalone := newClient(b, Clients(b, StartNodes(b, 5), nil), redlock.WithRestartGuard(0))
	warm(b, cluster)
	warm(b, standalone)
	keys := benchKeys(b.N)
	type side struct {
		t      latencies
		cpu    time.Duration
		allocs uint64
	}
	var cl, st side
	cl.t, st.t = make(latencies, 0, 1<<16), make(latencies, 0, 1<<16)
	measure := func(s *side, c *redlock.Client, key string) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		allocs, cpu := ms.Mallocs, processCPU()
		s.t = append(s.t, lockCycle(b, c, key))
		s.cpu += processCPU() - cpu
		runtime.ReadMemStats(&ms)
		s.allocs += ms.Mallocs - allocs
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		key := keys[i%len(keys)]
		measure(&st, standalone, key)
		measure(&cl, cluster, key)
		i++
	}
	st.t.report(b, "standalone")
	cl.t.report(b, "cluster")
	slices.Sort(st.t)
	slices.Sort(cl.t)
	b.ReportMetric(float64(cl.t[len(cl.t)/2])/float64(st.t[len(st.t)/2]), "p50-ratio")
	b.ReportMetric(float64(cl.cpu)/float64(st.cpu), "client-cpu-ratio")
	b.ReportMetric(float64(cl.allocs)/float64(i), "cluster-allocs/cycle")
	b.ReportMetric(float64(st.allocs)/float64(i), "standalone-allocs/cycle")
}

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
