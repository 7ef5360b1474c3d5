package integration

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// StartCluster starts a Redis Cluster of masters redis-server processes
// (no replicas) and returns a go-redis Cluster client for it, closed when
// the test ends: one Redlock node, however many shards.
func StartCluster(t *testing.T, masters int) (*redis.ClusterClient, []*Node) {
	t.Helper()
	kind, bin := backendOnce()
	if kind != backendProcess {
		t.Skip("a Redis Cluster needs redis-server processes started by the harness")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is needed to create a cluster")
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
func clusterPort(t *testing.T) int {
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
	cluster, _ := StartCluster(t, 3)
	standalone := StartNodes(t, 2)
	clients := func() []redis.UniversalClient {
		s := Clients(t, standalone, nil)
		return []redis.UniversalClient{cluster, s[0], s[1]}
	}
	a := newClient(t, clients(), redlock.WithNodeTimeout(100*time.Millisecond))
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
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
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
	b := newClient(t, clients(), redlock.WithNodeTimeout(100*time.Millisecond))
	holder, err := a.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, b, key)
	time.Sleep(300 * time.Millisecond) // b has failed once and subscribed
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
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken: the Cluster's release notice did not reach it")
	}
}
