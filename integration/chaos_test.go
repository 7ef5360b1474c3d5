package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// The chaos suite: workers in several Clients contend for one key on real
// redis-server processes while faults are injected; a checker records every
// holder's interval on one monotonic clock, with its fencing token, and
// fails on any overlap or token-order violation. Canaries prove the checker
// bites: each builds a schedule that breaks what the library does not
// claim to survive (the restart guard off, clocks far faster than the drift
// factor allows, a holder paused past its validity writing to an unfenced
// store), step by step, and the checker must catch it. Every run also
// checks that its workers were served fairly (fairShare), and each
// scenario of TestChaos names the workers its faults hold back.
//
// REDLOCK_CHAOS=long runs ten times as many acquisitions per scenario
// (make chaos); the default is the short profile CI runs. make chaos also
// builds chaos_random_test.go (tag chaos): the same canaries on random
// workloads, which report how many violations each run found.

// holding is one holder's claim: from Lock returning to the earlier of
// Unlock being called and the lock's validity ending.
type holding struct {
	worker        string
	started, from time.Time // Lock called; Lock returned
	to            time.Time
	fence         uint64
}

// checker collects holdings and writes, and finds violations.
type checker struct {
	mu       sync.Mutex
	holdings []holding
	stale    []string // writes a store accepted from a holder a newer token had superseded
}

func (c *checker) record(h holding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdings = append(c.holdings, h)
}

// violations lists every overlap of two holdings, every token that is not
// larger than that of a holding that ended before the next began, and every
// stale write.
func (c *checker) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := slices.Clone(c.holdings)
	sort.Slice(hs, func(i, j int) bool { return hs[i].from.Before(hs[j].from) })
	var v []string
	for i := 1; i < len(hs); i++ {
		for j := i - 1; j >= 0 && j >= i-8; j-- { // holders are short; near neighbours suffice
			a, b := hs[j], hs[i]
			if b.from.Before(a.to) {
				v = append(v, fmt.Sprintf("overlap: %s held %v–%v, %s from %v", a.worker, a.from.Format("15:04:05.000000"), a.to.Format("15:04:05.000000"), b.worker, b.from.Format("15:04:05.000000")))
			}
			if a.fence != 0 && b.fence != 0 && !a.from.After(b.started) && b.fence <= a.fence && a.to.Before(b.started) {
				v = append(v, fmt.Sprintf("token order: %s got %d after %s's %d", b.worker, b.fence, a.worker, a.fence))
			}
		}
	}
	seen := map[uint64]string{}
	for _, h := range hs {
		if h.fence == 0 {
			continue
		}
		if w, dup := seen[h.fence]; dup {
			v = append(v, fmt.Sprintf("token %d given to %s and %s", h.fence, w, h.worker))
		}
		seen[h.fence] = h.worker
	}
	return append(v, c.stale...)
}

// store is the resource the holders write to. Fenced, it refuses a token
// lower than one it has accepted; unfenced, it takes every write, and a
// write from a token lower than one already written is a stale write the
// checker counts.
type store struct {
	mu       sync.Mutex
	fenced   bool
	highest  uint64
	rejected int // stale writes a fenced store refused
	c        *checker
}

// newerThan reports whether a token above fence has been written.
func (s *store) newerThan(fence uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest > fence
}

func (s *store) write(worker string, fence uint64) (accepted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		if s.fenced {
			s.rejected++
			return false
		}
		s.c.mu.Lock()
		s.c.stale = append(s.c.stale, fmt.Sprintf("stale write: %s wrote with token %d after %d", worker, fence, s.highest))
		s.c.mu.Unlock()
		return true
	}
	s.highest = fence
	return true
}

