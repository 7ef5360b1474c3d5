package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	return c
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

// watchKey subscribes to the keyspace events of key on node n ("set",
// "del", "expire", …), so a test can see a grant land and be released even
// when both happen between two looks at the key.
func watchKey(t *testing.T, n *Node, key string) <-chan *redis.Message {
	t.Helper()
	admin := Admin(t, n)
	if err := admin.ConfigSet(t.Context(), "notify-keyspace-events", "Kg$").Err(); err != nil {
		t.Fatal(err)
	}
	sub := admin.Subscribe(t.Context(), "__keyspace@0__:"+RedisKey(key))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	return sub.Channel()
}

// expectSetThenDel waits for the key to be created and then deleted on the
// watched node, well before its one-minute TTL could remove it.
func expectSetThenDel(t *testing.T, n *Node, events <-chan *redis.Message, limit time.Duration) {
	t.Helper()
	var seen []string
	timeout := time.After(limit)
	for {
		select {
		case m := <-events:
			seen = append(seen, m.Payload)
			if m.Payload == "del" && slices.Contains(seen, "set") {
				return
			}
		case <-timeout:
			t.Fatalf("%s: want a grant (set) and its release (del) within %v, saw %v", n.Addr, limit, seen)
		}
	}
}

// warm runs one lock cycle on another key, so that every client has a
// connection to its node and every node has the scripts cached: a later
// acquire sent to a frozen node is then really in its socket (a cold pool
// would block in the connection handshake), and runs as soon as the node
// wakes (an uncached script would need an EVAL, which a caller whose
// context has ended never sends).
func warm(t testing.TB, c *redlock.Client) {
	t.Helper()
	l, err := c.Lock(t.Context(), "warm-up:"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestLateGrantsReleased: an attempt fails (3 of 5 nodes held by another
// token) while one node is frozen with the acquire in flight; when that node
// wakes and grants, the grant is released, long before its TTL.
func TestLateGrantsReleased(t *testing.T) {
	nodes := StartNodes(t, 5)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	for _, n := range nodes[:3] {
		if err := Admin(t, n).Set(t.Context(), RedisKey(key), "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(3*time.Second))
	warm(t, c)
	events := watchKey(t, nodes[3], key)
	nodes[3].Pause(t)
	_, err := c.TryLock(t.Context(), key)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained", err)
	}
	nodes[3].Resume(t)
	expectSetThenDel(t, nodes[3], events, 30*time.Second)
	waitEmpty(t, nodes[3:], key, 30*time.Second)
	for _, n := range nodes[:3] {
		if v, _ := Admin(t, n).Get(t.Context(), RedisKey(key)).Result(); v != "someone-else" {
			t.Fatalf("%s: the other holder's key became %q", n.Addr, v)
		}
	}
}

// TestCancelledAttemptReleases: a caller that gives up mid-attempt leaves no
// key behind, though its context is cancelled: not on the node that granted
// in time, nor on the frozen nodes whose grants come after.
func TestCancelledAttemptReleases(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil), redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(3*time.Second))
	warm(t, c)
	events := []<-chan *redis.Message{watchKey(t, nodes[0], key), watchKey(t, nodes[1], key), watchKey(t, nodes[2], key)}
	nodes[0].Pause(t)
	nodes[1].Pause(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := c.TryLock(ctx, key)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and the caller's deadline", err)
	}
	nodes[0].Resume(t)
	nodes[1].Resume(t)
	for i, n := range nodes {
		expectSetThenDel(t, n, events[i], 30*time.Second)
	}
	waitEmpty(t, nodes, key, 30*time.Second)
}

// TestCancelAfterMajorityReachesEveryNode: Lock, Extend and Unlock return
// at a majority, and a caller that cancels its context at once (a wait
// with a timeout, or defer cancel()) must not stop the calls still queued
// for slower nodes. Node 2 answers through a proxy that delays its replies
// by a second, so each of its calls waits in the node's stream behind the
// reply to the one before (the test waits until node 2 has run that one).
// Before these calls were detached from the caller's context, the queued
// ones were dropped: node 2 never got the second lock, kept the old expiry
// after the Extend, and kept the key after Unlock until its TTL (the
// command's exec tests caught the last as "1 nodes still hold the key"
// under load).
func TestCancelAfterMajorityReachesEveryNode(t *testing.T) {
	nodes := StartNodes(t, 3)
	key, other := UniqueKey(t, nodes), UniqueKey(t, nodes)
	proxies := ProxyNodes(t, nodes)
	c := newClient(t, Clients(t, Reach(proxies), nil), redlock.WithTTL(time.Minute))
	l, err := c.TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	node2 := Admin(t, nodes[2])
	pttlAbove := func(key string, d time.Duration) func() bool {
		return func() bool { return node2.PTTL(t.Context(), RedisKey(key)).Val() > d }
	}
	waitUntil(t, 10*time.Second, "node 2 to hold the key", pttlAbove(key, 0))
	proxies[2].Latency(t, 1000, 0)
	if err := l.Extend(t.Context(), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 2 to run the first Extend", pttlAbove(key, time.Minute))

	ctx, cancel := context.WithCancel(t.Context())
	l2, err := c.Lock(ctx, other)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 2 to run the Lock cancelled after it returned", pttlAbove(other, 0))

	ctx, cancel = context.WithCancel(t.Context())
	err = l.Extend(ctx, 3*time.Minute)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "node 2 to run the Extend cancelled after it returned", pttlAbove(key, 2*time.Minute))

	ctx, cancel = context.WithCancel(t.Context())
	err = l.Unlock(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 20*time.Second)
	if err := l2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

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

// TestExpiryHonoured: every key the library writes carries a TTL that
// matches what was asked: after Lock, Extend, re-entry and UnlockAfter.
func TestExpiryHonoured(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil))
	// Each call returns once a majority answered; the last node's call may
	// still be on its way (CI run 23, beside a CPU hog, read a node's PTTL
	// before its UnlockAfter's release landed), so each node gets up to
	// 2 s, well inside the shortest TTL checked.
	checkPTTL := func(what string, ttl time.Duration) {
		t.Helper()
		var last string
		if !poll(2*time.Second, func() bool {
			for _, n := range nodes {
				pttl, err := Admin(t, n).PTTL(t.Context(), RedisKey(key)).Result()
				if err != nil || pttl <= 0 || pttl > ttl {
					last = fmt.Sprintf("%s PTTL %v (%v)", n.Addr, pttl, err)
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s: %s, want in (0, %v]", what, last, ttl)
		}
	}
	l, err := c.TryLock(t.Context(), key, redlock.WithTTL(5*time.Second), redlock.WithMetadata("host=a"))
	if err != nil {
		t.Fatal(err)
	}
	admins := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		admins[i] = Admin(t, n)
	}
	waitUntil(t, 30*time.Second, "every node to hold the key (a straggling grant)", func() bool {
		for _, a := range admins {
			if k, _ := a.Exists(t.Context(), RedisKey(key)).Result(); k != 1 {
				return false
			}
		}
		return true
	})
	checkPTTL("after Lock", 5*time.Second)
	if err := l.Extend(t.Context(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	checkPTTL("after Extend", 30*time.Second)
	again, err := c.TryLock(t.Context(), key, redlock.WithToken(l.Token()), redlock.WithTTL(8*time.Second))
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	checkPTTL("after re-entry", 8*time.Second)
	s, err := c.Inspect(t.Context(), key, redlock.WithToken(l.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Holder(); !ok || !holdsMajority(s, l.Token()) || s.Remaining() <= 0 || s.Remaining() > 8*time.Second {
		t.Fatalf("Inspect: %+v, remaining %v", s.Nodes, s.Remaining())
	}
	if err := again.UnlockAfter(t.Context(), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	checkPTTL("after UnlockAfter", 3*time.Second)
	if _, err := c.TryLock(t.Context(), key); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("during the cooldown: got %v, want ErrNotObtained", err)
	}
}

// holdsMajority reports whether a majority of nodes show token, from an
// Inspect given that token.
func holdsMajority(s *redlock.KeyState, token string) bool {
	n := 0
	for _, ns := range s.Nodes {
		if ns.Token == token {
			n++
		}
	}
	return n >= len(s.Nodes)/2+1
}

// TestUnlockOutcomes: a lock that expired, or was taken over, reports it.
func TestUnlockOutcomes(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	c := newClient(t, Clients(t, nodes, nil))
	const ttl = time.Second
	// Lock, not TryLock: a 1 s TTL has a 50 ms node timeout, which a loaded
	// machine can miss once.
	l, err := c.Lock(t.Context(), key, redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 10*ttl) // it expires
	if err := l.Extend(t.Context(), time.Minute); !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Extend after expiry: got %v, want ErrExpired", err)
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Unlock after expiry: got %v, want ErrExpired", err)
	}
	for _, n := range nodes {
		if k, _ := Admin(t, n).Exists(t.Context(), RedisKey(key)).Result(); k != 0 {
			t.Fatalf("%s: Extend re-created the key", n.Addr)
		}
	}

	l, err = c.Lock(t.Context(), key, redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 10*ttl)
	other, err := c.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, redlock.ErrTakenOver) {
		t.Fatalf("Unlock after takeover: got %v, want ErrTakenOver", err)
	}
	if s, _ := c.Inspect(t.Context(), key, redlock.WithToken(other.Token())); s == nil {
		t.Fatal("Inspect failed")
	} else if !holdsMajority(s, other.Token()) {
		t.Fatalf("the new holder's lock was disturbed: %+v", s.Nodes)
	}
	if err := other.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(t.Context()); !errors.Is(err, redlock.ErrReleased) {
		t.Fatalf("double Unlock: got %v, want ErrReleased", err)
	}
}
