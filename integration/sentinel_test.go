package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redisproc"
)

// StartSentinelNode starts a master, one replica and 3 Sentinels watching
// them (quorum 2, master declared down after 500 ms), and returns a go-redis
// failover client for it: one Redlock node. The master is returned for
// killing, and the Sentinels' addresses for asking who the master is.
func StartSentinelNode(t *testing.T) (*redis.Client, *Node, []string) {
	t.Helper()
	bin := needProcesses(t, "a Sentinel-managed master")
	master := startProcess(t, bin, 0)
	_, mport, _ := net.SplitHostPort(master.Addr)
	startProcess(t, bin, 0, "--replicaof", "127.0.0.1", mport)
	conf := fmt.Sprintf("sentinel monitor lockmaster 127.0.0.1 %s 2\n"+
		"sentinel down-after-milliseconds lockmaster 500\n"+
		"sentinel failover-timeout lockmaster 5000\n"+
		"sentinel parallel-syncs lockmaster 1\n", mport)
	var sentinels []string
	for range 3 {
		s, err := redisproc.Start(redisproc.Config{Bin: bin, Dir: t.TempDir(), Sentinel: true, SentinelConfig: conf})
		if err != nil {
			t.Fatalf("sentinel: %v", err)
		}
		t.Cleanup(s.Close)
		sentinels = append(sentinels, s.Addr)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "lockmaster", SentinelAddrs: sentinels,
		DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	// Wait until the Sentinels agree on the master and the replica is in sync.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := Admin(t, master).Info(t.Context(), "replication").Result()
		if err == nil && c.Ping(t.Context()).Err() == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel node not ready: %v %s", err, info)
		}
	}
	return c, master, sentinels
}

// TestSentinelFailover: a Sentinel-managed master is one node beside two
// standalone ones. Workers in two Clients lock and unlock while the master
// is killed; Sentinel promotes the replica and the failover client follows
// it. No two holders overlap at any time, and afterwards the promoted
// master votes: with one standalone node frozen, locks are still granted.
func TestSentinelFailover(t *testing.T) {
	sentinel, master, sentinels := StartSentinelNode(t)
	ask := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
	defer ask.Close()
	standalone := StartNodes(t, 2)
	clients := func() []redis.UniversalClient {
		s := Clients(t, standalone, func(o *redis.Options) { o.DialerRetries, o.ContextTimeoutEnabled = 1, true })
		return []redis.UniversalClient{sentinel, s[0], s[1]}
	}
	// The restart guard sees the promoted replica as a new process (a new
	// run_id) and discounts its grants for one TTL: a grant the old master
	// made and never replicated has expired by then.
	var guarded atomic.Int64
	var reached atomic.Value // the last event's node errors, for a failure's message
	watch := redlock.Observer(func(e redlock.Event) {
		var errs []string
		for _, n := range e.Nodes {
			if errors.Is(n.Err, redlock.ErrNodeRestarted) {
				guarded.Add(1)
			}
			errs = append(errs, fmt.Sprint(n.Err))
		}
		if len(errs) > 0 {
			reached.Store(errs)
		}
	})
	opts := []redlock.Option{redlock.WithTTL(2 * time.Second), redlock.WithNodeTimeout(100 * time.Millisecond), redlock.WithObserver(watch)}
	a, b := newClient(t, clients(), opts...), newClient(t, clients(), opts...)
	key := UniqueKey(t, standalone)
	// The workers' hand-offs between Clients are mostly grants by the
	// release, whose events name no nodes, and a guard's discount shows
	// only in an attempt that a node granted: a third Client tries fresh
	// keys throughout, so that the promoted master's grants within its
	// discount period are attempts' (CI beside a CPU hog, 2026-11-29: the
	// workers alone showed none in a minute, after 12,433 acquisitions).
	probe := newClient(t, clients(), opts...)

	ctx, cancel := context.WithCancel(t.Context())
	var inside, overlaps, acquired atomic.Int64
	var wg sync.WaitGroup
	for _, c := range []*redlock.Client{a, a, b, b} {
		wg.Go(func() {
			for ctx.Err() == nil {
				lctx, lcancel := context.WithTimeout(ctx, time.Second)
				l, err := c.Lock(lctx, key, redlock.WithRetry(redlock.RandomBackoff(time.Millisecond, 10*time.Millisecond)))
				lcancel()
				if err != nil {
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				acquired.Add(1)
				time.Sleep(2 * time.Millisecond)
				if l.Validity() <= 0 {
					overlaps.Add(1) // held past its validity
				}
				inside.Add(-1)
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			if l, err := probe.TryLock(ctx, fmt.Sprintf("%s:probe:%d", key, i)); err == nil {
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	waitUntil(t, time.Minute, "20 acquisitions before the kill", func() bool { return acquired.Load() >= 20 })
	before := acquired.Load()
	master.Kill(t)
	// Sentinel notices after 500 ms and promotes the replica.
	promoted := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		addr, err := ask.GetMasterAddrByName(t.Context(), "lockmaster").Result()
		if err == nil && net.JoinHostPort(addr[0], addr[1]) != master.Addr {
			promoted = true
			break
		}
	}
	if !promoted {
		cancel()
		wg.Wait()
		t.Fatal("Sentinel did not promote the replica")
	}
	// The failover client reconnects to the new master, whose first grants
	// the restart guard discounts, and locking goes on.
	promotedAt, guardedAt := acquired.Load(), guarded.Load()
	if !poll(time.Minute, func() bool { return guarded.Load() > guardedAt && acquired.Load() >= promotedAt+20 }) {
		cancel()
		wg.Wait()
		t.Fatalf("waited 1m for a discounted grant of the promoted master (%d) and 20 acquisitions after the promotion (%d); nodes reached: %v",
			guarded.Load()-guardedAt, acquired.Load()-promotedAt, reached.Load())
	}
	cancel()
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holders during the failover", overlaps.Load())
	}
	if before == 0 || acquired.Load() == before {
		t.Fatalf("acquisitions: %d before the kill, %d in all: locking stopped", before, acquired.Load())
	}
	if guarded.Load() == 0 {
		t.Fatal("the restart guard never discounted the promoted master")
	}
	// The promoted master now votes: without one standalone node, the
	// Sentinel node is needed for a majority.
	standalone[1].Pause(t)
	defer standalone[1].Resume(t)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l, err := a.TryLock(t.Context(), key+":after")
		if err == nil {
			_ = l.Unlock(t.Context())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the promoted master does not grant: %v", err)
		}
	}
}