// scenario is one chaos run's setup.
type scenario struct {
	name       string
	persistent bool                                                           // AOF with appendfsync always: restarts forget nothing
	rates      []float64                                                      // per node, the clock rate (and nodes = len(rates)); nil: real time
	netFault   func(t *testing.T, proxies []*Proxy, stop <-chan struct{}) int // faults on the links, through proxies
	oneClient  bool                                                           // netFault's proxies are one Client's own; the others reach the nodes directly
	unfairTo   []int                                                          // workers the faults hold back (fairShare exempts them)
	offsetsMs  []int
	nodes      int
	opts       []redlock.Option
	hold       time.Duration                                               // how long a holder keeps the lock
	pause      func(worker int, i int) time.Duration                       // a holder's pause (GC, VM) before it writes; 0 none
	fenced     bool                                                        // the store refuses stale tokens
	fault      func(t *testing.T, nodes []*Node, stop <-chan struct{}) int // injects faults until stop; returns how many
	target     int                                                         // acquisitions, if not the profile's
	grants     bool                                                        // plain Locks: some must be held by a place's ID (granted by a release)
}

type outcome struct {
	acquisitions, attempts, faults int
	perWorker                      []int64 // acquisitions by worker
	rejected                       int     // stale writes the fenced store refused
	granted                        int     // acquisitions held by a place's ID (granted by a release)
	held, elapsed                  time.Duration
	violations                     []string
}

// chaosTarget is the acquisitions per scenario. The short profile (CI's)
// makes 1,000 per scenario, 8,000 in TestChaos's eight: enough for each
// kind of fault real servers show (process kills and pauses, AOF
// restarts, proxies, clocks) to strike many holdings. Volume is the
// simulator's job (TestSimulation: 1,000 seeds of every primitive under
// faults in make test, docs/testing.md); it was 2,500 before it.
func chaosTarget() int {
	if os.Getenv("REDLOCK_CHAOS") == "long" {
		return 25000
	}
	return 1000
}

