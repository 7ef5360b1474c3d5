package integration

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// restartScenario on real redis-server: a holds the key on nodes {0, 1}
// (node 2 refused it); node 0 is killed and restarted at once without
// persistence, forgetting a's key; b, which knew every node, then tries.
func restartScenario(t *testing.T, opts ...redlock.Option) (a, b *redlock.Lock, err error) {
	t.Helper()
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	opts = append(opts, redlock.WithTTL(time.Minute))
	ca := newClient(t, Clients(t, nodes, nil), opts...)
	cb := newClient(t, Clients(t, nodes, nil), opts...)
	warm(t, cb)
	// Node 2 refuses a (someone else holds the key there for 300 ms), so a
	// holds the key on nodes 0 and 1 only.
	if err := Admin(t, nodes[2]).Set(t.Context(), RedisKey(key), "someone-else", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	a, err = ca.TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes[2:], key, 30*time.Second) // the other key expires
	nodes[0].Restart(t)
	// b's connection to node 0 died with the old process: b's first try
	// may find it so (a lost vote for that round; docs/design.md, "Node
	// streams"), and b tries again, on a new connection.
	for range 3 {
		b, err = cb.TryLock(t.Context(), key)
		if !connectionLost(err, nodes[0]) {
			break
		}
		// The failed try's grant on node 2 is taken back in the
		// background; the next try must not find it.
		waitEmpty(t, nodes[2:], key, 30*time.Second)
	}
	return a, b, err
}

// connectionLost reports whether err says the client's connection to n
// was found dropped.
func connectionLost(err error, n *Node) bool {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	for _, nr := range qe.Nodes {
		if nr.Node == n.Addr && nr.Err != nil && (errors.Is(nr.Err, io.EOF) || errors.Is(nr.Err, syscall.ECONNRESET) || errors.Is(nr.Err, syscall.EPIPE)) {
			return true
		}
	}
	return false
}

func TestRestartGuard(t *testing.T) {
	a, _, err := restartScenario(t) // the guard is on by default
	if err == nil {
		t.Fatalf("b got the lock while a holds it with %v left: the restarted node's grant counted", a.Validity())
	}
	if !errors.Is(err, redlock.ErrNotObtained) || !strings.Contains(err.Error(), "restarted recently") {
		t.Fatalf("got %v, want ErrNotObtained naming the restarted node", err)
	}
}

// TestRestartGuardOffIsUnsafe is the canary: without the guard, the same
// restart makes two holders.
func TestRestartGuardOffIsUnsafe(t *testing.T) {
	a, b, err := restartScenario(t, redlock.WithRestartGuard(0))
	if err != nil {
		t.Fatalf("without the guard b should have got the lock (the unsafe case): %v", err)
	}
	if a.Validity() <= 0 || b.Validity() <= 0 {
		t.Fatal("the scenario did not make two valid holders")
	}
	t.Logf("without the guard: two holders, validities %v and %v", a.Validity().Round(time.Second), b.Validity().Round(time.Second))
}

// TestGuardWithoutInfoPermission: a node whose ACL user may not run INFO
// cannot take part while the restart guard is on. It must fail with the
// server's permission error, before any acquire is sent: the stream asks
// INFO alone first, so no orphan key is left behind.
func TestGuardWithoutInfoPermission(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	admin := Admin(t, nodes[0])
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	clients := Clients(t, nodes, nil)
	clients[0] = Clients(t, nodes[:1], func(o *redis.Options) { o.Username, o.Password = "noinfo", "pw" })[0]
	c := newClient(t, clients, redlock.WithTTL(time.Minute))
	l, err := c.TryLock(t.Context(), key)
	if err != nil {
		t.Fatalf("two nodes of three granted, yet: %v", err)
	}
	if n, err := admin.Exists(t.Context(), RedisKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("node 0 kept a key (%d, %v): the script wrote before INFO failed", n, err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// With two nodes without INFO, there is no majority, and the error says why.
	if err := Admin(t, nodes[1]).Do(t.Context(), "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	clients[1] = Clients(t, nodes[1:2], func(o *redis.Options) { o.Username, o.Password = "noinfo", "pw" })[0]
	c2 := newClient(t, clients, redlock.WithTTL(time.Minute))
	_, err = c2.TryLock(t.Context(), key)
	if !errors.Is(err, redlock.ErrNotObtained) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("got %v, want ErrNotObtained naming the missing permission", err)
	}
	for _, n := range nodes {
		if k, _ := Admin(t, n).Exists(t.Context(), RedisKey(key)).Result(); k != 0 {
			t.Fatalf("%s kept a key after a refused attempt", n.Addr)
		}
	}
}

// TestGuardInfoRevokedMidLife: a node that answered INFO before is asked
// it again inside a batch's pipeline, ahead of the acquires. If its user
// lost +info meanwhile, those acquires have run unguarded: the keys they
// created are taken back, and the attempt fails at once with the guard's
// error.
func TestGuardInfoRevokedMidLife(t *testing.T) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	admin := Admin(t, nodes[0])
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	clients := Clients(t, nodes, func(o *redis.Options) { o.Username, o.Password = "locker", "pw" })
	c := newClient(t, clients, redlock.WithAnyNodeCount(), redlock.WithTTL(time.Minute))
	warm(t, c) // INFO answered: the node is known to allow it
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	// A new connection asks again.
	if err := admin.Do(t.Context(), "CLIENT", "KILL", "USER", "locker").Err(); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 3 { // the first try may find the killed connection
		if _, err = c.TryLock(t.Context(), key); !connectionLost(err, nodes[0]) {
			break
		}
	}
	if !errors.Is(err, redlock.ErrUnusable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("got %v, want ErrUnusable with the node's NOPERM", err)
	}
	if n, err := admin.Exists(t.Context(), RedisKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("the node kept the unguarded acquire's key (%d, %v)", n, err)
	}
}
