package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

func newClient(t testing.TB, clients []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	clientsMu.Lock()
	clientsOf[t] = append(clientsOf[t], c)
	clientsMu.Unlock()
	t.Cleanup(func() {
		clientsMu.Lock()
		delete(clientsOf, t)
		clientsMu.Unlock()
	})
	return c
}

// clientsOf: the Clients newClient made for each test still running.
var (
	clientsMu sync.Mutex
	clientsOf = map[testing.TB][]*redlock.Client{}
)

// closeClients closes the Clients newClient made for t: Close waits for
// their calls still on their way (an Unlock returns once a majority
// released; the other nodes' releases follow).
func closeClients(t testing.TB) {
	clientsMu.Lock()
	cs := clientsOf[t]
	clientsMu.Unlock()
	for _, c := range cs {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// waitEmpty polls until no node holds key, failing after limit. Keys in these
// tests live for a minute, so only a release can empty them in time.
func waitEmpty(t *testing.T, nodes []*Node, key string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for _, n := range nodes {
		admin := Admin(t, n)
		for {
			v, err := admin.Get(t.Context(), RedisKey(key)).Result()
			if errors.Is(err, redis.Nil) {
				break
			}
			if time.Now().After(deadline) {
				pttl, _ := admin.PTTL(t.Context(), RedisKey(key)).Result()
				t.Fatalf("%s still holds %q (pttl %v, err %v) %v after the attempt", n.Addr, v, pttl, err, limit)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestMutualExclusion: 50 goroutines, in 5 Clients with their own
// connections (as 5 processes would have), contend for one key on 5 nodes;
// a shared counter detects any overlap of critical sections.
func TestMutualExclusion(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	var inside, overlaps, acquired atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for p := range 5 {
		c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(5*time.Second))
		for range 10 {
			wg.Go(func() {
				for range 4 {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					l, err := c.Lock(ctx, key, redlock.WithRetry(redlock.RandomBackoff(time.Millisecond, 20*time.Millisecond)),
						redlock.WithMetadata(fmt.Sprintf("process %d", p)))
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(200 * time.Microsecond)
					if l.Validity() <= 0 {
						errs <- fmt.Errorf("lock expired inside the critical section")
					}
					inside.Add(-1)
					acquired.Add(1)
					if err := l.Unlock(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlaps.Load() != 0 || acquired.Load() != 200 {
		t.Fatalf("got %d overlaps in %d acquisitions, want 0 in 200", overlaps.Load(), acquired.Load())
	}
	waitEmpty(t, nodes, key, 30*time.Second)
}

// TestMutualExclusionUnderFaults: the claim that matters most, with default
// options. 12 goroutines in 3 Clients contend for one key on 5 nodes; after
// 50 acquisitions one node is killed and another frozen. No two critical
// sections ever overlap, no holder finds its validity gone inside one, and
// 50 more acquisitions follow on the 3 nodes left, each released by a
// majority. (A lock taken before the faults may have had its majority on
// the killed node: its Unlock cannot be confirmed, and says so with
// ErrNotObtained, never with a takeover or an expiry.) It runs on both
// backends: redis-server processes (make test) and containers through
// testcontainers (make test-docker, REDLOCK_BACKEND=docker).
func TestMutualExclusionUnderFaults(t *testing.T) {
	nodes := StartNodes(t, 5)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	var inside, overlaps, acquired atomic.Int64
	var faulted atomic.Bool // the faults are in place
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 100)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	var wg sync.WaitGroup
	for range 3 {
		c := newClient(t, Clients(t, nodes, nil))
		for range 4 {
			wg.Go(func() {
				for {
					afterFaults := faulted.Load()
					l, err := c.Lock(ctx, key) // the default retries until ctx ends
					if ctx.Err() != nil {
						return
					}
					if err != nil {
						report(err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					if l.Validity() <= 0 {
						report(errors.New("lock expired inside the critical section"))
					}
					inside.Add(-1)
					acquired.Add(1)
					err = l.Unlock(context.WithoutCancel(ctx))
					unconfirmed := errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, redlock.ErrTakenOver) && !errors.Is(err, redlock.ErrExpired)
					if err != nil && (afterFaults || !unconfirmed) {
						report(fmt.Errorf("Unlock (of a lock taken after the faults: %v): %w", afterFaults, err))
					}
				}
			})
		}
	}
	waitUntil(t, 5*time.Minute, "50 acquisitions on 5 healthy nodes", func() bool { return acquired.Load() >= 50 })
	nodes[0].Kill(t)
	nodes[1].Pause(t)
	t.Cleanup(func() { nodes[1].Resume(t) })
	faulted.Store(true)
	mark := acquired.Load()
	waitUntil(t, 5*time.Minute, "50 acquisitions with one node killed and one frozen", func() bool { return acquired.Load() >= mark+50 })
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections in %d acquisitions", overlaps.Load(), acquired.Load())
	}
	t.Logf("%d acquisitions, %d of them with a node killed and one frozen", acquired.Load(), acquired.Load()-mark)
}

// TestMinorityKilled: with 2 of 5 nodes SIGKILLed, locking goes on.
func TestMinorityKilled(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil))
	nodes[1].Kill(t)
	nodes[3].Kill(t)
	for range 3 {
		l, err := c.TryLock(t.Context(), key)
		if err != nil {
			t.Fatalf("TryLock with 3 of 5 nodes up: %v", err)
		}
		if err := l.Extend(t.Context(), 20*time.Second); err != nil {
			t.Fatalf("Extend with 3 of 5 nodes up: %v", err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("Unlock with 3 of 5 nodes up: %v", err)
		}
	}
	s, err := c.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range s.Nodes {
		if down := i == 1 || i == 3; down != (n.Err != nil) {
			t.Errorf("Inspect node %d: got err %v, want an error exactly for the killed nodes", i, n.Err)
		}
	}
}

// TestMajorityDown: with 3 of 5 nodes down, TryLock fails at once (without
// waiting for any timeout) with ErrNotObtained listing each node's error,
// and leaves nothing on the live nodes.
func TestMajorityDown(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	// With the recommended go-redis settings (one dial attempt), a dead node
	// fails at once; with go-redis defaults it would take 5 dial attempts
	// 100 ms apart, bounded by the node timeout.
	recommended := func(o *redis.Options) { o.DialerRetries, o.ContextTimeoutEnabled = 1, true }
	c := newClient(t, Clients(t, nodes, recommended), redlock.WithNodeTimeout(time.Hour))
	for _, n := range nodes[:3] {
		n.Kill(t)
	}
	done := make(chan error)
	go func() { _, err := c.TryLock(context.Background(), key); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("TryLock waited although a majority was already impossible")
	}
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) {
		t.Fatalf("got %v, want a QuorumError matching ErrNotObtained", err)
	}
	refused := 0
	for _, ne := range qe.Nodes {
		if strings.Contains(ne.Err.Error(), "connection refused") {
			refused++
			if !strings.Contains(err.Error(), ne.Node) {
				t.Errorf("message does not name %s: %v", ne.Node, err)
			}
		}
	}
	if refused < 2 { // fail-fast may decide on 3 failures before the 3rd dead node answers
		t.Fatalf("got %v, want the dead nodes' connection errors", err)
	}
	waitEmpty(t, nodes[3:], key, 30*time.Second)
}

// TestHungNode: one of 5 nodes is frozen (SIGSTOP: it accepts connections
// but never answers). Lock must not wait for it: with a node timeout of an
// hour and go-redis reads that never time out, a Lock that waited for the
// frozen node would never return. Unlock, with default options, waits for
// it at most the node timeout and reports success from the majority. (How
// long each takes is measured by BenchmarkHungNode, not asserted here.)
func TestHungNode(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	forever := func(o *redis.Options) { o.ReadTimeout = -1 }
	patient := newClient(t, Clients(t, nodes, forever), redlock.WithNodeTimeout(time.Hour))
	plain := newClient(t, Clients(t, nodes, nil))
	// Warm the pools so the frozen node's connections exist before it
	// freezes (a dial to it would still succeed: the kernel accepts).
	warm(t, patient)
	warm(t, plain)
	nodes[2].Pause(t)
	t.Cleanup(func() { nodes[2].Resume(t) })
	for range 3 {
		l, err := patient.Lock(t.Context(), key)
		if err != nil {
			t.Fatalf("Lock with one frozen node: %v", err)
		}
		// Releasing on this Client would wait an hour for the frozen node:
		// give it a deadline, as a caller would. The majority confirms.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err = l.Unlock(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Unlock with one frozen node and a caller's deadline: %v", err)
		}
		if l, err = plain.Lock(t.Context(), key); err != nil {
			t.Fatalf("Lock with one frozen node, default options: %v", err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("Unlock with one frozen node, default options: %v", err)
		}
	}
	nodes[2].Resume(t)
	// The frozen node now runs the queued acquire and release scripts in
	// whatever order; the library releases any grant that comes back late.
	waitEmpty(t, nodes, key, 30*time.Second)
}