// runChaos runs sc until target acquisitions, with 3 Clients of 2 workers.
func runChaos(t *testing.T, sc scenario, target int) outcome {
	t.Helper()
	var nodes []*Node
	switch {
	case sc.rates != nil:
		nodes = StartSkewedNodes(t, sc.rates, sc.offsetsMs)
	case sc.persistent:
		nodes = StartNodesPersistent(t, sc.nodes)
	default:
		nodes = StartNodes(t, sc.nodes)
	}
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	chk := &checker{}
	st := &store{fenced: sc.fenced, c: chk}
	var attempts atomic.Int64
	count := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire {
			attempts.Add(1)
		}
	})
	opts := append([]redlock.Option{redlock.WithTTL(500 * time.Millisecond), redlock.WithNodeTimeout(25 * time.Millisecond),
		redlock.WithObserver(count)}, sc.opts...)
	// With network faults, the clients reach the nodes through proxies.
	reach := nodes
	var proxies []*Proxy
	if sc.netFault != nil {
		proxies = ProxyNodes(t, nodes)
		reach = Reach(proxies)
	}
	var clients []*redlock.Client
	for i := range 3 {
		via := reach
		if sc.oneClient {
			via = nodes
			if i == 2 {
				via = reach
			}
		}
		clients = append(clients, newClient(t, Clients(t, via, func(o *redis.Options) { o.DialerRetries = 1 }), opts...))
	}
	stop := make(chan struct{})
	faultsDone := make(chan int, 1)
	go func() {
		switch {
		case sc.fault != nil:
			faultsDone <- sc.fault(t, nodes, stop)
		case sc.netFault != nil:
			faultsDone <- sc.netFault(t, proxies, stop)
		default:
			faultsDone <- 0
		}
	}()
	var done atomic.Int64
	var heldNs, granted atomic.Int64
	perWorker := make([]atomic.Int64, 6)
	start := time.Now()
	deadline := start.Add(5 * time.Minute) // the target ends a run long before, but on a loaded machine
	var wg sync.WaitGroup
	for w := range 6 {
		c := clients[w%len(clients)]
		name := fmt.Sprintf("client%d/worker%d", w%len(clients), w)
		wg.Go(func() {
			for i := 0; done.Load() < int64(target) && time.Now().Before(deadline); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				began := time.Now()
				l, err := c.Lock(ctx, key)
				cancel()
				if err != nil {
					continue
				}
				from := time.Now()
				until := validUntil(l)
				if p := pauseOf(sc, w, i); p > 0 {
					// The pause outlives the lock; the holder resumes, unaware,
					// once another holder has written with a newer token, so
					// that its write is a stale one on every machine.
					time.Sleep(p)
					poll(time.Minute, func() bool { return st.newerThan(l.Fence()) })
				}
				if l.Validity() > 0 || sc.pause != nil { // a paused holder writes without looking
					st.write(name, l.Fence())
				}
				time.Sleep(sc.hold)
				to := time.Now()
				if until.Before(to) {
					to = until // validity ran out while it held: its claim ends there
				}
				_ = l.Unlock(context.Background())
				chk.record(holding{worker: name, started: began, from: from, to: to, fence: l.Fence()})
				heldNs.Add(int64(to.Sub(from)))
				if strings.Contains(l.Token(), ".wi") {
					granted.Add(1)
				}
				done.Add(1)
				perWorker[w].Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	st.mu.Lock()
	rejected := st.rejected
	st.mu.Unlock()
	o := outcome{acquisitions: int(done.Load()), attempts: int(attempts.Load()), faults: <-faultsDone, rejected: rejected, granted: int(granted.Load()),
		held: time.Duration(heldNs.Load()), elapsed: time.Since(start), violations: chk.violations(), perWorker: loads(perWorker)}
	t.Logf("%s: %d acquisitions (%d attempts, %d granted by a release) in %v, %d faults, lock held %.0f%% of the time, %d violations, %d stale writes refused",
		sc.name, o.acquisitions, o.attempts, o.granted, o.elapsed.Round(time.Millisecond), o.faults,
		100*o.held.Seconds()/o.elapsed.Seconds(), len(o.violations), o.rejected)
	return o
}

// loads returns the counts' values.
func loads(counts []atomic.Int64) []int64 {
	out := make([]int64, len(counts))
	for i := range counts {
		out[i] = counts[i].Load()
	}
	return out
}

// fairShare checks the acquisitions of a chaos run's workers (perWorker,
// which the waits of the workers named in exempt do not bind: a worker
// whose Client the run cuts off, or that it pauses, loses its turns): the
// least served of the others must have had at least share of their mean.
// The wait queues serve waiters in the order they came, whatever their
// Client or primitive; before every primitive queued (issue 28), one
// multi-key run's workers had 47 to 887 locks.
func fairShare(t *testing.T, perWorker []int64, share float64, exempt ...int) {
	t.Helper()
	var sum, least int64 = 0, -1
	n := 0
	for w, c := range perWorker {
		if slices.Contains(exempt, w) {
			continue
		}
		sum += c
		n++
		if least < 0 || c < least {
			least = c
		}
	}
	t.Logf("per worker %v (least served ÷ mean: %.2f, exempt %v)", perWorker, float64(least)/(float64(sum)/float64(n)), exempt)
	if n > 0 && float64(least) < share*float64(sum)/float64(n) {
		t.Errorf("the least-served worker got %d acquisitions, under %.2f × the mean (%.0f) of %v: unfair", least, share, float64(sum)/float64(n), perWorker)
	}
}

// validUntil is when l's validity ends, on this process's monotonic clock
// (a few nanoseconds early at most: the two clock readings are apart).
func validUntil(l *redlock.Lock) time.Time { return time.Now().Add(l.Validity()) }

func pauseOf(sc scenario, worker, i int) time.Duration {
	if sc.pause == nil {
		return 0
	}
	return sc.pause(worker, i)
}

// pauseMinority pauses two nodes chosen at random for up to 150 ms.
func pauseMinority(t *testing.T, nodes []*Node) {
	victims := rand.Perm(len(nodes))[:2]
	for _, i := range victims {
		nodes[i].Pause(t)
	}
	time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
	for _, i := range victims {
		nodes[i].Resume(t)
	}
}

// anyFault injects one fault chosen at random: a Client cut off (through
// proxies, its own) for 0.2–1.2 s, a minority of nodes paused, or a node
// killed and restarted 200 ms later (from its AOF, for persistent nodes).
func anyFault(t *testing.T, nodes []*Node, proxies []*Proxy) {
	switch rand.IntN(3) {
	case 0:
		cutOff(t, proxies, time.Duration(200+rand.IntN(1000))*time.Millisecond)
	case 1:
		pauseMinority(t, nodes)
	case 2:
		victim := nodes[rand.IntN(len(nodes))]
		victim.Kill(t)
		time.Sleep(200 * time.Millisecond)
		victim.Restart(t)
	}
}

// cutOff cuts every link through proxies for d.
func cutOff(t *testing.T, proxies []*Proxy, d time.Duration) {
	for _, p := range proxies {
		p.Partition(t)
	}
	time.Sleep(d)
	for _, p := range proxies {
		p.Heal(t)
	}
}

// every runs f every period until stop, and counts the runs.
func every(period time.Duration, stop <-chan struct{}, f func()) int {
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-time.After(period):
			f()
			n++
		}
	}
}

