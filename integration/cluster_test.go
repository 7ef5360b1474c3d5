package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// StartCluster starts a Redis Cluster of masters redis-server processes
// (no replicas) and returns a go-redis Cluster client for it, closed when
// the test ends: one Redlock node, however many shards.
func StartCluster(t testing.TB, masters int) (*redis.ClusterClient, []*Node) {
	t.Helper()
	bin := needProcesses(t, "a Redis Cluster")
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		redistest.Need(t, "redis-cli, to create a cluster", "Debian's redis-tools package (redis-server depends on it)")
	}
	nodes := make([]*Node, masters)
	addrs := make([]string, masters)
	for i := range nodes {
		nodes[i] = startProcess(t, bin, clusterPort(t), "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs[i] = nodes[i].Addr
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range nodes { // wait until every node sees all slots served
		admin := Admin(t, n)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			info, _ := admin.ClusterInfo(t.Context()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: cluster not ready: %s", n.Addr, info)
			}
		}
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c, nodes
}

// clusterPort finds a free port whose cluster bus port (+10000) is free too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 50 {
		p := freePort(t)
		if p+10000 > 65535 {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// TestClusterNode: a Redis Cluster counts as one node beside standalone
// ones. Locks on keys spread over many slots work; and a waiter in another
// Client hears the release through the Cluster's notices: with one
// standalone node frozen, the Cluster's notice is needed for the majority
// that wakes it.
func TestClusterNode(t *testing.T) {
	cluster, masters := StartCluster(t, 3)
	standalone := StartNodes(t, 2)
	clients := func() []redis.UniversalClient {
		s := Clients(t, standalone, nil)
		return []redis.UniversalClient{cluster, s[0], s[1]}
	}
	a := newClient(t, clients())
	for i := range 50 { // keys in many slots
		key := fmt.Sprintf("cluster:%d:%d", i, time.Now().UnixNano())
		l, err := a.TryLock(t.Context(), key)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		// A grant that came late is released in the background: give it a
		// moment, far less than the 10 s TTL.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			n, err := cluster.Exists(t.Context(), "redlock:{"+key+"}").Result()
			if err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("key %q left on the cluster: %v %v", key, n, err)
			}
		}
	}

	key := UniqueKey(t, standalone)
	b := newClient(t, clients())
	holder, err := a.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, b, key)
	// b has failed once and subscribed: on both standalone nodes, and on
	// one master of the cluster.
	waitSubscribed(t, standalone...)
	clusterSubs := wakeSubs(t, masters...)
	waitUntil(t, 30*time.Second, "a release-notice subscription on the cluster", func() bool { return clusterSubs() > 0 })
	standalone[1].Pause(t)
	defer standalone[1].Resume(t)
	if err := holder.Unlock(t.Context()); err != nil && !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil && !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // the holder's TTL would wake it at 60 s
		t.Fatal("the waiter was not woken: the Cluster's release notice did not reach it")
	}
}

