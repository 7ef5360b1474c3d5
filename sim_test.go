package redlock

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// The seeded simulator: each seed builds a run from a random source of its
// own (3, 5 or 7 in-memory nodes running the production scripts, 2 to 4
// Clients standing for processes, workers with random workloads, and
// random faults), runs it in virtual time, and checks the recorded history
// (sim_check_test.go). A failure prints its seed and the command that runs
// that seed alone. The same seed gives the same workload and fault
// schedule; the library's own randomness (tokens, jitter) and goroutine
// interleavings can still differ between runs of one seed.
var (
	simSeeds  = flag.Int("sim.seeds", 0, "how many seeds TestSimulation runs (default 100, 20 under -race; make test runs 1000)")
	simFirst  = flag.Uint64("sim.first", 1, "the first seed TestSimulation runs")
	simSeed   = flag.Uint64("sim.seed", 0, "run only this seed, with its history (-v)")
	simPerKey = flag.Bool("sim.perkey", false, "links keep each key's calls in order, not each node's, as a stream with several connections would")
	simTrace  = flag.Bool("sim.trace", false, "log every round of every seed (a failure shows the rounds before it)")
)

// TestSimulation runs the simulator's seeds, in as many parallel shards as
// there are processors, and fails on a seed that breaks a checked
// property. By default it runs few seeds (fewer under -race, ten times
// slower); make test runs 1000 without the race detector, make sim 50,000.
func TestSimulation(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	switch {
	case *simSeed != 0:
		first, n = *simSeed, 1
	case n == 0 && raceEnabled:
		n = 20
	case n == 0:
		n = 100
	}
	start := time.Now()
	shards := uint64(min(runtime.GOMAXPROCS(0), int(n)))
	for shard := range shards {
		t.Run(fmt.Sprint("shard=", shard), func(t *testing.T) {
			t.Parallel()
			for seed := first + shard; seed < first+n; seed += shards {
				var sim *simRun
				began := time.Now()
				synctest.Test(t, func(t *testing.T) { sim = runSim(t, seed, noMutant) })
				if took := time.Since(began); took > 2*time.Second {
					t.Logf("seed %d took %v: %s", seed, took.Round(time.Millisecond), sim.summary())
				}
				if v := sim.violations(); len(v) > 0 {
					if *simHistory {
						t.Logf("HISTORY seed %d:\n%s", seed, strings.Join(sim.hist, "\n"))
					}
					t.Fatalf("seed %d: %s\nrun it alone: go test -run TestSimulation -sim.seed=%d -v .\n%s", seed, strings.Join(v, "\n"), seed, sim.around(v))
				}
				if n == 1 {
					t.Logf("seed %d: %s\n%s", seed, sim.summary(), strings.Join(sim.log, "\n"))
				}
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d seeds in %v", n, time.Since(start).Round(time.Millisecond))
		if *simPerKey {
			t.Logf("order per key: %d of %d calls the links ran were overtaken by a call made after them on their link", simOvertakes.Load(), simLinkCalls.Load())
		}
	})
}

// simRun is one seed's run: its setup, and what happened.
type simRun struct {
	seed    uint64
	mutant  mutant
	ttl     time.Duration
	nodes   []*fakeNode
	latency []time.Duration   // per node: how long it takes to answer
	rates   []float64         // per node: how fast its clock runs
	cuts    []*atomic.Bool    // per Client: cut off from every node
	pauses  []*atomic.Int64   // per Client: how late it reads replies
	stalls  []*simStall       // per Client: replies and notices held until a time
	lags    [][]*atomic.Int64 // per Client, per node: how late its calls arrive
	clients []*Client
	quits   []*simQuits // per Client: its calls in flight, for its queued attempts to end
	begin   time.Time
	calm    time.Time // no fault starts after it
	end     time.Time // workers start nothing after it, and the Clients close

	mu        sync.Mutex
	log       []string
	holdings  []simHolding
	served    []simServed
	direct    []simServed // acquisitions at a first attempt, unqueued: queued is the attempt's start
	waits     []simWait
	reads     []simRead
	observers []simObserver
	released  map[string]time.Time // tokens Unlock released, when it returned
	cooldowns map[string]time.Time // tokens released with a cooldown, until when
	reached   []map[string]uint8   // per node: the tokens its acquires (1) and releases (2) ran for
	left      []string             // what the nodes held after every Client closed
	hist      []string             // with -sim.history: every op each node ran, with its key after it
	spans     []simSpan            // the faults
	healed    time.Time            // when the last fault healed
	forgot    []time.Time          // when a node restarted empty: fencing counters forgotten
	emptied   [][]time.Time        // per node: when it restarted empty
	unbacked  []string             // valid Locks fewer than a majority of nodes held (sim_backing_test.go)
}

// simHolding is one holder's claim on a key: from Lock returning to the
// earlier of its release and its validity's end (or, under Do, the work's
// context ending).
type simHolding struct {
	keys     []string
	reader   bool // a read-write lock's reader: readers share
	who      string
	token    string
	fence    uint64
	got      time.Time // when Lock returned it
	from, to time.Time
	// expires: at to, its keys were left to expire on the nodes, not
	// released (a cooldown; a holding that ended before its release)
	expires bool
	// kept, if later than to, is when the holder gave the keys up: a Do
	// relies on its lock until its last look found it live, and keeps it
	// until the work returns
	kept time.Time
}

// keptUntil is when h's holder gave its keys up.
func (h *simHolding) keptUntil() time.Time {
	if h.kept.After(h.to) {
		return h.kept
	}
	return h.to
}

// simWait is a Lock call on one key, or on a set: from its call to its
// return, and whether it failed.
type simWait struct {
	keys     []string
	reader   bool // an RLock's
	who      string
	from, to time.Time
	ticket   time.Time // its place's, if it queued (zero if not)
	failed   bool
	blind    bool // it failed reporting a try that heard no node (see blindFailures)
	// guarded: some Client's restart guard refused a node's grants while
	// it waited (a Client learns of a restart when it next hears from the
	// node, so the guard can outlast the fault by far)
	guarded bool
}

// simRead is an Election.Leader call's answer: a term, or none.
type simRead struct {
	who       string
	call, ret time.Time
	term      uint64
	none      bool
}

// simObserver is an Election.Observe run: what it saw, and when.
type simObserver struct {
	who      string
	from, to time.Time
	seen     []simSeen
}

type simSeen struct {
	at        time.Time
	term, seq uint64
}

// simServed is a Lock call that waited in its keys' queues and got the
// lock.
type simServed struct {
	keys         []string
	reader       bool // a read-write lock's reader: readers ahead of a writer enter together
	reentry      bool // a holder's re-entry (its own token)
	client       string
	queued, took time.Time
	guarded      bool // a restart guard refused grants meanwhile (see simWait)
}

// observe is client c's observer: it notes every Lock call served after
// waiting in a queue, and every acquisition at an unqueued attempt, and
// with -sim.seed logs each round, with each node's answer.
func (s *simRun) observe(c string) Observer {
	return func(e Event) {
		if t, ok := e.Context.Value(simTicket{}).(*time.Time); ok && e.Kind == EventAcquire && !e.Queued.IsZero() {
			*t = e.Queued
		}
		if e.Kind == EventAcquire && e.Err == nil {
			now := time.Now()
			guarded := !e.Queued.IsZero() && s.guardedSince(e.Queued)
			s.mu.Lock()
			keys := strings.Fields(e.Key) // the simulator's keys hold no space
			if strings.HasPrefix(e.Key, "sem:s:") {
				keys = append(keys, "sem:s") // a permit: its slots are one resource, served in order
			}
			if !e.Queued.IsZero() {
				s.served = append(s.served, simServed{keys: keys, reader: e.Read, client: c, queued: e.Queued, took: now, guarded: guarded})
			} else {
				reentry := e.Context.Value(simReentry{}) != nil
				s.direct = append(s.direct, simServed{keys: keys, reader: e.Read, reentry: reentry, client: c, queued: now.Add(-e.Duration), took: now})
			}
			s.mu.Unlock()
		}
		if *simSeed == 0 && !*simTrace {
			return
		}
		var nodes []string
		for _, n := range e.Nodes {
			r := "ok"
			if n.Err != nil {
				r = n.Err.Error()
			}
			nodes = append(nodes, r)
		}
		s.logf("%s %v %s err=%v validity=%v nodes=%q", c, e.Kind, e.Key, e.Err, e.Validity, nodes)
	}
}

func (s *simRun) record(h simHolding) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdings = append(s.holdings, h)
	s.log = append(s.log, fmt.Sprintf("%8.3fs %s held %v (fence %d) from %.3fs", time.Since(s.begin).Seconds(), h.who, h.keys, h.fence, h.from.Sub(s.begin).Seconds()))
}

// runSim builds and runs one seed, inside the caller's bubble: faults
// until calm, workers until end, then every Client closes while its
// workers may still hold or wait.
func runSim(t *testing.T, seed uint64, m mutant) *simRun {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &simRun{seed: seed, mutant: m, begin: time.Now(), released: map[string]time.Time{}, cooldowns: map[string]time.Time{}}
	s.ttl = time.Duration(200+rng.IntN(1800)) * time.Millisecond
	s.calm, s.end = s.begin.Add(6*s.ttl), s.begin.Add(10*s.ttl)
	s.setUpNodes(rng)
	type worker struct{ c, w int }
	var workers []worker
	for i := range 2 + rng.IntN(3) {
		s.newClient(t, i, rng)
		for w := range 1 + rng.IntN(3) {
			workers = append(workers, worker{i, w})
		}
	}
	var wg sync.WaitGroup // every Client made before any worker starts: workers read s.clients
	for _, w := range workers {
		wrng := rand.New(rand.NewPCG(seed, uint64(100*w.c+w.w+1)))
		wg.Go(func() { s.work(s.clients[w.c], fmt.Sprintf("c%d.w%d", w.c, w.w), wrng) })
	}
	wg.Go(func() { s.injectFaults(rand.New(rand.NewPCG(seed, 0xfa17))) })
	time.Sleep(time.Until(s.end))
	s.closeAll()
	wg.Wait()
	return s
}

// newClient makes the run's i-th Client, a process of its own, over links
// that faults can cut or slow.
func (s *simRun) newClient(t *testing.T, i int, rng *rand.Rand) *Client {
	cut, pause, stall := &atomic.Bool{}, &atomic.Int64{}, &simStall{}
	nodes := make([]node, len(s.nodes))
	lags := make([]*atomic.Int64, len(s.nodes))
	quits := &simQuits{rng: rand.New(rand.NewPCG(s.seed, uint64(0x9017+i))), calls: map[int]context.CancelFunc{}, slow: slices.Max(s.latency)}
	s.quits = append(s.quits, quits)
	for j, f := range s.nodes {
		lags[j] = &atomic.Int64{}
		last := &simLast{}
		if *simPerKey {
			last.rng, last.byKey = rand.New(rand.NewPCG(s.seed, uint64(0x1a9e+100*i+j))), map[string]chan struct{}{}
		}
		nodes[j] = simLink{f, cut, pause, lags[j], last, quits, stall}
	}
	s.lags = append(s.lags, lags)
	c, err := newClient(nodes, []Option{WithTTL(s.ttl), WithObserver(s.observe(fmt.Sprint("c", i)))})
	if err != nil {
		t.Fatal(err)
	}
	if rng.IntN(2) == 0 { // a process whose clock runs ahead proposes larger fencing tokens
		c.proposed.Store(c.propose() + int64(rng.IntN(1e6))*wire.FenceModulus)
	}
	s.logf("client %d: waiter IDs %s.N", i, c.hand.id)
	s.cuts, s.pauses, s.stalls = append(s.cuts, cut), append(s.pauses, pause), append(s.stalls, stall)
	s.clients = append(s.clients, c)
	return c
}

// closeAll closes every Client at once, while their workers may still
// hold locks or wait for them, and notes what the nodes still hold once
// every call has had time to arrive: fencing counters only, by design.
func (s *simRun) closeAll() {
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Go(func() {
			if err := c.Close(context.Background()); err != nil {
				s.logf("client %d: close: %v", i, err)
			}
		})
	}
	wg.Wait()
	time.Sleep(10 * time.Millisecond) // every node answers within 1 ms when calm
	for i, f := range s.nodes {
		for _, k := range f.mem.Keys() {
			if !strings.HasSuffix(k, ":fence") && !s.coolingDown(f, k) {
				var v any = f.mem.Do("GET", k)
				if _, err := v.(error); err {
					v = f.mem.Do("ZRANGE", k, 0, -1, "WITHSCORES")
				}
				s.left = append(s.left, fmt.Sprintf("node %d: %s %q, PTTL %v ms at %v (TIME)", i, k, v, f.mem.Do("PTTL", k), f.mem.Do("TIME")))
			}
		}
	}
}