func TestChaos(t *testing.T) {
	target := chaosTarget()
	fenced := []redlock.Option{redlock.WithFencing()}
	const hold = time.Millisecond
	for _, sc := range []scenario{
		{name: "baseline", nodes: 5, opts: fenced, fenced: true, hold: hold},
		// Fencing needs counters that survive a restart: these nodes fsync
		// every write.
		{name: "SIGKILL a minority, restart from AOF", nodes: 5, persistent: true, opts: fenced, fenced: true, hold: hold,
			fault: func(t *testing.T, nodes []*Node, stop <-chan struct{}) int {
				return every(time.Second, stop, func() {
					victims := rand.Perm(len(nodes))[:2]
					for _, i := range victims {
						nodes[i].Kill(t)
					}
					time.Sleep(200 * time.Millisecond)
					for _, i := range victims {
						nodes[i].Restart(t)
					}
				})
			}},
		{name: "SIGSTOP/SIGCONT a minority", nodes: 5, opts: fenced, fenced: true, hold: hold,
			fault: func(t *testing.T, nodes []*Node, stop <-chan struct{}) int {
				return every(100*time.Millisecond, stop, func() { pauseMinority(t, nodes) })
			}},
		// Without persistence a restart forgets the fence counters too, so
		// this one checks mutual exclusion only: the restart guard's claim.
		// The canary's fault pattern, which breaks mutual exclusion without
		// the guard (TestChaosCanaries).
		restartScenarioChaos("kill + immediate restart without persistence, guard on", 150*time.Millisecond, 600),
		// Every 200 ms one link, chosen at random, is either slowed by
		// 10–30 ms (the node timeout is 25 ms) or cut.
		{name: "latency and partitions (toxiproxy)", nodes: 5, opts: fenced, fenced: true, hold: hold,
			netFault: func(t *testing.T, proxies []*Proxy, stop <-chan struct{}) int {
				var faulty *Proxy
				n := every(200*time.Millisecond, stop, func() {
					if faulty != nil {
						faulty.Heal(t)
					}
					faulty = proxies[rand.IntN(len(proxies))]
					if rand.IntN(2) == 0 {
						faulty.Latency(t, 20, 10)
					} else {
						faulty.Partition(t)
					}
				})
				if faulty != nil {
					faulty.Heal(t)
				}
				return n
			}},
		// Waiters paused or gone: every 400 ms, one Client of the three
		// (through proxies of its own) is cut off from every node for
		// 0.2–1.6 s, mostly while its workers wait in the queue: past the
		// 1 s waiter lease its places lapse, as a killed process's would;
		// short of it they stand, as a paused one's. Its holders lose their
		// locks to expiry meanwhile.
		{name: "queued waiters cut off or paused (toxiproxy)", nodes: 5, opts: fenced, fenced: true, hold: hold, oneClient: true, unfairTo: []int{2, 5},
			netFault: func(t *testing.T, proxies []*Proxy, stop <-chan struct{}) int {
				return every(400*time.Millisecond, stop, func() {
					cutOff(t, proxies, time.Duration(200+rand.IntN(1400))*time.Millisecond)
				})
			}},
		// Plain Locks (no fencing): a release grants the key to the first
		// waiter, under pauses of a minority and with a Client cut off
		// while its workers wait (their places lapse, or stand).
		{name: "SIGSTOP/SIGCONT a minority, plain Locks granted by releases", nodes: 5, hold: hold, grants: true,
			fault: func(t *testing.T, nodes []*Node, stop <-chan struct{}) int {
				return every(100*time.Millisecond, stop, func() { pauseMinority(t, nodes) })
			}},
		{name: "queued waiters cut off or paused, plain Locks granted by releases", nodes: 5, hold: hold, grants: true, oneClient: true, unfairTo: []int{2, 5},
			netFault: func(t *testing.T, proxies []*Proxy, stop <-chan struct{}) int {
				return every(400*time.Millisecond, stop, func() {
					cutOff(t, proxies, time.Duration(200+rand.IntN(1400))*time.Millisecond)
				})
			}},
		// Clocks seconds apart and running up to 0.5% fast or slow: within
		// the 1% drift factor, so no violation.
		{name: "clock skew (offsets ±5 s, rates 0.995–1.005)", opts: fenced, fenced: true, hold: hold,
			rates: []float64{1, 1.005, 0.995, 1.004, 0.996}, offsetsMs: []int{0, 5000, -5000, 2000, -3000}},
		{name: "client pauses past validity, fenced store", nodes: 5, opts: fenced, fenced: true, hold: hold, unfairTo: []int{0},
			pause: func(w, i int) time.Duration {
				if w == 0 && i%20 == 5 {
					return 700 * time.Millisecond // longer than the 500 ms TTL
				}
				return 0
			}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			want := target
			if sc.target > 0 {
				want = sc.target
			}
			o := runChaos(t, sc, want)
			if len(o.violations) > 0 {
				t.Fatalf("%d violations, the first: %s", len(o.violations), strings.Join(o.violations[:min(5, len(o.violations))], "\n"))
			}
			if sc.pause != nil && o.rejected == 0 {
				t.Fatal("no paused holder tried a stale write: the scenario tested nothing")
			}
			if sc.grants && o.granted == 0 {
				t.Fatal("no Lock was granted the key by a release: the scenario did not test the grant")
			}
			if o.acquisitions < want/2 {
				t.Fatalf("only %d acquisitions: the scenario made too little progress to prove anything", o.acquisitions)
			}
			fairShare(t, o.perWorker, 0.5, sc.unfairTo...)
		})
	}
}

