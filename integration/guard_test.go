package integration

import (
	"context"
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
		// The failed try's grants are taken back in the background: on
		// node 2, and on node 0 where its call went again on a new
		// connection and was granted after the try had failed (CI beside
		// a CPU hog, once: the next try found node 0 held). The next try
		// must find neither.
		waitEmpty(t, []*Node{nodes[0], nodes[2]}, key, 30*time.Second)
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
	refused := infoRefusals(t, nodes[0])
	l, err := c.TryLock(t.Context(), key)
	if err != nil {
		t.Fatalf("two nodes of three granted, yet: %v", err)
	}
	// TryLock returned at two grants: node 0's INFO may still be on its
	// way, and an acquire sent after it would come later still.
	waitUntil(t, 30*time.Second, "node 0 to refuse INFO", func() bool { return infoRefusals(t, nodes[0]) > refused })
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
	// The attempt is decided once two nodes failed: a grant that came
	// later is taken back in the background.
	waitEmpty(t, nodes, key, 30*time.Second)
}

// infoRefusals is how many INFO calls node n refused (an ACL denial is a
// rejected call).
func infoRefusals(t *testing.T, n *Node) int {
	t.Helper()
	return commandStat(t, Admin(t, n), "rejected_calls")["info"]
}

// TestGuardInfoRevokedMidLife: a node that answered INFO before is asked
// it again inside a batch's pipeline, ahead of the acquires. If its user
// lost +info meanwhile, those acquires have run unguarded: the keys they
// created are taken back, and the attempt fails at once with the guard's
// error.
func TestGuardInfoRevokedMidLife(t *testing.T) {
	node, c := revokedInfoNode(t)
	key := UniqueKey(t, []*Node{node})
	tryRevoked(t, c, node, key)
	if n, err := Admin(t, node).Exists(t.Context(), RedisKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("the node kept the unguarded acquire's key (%d, %v)", n, err)
	}
}

// TestGuardTakeBackWakesTheNextWaiter: the take-back of an unguarded
// acquire's key wakes the key's next waiter, as every take-back of a
// failed attempt does: the waiter's Client counts it toward the majority
// of one token's notices that wakes it (a key given back on a majority
// with no notice left the waiter asleep until its next look: 92fe7ff).
// The unguarded acquire is a queued waiter's, woken by the holder's
// release: the first call on its stream's new connection, in a batch with
// the INFO the node now refuses.
func TestGuardTakeBackWakesTheNextWaiter(t *testing.T) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	admin := Admin(t, nodes[0])
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	opts := []redlock.Option{redlock.WithAnyNodeCount(), redlock.WithTTL(time.Minute)}
	holder := newClient(t, Clients(t, nodes, nil), opts...)
	c := newClient(t, Clients(t, nodes, func(o *redis.Options) { o.Username, o.Password = "locker", "pw" }), opts...)
	warm(t, c) // INFO answered: the node is known to allow it
	held, err := holder.TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	q, l := RedisKey(key)+":queue", RedisKey(key)+":lease"
	lockErr := make(chan error, 1)
	go func() {
		// A token of its own: the holder's release does not grant it the
		// key (as it would a plain Lock's waiter, with no attempt and so
		// no INFO: docs/design.md, "A writer granted the key by the
		// release"); it is woken to attempt.
		_, err := c.Lock(t.Context(), key, redlock.WithToken("c-token"))
		lockErr <- err
	}()
	waitUntil(t, 10*time.Second, "c's waiter in the queue", func() bool { n, _ := admin.ZCard(t.Context(), q).Result(); return n == 1 })
	// Behind it, a waiter "X.1" of another Client ("X"), its place live
	// for a minute.
	now, err := admin.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ZAdd(t.Context(), q, redis.Z{Score: 1e19, Member: "X.1"}).Err(); err != nil { // after any ticket
		t.Fatal(err)
	}
	if err := admin.ZAdd(t.Context(), l, redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: "X.1"}).Err(); err != nil {
		t.Fatal(err)
	}
	sub := admin.Subscribe(t.Context(), "redlock:wake:X")
	defer sub.Close()
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	// c's user loses +info, and its stream's connection (not its
	// subscription's) is killed: its next call asks INFO again.
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	killStreamConns(t, admin, "locker")
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-lockErr; !errors.Is(err, redlock.ErrUnusable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("c's Lock: got %v, want ErrUnusable with the node's NOPERM", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a hang turned into a failure, not a claim about speed
	defer cancel()
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no wake-up for the key's next waiter after the take-back: %v", err)
	}
	parts := strings.Split(msg.Payload, "\x00")
	if len(parts) != 3 || parts[0] != RedisKey(key) || parts[1] == held.Token() || parts[2] != "X.1" {
		t.Fatalf("wake-up %q, want the key, the token of c's attempt (not the holder's) and X.1", msg.Payload)
	}
}

// killStreamConns kills user's connections that are not subscribed.
func killStreamConns(t *testing.T, admin *redis.Client, user string) {
	list, err := admin.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["user"] == user && f["sub"] == "0" && f["psub"] == "0" {
			if err := admin.ClientKillByFilter(t.Context(), "ID", f["id"]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// revokedInfoNode starts a node whose lock user answered INFO to c, and
// then lost +info, with its connections killed so that c asks again.
func revokedInfoNode(t *testing.T) (*Node, *redlock.Client) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
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
	return nodes[0], c
}

// tryRevoked tries key on c, whose node lost +info, and wants the guard's
// error.
func tryRevoked(t *testing.T, c *redlock.Client, node *Node, key string) {
	var err error
	for range 3 { // the first try may find the killed connection
		if _, err = c.TryLock(t.Context(), key); !connectionLost(err, node) {
			break
		}
	}
	if !errors.Is(err, redlock.ErrUnusable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("got %v, want ErrUnusable with the node's NOPERM", err)
	}
}