// TestClusterReshardMidRun: two Redis Clusters and one standalone server
// are the three nodes. Workers in two Clients lock and unlock keys whose
// slots are being moved from one master of the first cluster to another
// (redis-cli --cluster reshard, keys migrated with MIGRATE, clients sent
// MOVED and ASK). No two holders of a key ever overlap, locking goes on
// during the move, and afterwards both clusters vote.
func TestClusterReshardMidRun(t *testing.T) {
	c1, masters := StartCluster(t, 3)
	c2, _ := StartCluster(t, 3)
	standalone := StartNodes(t, 1)
	clients := func() []redis.UniversalClient {
		s := Clients(t, standalone, func(o *redis.Options) { o.DialerRetries = 1 })
		return []redis.UniversalClient{c1, c2, s[0]}
	}
	// Fencing too: its counter key must be in the lock key's slot (the hash
	// tag), or the fenced scripts would fail with CROSSSLOT.
	opts := []redlock.Option{redlock.WithTTL(2 * time.Second), redlock.WithNodeTimeout(200 * time.Millisecond), redlock.WithFencing()}
	a, b := newClient(t, clients(), opts...), newClient(t, clients(), opts...)

	// Keys in the first 500 slots, which the reshard below moves.
	var keys []string
	for i := 0; len(keys) < 6; i++ {
		k := fmt.Sprintf("reshard:%d:%d", i, time.Now().UnixNano())
		slot, err := c1.ClusterKeySlot(t.Context(), "redlock:{"+k+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot < 500 {
			keys = append(keys, k)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	var overlaps, acquired atomic.Int64
	inside := make([]atomic.Int32, len(keys))
	fences := make([]uint64, len(keys)) // the last fencing token per key, guarded by inside
	var wg sync.WaitGroup
	for w, c := range []*redlock.Client{a, a, a, b, b, b} {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i++ {
				k := i % len(keys)
				lctx, lcancel := context.WithTimeout(ctx, time.Second)
				l, err := c.Lock(lctx, keys[k], redlock.WithRetry(redlock.RandomBackoff(time.Millisecond, 10*time.Millisecond)))
				lcancel()
				if err != nil {
					continue
				}
				if inside[k].Add(1) != 1 {
					overlaps.Add(1)
				} else {
					if l.Fence() <= fences[k] {
						overlaps.Add(1) // a token that did not grow
					}
					fences[k] = l.Fence()
				}
				acquired.Add(1)
				time.Sleep(time.Millisecond)
				if l.Validity() <= 0 {
					overlaps.Add(1)
				}
				inside[k].Add(-1)
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
		})
	}
	waitUntil(t, time.Minute, "20 acquisitions before the reshard", func() bool { return acquired.Load() >= 20 })
	from, err := Admin(t, masters[0]).Do(t.Context(), "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	to, err := Admin(t, masters[1]).Do(t.Context(), "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := exec.LookPath("redis-cli")
	before := acquired.Load()
	out, err := exec.Command(cli, "--cluster", "reshard", masters[0].Addr, "--cluster-from", from, "--cluster-to", to,
		"--cluster-slots", "500", "--cluster-yes").CombinedOutput()
	during := acquired.Load() - before
	after := acquired.Load()
	waitUntil(t, time.Minute, "20 acquisitions after the reshard", func() bool { return acquired.Load() >= after+20 })
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holders, or fencing tokens that did not grow, during the reshard", overlaps.Load())
	}
	if during == 0 {
		t.Fatal("no lock was granted while the slots moved")
	}
	// The keys' slots have moved: their first owner redirects to the new one.
	for _, k := range keys {
		err := Admin(t, masters[0]).Get(t.Context(), "redlock:{"+k+"}").Err()
		if err == nil || !strings.Contains(err.Error(), "MOVED") || !strings.Contains(err.Error(), masters[1].Addr) {
			t.Fatalf("key %q: got %v from the old owner, want MOVED to %s", k, err, masters[1].Addr)
		}
	}
	// Both clusters vote: without the standalone node, both are needed.
	standalone[0].Pause(t)
	defer standalone[0].Resume(t)
	for _, k := range keys {
		// Lock, not TryLock: the workers' cancelled waits leave the key's
		// wait queue in the background, and a TryLock refuses while the
		// queue has a place.
		lctx, lcancel := context.WithTimeout(t.Context(), 30*time.Second)
		l, err := a.Lock(lctx, k)
		lcancel()
		if err != nil {
			t.Fatalf("key %q after the reshard, standalone frozen: %v", k, err)
		}
		_ = l.Unlock(t.Context())
	}
	t.Logf("%d acquisitions, %d while 500 slots moved", acquired.Load(), during)
}

// TestClusterKeysSpread: different locks land on different shards of a
// Cluster node, evenly: over 10,000 keys and 3 shards, the busiest shard
// owns at most 1.2 times the mean. Capacity grows with the shards, while a
// lock still needs a majority of the N votes (docs/operations.md).
func TestClusterKeysSpread(t *testing.T) {
	cc, shards := StartCluster(t, 3)
	owner := map[string]int{}
	const keys = 10000
	for i := range keys {
		key := RedisKey(fmt.Sprintf("job-%d", i))
		m, err := cc.MasterForKey(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		owner[m.Options().Addr]++
	}
	if len(owner) != len(shards) {
		t.Fatalf("keys landed on %d of %d shards: %v", len(owner), len(shards), owner)
	}
	most := 0
	for _, n := range owner {
		most = max(most, n)
	}
	ratio := float64(most) / (float64(keys) / float64(len(shards)))
	t.Logf("keys per shard %v: busiest ÷ mean = %.3f", owner, ratio)
	if ratio > 1.2 {
		t.Fatalf("busiest shard owns %.2f× the mean", ratio)
	}
}

// TestClusterMultiLock: a multi-key lock over a Cluster node takes only
// keys in one hash slot, and says so, naming the slots the cluster itself
// gives (CLUSTER KEYSLOT); keys that share a start up to a '}' share a
// slot, and the cluster node grants them together.
func TestClusterMultiLock(t *testing.T) {
	cluster, _ := StartCluster(t, 3)
	standalone := StartNodes(t, 2)
	s := Clients(t, standalone, nil)
	c := newClient(t, []redis.UniversalClient{cluster, s[0], s[1]})
	ctx := t.Context()
	tag := UniqueKey(t, standalone)
	a := tag + ":a"
	slotA := cluster.ClusterKeySlot(ctx, RedisKey(a)).Val()
	var b string
	var slotB int64
	for i := 0; slotB == slotA || b == ""; i++ { // a shared slot is 1 chance in 16384
		b = fmt.Sprintf("%s:b%d", tag, i)
		slotB = cluster.ClusterKeySlot(ctx, RedisKey(b)).Val()
	}
	_, err := c.MultiLock([]string{a, b})
	if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("(slot %d)", slotA)) || !strings.Contains(err.Error(), fmt.Sprintf("(slot %d)", slotB)) {
		t.Fatalf("got %v, want ErrInvalidArgument naming slots %d and %d", err, slotA, slotB)
	}
	items, payment := "order:{"+tag+"}:items", "order:{"+tag+"}:payment"
	if x, y := cluster.ClusterKeySlot(ctx, RedisKey(items)).Val(), cluster.ClusterKeySlot(ctx, RedisKey(payment)).Val(); x != y {
		t.Fatalf("the documented pair is in slots %d and %d", x, y)
	}
	m, err := c.MultiLock([]string{items, payment}, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.WithoutCancel(ctx)) }()
	waitUntil(t, 30*time.Second, "the cluster's grant of both keys", func() bool {
		n, err := cluster.Exists(ctx, RedisKey(items), RedisKey(payment)).Result()
		return err == nil && n == 2
	})
}
