package integration

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Clients returns one go-redis client per node, closed when the test ends.
// edit, if not nil, adjusts each client's options.
func Clients(t testing.TB, nodes []*Node, edit func(*redis.Options)) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(nodes))
	for i, n := range nodes {
		opt := &redis.Options{Addr: n.Addr}
		if edit != nil {
			edit(opt)
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

// Admin returns a client for inspecting and preparing one node directly.
func Admin(t testing.TB, n *Node) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Admins returns an Admin client for each of nodes, in order.
func Admins(t testing.TB, nodes []*Node) []*redis.Client {
	t.Helper()
	admins := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		admins[i] = Admin(t, n)
	}
	return admins
}

// Counter reads the fence counter of a lock's Redis key rkey on an admin
// client, as the library's scripts do: the score of "c" in the sorted set
// rkey+":fence" (0 where there is none).
func Counter(ctx context.Context, admin *redis.Client, rkey string) (uint64, error) {
	f, err := admin.ZScore(ctx, rkey+":fence", "c").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return uint64(f), err
}

// UniqueKey returns a lock key no other test or run uses, and deletes its
// Redis key from every node when the test ends.
func UniqueKey(t testing.TB, nodes []*Node) string {
	t.Helper()
	key := fmt.Sprintf("%s:%s", strings.ReplaceAll(t.Name(), "/", ":"), rand.Text()[:8])
	t.Cleanup(func() {
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			c.Del(ctx, RedisKey(key))
			cancel()
			_ = c.Close()
		}
	})
	return key
}

// RedisKey is where the library stores the lock key with its default prefix.
func RedisKey(key string) string { return "redlock:{" + key + "}" }

// waitUntil polls cond every 10 ms until it holds, and fails the test with
// what it waited for if limit passes first. Limits are generous: they only
// turn a hang into a failure, and are never a claim about speed.
func waitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(limit, cond) {
		t.Fatalf("waited %v for %s", limit, what)
	}
}

// poll calls cond every 10 ms until it holds (true) or limit passes
// (false). Unlike waitUntil, it may run in any goroutine.
func poll(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// waitSubscribed waits until each node has a subscriber on a wake channel
// (PUBSUB CHANNELS redlock:wake:*): a Client that started waiting has
// subscribed to the release notices, so a release from now on reaches it.
func waitSubscribed(t testing.TB, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		subs := wakeSubs(t, n)
		waitUntil(t, 30*time.Second, n.Addr+"'s release-notice subscription", func() bool { return subs() > 0 })
	}
}

// wakeSubs returns a function that counts the wake channels with
// subscribers that the nodes have in all (PUBSUB CHANNELS redlock:wake:*),
// through one admin client per node, made once for every poll.
func wakeSubs(t testing.TB, nodes ...*Node) func() int {
	t.Helper()
	admins := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		admins[i] = Admin(t, n)
	}
	return func() int {
		total := 0
		for _, a := range admins {
			got, err := a.PubSubChannels(t.Context(), "redlock:wake:*").Result()
			if err != nil {
				return 0 // not yet: the wait's deadline reports it
			}
			total += len(got)
		}
		return total
	}
}