// restartScenarioChaos kills and at once restarts, without persistence, a
// node that the holders are likely to rely on: one node is frozen for a
// while, so holders take the other two, then one of those two restarts.
// Without the restart guard a contender can then win the restarted node
// and the unfrozen one while the holder still believes itself valid.
func restartScenarioChaos(name string, period time.Duration, target int, opts ...redlock.Option) scenario {
	// A 200 ms TTL: the guard's default period, so a restarted node is kept
	// out only that long.
	opts = append([]redlock.Option{redlock.WithTTL(200 * time.Millisecond)}, opts...)
	return scenario{name: name, nodes: 3, hold: 20 * time.Millisecond, opts: opts, target: target,
		fault: func(t *testing.T, nodes []*Node, stop <-chan struct{}) int {
			return every(period, stop, func() {
				order := rand.Perm(len(nodes))
				frozen, victim := nodes[order[0]], nodes[order[1]]
				frozen.Pause(t)
				time.Sleep(100 * time.Millisecond) // holders take the other two
				frozen.Resume(t)
				victim.Restart(t)
			})
		}}
}

// TestChaosCanaries: faults the library does not claim to survive must be
// caught by the checker; if they were not, the checker would prove nothing.
// Each canary builds its violating schedule step by step.
func TestChaosCanaries(t *testing.T) {
	t.Run("restart without the guard", func(t *testing.T) {
		chk := &checker{}
		a, b, err := restartScenario(t, redlock.WithRestartGuard(0))
		if err != nil {
			t.Fatalf("the unsafe scenario did not happen: %v", err)
		}
		now := time.Now()
		chk.record(holding{worker: "a", from: now.Add(-time.Second), to: validUntil(a)})
		chk.record(holding{worker: "b", from: now, to: validUntil(b)})
		if len(chk.violations()) == 0 {
			t.Fatal("the checker missed two holders")
		}
	})
	t.Run("clock rate x10 on 2 of 3 nodes", func(t *testing.T) {
		// Keys expire ten times as fast as their holder thinks on a
		// majority: once a's keys are gone from the fast nodes, b gets the
		// lock while a still believes itself valid for about 9 s.
		nodes := StartSkewedNodes(t, []float64{10, 10, 1}, []int{0, 0, 0})
		key := UniqueKey(t, nodes)
		opts := []redlock.Option{redlock.WithTTL(10 * time.Second)}
		ca, cb := newClient(t, Clients(t, nodes, nil), opts...), newClient(t, Clients(t, nodes, nil), opts...)
		a, err := ca.TryLock(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		aFrom, aUntil := time.Now(), validUntil(a)
		// a's TryLock returned at a majority; its call to the third node
		// may land late (beside a CPU hog, once in 16 CI runs, after the
		// fast nodes had been seen empty), so b tries again once the fast
		// nodes are empty again.
		var b *redlock.Lock
		for try := 0; b == nil; try++ {
			waitEmpty(t, nodes[:2], key, time.Minute)
			if b, err = cb.TryLock(t.Context(), key); err != nil && try == 2 {
				t.Fatalf("b did not get the keys the fast nodes expired: %v", err)
			}
		}
		bFrom, bUntil := time.Now(), validUntil(b)
		if a.Validity() <= 0 {
			t.Fatalf("a's validity ended before b's grant: the schedule did not make two holders")
		}
		chk := &checker{}
		chk.record(holding{worker: "a", started: aFrom, from: aFrom, to: aUntil})
		chk.record(holding{worker: "b", started: bFrom, from: bFrom, to: bUntil})
		if !slices.ContainsFunc(chk.violations(), func(v string) bool { return strings.HasPrefix(v, "overlap") }) {
			t.Fatalf("the checker missed the overlap of clocks running ten times as fast: %v", chk.violations())
		}
	})
	t.Run("client pauses past validity, unfenced store", func(t *testing.T) {
		// a holds a fenced lock and pauses (it does nothing) until its keys
		// have expired; b takes the lock and writes with its newer token;
		// then a, unaware, writes with its old one. An unfenced store takes
		// the stale write, and the checker must report it; a fenced store
		// refuses it.
		nodes := StartNodes(t, 5)
		key := UniqueKey(t, nodes)
		opts := []redlock.Option{redlock.WithTTL(500 * time.Millisecond), redlock.WithFencing()}
		ca, cb := newClient(t, Clients(t, nodes, nil), opts...), newClient(t, Clients(t, nodes, nil), opts...)
		a, err := ca.Lock(t.Context(), key) // Lock: retries if a 25 ms node timeout is missed
		if err != nil {
			t.Fatal(err)
		}
		waitEmpty(t, nodes, key, time.Minute) // a's pause outlives its keys
		b, err := cb.Lock(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		chk := &checker{}
		unfenced, fenced := &store{c: chk}, &store{fenced: true, c: &checker{}}
		for _, st := range []*store{unfenced, fenced} {
			st.write("b", b.Fence())
			st.write("a", a.Fence())
		}
		if !slices.ContainsFunc(chk.violations(), func(v string) bool { return strings.HasPrefix(v, "stale write") }) {
			t.Fatalf("the checker missed a paused holder's stale write (tokens %d then %d): %v", b.Fence(), a.Fence(), chk.violations())
		}
		if fenced.rejected != 1 {
			t.Fatalf("the fenced store refused %d stale writes, want 1", fenced.rejected)
		}
	})
}

// faultsEvery injects a fault from fault every period until the returned
// stop is called, which waits for the fault under way and returns how many
// were injected.
func faultsEvery(period time.Duration, fault func()) (stop func() int) {
	quit := make(chan struct{})
	n := make(chan int)
	go func() { n <- every(period, quit, fault) }()
	return func() int {
		close(quit)
		return <-n
	}
}

// holdRepeatedly is a chaos worker: until done reaches target or deadline
// passes, it takes a lock with acquire (within 2 s), holds it 0–20 ms,
// releases it, hands record the lock and its holding (from Lock returning
// to the earlier of Unlock and the end of its validity), and rests for up
// to rest before the next.
func holdRepeatedly(done *atomic.Int64, target int, deadline time.Time, who string, rest time.Duration, acquire func(context.Context) (*redlock.Lock, error), record func(*redlock.Lock, holding)) {
	for done.Load() < int64(target) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		began := time.Now()
		l, err := acquire(ctx)
		cancel()
		if err != nil {
			continue
		}
		from := time.Now()
		until := validUntil(l)
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		to := time.Now()
		if until.Before(to) {
			to = until
		}
		_ = l.Unlock(context.Background())
		record(l, holding{worker: who, started: began, from: from, to: to, fence: l.Fence()})
		done.Add(1)
		if rest > 0 {
			time.Sleep(rand.N(rest))
		}
	}
}

// readNodesEvery reads every node every period, through an admin client of
// its own with 50 ms timeouts, until the returned stop is called: read
// returns the violations one node's state shows, and ok false when the
// node did not answer (paused or killed). stop returns how many reads
// were answered and every violation found.
func readNodesEvery(nodes []*Node, period time.Duration, read func(ctx context.Context, admin *redis.Client, node *Node) (violations []string, ok bool)) (stop func() (int, []string)) {
	quit, done := make(chan struct{}), make(chan struct{})
	var reads int
	var found []string
	go func() {
		defer close(done)
		admins := make([]*redis.Client, len(nodes))
		for i, n := range nodes {
			admins[i] = redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
			defer admins[i].Close()
		}
		for {
			select {
			case <-quit:
				return
			case <-time.After(period):
			}
			for i, a := range admins {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				v, ok := read(ctx, a, nodes[i])
				cancel()
				if ok {
					reads++
					found = append(found, v...)
				}
			}
		}
	}()
	return func() (int, []string) {
		close(quit)
		<-done
		return reads, found
	}
}

// fencedAndGranted runs a chaos run twice: fenced, when no acquisition
// may be held by a place's ID (fenced waiters attempt, never granted),
// and with the default options, when some must be (the run tests the
// grant by release). run returns how many of its acquisitions (what)
// were held by a place's ID.
func fencedAndGranted(t *testing.T, what string, run func(*testing.T, ...redlock.Option) int64) {
	t.Run("fenced", func(t *testing.T) {
		if granted := run(t, redlock.WithFencing()); granted != 0 {
			t.Fatalf("%d fenced %s held by a place's ID", granted, what)
		}
	})
	t.Run("granted by releases", func(t *testing.T) {
		if run(t) == 0 {
			t.Fatalf("no %s granted by a release: the run did not test the grant", what)
		}
	})
}
