package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// TestNoScript: after SCRIPT FLUSH every operation still works.
func TestNoScript(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil))
	flush := func() {
		for _, n := range nodes {
			if err := Admin(t, n).ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush()
	l, err := c.TryLock(t.Context(), key)
	if err != nil {
		t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := l.Extend(t.Context(), time.Minute); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, err := c.Inspect(t.Context(), key); err != nil {
		t.Fatalf("Inspect after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
	}
	waitEmpty(t, nodes, key, 30*time.Second)
}

// TestNodeErrorReplies: a node answering WRONGTYPE, READONLY, NOPERM, OOM or
// BUSY counts as a failed node: with two such nodes of three the lock is not
// obtained, the error names each node's reply, the healthy node's grant is
// released, and a foreign key is never deleted.
func TestNodeErrorReplies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
		// break makes node n answer with the error; it returns a check run
		// after the attempt.
		breakNode func(t *testing.T, n *Node, peer *Node, key string) (edit func(*redis.Options), after func())
	}{
		{"WRONGTYPE", "WRONGTYPE", func(t *testing.T, n, _ *Node, key string) (func(*redis.Options), func()) {
			admin := Admin(t, n)
			if err := admin.HSet(t.Context(), RedisKey(key), "field", "foreign").Err(); err != nil {
				t.Fatal(err)
			}
			return nil, func() {
				if v, err := admin.HGet(t.Context(), RedisKey(key), "field").Result(); err != nil || v != "foreign" {
					t.Errorf("%s: the foreign hash is gone or changed: %q %v", n.Addr, v, err)
				}
			}
		}},
		{"READONLY", "READONLY", func(t *testing.T, n, peer *Node, _ string) (func(*redis.Options), func()) {
			host, port, _ := strings.Cut(peer.Addr, ":")
			if err := Admin(t, n).ReplicaOf(t.Context(), host, port).Err(); err != nil {
				t.Fatal(err)
			}
			return nil, nil
		}},
		{"NOPERM", "NOPERM", func(t *testing.T, n, _ *Node, _ string) (func(*redis.Options), func()) {
			// A user who may read and write keys but not run scripts.
			if err := Admin(t, n).Do(t.Context(), "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "+@all", "-evalsha", "-eval").Err(); err != nil {
				t.Fatal(err)
			}
			return func(o *redis.Options) { o.Username, o.Password = "noscript", "pw" }, nil
		}},
		{"OOM", "OOM", func(t *testing.T, n, _ *Node, _ string) (func(*redis.Options), func()) {
			admin := Admin(t, n)
			if err := admin.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
			return nil, nil
		}},
		{"BUSY", "BUSY", func(t *testing.T, n, _ *Node, _ string) (func(*redis.Options), func()) {
			admin := Admin(t, n)
			if err := admin.ConfigSet(t.Context(), "busy-reply-threshold", "10").Err(); err != nil {
				t.Fatal(err)
			}
			// A read-only script that spins for 2 s, so SCRIPT KILL can end it.
			spin := redis.NewClient(&redis.Options{Addr: n.Addr, ReadTimeout: -1})
			done := make(chan struct{})
			go func() {
				defer close(done)
				spin.Eval(context.Background(), `local t = redis.call('TIME') local e = t[1] * 1000000 + t[2] + 2000000
					repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] > e return 1`, nil)
			}()
			probe := Admin(t, n)
			waitUntil(t, 30*time.Second, n.Addr+" answering BUSY", func() bool {
				err := probe.Ping(t.Context()).Err()
				return err != nil && strings.HasPrefix(err.Error(), "BUSY")
			})
			return nil, func() {
				_ = admin.ScriptKill(context.Background()).Err()
				<-done
				_ = spin.Close()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := StartNodes(t, 3)
			needsOwnServers(t, nodes[0]) // the setups reconfigure the servers
			key := UniqueKey(t, nodes)
			var afters []func()
			edits := make([]func(*redis.Options), 3)
			for i := range 2 {
				edit, after := tc.breakNode(t, nodes[i], nodes[2], key)
				edits[i] = edit
				if after != nil {
					afters = append(afters, after)
				}
			}
			clients := make([]redis.UniversalClient, 3)
			for i, n := range nodes {
				clients[i] = Clients(t, []*Node{n}, edits[i])[0]
			}
			c := newClient(t, clients, redlock.WithTTL(time.Minute))
			_, err := c.TryLock(t.Context(), key)
			var qe *redlock.QuorumError
			if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) {
				t.Fatalf("got %v, want a QuorumError matching ErrNotObtained", err)
			}
			for _, ne := range qe.Nodes {
				if ne.Node != nodes[2].Addr && !strings.Contains(ne.Err.Error(), tc.reply) {
					t.Errorf("%s: got %v, want its %s reply", ne.Node, ne.Err, tc.reply)
				}
			}
			for _, after := range afters {
				after()
			}
			waitEmpty(t, nodes[2:], key, 30*time.Second)
		})
	}
}

// TestLoadingReply: a node that is loading its dataset answers LOADING; it
// counts as a failed node, named in the error. The node is made to load
// for about 10 s (2,000 keys, each delayed 5 ms by key-load-delay, with
// client events served every KiB read), so the attempt lands inside the
// loading window on any machine.
func TestLoadingReply(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	admin := Admin(t, nodes[0])
	for _, cmd := range [][]any{
		{"DEBUG", "POPULATE", 2000, "filler", 100},
		{"CONFIG", "SET", "key-load-delay", 5000},
		{"CONFIG", "SET", "loading-process-events-interval-bytes", 1024},
	} {
		if err := admin.Do(t.Context(), cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	if err := Admin(t, nodes[2]).Set(t.Context(), RedisKey(key), "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	reload := redis.NewClient(&redis.Options{Addr: nodes[0].Addr, ReadTimeout: -1, MaxRetries: -1})
	defer reload.Close()
	done := make(chan error, 1)
	go func() { done <- reload.Do(context.Background(), "DEBUG", "RELOAD").Err() }()
	// Wait until the node answers LOADING (it saves first, then loads).
	probe := Admin(t, nodes[0])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := probe.Get(t.Context(), "probe").Err()
		if err != nil && strings.HasPrefix(err.Error(), "LOADING") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never answered LOADING within 30 s (last: %v)", err)
		}
	}
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(5*time.Second))
	_, err := c.TryLock(t.Context(), key)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || len(qe.Nodes) == 0 || qe.Nodes[0].Node != nodes[0].Addr ||
		!strings.HasPrefix(qe.Nodes[0].Err.Error(), "LOADING") {
		t.Fatalf("got %v, want ErrNotObtained naming %s's LOADING reply", err, nodes[0].Addr)
	}
	nodes[0].Kill(t) // rather than wait for the rest of the reload
	<-done
	waitEmpty(t, nodes[1:2], key, 30*time.Second)
}
